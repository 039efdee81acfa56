"""Catalogue entries for what vLLM itself raises or logs while it starts (and two request-level errors).

Every pattern is copied from the vLLM source that prints it; `source` cites the lines (the oldest and the
newest release we read, 0.27.1 and 0.33.0; the wording is the same in every release between them unless
a second citation says otherwise). Most configuration errors are raised inside vLLM's pydantic config
dataclasses, so the log shows them as pydantic's `  Value error, <vLLM's message> [type=value_error, …]`
line under `ValidationError: 1 validation error for ModelConfig` (or SchedulerConfig / VllmConfig);
the patterns search the message anywhere in the line, so they match that form, the plain
`ValueError: <message>` of a worker traceback and an engine's `Worker failed with error '<message>'` alike.

Named groups become the finding's details and fill the `{placeholders}` of meaning and actions.

Kept whole: data, one entry per message (see signatures.py).
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

_PIECEWISE = "--compilation-config '{{\"cudagraph_mode\": \"PIECEWISE\"}}'"

SIGNATURES: tuple[Signature, ...] = (
    # ------------------------------------------------------------------ configuration validation
    Signature(
        id="max_model_len_exceeds_model",
        severity="critical",
        title="--max-model-len is longer than the model's own context length",
        meaning=(
            "The requested max_model_len ({requested}) is larger than the length vLLM derives from the "
            "model's config.json ({len_key}={derived}). vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
            "is set, because positions past the trained length give NaNs (RoPE) or out-of-bounds reads."
        ),
        patterns=(
            r"User-specified max_model_len \((?P<requested>[0-9]+)\) is greater than the derived max_model_len "
            r"\((?P<len_key>\w+)=(?P<derived>[0-9]+)",
        ),
        actions=(
            "Use at most the model's length: --max-model-len {derived}",
            "Or let vLLM take the model's length and fit it to memory: --max-model-len auto",
            "Only if the model really supports the longer context (you configured its RoPE scaling): "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve {model!q}{_serve_flags} --max-model-len {requested}",
        ),
        source="vllm==0.33.0 vllm/config/model.py:2664; vllm==0.27.1 vllm/config/model.py:2363",
    ),
    Signature(
        id="tp_heads_not_divisible",
        severity="critical",
        title="Attention heads not divisible by --tensor-parallel-size",
        meaning=(
            "Tensor parallelism splits the attention heads evenly across the GPUs; the model has {heads} "
            "heads, which {tp} GPUs cannot share evenly."
        ),
        patterns=(
            r"Total number of attention heads \((?P<heads>[0-9]+)\) must be divisible by tensor parallel size "
            r"\((?P<tp>[0-9]+)\)",
        ),
        actions=(
            "Use a --tensor-parallel-size that divides {heads}",
            "To use the other GPUs, combine that with --pipeline-parallel-size or --data-parallel-size",
        ),
        source="vllm==0.33.0 vllm/config/model.py:1562; vllm==0.27.1 vllm/config/model.py:1318",
    ),
    Signature(
        id="world_size_exceeds_gpus",
        severity="critical",
        title="More GPUs requested than this node has",
        meaning=(
            "tensor parallel × pipeline parallel asks for {world_size} GPUs, but this process sees {gpus} on this "
            "node. vLLM's default multiprocessing executor runs on one node unless told otherwise."
        ),
        patterns=(
            r"World size \((?P<world_size>[0-9]+)\) is larger than the number of available GPUs \((?P<gpus>[0-9]+)\) "
            r"in this node",
        ),
        actions=(
            "Check which GPUs this process can see (CUDA_VISIBLE_DEVICES, the container's GPUs): dsv4ctl gpus",
            "Fit the node: --tensor-parallel-size and --pipeline-parallel-size whose product is at most {gpus}",
            "To span several nodes, run over Ray (or vLLM's multi-node multiprocessing, --nnodes): --distributed-executor-backend ray",
        ),
        source="vllm==0.33.0 vllm/config/parallel.py:1072; vllm==0.27.1 vllm/config/parallel.py:929",
        next_command="dsv4ctl gpus",
    ),
    Signature(
        id="pipeline_parallel_unsupported",
        severity="critical",
        title="Pipeline parallelism not supported for this model",
        meaning=(
            "--pipeline-parallel-size > 1 was given, but vLLM's implementation of this architecture does not "
            "support pipeline parallelism (it does not implement the SupportsPP interface)."
        ),
        patterns=(r"Pipeline parallelism is not supported for this model",),
        actions=(
            "Drop --pipeline-parallel-size; spread the model with --tensor-parallel-size (and "
            "--data-parallel-size) instead",
        ),
        source="vllm==0.33.0 vllm/config/model.py:1574; vllm==0.27.1 vllm/config/model.py:1330",
    ),
    Signature(
        id="expert_parallel_not_moe",
        severity="critical",
        title="Expert parallelism enabled for a model without experts",
        meaning="--enable-expert-parallel was given, but the model is not a mixture-of-experts model.",
        patterns=(r"Number of experts in the model must be greater than 0 when expert parallelism is enabled",),
        actions=("Drop --enable-expert-parallel (and check that the served model is the one you meant)",),
        source="vllm==0.33.0 vllm/config/model.py:1502; vllm==0.27.1 vllm/config/model.py:1266",
    ),
    Signature(
        id="batched_tokens_below_max_model_len",
        severity="critical",
        title="--max-num-batched-tokens below --max-model-len with chunked prefill off",
        meaning=(
            "With chunked prefill disabled a prompt must fit in one batch, but max_num_batched_tokens "
            "({batched}) is smaller than max_model_len ({max_len}): longer prompts could never be scheduled, "
            "so vLLM refuses the configuration."
        ),
        patterns=(
            r"max_num_batched_tokens \((?P<batched>[0-9]+)\) is smaller than max_model_len \((?P<max_len>[0-9]+)\)",
        ),
        actions=(
            "Keep chunked prefill on: drop --no-enable-chunked-prefill (or pass --enable-chunked-prefill)",
            "Or raise the batch budget: --max-num-batched-tokens {max_len}",
            "Or shorten the context: --max-model-len {batched}",
        ),
        source="vllm==0.33.0 vllm/config/scheduler.py:324; vllm==0.27.1 vllm/config/scheduler.py:256",
    ),
    Signature(
        id="batched_tokens_below_max_num_seqs",
        severity="critical",
        title="--max-num-batched-tokens below --max-num-seqs",
        meaning=(
            "Every running sequence needs at least one token per step, so max_num_batched_tokens ({batched}) "
            "must be at least max_num_seqs ({seqs})."
        ),
        patterns=(
            r"max_num_batched_tokens \((?P<batched>[0-9]+)\) must be greater than or equal to max_num_seqs "
            r"\((?P<seqs>[0-9]+)\)",
        ),
        actions=(
            "Raise the batch budget: --max-num-batched-tokens {seqs}",
            "Or lower the concurrency: --max-num-seqs {batched}",
        ),
        source="vllm==0.33.0 vllm/config/scheduler.py:334; vllm==0.27.1 vllm/config/scheduler.py:266",
    ),
    Signature(
        id="quantization_unknown",
        severity="critical",
        title="Unknown quantization method",
        meaning=(
            "The quantization method '{quantization}' (from --quantization or the checkpoint's "
            "quantization_config) is not one this vLLM build knows."
        ),
        patterns=(r"Unknown quantization method: (?P<quantization>\S+?)\. Must be one of",),
        actions=(
            "Check quant_method in the model's config.json and --quantization; use a vLLM release that "
            "supports that method",
        ),
        source="vllm==0.33.0 vllm/config/model.py:1467; vllm==0.27.1 vllm/config/model.py:1203",
    ),
    Signature(
        id="quantization_mismatch",
        severity="critical",
        title="--quantization contradicts the checkpoint's quantization",
        meaning=(
            "The checkpoint is quantized with {config_quant} (its config.json says so), but --quantization "
            "asked for {arg_quant}."
        ),
        patterns=(
            r"Quantization method specified in the model config \((?P<config_quant>[^)]*)\) does not match the "
            r"quantization method specified in the `quantization` argument \((?P<arg_quant>[^)]*)\)",
        ),
        actions=(
            "Drop --quantization {arg_quant}: vLLM reads the method from the checkpoint",
            "Or pass the checkpoint's method: --quantization {config_quant}",
        ),
        source="vllm==0.33.0 vllm/config/model.py:1459; vllm==0.27.1 vllm/config/model.py:1195",
    ),
    Signature(
        id="quantization_gpu_unsupported",
        severity="critical",
        title="Quantization method needs a newer GPU",
        meaning=(
            "The {quantization} kernels need compute capability {min_cap} or higher; this GPU has "
            "{cap} (e.g. 80 = A100, 89 = L40S/RTX 4090, 90 = H100/H200, 100 = B200)."
        ),
        patterns=(
            r"The quantization method (?P<quantization>\S+) is not supported for the current GPU\. Minimum "
            r"capability: (?P<min_cap>[0-9]+)\. Current capability: (?P<cap>[0-9]+)",
        ),
        actions=(
            "Run on a GPU with compute capability {min_cap} or higher; see what this one has: dsv4ctl gpus",
            "Or a checkpoint that is not {quantization}-quantized: one quantized with a method this GPU supports, or "
            "the unquantized model",
        ),
        source="vllm==0.33.0 vllm/config/vllm.py:933; vllm==0.27.1 vllm/config/vllm.py:723",
        next_command="dsv4ctl gpus",
    ),
    Signature(
        id="quantization_dtype_unsupported",
        severity="critical",
        title="--dtype not supported by the checkpoint's quantization",
        meaning=(
            "The {quantization} kernels accept activations in {supported} only, and the model was asked to run "
            "in {dtype}."
        ),
        patterns=(
            r"(?P<dtype>torch\.\w+) is not supported for quantization method (?P<quantization>\S+)\. Supported dtypes: "
            r"(?P<supported>\[[^\]]*\])",
        ),
        actions=(
            "Drop --dtype (the checkpoint's dtype is used) or pick one from the supported list, e.g. --dtype bfloat16",
        ),
        source="vllm==0.33.0 vllm/config/vllm.py:940; vllm==0.27.1 vllm/config/vllm.py:730",
    ),
    Signature(
        id="bf16_unsupported_gpu",
        severity="critical",
        title="bfloat16 needs compute capability 8.0 (Ampere) or newer",
        meaning=(
            "The model runs in bfloat16 (its config's torch_dtype, or --dtype), which GPUs older than "
            "Ampere (compute capability < 8.0: V100, T4) do not support."
        ),
        patterns=(r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0",),
        actions=(
            "Run in float16 instead: --dtype half",
            "Or run on an Ampere or newer GPU; see which this one is: dsv4ctl gpus",
        ),
        source="vllm==0.33.0 vllm/platforms/cuda.py:651; vllm==0.27.1 vllm/platforms/cuda.py:625",
    ),
    # ------------------------------------------------------------------ the model
    Signature(
        id="model_architecture_unsupported",
        severity="critical",
        title="Model architecture not supported by this vLLM",
        meaning=(
            "The architectures in the model's config.json ({architectures}) are not in this vLLM's model "
            "registry: the model needs a newer vLLM (or a plugin)."
        ),
        patterns=(r"Model architectures \[(?P<architectures>[^\]]*)\] are not supported for now",),
        actions=(
            "Upgrade vLLM to a release that lists the architecture (DeepSeek-V4: DeepseekV4ForCausalLM)",
            "Check the architectures field of the model's config.json",
        ),
        source="vllm==0.33.0 vllm/model_executor/models/registry.py:1250; "
        "vllm==0.27.1 vllm/model_executor/models/registry.py:1132",
    ),
    Signature(
        id="model_architecture_removed",
        severity="critical",
        title="Model architecture no longer in this vLLM",
        meaning=(
            "vLLM dropped the model's architecture ({architectures}) from its own code: it needs an older vLLM "
            "release, or the out-of-tree plugin named in the message."
        ),
        patterns=(
            r"Model architecture (?P<architectures>\S+) was supported in vLLM until v(?P<until>[0-9][0-9.]*), and is "
            r"not supported anymore",
            r"Model architecture (?P<architectures>\S+) is not supported in-tree anymore\. Please install the plugin at "
            r"(?P<plugin_url>\S+) ",
        ),
        actions=(
            "Install the plugin the message names: pip install git+{plugin_url}",
            "Or run it with vLLM {until} (the last release that had it): pip install vllm=={until}",
        ),
        source="vllm==0.33.0 vllm/model_executor/models/registry.py:1236; "
        "vllm==0.27.1 vllm/model_executor/models/registry.py:1118; "
        "vllm==0.33.0 vllm/model_executor/models/registry.py:1244; "
        "vllm==0.27.1 vllm/model_executor/models/registry.py:1126",
    ),
    Signature(
        id="model_inspection_failed",
        severity="critical",
        role="symptom",
        title="vLLM could not import the model's implementation",
        meaning=(
            "vLLM knows the architecture ({architectures}) but importing its implementation failed (in a "
            "subprocess that inspects the model class). The real error is printed above this line, after "
            "'Error in inspecting model architecture' or inside 'Error raised in subprocess'."
        ),
        patterns=(r"Model architectures \[(?P<architectures>[^\]]*)\] failed to be inspected",),
        actions=(
            "Read the traceback above this line (usually an import error: a missing or mismatched "
            "package, or a CUDA initialisation failure)",
            "Collect the environment: vllm collect-env",
        ),
        source="vllm==0.33.0 vllm/model_executor/models/registry.py:1227; "
        "vllm==0.27.1 vllm/model_executor/models/registry.py:1109",
    ),
    Signature(
        id="trust_remote_code_required",
        severity="critical",
        title="The model needs --trust-remote-code",
        meaning=(
            "The model's config or tokenizer is custom code shipped with the checkpoint (not part of the "
            "installed transformers), and vLLM was not allowed to run it."
        ),
        patterns=(
            r"Failed to load the model config\. If the model is a custom model not yet available in the "
            r"HuggingFace transformers library, consider setting `trust_remote_code=True`",
            r"Failed to load the tokenizer\. If the tokenizer is a custom tokenizer not yet available in the "
            r"HuggingFace transformers library, consider setting `trust_remote_code=True`",
        ),
        actions=(
            "If you trust the checkpoint's code: add --trust-remote-code",
            "Or upgrade transformers if the model is newer than the installed version",
        ),
        source="vllm==0.33.0 vllm/transformers_utils/config.py:458; vllm==0.27.1 vllm/transformers_utils/config.py:329; "
        "vllm==0.33.0 vllm/tokenizers/hf.py:200; vllm==0.27.1 vllm/tokenizers/hf.py:227",
    ),
    Signature(
        id="model_path_invalid",
        severity="critical",
        title="Model not found (no config.json at that path or repository)",
        meaning=(
            "vLLM could not read a model config for '{model_path}': it is neither a local directory with a "
            "config.json (or Mistral params.json) nor a Hugging Face repository it could reach."
        ),
        patterns=(r"Invalid repository ID or local directory specified: '(?P<model_path>[^']*)'",),
        actions=(
            "Check the spelling of the model argument; a local path must be a directory that contains config.json",
            "For a Hugging Face ID: check network access and HF_TOKEN for gated models; with HF_HUB_OFFLINE=1 "
            "the model must already be in the Hugging Face cache",
        ),
        source="vllm==0.33.0 vllm/transformers_utils/config.py:912; vllm==0.27.1 vllm/transformers_utils/config.py:715",
    ),
    Signature(
        id="model_weights_missing",
        severity="critical",
        title="No weight files found for the model",
        meaning=(
            "The model directory (or repository snapshot) '{model_path}' has a config but no weight files vLLM can "
            "load (*.safetensors, or *.bin / *.pt): the download is incomplete, the path points at the wrong "
            "directory, or --load-format does not match the files."
        ),
        patterns=(r"Cannot find any model weights with `(?P<model_path>[^`]*)`",),
        actions=(
            "List what is there: ls -la {model_path!q}",
            "Finish the download into that directory, or point vLLM at the directory that holds the *.safetensors shards",
        ),
        source="vllm==0.33.0 vllm/model_executor/model_loader/default_loader.py:260; "
        "vllm==0.27.1 vllm/model_executor/model_loader/default_loader.py:239",
    ),
    Signature(
        id="weights_not_initialized",
        severity="critical",
        title="Checkpoint is missing weights the model needs",
        meaning=(
            "Loading finished but some of the model's parameters got no tensor from the checkpoint (they are listed "
            "in the message): shards are missing or truncated, or the checkpoint was made for a different "
            "model/variant or quantization than vLLM built."
        ),
        patterns=(r"Following weights were not initialized from checkpoint: ",),
        actions=(
            "Check the checkpoint is complete: every shard named in model.safetensors.index.json is present, with the right size",
            "Check the checkpoint matches the model and quantization you serve (e.g. the MTP layer for --speculative-config)",
        ),
        source="vllm==0.33.0 vllm/model_executor/model_loader/default_loader.py:570; "
        "vllm==0.27.1 vllm/model_executor/model_loader/default_loader.py:468",
    ),
    # ------------------------------------------------------------------ CUDA graphs
    Signature(
        id="cudagraph_mode_unsupported",
        severity="critical",
        title="Full CUDA graphs not supported by the attention backend",
        meaning=(
            "The configured cudagraph_mode {cudagraph_mode} captures full CUDA graphs, but the attention "
            "backend {backend} cannot run inside one ({support}). (When the backend supports some full graphs "
            "vLLM only warns and lowers the mode; this is the case where it cannot.)"
        ),
        patterns=(
            r"CUDAGraphMode\.(?P<cudagraph_mode>\w+) is not supported with (?P<backend>\S+) backend "
            r"\(support: ?(?P<support>[^)]*)\) ?; please try cudagraph_mode=PIECEWISE",
        ),
        actions=(
            "Capture piecewise graphs only: " + _PIECEWISE,
            "Or choose an attention backend that supports full graphs with --attention-backend",
            "Last resort, no CUDA graphs: --enforce-eager",
        ),
        source="vllm==0.33.0 vllm/config/compilation.py:1407; vllm==0.33.0 vllm/config/compilation.py:1489; "
        "vllm==0.27.1 vllm/config/compilation.py:1399; vllm==0.27.1 vllm/config/compilation.py:1467",
    ),
    Signature(
        id="cudagraph_sizes_spec_decode",
        severity="critical",
        title="No CUDA-graph capture size fits the speculative decode step",
        meaning=(
            "With speculative decoding every decode step has num_speculative_tokens + 1 = {multiple} tokens per "
            "request, so capture sizes are rounded up to multiples of {multiple}; none of them stays within "
            "max_cudagraph_capture_size."
        ),
        patterns=(
            r"No valid cudagraph sizes after rounding to multiple of (?P<multiple>[0-9]+) \(num_speculative_tokens \+ 1\)",
        ),
        actions=(
            "Allow a capture size of at least {multiple}: --compilation-config '{{\"max_cudagraph_capture_size\": {multiple}}}'",
            "Or use fewer speculative tokens (num_speculative_tokens in --speculative-config)",
        ),
        source="vllm==0.33.0 vllm/config/compilation.py:1557; vllm==0.27.1 vllm/config/compilation.py:1555",
    ),
    # ------------------------------------------------------------------ hangs and timeouts
    Signature(
        id="engine_startup_timeout",
        echo=True,
        severity="critical",
        tier=1,
        title="The API server gave up waiting for the engine to start",
        meaning=(
            "The engine core processes did not report ready within VLLM_ENGINE_READY_TIMEOUT_S ({waited} s). "
            "Either the startup is just slow (weights on network storage, a first torch.compile) or an "
            "engine is stuck (a hung collective, a worker that died without a message); an error printed "
            "by an engine or worker above this line is the better explanation."
        ),
        patterns=(
            r"Timed out waiting for engine core processes to start\. This is often caused by slow weight "
            r"loading for large models\. Waited (?P<waited>[0-9]+)s",
        ),
        actions=(
            "Look above for a worker error or a stalled progress bar (where did loading stop?)",
            "If it was only slow, allow more time: VLLM_ENGINE_READY_TIMEOUT_S=3600 vllm serve {model!q}{_serve_all}",
        ),
        source="vllm==0.33.0 vllm/v1/engine/core_client.py:765; vllm==0.27.1 vllm/v1/engine/core_client.py:659",
    ),
    Signature(
        id="frontend_handshake_timeout",
        echo=True,
        severity="critical",
        tier=1,
        title="Engine got no answer from the front-end (API server) process",
        meaning=(
            "This engine (typically a headless or data-parallel engine on another node) registered with the "
            "front-end and waited {minutes} minutes for its reply: the front-end is not running, failed, or "
            "is not reachable at the address and port the engine was given."
        ),
        patterns=(r"Did not receive response from front-end process within (?P<minutes>[0-9]+) minutes",),
        actions=(
            "Check the front-end node's log first (it may have failed before answering)",
            "Check this node reaches the front-end at --data-parallel-address on --data-parallel-rpc-port "
            "(same values on every node, no firewall between them)",
        ),
        source="vllm==0.33.0 vllm/v1/engine/core.py:1422; vllm==0.27.1 vllm/v1/engine/core.py:1255",
    ),
    Signature(
        id="rpc_timeout",
        echo=True,
        severity="critical",
        tier=1,
        fatal=True,
        title="A worker did not answer an RPC in time",
        meaning=(
            "The executor waited too long for the workers to finish '{method}' (execute_model and a few others "
            "are bounded by VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s by default). A worker is stuck — usually "
            "in a collective another rank never joined, or after a GPU fault — and the engine stops."
        ),
        patterns=(r"RPC call to (?P<method>\w+) timed out",),
        actions=(
            "Look for the first error of any worker above this line; rerun with NCCL_DEBUG=INFO if there is none",
            "If a step is legitimately slow (huge batches), raise VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
        ),
        source="vllm==0.33.0 vllm/v1/executor/multiproc_executor.py:509; "
        "vllm==0.27.1 vllm/v1/executor/multiproc_executor.py:403",
    ),
    # ------------------------------------------------------------------ the API server
    Signature(
        id="tool_call_parser_unknown",
        severity="critical",
        title="Unknown --tool-call-parser",
        meaning=(
            "--enable-auto-tool-choice needs a registered tool-call parser, and '{parser}' is not one; the "
            "message lists the names this vLLM knows."
        ),
        patterns=(r"invalid tool call parser: (?P<parser>\S+) \(chose from",),
        actions=(
            "Pick a name from the list in the message; for DeepSeek-V4, where listed: --tool-call-parser deepseek_v4",
        ),
        source="vllm==0.33.0 vllm/entrypoints/common/cli_args.py:621; "
        "vllm==0.27.1 vllm/entrypoints/openai/api_server.py:606",
    ),
    Signature(
        id="reasoning_parser_unknown",
        severity="critical",
        title="Unknown --reasoning-parser",
        meaning="'{parser}' is not a registered reasoning parser; the message lists the names this vLLM knows.",
        patterns=(r"invalid reasoning parser: (?P<parser>\S+) \(chose from",),
        actions=(
            "Pick a name from the list in the message; for DeepSeek-V4, where listed: --reasoning-parser deepseek_v4",
        ),
        source="vllm==0.33.0 vllm/entrypoints/common/cli_args.py:630; "
        "vllm==0.27.1 vllm/entrypoints/openai/api_server.py:615",
    ),
    # ------------------------------------------------------------------ request-level
    Signature(
        id="prompt_too_long",
        severity="warning",
        role="request",
        title="A request was longer than max_model_len",
        meaning=(
            "A request's prompt (plus the output tokens it asked for) does not fit in the server's "
            "max_model_len ({max_len} tokens). vLLM rejected that request (HTTP 400 from the server, an exception "
            "in an offline script) and the engine kept running."
        ),
        patterns=(
            r"This model's maximum context length is (?P<max_len>[0-9]+) tokens\. However, you requested "
            r"(?P<output_tokens>[0-9]+) output tokens and your prompt contains (?:at least )?(?P<prompt_len>[0-9]+) "
            r"input tokens",
            r"This model's maximum context length is (?P<max_len>[0-9]+) tokens\. However, your prompt contains "
            r"(?:at least )?(?P<prompt_len>[0-9]+) input tokens",
            r"This model's maximum context length is (?P<max_len>[0-9]+) tokens\. However, ",
            r"The decoder prompt \(length (?P<prompt_len>[0-9]+)\) (?:plus the number of requested output tokens "
            r"\(at least 1\) )?is longer than the maximum model length of (?P<max_len>[0-9]+)",
            # the V0 scheduler, which drops such a request (vllm==0.6.3 vllm/core/scheduler.py:897; the limit is
            # max_model_len, or min(max_model_len, max_num_batched_tokens) without chunked prefill: :756-762)
            r"Input prompt \((?P<prompt_len>[0-9]+) tokens\) is too long and exceeds limit of (?P<max_len>[0-9]+)",
        ),
        actions=(
            "Shorten the prompt or ask for fewer output tokens (max_tokens) in the client",
            "If the GPUs have room for a longer context, see what fits: dsv4ctl fit-length {model!q}{_fit_flags}",
        ),
        source="vllm==0.33.0 vllm/renderers/params.py:544; vllm==0.27.1 vllm/renderers/params.py:450; "
        "vllm==0.33.0 vllm/v1/engine/input_processor.py:590; vllm==0.27.1 vllm/v1/engine/input_processor.py:429; "
        "vllm==0.33.0 vllm/v1/engine/input_processor.py:600; vllm==0.27.1 vllm/v1/engine/input_processor.py:439",
    ),
    Signature(
        id="chat_template_missing",
        severity="warning",
        role="request",
        title="Chat request to a model without a chat template",
        meaning=(
            "A chat request needs a chat template, and neither the tokenizer nor --chat-template provides one; "
            "vLLM rejected the request and kept serving."
        ),
        patterns=(r"default chat template is no longer allowed, so you must provide a chat template",),
        actions=(
            "Start the server with --chat-template set to the model's Jinja template file",
            "Or send plain-text prompts to /v1/completions instead of /v1/chat/completions",
        ),
        source="vllm==0.33.0 vllm/renderers/hf.py:886; vllm==0.27.1 vllm/renderers/hf.py:718",
    ),
    Signature(
        id="request_rejected",
        severity="warning",
        role="request",
        title="A request was answered with an error (the server stays up)",
        meaning=(
            "vLLM answered a request with an error response and kept serving: {detail}. The request is the "
            "client's to fix; the server is not failing."
        ),
        patterns=(
            # the chat/completion server logs the ErrorResponse it returns (pydantic's repr of ErrorInfo)
            r"Error with model error=ErrorInfo\(message=['\"](?P<detail>.*?)['\"], type='(?P<err_type>\w+)'.*"
            r"code=(?P<code>4[0-9][0-9])\)",
            # the engine client logs a request its input checks refused
            r"Request \S+ failed \(bad request\): (?P<detail>.+?)\.?$",
        ),
        actions=(
            "Fix the request on the client side (the model name it asks for, the size of its inputs); "
            "the server needs no restart",
        ),
        source=(
            "vllm==0.33.0 vllm/entrypoints/openai/chat_completion/serving.py:280; "
            "vllm==0.27.1 vllm/entrypoints/openai/chat_completion/serving.py:208; "
            "vllm==0.33.0 vllm/v1/engine/async_llm.py:826; vllm==0.27.1 vllm/v1/engine/async_llm.py:627"
        ),
    ),
)
