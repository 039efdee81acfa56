"""The model, its adapters and the features a launch turns on: remote code, an architecture's inspection, LoRA,
speculative decoding, attention backends and block sizes, memory profiling, multimodal limits, tool calls."""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

FAMILIES: tuple[Signature, ...] = (
    Signature(
        id="remote_code_not_trusted",
        severity="critical",
        tier=1,
        title="The model's repository runs its own code, and the launch did not allow it",
        meaning=(
            "{repo_text} ships Python code (a custom config, model or tokenizer class) that transformers runs only with "
            "trust_remote_code. Without it transformers asks on the terminal; with no terminal (a container, a service) "
            "the question ends the start (EOFError) or is refused."
        ),
        patterns=(
            # transformers==5.19.0 dynamic_module_utils.py resolve_trust_remote_code
            r"The repository (?:for )?'?(?P<repo>[\w./-]+?)'? contains custom code which must be executed",
            r"Loading (?P<repo>[\w./-]+) requires you to execute the configuration file in that repo",
        ),
        actions=("Allow the repository's code, after reading it: --trust-remote-code{serve_trust_sep}{serve_trust}",),
        source="transformers==5.19.0 transformers/dynamic_module_utils.py (resolve_trust_remote_code); advice: vllm-project/vllm#595",
    ),
    Signature(
        id="architecture_inspection_failed",
        severity="critical",
        tier=1,
        title="vLLM could not inspect {arch} in its subprocess; the subprocess's own error is the cause",
        meaning=(
            "vLLM imports each model class in a subprocess (python -m vllm.model_executor.models.registry) to learn what "
            "it supports. That import failed; its traceback is printed after 'Error raised in subprocess'. It is usually "
            "a compiled extension that does not load (flash-attn or vLLM's _C built for another torch){windows_text}."
        ),
        patterns=(r"Error in inspecting model architecture '(?P<arch>\w+)'",
                  r"Model architectures \[(?P<arch>[^\]]+)\] failed to be inspected"),
        actions=(
            "{windows_action}",
            "Check that vLLM's compiled parts load in this environment: python -c 'import vllm._C'",
            "Find the subprocess's error above or below this line: the lines after 'Error raised in subprocess'",
        ),
        source="vllm==0.32.0 vllm/model_executor/models/registry.py (_run_in_subprocess); advice: vllm-project/vllm#9713, #9377",
    ),
    Signature(
        id="lora_modules_mismatch",
        severity="critical",
        tier=1,
        title="The LoRA adapter targets modules this model does not have",
        meaning=(
            "The adapter at {adapter} was trained for other module names ({received}) than the ones vLLM can apply LoRA to "
            "in this model: it was made for another base model, or it adapts parts (a vision tower, lm_head) vLLM skips."
        ),
        patterns=(r"While loading (?P<adapter>\S+), expected target modules in (?P<expected>\[[^\]]*\]) but received (?P<received>\[[^\]]*\])",),
        actions=("Check the adapter's base model and target_modules: cat {adapter!q}/adapter_config.json",
                 "Use an adapter trained for this base model, targeting only the language model's modules"),
        source="vllm==0.32.0 vllm/lora/lora_model.py (check_unexpected_modules); advice: vllm-project/vllm#7344, #41702",
    ),
    Signature(
        id="lora_unsupported_model",
        severity="critical",
        tier=1,
        title="{model_class} has no LoRA support in this vLLM",
        meaning="LoRA was enabled (--enable-lora) for an architecture whose vLLM implementation does not support adapters.",
        patterns=(r"(?P<model_class>\w+) does not support LoRA yet", r"Model (?P<model_class>\w+) does not support LoRA, but LoRA is enabled", r"Model (?P<model_class><class [^>]+>|\S+) is not supported for LoRA"),
        actions=("Start without --enable-lora, or merge the adapter into the weights and serve the merged model",
                 "Check the LoRA column of vLLM's supported-models list for a release that adds it"),
        source="vllm==0.32.0 vllm/v1/worker/lora_model_runner_mixin.py:48, vllm/lora/model_manager.py:1448",
    ),
    Signature(
        id="speculative_config_incomplete",
        severity="critical",
        tier=1,
        title="--speculative-config does not say how many tokens to draft",
        meaning=(
            "A draft model (or method) was given without num_speculative_tokens, and the draft model's config has no "
            "n_predict to take it from."
        ),
        patterns=(r"num_speculative_tokens (?:must be provided|was provided without speculative_model)",),
        actions=("Add num_speculative_tokens to --speculative-config: {spec_fixed}",
                 "Add num_speculative_tokens to --speculative-config, e.g. '{{\"method\": \"…\", \"num_speculative_tokens\": 3}}'"),
        source="vllm==0.32.0 vllm/config/speculative.py:1821; advice: vllm-project/vllm#12755",
    ),
    Signature(
        id="feature_not_supported",
        severity="critical",
        tier=1,
        title="Not implemented in this vLLM: {feature_text}",
        meaning=(
            "This vLLM has no implementation for the combination the launch asked for. It is not a fault of the "
            "machine: the same flags fail everywhere on this release. {feature_flags_text}"
        ),
        patterns=(
            r"(?P<feature_text>Speculative Decoding with [^\n]*? does not support [^\n.]+)",
            r"NotImplementedError: (?P<feature_text>[^\n]{8,200})",
            r"(?P<feature_text>[A-Z][^\n]{4,120}? (?:is|are) not (?:yet )?supported (?:with|for|on|in|when) [^\n.]{3,120})",
        ),
        actions=("{feature_action}", "{feature_action_2}"),
        source="vllm==0.32.0 vllm/v1/spec_decode/llm_base_proposer.py:349 and vLLM's NotImplementedError checks",
    ),
    Signature(
        id="block_size_unsupported",
        severity="critical",
        tier=1,
        title="No attention kernel takes a KV block size of {block}",
        meaning="The KV cache manager's block size {block} is not a multiple of any block size the attention backends support{sizes_text}.",
        patterns=(r"No common block size for (?P<block>[0-9]+)(?: \((?P<sizes>[^)]*\)[^)]*)\))?",),
        actions=("Use a block size the backend supports: --block-size {block_fix}{serve_block_sep}{serve_block}",
                 "Use a block size the backend supports (--block-size), or drop --block-size and let vLLM choose"),
        source="vllm==0.32.0 vllm/v1/worker/utils.py:555; advice: vllm-project/vllm#24692",
    ),
    Signature(
        id="attention_backend_unavailable",
        severity="critical",
        tier=1,
        title="No attention backend supports this configuration{head_text}",
        meaning="Every attention backend vLLM tried refused this model's head size, KV-cache dtype, block size or sparsity{reasons_text}.",
        patterns=(r"No valid attention backend found for (?P<device>\w+)(?P<rest>[^\n]*)",
                  r"Head size (?P<head>[0-9]+) is not supported by (?P<backend>\w+)"),
        actions=("{backend_action}", "Change what the backends refused (--kv-cache-dtype, --block-size) or choose a backend that "
                 "supports it: --attention-backend NAME"),
        source="vllm==0.32.0 vllm/platforms/cuda.py:471, vllm/v1/attention/backends/mla/common.py (validate_head_size)",
    ),
    Signature(
        id="attention_backend_refused",
        severity="critical",
        tier=1,
        title="The attention backend {backend} refuses this configuration ({reasons})",
        meaning=(
            "vLLM checked the attention backend it was to use, {backend}, against this model and GPU and the backend "
            "refused: {reasons}. {chosen_text}{platform_text}"
        ),
        patterns=(
            # vllm==0.33.0 vllm/platforms/cuda.py:443-446 (validate_configuration's reasons of the selected backend)
            r"Selected backend (?:AttentionBackendEnum\.)?(?P<backend>\w+) is not valid for this configuration\. "
            r"Reason: \[?(?P<reasons>[^\]\n]*)\]?",
        ),
        actions=("{backend_pick}", "{backend_drop}"),
        source="vllm==0.33.0 vllm/platforms/cuda.py:443-446; the backends per release: catalogue/vllm_flags",
    ),
    Signature(
        id="lora_weight_unsupported",
        severity="critical",
        tier=1,
        title="The LoRA adapter has a weight vLLM's LoRA does not load: {weight}",
        meaning=(
            "vLLM's LoRA loader takes an adapter's lora_A and lora_B weights (and lora_embedding_A/B, and a classifier's "
            "score or classifier weight) and refuses any other tensor (vllm==0.33.0 vllm/lora/utils.py:219-233). "
            "{weight} is a whole module's weight, not a LoRA pair: PEFT saves the modules listed in modules_to_save so, "
            "fully."
        ),
        patterns=(r"(?P<weight>[\w.]+) is unsupported LoRA weight",),
        actions=(
            "Check the adapter's adapter_config.json: modules_to_save lists the fully saved modules",
            "Export or retrain the adapter without modules_to_save (that module as a LoRA target instead), or merge the "
            "adapter into the base model and serve the merged weights",
        ),
        source="vllm==0.33.0 vllm/lora/utils.py:219-233 (parse_fine_tuned_lora_name)",
    ),
    Signature(
        id="quantized_shape_tp",
        severity="critical",
        tier=1,
        title="The quantized weights do not split at this tensor-parallel size",
        meaning=(
            "The {which} size of a quantized layer, divided by --tensor-parallel-size{tp_text}, is not a multiple of the "
            "quantization's group size."
        ),
        patterns=(r"The (?P<which>input|output) size is not aligned with the quantized weight shape",),
        actions=("Use a smaller --tensor-parallel-size{tp_smaller} (pipeline or data parallelism for the other GPUs)",
                 "Or a checkpoint padded for tensor parallelism"),
        source="vllm==0.32.0 vllm/model_executor/layers/quantization (AWQ/GPTQ create_weights); advice: vllm-project/vllm#21695",
    ),
    Signature(
        id="memory_profiling_disturbed",
        severity="critical",
        tier=1,
        title="Another process freed GPU memory while vLLM measured it",
        meaning=(
            "Free memory was {before} GiB before profiling and {after} GiB after: memory vLLM did not allocate came and "
            "went during its measurement, so its KV budget would be wrong. The GPU is shared with another process."
        ),
        patterns=(r"Error in memory profiling\. Initial free memory (?P<before>[0-9.]+) GiB, current free memory (?P<after>[0-9.]+) GiB",),
        actions=("Give vLLM the GPU alone while it starts; see who else uses it: nvidia-smi --query-compute-apps=pid,used_memory --format=csv",),
        source="vllm==0.32.0 vllm/v1/worker/gpu_worker.py:720; advice: vllm-project/vllm#56830",
    ),
    Signature(
        id="sampler_warmup_oom",
        severity="critical",
        tier=1,
        title="Out of GPU memory warming up the sampler with {seqs} requests",
        meaning="The sampler's warm-up runs --max-num-seqs ({seqs}) dummy requests at once and did not fit next to the KV cache.",
        patterns=(r"CUDA out of memory occurred when warming up sampler with (?P<seqs>[0-9]+) dummy requests",),
        actions=("Lower --max-num-seqs: --max-num-seqs {seqs_half}{serve_seqs_sep}{serve_seqs}",
                 "Or lower --gpu-memory-utilization so more memory stays outside the KV cache"),
        source="vllm==0.32.0 vllm/v1/worker/gpu_model_runner.py:5991; advice: vllm-project/vllm#15105",
    ),
    Signature(
        id="no_memory_for_kv_blocks",
        severity="critical",
        tier=1,
        title="No GPU memory left for the KV cache after the weights",
        meaning="After the weights and activations, the memory vLLM may use (--gpu-memory-utilization) left nothing for KV blocks.",
        patterns=(r"No available memory for the cache blocks",),  # vllm==0.32.0 vllm/v1/core/kv_cache_utils.py:1011
        actions=("Raise --gpu-memory-utilization{util_hint}",
                 "Or need less for the weights per GPU: a larger --tensor-parallel-size, or a quantized checkpoint"),
        source="vllm==0.32.0 vllm/v1/core/kv_cache_utils.py:1011; advice: vllm-project/vllm#15357",
    ),
    Signature(
        id="kv_tokens_below_max_len",
        severity="critical",
        tier=1,
        title="The KV cache holds {kv_tokens:,} tokens, fewer than --max-model-len {max_len:,}",
        meaning="One request of the full length would not fit in the KV cache this memory gives.",
        patterns=(r"The model's max seq len \((?P<max_len>[0-9]+)\) is larger than the maximum number of tokens that can be stored in KV cache \((?P<kv_tokens>[0-9]+)\)",),
        actions=("Set --max-model-len {kv_tokens} or less{serve_len_sep}{serve_len}", "Or raise --gpu-memory-utilization"),
        source="vllm (V0) vllm/worker/worker.py raise_if_cache_size_invalid; advice: QwenLM/Qwen3#295",
    ),
    Signature(
        id="multimodal_placeholders_mismatch",
        severity="critical",
        tier=1,
        title="{tokens} multimodal tokens for {placeholders} placeholders",
        meaning="The prompt's image/video placeholders were cut: the prompt with its multimodal tokens is longer than the space the scheduler gave it.",
        patterns=(r"Attempted to assign (?:[^=\n]*= )?(?P<tokens>[0-9]+) multimodal tokens to (?P<placeholders>[0-9]+) placeholders",),
        actions=("Raise --max-model-len (and --max-num-batched-tokens) above the multimodal tokens plus the text",),
        source="vllm==0.32.0 vllm/model_executor/models/utils.py:748; advice: vllm-project/vllm#7996, #8028",
    ),
    Signature(
        id="request_over_server_limit",
        severity="warning",
        tier=1,
        role="request",
        title="A request asked for more than this server allows ({limit_text})",
        meaning="The request was refused by a server limit set at launch; the server stays up.",
        patterns=(
            r"(?P<limit_text>At most (?P<mm_limit>[0-9]+) (?P<modality>\w+)\(s\) may be provided in one (?:request|prompt))",
            r"(?P<limit_text>Cannot request more than (?P<logprobs>[0-9]+) logprobs)",
            r"(?P<limit_text>Cannot load local files without `--allowed-local-media-path`)",
            r"(?P<limit_text>\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set)",
        ),
        actions=("{limit_action}",),
        source=(
            "vllm==0.32.0 vllm/multimodal/processing/context.py:621, vllm/multimodal/media/connector.py:189, "
            "vllm/renderers/online_renderer.py:268; advice: vllm-project/vllm#13513, #5312, #9915, #17792"
        ),
    ),
    Signature(
        id="dsv4_kv_shape_mismatch",
        severity="critical",
        tier=1,
        title="FlashMLA got a KV cache of another layout than DeepSeek-V4's fp8_ds_mla",
        meaning=(
            "FlashMLA's sparse decode checks the cache's bytes per token; the layer's cache was allocated with another "
            "KV dtype or layout than the one the kernel reads (a bug of some 0.23-era builds, fixed by propagating the "
            "layer's cache dtype)."
        ),
        patterns=(r"kv must have shape \(num_blocks, page_block_size, h_kv, bytes_per_token\)",),
        actions=("Start with the KV layout the kernel expects: --kv-cache-dtype fp8 --block-size 256",
                 "Upgrade vLLM past the fix (vllm-project/vllm#47716)"),
        source="FlashMLA sparse decode (vllm _flashmla_C); advice: vllm-project/vllm#47716",
    ),
    Signature(
        id="response_schema_error",
        severity="critical",
        tier=1,
        title="vLLM built a {response} its own schema rejects",
        meaning=(
            "The server constructed a response object that failed pydantic validation: a bug of this release in the "
            "serving path for the request's features (streaming, tool calls, logprobs), not a fault of the request."
        ),
        patterns=(r"validation errors? for (?P<response>\w*(?:Response|Chunk)\w*)",),
        actions=("Upgrade vLLM (the serving path is fixed release by release), or turn off the feature the failing requests "
                 "used (streaming, tools, logprobs) until then",),
        source="pydantic ValidationError raised in vllm/entrypoints/openai (the response models)",
    ),
    Signature(
        id="sglang_cuda_graph_capture",
        severity="critical",
        tier=1,
        title="SGLang could not capture its decode CUDA graphs",
        meaning=(
            "This is SGLang's engine, not vLLM's: its CUDA-graph runner failed while capturing the decode graphs{cause_text}. "
            "Capture needs memory beyond the static pool and kernels that support capture at every batch size."
        ),
        patterns=(r"Capture cuda graph failed:(?P<cause>[^\n]*)",),
        actions=(
            "Leave more memory outside SGLang's static pool: a smaller --mem-fraction-static (0.8 or 0.7)",
            "Capture fewer batch sizes: a smaller --cuda-graph-max-bs (--cuda-graph-max-bs-decode in 0.5.2x), e.g. 16",
            "To confirm it is the capture, run once without decode graphs (slow, not for production; in 0.5.2x "
            "--cuda-graph-backend-decode=disabled): --disable-cuda-graph",
        ),
        source=(
            "sglang==0.5.23 sglang/srt/model_executor/runner/decode_cuda_graph_runner.py:603, "
            "runner_backend_utils/__init__.py:14 (the remedies it prints)"
        ),
    ),
    Signature(
        id="kv_budget_too_small",
        severity="critical",
        tier=1,
        title="One request of {max_len:,} tokens needs {need} GiB of KV cache; {avail} GiB is available",
        meaning=(
            "vLLM sizes the KV cache from the memory left after the weights ({avail} GiB) and refuses a --max-model-len "
            "whose one request would not fit ({need} GiB). {estimate_text}"
        ),
        patterns=(r"max seq len \((?P<max_len>[0-9]+)\), \((?P<need>[0-9.]+) GiB KV cache is needed, which is larger than the "
                  r"available KV cache memory \((?P<avail>[0-9.]+) GiB\)",),
        actions=("Set --max-model-len {fit_len} or less{serve_len_sep}{serve_len}",
                 "Or give the KV cache more memory: {more_memory}"),
        source="vllm==0.32.0 vllm/v1/core/kv_cache_utils.py:1027 (the estimate); older releases' 'models's max seq len' wording",
    ),
    Signature(
        id="flag_needs_multimodal_model",
        severity="critical",
        tier=1,
        title="{flag_text} is only for multimodal models",
        meaning="The launch set a multimodal option for a model that vLLM loads as text-only (or whose multimodal architecture this vLLM does not register).",
        patterns=(r"`(?P<flag_text>limit_mm_per_prompt)` is only supported for multimodal models",),
        actions=("Start without --limit-mm-per-prompt, or with a vLLM release that registers the model's multimodal architecture",),
        source="vllm (0.9.x) vllm/config.py ModelConfig; advice: zai-org/GLM-V#15",
    ),
    Signature(
        id="engine_handshake_timeout",
        severity="critical",
        tier=1,
        title="The engine process never answered the front end ({timeout_text})",
        meaning=(
            "The API server waited for its engine core process (or, in a multi-node data-parallel group, for the remote "
            "engines) and gave up: the engine died before it could answer, is still loading, or cannot reach the "
            "front end's address."
        ),
        patterns=(r"(?P<timeout_text>Timed out waiting for engines to send initial message on input socket)",
                  r"(?P<timeout_text>Server didn't reply within [0-9]+ ms)"),
        actions=("Look for the engine's own error before this line (EngineCore / Worker lines); if it was only slow, allow more "
                 "time (the default is 600 s, vllm/envs.py:811): VLLM_ENGINE_READY_TIMEOUT_S=1800",
                 "Multi-node: every headless node must reach --data-parallel-address on --data-parallel-rpc-port (check with nc -zv ADDR PORT)"),
        source="vllm==0.32.0 vllm/envs.py:811 (VLLM_ENGINE_READY_TIMEOUT_S); vllm v1/engine/utils.py (the handshake); V0 'Server didn't reply' (VLLM_RPC_TIMEOUT)",
    ),
)
