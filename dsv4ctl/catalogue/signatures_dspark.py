"""Catalogue entries for DSpark, DeepSeek's speculative decoding (`--speculative-config '{"method": "dspark"}'`), and its
crash family in the field, and the classic-MTP refusal of DeepSeek-V4.1 (whose only draft is DSpark).

Each text is the report's own (the thread is cited; /work/shared/research/deepseek-v41-and-dspark.md §6 quotes them)
and, where vLLM ships it, the file:line of vllm==0.34.0 (the wheel unpacked with `pip download vllm==0.34.0
--no-deps`). FlashMLA's host assertion is compiled into the wheel (`vllm/_flashmla_C.abi3.so`, no C++ source ships):
0.34.0's binary holds 'Failed to create tensormap', 'Dim: %d', 'Assertion `%s` failed (%s:%d)' and the path
`/workspace/.deps/flashmla-src/csrc/3rdparty/kerutils/include/kerutils/host/host.h` (vllm#50842 on 0.26.0 printed
`csrc/kerutils/include/...`, line 140). Ascend's texts are CANN's (vllm-ascend); no source of them ships here.

The advice says what the threads show: the conditions of each report and what helped there. A condition the log
does not show (DSpark on, the GPU, the prompt's length) is a check to make, not a fix.

Kept whole: data, one entry per message (see signatures.py).
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

_HOST_H = r"\S*kerutils/host/host\.h:(?P<line>[0-9]+)"

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        id="dspark_flashmla_tensormap",
        fatal=True,
        severity="critical",
        title="FlashMLA could not create a TMA tensor map (its host check failed)",
        meaning=(
            "FlashMLA's host code failed to build a TMA descriptor ('Failed to create tensormap', kerutils "
            "host.h:{line}) and asserted. vllm#50842 reports this text from DeepSeek-V4-Pro with DSpark "
            "speculative decoding on 8 × H200 under DP=8 + EP (vLLM 0.26.0, during prefill, through a breakable "
            "CUDA graph's replay); the issue is closed without a named fix. The same FlashMLA TMA-descriptor family "
            "(vllm#54179, #51486) was a prefill chunk of zero query tokens reaching flash_mla_sparse_fwd.{spec_text}"
        ),
        patterns=(
            r"Assertion .false. failed \(" + _HOST_H + r"\)",
            r"Failed to create tensormap",
        ),
        actions=(
            "{spec_check}",
            "Check the breakable CUDA-graph path, which vllm#50842's stack ran through and whose opt-out removed the "
            "same family's failure in vllm#54179: VLLM_USE_BREAKABLE_CUDAGRAPH=0 vllm serve {model!q}{_serve_all}",
            "Follow vllm#50842 (closed on 0.26.0 without a named fix) and vllm#54179 (fixed by vllm#49302; 0.28.0 "
            "started cleanly there)",
        ),
        source=(
            "vllm==0.34.0 vllm/_flashmla_C.abi3.so (strings: 'Failed to create tensormap', 'Dim: %d', 'Assertion `%s` "
            "failed (%s:%d)', flashmla-src/csrc/3rdparty/kerutils/include/kerutils/host/host.h); the text and "
            "host.h:140: vllm#50842 (vLLM 0.26.0, csrc/kerutils/include/kerutils/host/host.h)"
        ),
    ),
    Signature(
        id="dspark_map_draft_to_target",
        fatal=True,
        severity="critical",
        title="DSpark's draft-to-target id mapping was in the failing call",
        meaning=(
            "The error was raised in DSpark's draft sampling, through the drafter's map_draft_to_target. vllm#56443 "
            "reports DeepSeek-V4.1-Flash + DSpark failing there with a CUDA device-side assert at draft warm-up on "
            "4 × H200 (SM90) TP4 + EP with the Marlin MXFP4 MoE backend, about 35 s after the weights loaded, all "
            "four workers killed; vllm#56448 did not fix it and the issue closed without a named fix. In vLLM "
            "0.34.0 DeepSeek-V4.1's map_draft_to_target returns the draft ids unchanged (full vocabulary), so no "
            "index is taken there.{spec_text}"
        ),
        patterns=(
            r"line [0-9]+, in map_draft_to_target\b",
            r"self\.model\.map_draft_to_target\(",
        ),
        actions=(
            "CUDA reports a device-side assert late: rerun with CUDA_LAUNCH_BLOCKING=1 to see the kernel that "
            "asserts: CUDA_LAUNCH_BLOCKING=1 vllm serve {model!q}{_serve_all}",
            "{spec_check}",
            "{release_check}",
        ),
        source=(
            "vllm==0.34.0 vllm/v1/worker/gpu/spec_decode/dspark/speculator.py:204 (the call in _sample_logits), "
            "vllm/models/deepseek_v41/nvidia/dspark.py:387-388 (the identity); vllm#56443, vllm#56448"
        ),
    ),
    Signature(
        id="ascend_index_check_dspark",
        fatal=True,
        severity="critical",
        title="An Ascend kernel's index check failed (index {index} beyond bound {bound})",
        meaning=(
            "An Ascend kernel checked an index against its bound and it was out of range{numbers_text}. "
            "vllm-ascend#16576 reports this with DeepSeek-V4-Pro (W4A8) + DSpark on Ascend A2 (910B2C, "
            "v0.26.0rc1), in the Lightning Indexer's metadata kernel (launch failed for "
            "VllmQuantLightningIndexerMetadata, errno 361001); vllm-ascend#15930 (DeepSeek-V4-Pro, PD "
            "disaggregation + DSpark on A3, marked a duplicate) the same IndexCheck int64 out-of-bounds. Both are "
            "open.{spec_text}"
        ),
        patterns=(
            r"IndexCheckKernel<(?P<index_type>\w+)>::ProcessScalar\(.*Assertion .\(idx < bound\). failed",
            r"Index out of range in dimension (?P<dim>[0-9]+): index value (?P<index>[0-9]+) exceeds bounds "
            r"(?P<bound>[0-9]+)",
            r"launch failed for VllmQuantLightningIndexerMetadata, errno:(?P<errno>[0-9]+)",
        ),
        actions=(
            "{spec_check}",
            "Follow vllm-ascend#16576 (open) and vllm-ascend#15930",
        ),
        source=(
            "CANN ops-nn ascendc/index_check/index_check.h:130 and vllm-ascend's VllmQuantLightningIndexerMetadata, "
            "as vllm-ascend#16576 quotes them (v0.26.0rc1); vllm-ascend#15930"
        ),
    ),
    Signature(
        id="mtp_refused_for_v41",
        severity="critical",
        title="DeepSeek-V4.1 has no classic-MTP draft: vLLM refuses --speculative-config method mtp",
        meaning=(
            "vLLM refused the MTP draft for DeepSeek-V4.1: its checkpoints ship DSpark stages under mtp.* "
            "(main_proj/markov_head/confidence_head), not the classic MTP weights. DSpark is V4.1's only speculative "
            "method; it takes its draft from the target checkpoint (no draft model path), and its "
            "num_speculative_tokens defaults to the checkpoint's dspark_block_size."
        ),
        patterns=(r"DeepSeek V4\.1 has no classic-MTP draft",),
        actions=(
            "Use DSpark, the draft the checkpoint ships: vllm serve {model!q}{_serve_no_spec} --speculative-config "
            "'{{\"method\": \"dspark\"}}'",
            "Or serve without speculative decoding: vllm serve {model!q}{_serve_no_spec}",
        ),
        source=(
            "vllm==0.34.0 vllm/v1/worker/gpu/spec_decode/mtp/config.py:82-88; DSpark's draft and its default length: "
            "vllm/v1/worker/gpu/spec_decode/dspark/config.py:36-85"
        ),
    ),
)

DERIVED: tuple[Signature, ...] = (
    Signature(
        id="dspark_v41_long_prompt_ima",
        severity="warning",
        role="note",
        title="DeepSeek-V4.1 with DSpark and an illegal memory access: a reported SM120 long-prompt crash",
        meaning=(
            "This start runs DeepSeek-V4.1 with DSpark speculative decoding and failed with an illegal memory access. "
            "vllm#56771 reports exactly that pair on 4 × RTX PRO 6000 (SM120): 'send any prompt ≳4K tokens (12K "
            "reproduces reliably). Short prompts work', 'Without DSpark this configuration serves cleanly' (open; "
            "fix PR vllm#57388, open, names a FlashInfer workspace shared by graph-captured decode and eager "
            "prefill, 2-D prefill indices, and unbounded block-table loads). The log does not show the GPU's "
            "architecture or the prompt's length: checks to make."
        ),
        patterns=(),
        actions=(
            "Check the GPU is SM120 (RTX PRO 6000, RTX 5090): nvidia-smi --query-gpu=name,compute_cap --format=csv",
            "Check whether the failing request had a long prompt (≳4K tokens in vllm#56771)",
            "Check whether it follows DSpark: vllm serve {model!q}{_serve_no_spec}",
            "Follow vllm#56771 and its fix PR vllm#57388",
        ),
        source="vllm#56771, vllm#57388",
    ),
)
