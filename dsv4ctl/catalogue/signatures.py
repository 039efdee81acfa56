"""The catalogue of startup-failure signatures `diagnose` knows: data, not if-chains.

Each `Signature` says what it means, which log messages are its evidence (regexes over the
`LogLine.message`, each containing a prefilter keyword), how it ranks, and what to do. Numbers in the
actions are filled in from the log (`{placeholders}` are keys of the finding's `details`); an action
whose placeholders the log cannot fill is left out rather than printed with a guess.

Kept whole (this file and signatures_vllm.py, signatures_ecosystem.py): data, one entry per signature with its
words, source and advice; split by size the registry would scatter.

role:
- "cause": can be the root cause of a failed startup;
- "symptom": a consequence that points elsewhere (EngineCore failed to start, a worker died, an NCCL
  error after a CUDA fault); it is the root cause only when nothing else explains the failure;
- "note": worth knowing, never a failure by itself (auto-fit reduced the context);
- "request": a request-level error that leaves a running server up (a prompt longer than max_model_len,
  a missing chat template): a warning, never a failure;
- "noise": printed while vLLM stops (after SIGTERM), harmless.
fatal: seen after the server was ready, this error means the server or its engine is down (the engine
is dead, a collective timed out, the port could not be bound): the start is `failed` in phase `serving`.
Named groups in a pattern (`(?P<tp>[0-9]+)`) become the finding's `details` (from the first matching
line) and can be used as `{tp}` in the meaning and actions.
tier: among causes, tier 0 (specific) beats tier 1 (generic classes such as "an NCCL error");
within a tier the earliest evidence wins.
echo: the error tells of another rank's failure (a collective that timed out waiting for it, a peer that went
away, a process that never answered); in one log it ranks as any cause, across a deployment's logs it never
outranks another rank's own error.
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature


AFFECTED_STALE = "0.29.0–0.30.x"
FIXED_STALE = "0.31.0"

CATALOGUE: tuple[Signature, ...] = (
    Signature(
        id="autofit_reduced",
        severity="warning",
        role="note",
        title="Auto-fit reduced max_model_len",
        meaning=(
            "vLLM measured less KV-cache memory than the model's full context needs and lowered "
            "max_model_len from {from_len:,} to {to_len:,} ({memory}). The served context is smaller than "
            "the checkpoint's, and because the result depends on the free memory at each start it can "
            "differ between restarts.{tentative_text}"
        ),
        patterns=(
            r"max_model_len: reduced from [0-9,]+ to [0-9,]+",
            # vLLM 0.34: the reduction that stands (after CUDA-graph capture and warmup in the measured mode)
            r"-max-model-len auto reduced max_model_len from [0-9]+ to [0-9]+",
        ),
        actions=(
            "Pin the length explicitly so every start behaves the same: --max-model-len {safe_len}",
            "{knob_action}",
            "See how much memory a longer context needs: dsv4ctl fit-length {model!q} --from-log {log!q}{_fit_flags}",
        ),
        source=(
            "vllm/v1/core/kv_cache_utils.py (0.27-0.32), v1/core/kv_cache_planning.py (0.33); vllm==0.34.0 "
            "v1/core/kv_cache_planning.py:1478-1485 (tentative), :1494-1499 and :1506-1514 (the reduction that stands)"
        ),
    ),
    Signature(
        id="stale_max_model_len",
        severity="critical",
        title="Stale max_model_len after auto-fit (sparse-MLA C128A assertion)",
        meaning=(
            "Auto-fit lowered max_model_len, but the V2 model runner's ModelState kept the old value. "
            "The sparse-MLA metadata builder sized its C128A top-k buffer for the reduced length while "
            "CUDA-graph capture asked for the original one, and the consistency assertion in "
            "_build_c128a_metadata fired. Affects vLLM {affected} with DeepSeek-V4 on the V2 runner; "
            "fixed in {fixed} (ModelState.max_model_len became a property).{premise_text}"
        ),
        patterns=(
            r"active_topk_width >= cm\.max_seq_len",
            r"in _build_c128a_metadata",
        ),
        actions=(
            "Set an explicit length that fits, so auto-fit never runs: --max-model-len {safe_len}",
            "{premise_check}",
            "{length_action}",
            "{knob_action}",
            "Launch through dsv4ctl, which sets that length for you: dsv4ctl serve {model!q}{_serve_flags} --max-model-len {safe_len}",
            "Upgrade vLLM to {fixed} or later",
        ),
        source="vllm/models/deepseek_v4/sparse_mla.py (assert added in 0.29.0); upstream report in docs",
        next_command="dsv4ctl serve {model!q}{_serve_flags} --max-model-len {safe_len}",
    ),
    Signature(
        id="deepgemm_metadata_oob",
        fatal=True,
        severity="critical",
        title="DeepGEMM's paged-MQA scheduler metadata kernel read out of bounds",
        meaning=(
            "DeepGEMM's SM90 paged-MQA metadata kernel (get_paged_mqa_logits_metadata, called by the "
            "DeepSeek-V4 indexer metadata builder) reads one int past its shared-memory buffer when every "
            "context length is zero and the batch size is a multiple of 32. {when_text} The fault is an illegal "
            "memory access that surfaces wherever CUDA next synchronises (often a later op, or an NCCL 'unhandled "
            "cuda error'). The vendored DeepGEMM is unguarded in vLLM ≤ 0.27.x; any vLLM with an old external "
            "deep_gemm package (which takes precedence over the vendored copy) is exposed too."
        ),
        patterns=(r"get_paged_mqa_logits_metadata",),
        context=True,
        actions=(
            "Upgrade DeepGEMM past the unguarded kernel: vLLM 0.28.0 or later vendors a guarded copy; remove any old "
            "external deep_gemm package, which takes precedence (pip uninstall deep_gemm)",
            "Launch through dsv4ctl, which clamps the scheduler input: dsv4ctl serve {model!q}{_serve_all}",
            "Avoid FULL CUDA graphs (FULL_DECODE_ONLY still captures FULL decode graphs): "
            "--compilation-config '{{\"cudagraph_mode\": \"PIECEWISE\"}}'",
            "Last resort, no CUDA graphs at all: --enforce-eager",
        ),
        source="upstream DeepGEMM SM90 paged-MQA metadata report; vllm/v1/attention/backends/mla/indexer.py",
        next_command="dsv4ctl probe deepgemm",
    ),
    Signature(
        id="kv_cache_insufficient",
        severity="critical",
        title="Not enough KV-cache memory for max_model_len",
        meaning=(
            "{when_text}, the memory left for the KV cache cannot hold one request "
            "of the configured max_model_len{needed_clause}.{measured_text}"
        ),
        patterns=(
            r"To serve at least one request with the model's max seq len",
            r"No available memory for the cache blocks",
            r"The model's max seq len \([0-9]+\) is larger than the maximum number of tokens that can be stored in KV cache",
            r"Cannot auto-fit max_model_len",
        ),
        actions=(
            "Use a length that fits: --max-model-len {safe_len}",
            "{knob_action}",
            "Let vLLM choose the largest length that fits: --max-model-len auto",
            "Store the KV cache in fp8, half the memory of bf16: --kv-cache-dtype fp8",
            "Give the KV cache more memory: {more_memory_text}",
            "{graphs_action}",
        ),
        source=(
            "vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory / _auto_fit_max_model_len; vllm==0.34.0 "
            "v1/core/kv_cache_planning.py:99-132 (the check), :1849-1860 (after CUDA-graph capture, the hint "
            "_more_kv_cache_memory_hint(after_warmup=True) :64-96), :1428-1439 (auto-fit after warmup)"
        ),
        next_command="dsv4ctl fit-length {model!q} --from-log {log!q}{_fit_flags}",
    ),
    Signature(
        id="cuda_oom",
        severity="critical",
        title="CUDA out of memory",
        meaning="The GPU ran out of memory{phase_text}.",
        patterns=(
            r"CUDA out of memory",
            # torch's own type (torch.OutOfMemoryError, torch.cuda.OutOfMemoryError): the type alone, a message cut off.
            # Ray's ray.exceptions.OutOfMemoryError is the node's host memory, not the GPU's: its message says so.
            r"(?<![\w.])torch\.(?:cuda\.)?OutOfMemoryError",
            r"Failed to load model - not enough GPU memory",
            r"CUDA error: out of memory",
        ),
        actions=("{phase_action}", "{phase_action_2}", "{phase_action_3}", "{phase_action_4}",
                 "Check what else holds GPU memory: dsv4ctl gpus"),
        source="torch.OutOfMemoryError; vllm/v1/worker/gpu_model_runner.py load_model",
        next_command="dsv4ctl gpus",
    ),
    Signature(
        id="free_memory_below_utilization",
        severity="critical",
        title="Free GPU memory below the requested utilization at startup",
        meaning=(
            "vLLM reserves gpu_memory_utilization × total memory up front; at startup less than that was "
            "free ({free_text}): {in_use_text}. The log does not say what held it: another process on the GPU (an "
            "old vLLM, a notebook), or memory this launch's own process took before the check."
        ),
        patterns=(r"on startup is less than desired GPU memory utilization",),
        actions=(
            "See what holds the memory already in use on that GPU: nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
            "Or ask for less: --gpu-memory-utilization {suggested_util}",
        ),
        source="vllm/v1/worker/utils.py request_memory",
        next_command="dsv4ctl gpus",
    ),
    Signature(
        id="deepgemm_unsupported_arch",
        severity="critical",
        title="DeepGEMM does not support this GPU architecture",
        meaning=(
            "A DeepGEMM kernel DeepSeek-V4 needs has no build for this GPU's compute capability "
            "(DeepGEMM targets SM90 and SM100)."
        ),
        patterns=(r"Assertion error \([^)]*\): Unsupported architecture", r"Unsupported architecture"),
        actions=(
            "Run on a supported GPU (H100/H200: SM90, B200/GB200: SM100), or",
            "Use a vLLM build whose DeepSeek-V4 path does not need DeepGEMM on this GPU (check the vLLM recipe for your architecture)",
        ),
        source="DeepGEMM host assertion (DG_HOST_ASSERT format 'Assertion error (file:line): cond'), vLLM issue #40778",
    ),
    Signature(
        id="deep_gemm_missing",
        severity="critical",
        title="DeepGEMM is not available",
        meaning=(
            "DeepSeek-V4's sparse indexer needs DeepGEMM on CUDA, and neither an installed deep_gemm "
            "package nor vLLM's vendored copy could be used (or the installed one is too old)."
        ),
        patterns=(
            r"requires DeepGEMM",
            r"DeepGEMM is not available",
            r"No module named '?deep_gemm",
            r"Vendored deep_gemm not found either",
        ),
        actions=(
            "Use a vLLM wheel that vendors DeepGEMM (the official CUDA wheels do), or install a DeepGEMM that matches it",
            "Check the JIT include files are present; clear DG_JIT_CACHE_DIR after changing DeepGEMM",
        ),
        source="vllm/model_executor/layers/sparse_attn_indexer.py, vllm/utils/deep_gemm.py",
    ),
    Signature(
        id="no_sparse_mla_backend",
        severity="critical",
        title="No sparse-MLA attention backend for this GPU",
        meaning=(
            "vLLM found no attention backend that supports DeepSeek-V4's sparse MLA with this GPU, dtype "
            "and block size; the reasons per backend are in the evidence."
        ),
        patterns=(r"No valid attention backend found for",),
        actions=(
            "Read the per-backend reasons in the evidence; DeepSeek-V4 needs --block-size 256",
            "On SM12x use the FlashInfer DSv4 backend: --attention-backend FLASHINFER_MLA_SPARSE_DSV4",
        ),
        source="vllm/platforms/cuda.py get_attn_backend_cls",
    ),
    Signature(
        id="kv_cache_dtype_unsupported",
        severity="critical",
        title="KV-cache dtype not supported by the DeepSeek-V4 layout",
        meaning=(
            "The fp8_ds_mla KV layout (FlashMLA, SM90/SM100) stores fp8 only, and a non-fp8 "
            "--kv-cache-dtype was given. On SM12x the default FlashInfer backend stores plain rows, where "
            "`auto` means bf16 — twice the KV memory of fp8."
        ),
        patterns=(r"fp8_ds_mla layout only supports fp8",),
        actions=("Use --kv-cache-dtype fp8",),
        source="vllm/models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype",
    ),
    Signature(
        id="mtp_next_n_unsupported",
        severity="critical",
        title="MTP speculative tokens not supported by the indexer kernel (next_n)",
        meaning=(
            "With MTP/speculative decoding the indexer's paged-MQA logits kernel is called with "
            "next_n = num_speculative_tokens + 1 query rows per request; this kernel build accepts only "
            "some values (SM90: 1, 2, 4; older DeepGEMM: 1, 2)."
        ),
        patterns=(r"Assertion error \([^)]*\):.*next_n", r"AssertionError.*next_n", r"assert .*next_n"),
        actions=(
            "Use num_speculative_tokens 1 (next_n = 2) in --speculative-config, or",
            "Upgrade vLLM (0.32+ flattens unsupported next_n on SM90) and DeepGEMM",
        ),
        source="DeepGEMM paged MQA logits host assertion; vllm/utils/deep_gemm.py native_next_n_supported",
    ),
    Signature(
        id="mtp_weights_missing",
        severity="critical",
        title="MTP layer weights missing from the checkpoint",
        meaning="Speculative decoding with MTP was requested, but the checkpoint has no weights for the MTP layer.",
        patterns=(r"MTP speculative decoding layer [0-9]+ weights missing from checkpoint",),
        actions=("Use a checkpoint that includes the MTP layer, or drop --speculative-config",),
        source="vllm/models/deepseek_v4/nvidia/mtp.py",
    ),
    Signature(
        id="cuda_driver_too_old",
        severity="critical",
        title="NVIDIA driver too old for this CUDA build",
        meaning="The installed driver does not support the CUDA runtime the vLLM/torch wheels were built for.",
        patterns=(
            r"driver on your system is too old",
            r"CUDA driver version is insufficient for CUDA runtime version",
        ),
        actions=("Upgrade the NVIDIA driver, or use the CUDA forward-compatibility libraries, or a wheel built for an older CUDA",),
        source="torch/CUDA runtime error texts",
    ),
    Signature(
        id="address_in_use",
        fatal=True,
        severity="critical",
        title="The address {port_text}is already taken",
        meaning=(
            "A socket of this server could not be bound ({bind_text}): something already holds that address. The log "
            "does not say what: a server left from before, another program, or a process of this same launch (vLLM's "
            "engine and worker processes inherit the API server's sockets when they are started by fork)."
        ),
        patterns=(
            # asyncio's create_server, which uvicorn uses to bind (CPython 3.11.7 asyncio/base_events.py:1525, its strerror
            # lower-cased): "[Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"
            r"error while attempting to bind on address \('(?P<host>[^']*)', (?P<port>[0-9]+)\)[^\n]*: address already in use",
            r"Address already in use",
        ),
        actions=(
            "See which process holds it: {ss_command}",
            "If it is a process of this same launch (a child of this server), start vLLM's processes with spawn: "
            "VLLM_WORKER_MULTIPROC_METHOD=spawn",
            "If it is a server left from before, stop it before starting this one",
        ),
        source="OSError [Errno 98] from the API server socket; CPython 3.11.7 asyncio/base_events.py:1525; "
               "vllm==0.33.0 vllm/envs.py:939 VLLM_WORKER_MULTIPROC_METHOD (fork, spawn)",
        next_command="{ss_command}",
        phase="startup",  # a server that cannot bind its port never served, whatever it logged before
    ),
    Signature(
        id="cli_arguments_rejected",
        severity="critical",
        title="The command line was rejected",
        meaning=(
            "{prog} refused its arguments before starting anything ({usage_error}): a flag vLLM does not have "
            "(often a misspelling), a value of the wrong type, or a flag of another release."
        ),
        patterns=(
            r"^(?P<prog>[\w.-]+(?: [\w.-]+)?): error: (?P<usage_error>unrecognized arguments: .+)",
            r"^(?P<prog>[\w.-]+(?: [\w.-]+)?): error: (?P<usage_error>argument \S+: .+)",
        ),
        actions=(
            "Check each flag's spelling and value against this release's own list: vllm serve --help=all",
        ),
        source=(
            "CPython 3.11.7 argparse.py:2630 (the exit), :2384 (unrecognized arguments), :776 (argument …); "
            "vllm==0.33.0 vllm/utils/argparse_utils.py:182 (FlexibleArgumentParser.error hands it to argparse)"
        ),
        phase="startup",
    ),
    Signature(
        id="cuda_illegal_memory_access",
        fatal=True,
        severity="critical",
        tier=1,
        title="CUDA illegal memory access",
        meaning=(
            "A CUDA kernel accessed memory it does not own. The error is sticky and asynchronous: the "
            "Python frame that reports it is usually not the kernel that faulted."
        ),
        patterns=(
            r"illegal memory access",
            r"cudaErrorIllegalAddress",
            # The CUDA driver's core dump and cuda-gdb (benchmarks/results/h200-2026-11-30/coredump-*.txt).
            r"Detected an exception of type CUDBG_EXCEPTION_\w*ADDRESS",
            r"^CUDA Exception: \w+ (?:Illegal|Out-of-range|Misaligned) Address",
        ),
        actions=(
            "Rerun once with CUDA_LAUNCH_BLOCKING=1 to find the kernel that faults",
            "Try --enforce-eager to see whether CUDA-graph capture is involved",
        ),
        source="CUDA runtime error text",
    ),
    Signature(
        id="nccl_error",
        fatal=True,
        severity="critical",
        tier=1,
        title="NCCL error",
        meaning=(
            "A collective operation failed. 'unhandled cuda error' means a CUDA error on that GPU surfaced "
            "inside NCCL — usually a fault elsewhere, not the interconnect."
        ),
        patterns=(r"NCCL error", r"unhandled cuda error", r"ncclUnhandledCudaError", r"DistBackendError"),
        actions=(
            "Look for an earlier CUDA error on any worker; rerun with NCCL_DEBUG=INFO for details",
            "If only NCCL fails: check the GPUs see each other (nvidia-smi topo -m) and try --disable-custom-all-reduce",
        ),
        source="vllm/distributed/device_communicators/pynccl_wrapper.py; torch.distributed",
    ),
    Signature(
        id="compile_error",
        severity="critical",
        tier=1,
        title="torch.compile / Inductor failed",
        meaning="Compiling the model graph (torch.compile with Inductor) raised an error during startup.",
        patterns=(
            r"BackendCompilerFailed",
            r"InductorError",
            r"torch\._inductor\.exc",
            r"torch\._dynamo\.exc",
        ),
        actions=(
            "Retry without compilation to confirm (-O0 does the same): --enforce-eager",
            "Clear the compile cache (~/.cache/vllm/torch_compile_cache) and retry",
        ),
        source="torch._dynamo / torch._inductor exception names",
    ),
    Signature(
        id="worker_died",
        fatal=True,
        severity="critical",
        role="symptom",
        title="A worker process died",
        meaning=(
            "A worker exited while the engine was running ({exit_text}). The reason is in that worker's own "
            "output; exit code -9 usually means the kernel's OOM killer (host RAM)."
        ),
        patterns=(r"Worker proc \S+ died unexpectedly", r"died unexpectedly"),
        actions=("Read the worker's last lines before this one; check host memory (dmesg | grep -i oom)",),
        source="vllm/v1/executor/multiproc_executor.py monitor_workers",
    ),
    Signature(
        id="serve_engine_died",
        fatal=True,
        severity="critical",
        tier=1,  # what the engine printed before it ended (a Python error of a known kind) says more
        title="A vLLM engine process died",
        meaning=(
            "vLLM's {process} process (pid {pid}) {how} while the server was meant to run; dsv4ctl serve saw it "
            "end (on a headless node vLLM itself logs no word of it, and the head keeps answering /health). "
            "A signal with nothing printed before it is the kernel's OOM killer (SIGKILL: host or container "
            "memory), a crash in native code (SIGSEGV, SIGBUS, SIGABRT) or someone's kill; an exit code follows "
            "an error the engine printed just before."
        ),
        patterns=(
            r"dsv4ctl serve: engine process (?P<process>\S+) \(pid (?P<pid>[0-9]+)(?:, DP rank (?P<rank>[0-9]+))?\) "
            r"(?P<how>was killed by signal (?P<signum>[0-9]+) \((?P<signal>[^)]+)\)|exited with code (?P<code>-?[0-9]+))",
        ),
        actions=(
            "Read the lines of ({process} pid={pid}) just before this one: an error there is the cause",
            "After SIGKILL, look for the OOM killer: dmesg -T | grep -i -E 'killed process|out of memory'",
            "Restart every node of the group: a data-parallel deployment serves only with all of its ranks",
        ),
        source="dsv4ctl dsv4ctl/serve/engines.py:78 (EngineDeath.describe; the words at :75-78)",
    ),
    Signature(
        id="engine_core_failed",
        fatal=True,
        severity="critical",
        role="symptom",
        title="Engine core failed",
        meaning=(
            "The engine reported that {what_failed}. This line is a consequence; the cause is the worker's own "
            "first error, printed with it (its traceback follows the line in vLLM's log, or comes before it)."
        ),
        patterns=(
            r"EngineCore failed to start",
            r"WorkerProc initialization failed",
            r"WorkerProc failed to start",
            r"Engine core initialization failed",
            r"EngineCore encountered a fatal error",
            r"WorkerProc hit an exception",
            r"EngineDeadError",
            r"output_handler failed",
        ),
        actions=("Read the worker's first ERROR and its traceback, printed with this line",),
        source="vllm/v1/engine/core.py, v1/executor/multiproc_executor.py, v1/engine/utils.py",
    ),
    Signature(
        id="engine_waiting",
        severity="warning",
        role="note",
        title="vLLM's processes waited on each other for a long time",
        meaning=(
            "A process waited on the others to hand over work (vLLM's shared-memory broadcast queue), reported "
            "once per {seconds}-second interval, {occurrences} time(s) here. vLLM prints this when some processes "
            "hang, or while they do long work such as compiling or quantising; a log that ends here without the "
            "server ready most likely hung."
        ),
        patterns=(r"No available shared memory broadcast block found in (?P<seconds>[0-9]+) seconds",),
        actions=(
            "Find the process that stopped progressing: the last lines of each Worker/EngineCore before this one, and "
            "where each stands now: py-spy dump --pid PID of each vLLM process",
            "{compile_action}",
        ),
        source="vllm==0.32.0 vllm/distributed/device_communicators/shm_broadcast.py:109; "
        "vllm==0.27.1 vllm/distributed/device_communicators/shm_broadcast.py:105",
    ),
    Signature(
        id="shutdown_noise",
        severity="info",
        role="noise",
        title="Errors during shutdown (harmless)",
        meaning=(
            "Printed while vLLM's processes stop — after SIGTERM or Ctrl-C, when the server shuts down, or "
            "at exit (leaked shared-memory warnings). Harmless, and not a startup failure."
        ),
        patterns=(
            r"output_handler failed",
            r"EngineDeadError",
            r"leaked shared_memory",
            r"^KeyboardInterrupt",
        ),
        actions=(),
        source="vllm/v1/engine/async_llm.py; multiprocessing resource_tracker",
    ),
)

# Findings derived by diagnose itself (not matched line by line).
DERIVED: tuple[Signature, ...] = (
    Signature(
        id="kv_cache_dtype_auto_bf16",
        severity="warning",
        role="note",
        title="KV cache stored as bf16 (--kv-cache-dtype auto without the fp8_ds_mla layout)",
        meaning=(
            "The engine ran DeepSeek-V4 with kv_cache_dtype=auto and never switched to DeepSeek's fp8_ds_mla "
            "KV format, which is what happens with the FlashInfer DSv4 backend (the default on SM12x GPUs): it "
            "stores plain bf16 rows, about twice the memory per token of fp8, so the context that fits is "
            "roughly halved."
        ),
        patterns=(),
        actions=("Store the KV cache in fp8: --kv-cache-dtype fp8",),
        source="vllm/models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype (plain-row branch)",
    ),
    Signature(
        id="error_after_startup",
        severity="warning",
        role="note",
        title="Error after startup completed",
        meaning=(
            "The server finished starting (line {ready_line}) and this error came later, while serving. It is "
            "not a startup failure; it was classified as {classified_as}."
        ),
        patterns=(),
        actions=("Diagnose the serving error separately; the startup itself succeeded",),
    ),
    Signature(
        id="error_survived",
        severity="warning",
        role="note",
        title="An error the server survived",
        meaning=(
            "{answered}, so it did not take the server down: a request's or a client's error, or one vLLM "
            "handled."
        ),
        patterns=(),
        actions=("Look at the request that failed; the server needs no restart",),
    ),
    Signature(
        id="indexed_error",
        severity="critical",
        tier=1,
        title="A known error of {package}",
        meaning=(
            "The error that ended this start ({exception}) is a message {package} prints in {function} "
            "({cite}; {release_span}). No hand-written signature explains it, so dsv4ctl has no advice of its own; "
            "the source and the settings that feed that check are where to look."
        ),
        patterns=(),
        actions=(
            "Check the settings this check reads ({flags_text})",
            "Read the check where it is raised: {cite}",
        ),
        source="dsv4ctl/catalogue/message_index.json.gz (scripts/build_message_index.py)",
    ),
    Signature(
        id="unrecognized_error",
        severity="critical",
        tier=1,
        title="An error dsv4ctl does not recognise",
        meaning=(
            "The error that ended this start ({exception}) matches no known signature, and no message of the "
            "packages dsv4ctl indexed (vLLM 0.27.1-0.33.0, torch, transformers, huggingface_hub, Ray, safetensors, "
            "Triton, the CUDA runtime, NCCL). It is the originating error: the first a process raised itself, "
            "before the wrappers that repeat it (EngineCore failed to start, Worker failed with error …); the line "
            "is quoted below."
        ),
        patterns=(),
        actions=(
            "Read the traceback around the quoted line",
        ),
    ),
    Signature(
        id="log_ends_before_ready",
        severity="warning",
        role="note",
        title="The log ends while {phase_text}",
        meaning=(
            "Nothing in the log failed, and it ends while {phase_text}{progress_text}. The log cannot say why it stops "
            "there: the process may still be at work, have been stopped from outside (the host's OOM killer, a probe, a "
            "restart), or hang. The checks below tell these apart; none of them is shown by the log."
        ),
        patterns=(),
        actions=(
            "Check whether the server is still running, and so still at work: pgrep -af vllm",
            "{storage_check}",
            "Check whether the host's OOM killer ended it (a process of the start killed for host memory): "
            "dmesg -T | grep -i -E 'killed process|out of memory'",
            "In a container, check its shared memory (Docker gives 64 MB unless docker run --shm-size or --ipc=host; vLLM's workers "
            "need more): df -h /dev/shm",
            "If a startup or liveness probe watches the server (Kubernetes), check that it allows longer than the start "
            "takes and did not restart it (kubectl describe pod: Events, Last State)",
        ),
        source="vllm==0.32.0 model_executor/model_loader/weight_utils.py (the shards bar); the startup timeline",
    ),
    Signature(
        id="not_a_vllm_log",
        severity="warning",
        role="note",
        title="Not a vLLM log",
        meaning=(
            "Read {lines_read:,} lines and none of them is a vLLM log record, a process-tagged line or a Python "
            "traceback, so there is no start to diagnose."
        ),
        patterns=(),
        actions=(
            "Pass the log of the vLLM process (vllm serve's stdout and stderr, e.g. docker logs CONTAINER 2>&1)",
        ),
    ),
)

# The catalogue's families beyond DeepSeek-V4, each in a module of its own (each entry cites the source
# file:line of the package that prints the message).
from dsv4ctl.catalogue.signatures_dspark import DERIVED as _DSPARK_DERIVED, SIGNATURES as _DSPARK  # noqa: E402
from dsv4ctl.catalogue.signatures_dsv4_field import SIGNATURES as _DSV4_FIELD  # noqa: E402
from dsv4ctl.catalogue.signatures_ecosystem import SIGNATURES as _ECOSYSTEM  # noqa: E402
from dsv4ctl.catalogue.signatures_vllm import SIGNATURES as _VLLM  # noqa: E402
from dsv4ctl.catalogue.signatures_v034 import DERIVED as _V034_DERIVED, SIGNATURES as _V034  # noqa: E402
from dsv4ctl.catalogue.signatures_waits import DERIVED as _WAITS_DERIVED, SIGNATURES as _WAITS  # noqa: E402

CATALOGUE = CATALOGUE + _VLLM + _ECOSYSTEM + _WAITS + _DSV4_FIELD + _V034 + _DSPARK

class _ById(dict):
    """Signatures by id; the family rules (catalogue/families) join at the first id that is none of the above, so a
    log that fails on nothing the families answer never compiles them."""

    def __missing__(self, key: str) -> Signature:
        from dsv4ctl.catalogue.families import BY_ID as families

        if key not in families:
            raise KeyError(key)
        self.update(families)
        return families[key]


BY_ID: dict[str, Signature] = _ById({s.id: s for s in CATALOGUE + DERIVED + _WAITS_DERIVED + _DSPARK_DERIVED + _V034_DERIVED})
