"""Traps of a launch that vLLM does not warn about before it starts: serve's preflight notes them.

Each rule reads the launch (vLLM's parsed flags), the release that will run, the GPUs NVML names and the
environment, and returns a note that ends in the command to run instead (the launch's own flags plus the
change; one line). Pure: never prints, never reads NVML or the environment itself.

- **Custom all-reduce on a multi-node group, vLLM 0.27.x–0.28.x.** Their `custom_all_reduce.py` sets up
  custom all-reduce on a group that spans nodes and enters the cross-node MNNVL symmetric-memory rendezvous
  (`_init_mnnvl_buffer`) on every such group; multi-node DeepSeek-V4-Pro starts hang there (vllm#53894,
  vllm#48466: `--disable-custom-all-reduce` "It works now"). 0.25.0–0.26.0 skip multi-node groups
  ("Custom allreduce is disabled because this process group spans across nodes."); 0.29.0–0.33.0 skip them
  unless every rank has MNNVL-capable GPUs (`_group_can_attempt_mnnvl`, read in each wheel).
- **Symmetric memory on H20.** On 8 × H20 torch's symmetric-memory multicast check fails at start
  (vllm#53320, workaround `TORCH_SYMM_MEM_DISABLE_MULTICAST=1`); vLLM's check is the same in 0.33.0
  (`symm_mem.py`: `handle.multicast_ptr == 0`). vLLM uses it for all-reduce with more than one GPU unless
  `VLLM_ALLREDUCE_USE_SYMM_MEM=0`.
- **`VLLM_USE_BREAKABLE_CUDAGRAPH` set to anything but 1 for DeepSeek-V4.** vLLM turns breakable CUDA
  graphs on for DeepSeek-V4 unless the variable is set (`config/vllm.py`,
  `DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES`; "Set VLLM_USE_BREAKABLE_CUDAGRAPH=0 to opt out"). Opted
  out, the start takes more memory per GPU: a whole thread took it for a 4 GiB-per-GPU regression
  (vllm#54677, retracted once every run was found to have it set).
- **DSpark** (`--speculative-config '{"method": "dspark", ...}'`), the crash family of the field
  (/work/shared/research/deepseek-v41-and-dspark.md §6.2); each note names its thread and ends in the launch
  without DSpark, the comparison every thread made: DeepSeek-V4 with DP + EP (vllm#50842: FlashMLA's "Failed to
  create tensormap" on 8 × H200, DP=8 + EP, closed without a named fix); DeepSeek-V4.1 on SM120 (vllm#56771: an
  illegal memory access in sparse-MLA prefill for prompts of about 4K tokens and more, "Without DSpark this
  configuration serves cleanly", open, fix PR vllm#57388); DeepSeek-V4.1 before 0.34 (vllm#56443: a device-side
  assert in `map_draft_to_target` at draft warm-up on H200; in vllm==0.34.0
  `models/deepseek_v41/nvidia/dspark.py:387-388` the mapping is the identity); GB10 with more than one GPU
  (vllm#54385: Xid 31 on both ranks at the PIECEWISE warm-up, TP=2, open, no workaround found); on SM90
  (H100/H200/H20), adaptive verification (`"enable_adaptive_verification": true`, the recipe's NVIDIA line), which
  vllm#56797 left off "because adaptive DSpark is currently broken on SM90 (#54011)", and on vLLM 0.27 the SM90
  crashes of DeepSeek-V4 + DSpark (vllm#52065: DeepGEMM's CUDA_ERROR_ILLEGAL_ADDRESS minutes after the draft
  loads, 0.27.0 on 8 x H100, "works on 0.26.0", open; vllm#54179: FlashMLA's SM90 sparse prefill assertion on a
  replay step of 512 tokens or fewer, "The released v0.28.0 image also starts cleanly"). Where no GPU is readable
  (a dry run on a laptop) the GPU-bound reports are named as checks to make on the GPU box.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CUSTOM_ALL_REDUCE = "custom-all-reduce-multi-node"
H20_MULTICAST = "h20-symm-mem-multicast"
BREAKABLE_OFF = "breakable-cudagraph-off"
DSPARK_DP_EP = "dspark-flashmla-tensormap-dp-ep"
DSPARK_V41_SM120 = "dspark-v41-sm120-long-prompt"
DSPARK_V41_MAP = "dspark-v41-draft-map-assert"
DSPARK_GB10 = "dspark-gb10-xid31"
DSPARK_SM90_ADAPTIVE = "dspark-sm90-adaptive-verification"
DSPARK_SM90_027 = "dspark-sm90-0.27"
DSPARK_GPUS_UNKNOWN = "dspark-gpus-unknown"

# The releases whose custom all-reduce enters the cross-node rendezvous on every multi-node group (read:
# vllm 0.27.1 and 0.28.0 custom_all_reduce.py; 0.26.0 returns early, 0.29.0 checks _group_can_attempt_mnnvl).
UNGUARDED_MULTI_NODE = ((0, 27), (0, 28))
_H20 = re.compile(r"\bH20\b")  # "NVIDIA H20" and "H20-3e", never "H200"
# SM120 boards by NVML's name (the RTX PRO 6000 Blackwell editions, the RTX 50 series); "RTX 6000 Ada" is SM89.
_SM120 = re.compile(r"RTX PRO 6000|RTX 50[5-9]0\b")
_GB10 = re.compile(r"\bGB10\b")
# SM90 boards by NVML's name, where the compute capability is not known (H100, H200, H20, H800, GH200).
_SM90 = re.compile(r"\b(GH200|H100|H200|H20|H800)\b")
# The release whose DeepSeek-V4.1 drafter maps draft ids as the identity (vllm==0.34.0
# models/deepseek_v41/nvidia/dspark.py:387-388).
DSPARK_V41_IDENTITY = (0, 34)
_SPEC_FLAGS = ("--speculative-config", "-sc")


@dataclass(frozen=True)
class Trap:
    rule: str
    text: str  # what and why, with its evidence
    command: str  # the command to run instead: the launch's own flags plus the change

    def note(self) -> str:
        return f"{self.text}: {self.command}"


def _release(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _int(namespace: Any, name: str, default: int = 1) -> int:
    value = getattr(namespace, name, None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def multi_node(namespace: Any, gpus_here: int | None) -> str | None:
    """Why this launch's group spans nodes (in words), or None. From vLLM's own flags: `--nnodes`,
    `--headless`, data parallelism beyond the local replicas; or a TP × PP group larger than this node."""
    nnodes = _int(namespace, "nnodes")
    if nnodes > 1:
        return f"--nnodes {nnodes}"
    if getattr(namespace, "headless", False):
        return "--headless (this node runs workers of a group led elsewhere)"
    dp, dp_local = _int(namespace, "data_parallel_size"), getattr(namespace, "data_parallel_size_local", None)
    if isinstance(dp_local, int) and 0 < dp_local < dp:
        return f"--data-parallel-size {dp} with {dp_local} local"
    world = _int(namespace, "tensor_parallel_size") * _int(namespace, "pipeline_parallel_size")
    if gpus_here and world > gpus_here:
        return f"tensor × pipeline parallel = {world} GPUs, {gpus_here} on this node"
    return None


def _speculative_config(namespace: Any) -> dict[str, Any] | None:
    """vLLM's parsed `--speculative-config` (a dict; a JSON string read as one)."""
    spec = getattr(namespace, "speculative_config", None)
    if isinstance(spec, str):
        try:
            import json

            spec = json.loads(spec)
        except ValueError:
            return None
    return spec if isinstance(spec, dict) else None


def _speculative_method(namespace: Any) -> str | None:
    """The method of vLLM's parsed `--speculative-config`."""
    method = (_speculative_config(namespace) or {}).get("method")
    return method if isinstance(method, str) else None


def without_speculation(flags: Sequence[str]) -> list[str]:
    """The launch's flags without its speculative config (`--speculative-config X`, `--speculative-config=X`, `-sc X`)."""
    out: list[str] = []
    skip = False
    for token in flags:
        if skip:
            skip = False
            continue
        if token in _SPEC_FLAGS:
            skip = True
            continue
        if any(token.startswith(f + "=") for f in _SPEC_FLAGS):
            continue
        out.append(token)
    return out


def _is_v41(namespace: Any) -> bool:
    model = str(getattr(namespace, "model", "") or "").lower()
    return "deepseek-v4.1" in model or "deepseek_v41" in model or "deepseekv41" in model


def dspark_traps(namespace: Any, flags: Sequence[str], *, version: str | None, gpu_names: Sequence[str], dsv4: bool,
                 v41: bool | None = None, capabilities: Sequence[tuple[int, int]] = ()) -> list[Trap]:
    """DSpark's reported crashes whose conditions this launch meets, each with the launch without DSpark (or the
    change the report names); with no GPU readable, the GPU-bound reports as checks to make. `v41`: None reads it
    from the model's name; `capabilities`: the GPUs' compute capabilities (else SM90 is read from their names)."""
    if _speculative_method(namespace) != "dspark":
        return []
    v41 = _is_v41(namespace) if v41 is None else v41
    traps = _dspark_reported(namespace, flags, version=version, gpu_names=gpu_names, dsv4=dsv4, v41=v41)
    return traps + _dspark_sm90(namespace, flags, version=version, gpu_names=gpu_names, dsv4=dsv4, v41=v41,
                                capabilities=capabilities)


def _dspark_reported(namespace: Any, flags: Sequence[str], *, version: str | None, gpu_names: Sequence[str],
                     dsv4: bool, v41: bool) -> list[Trap]:
    """DP + EP (vllm#50842), V4.1 on SM120 (vllm#56771), V4.1 before 0.34 (vllm#56443), GB10 (vllm#54385)."""
    release = _release(version)
    plain = _command(without_speculation(flags))
    dp, ep = _int(namespace, "data_parallel_size"), bool(getattr(namespace, "enable_expert_parallel", False))
    world = _int(namespace, "tensor_parallel_size") * _int(namespace, "pipeline_parallel_size") * dp
    traps: list[Trap] = []
    if dsv4 and dp > 1 and ep:
        traps.append(Trap(
            DSPARK_DP_EP,
            f"DSpark with DP={dp} + EP: vllm#50842 (DeepSeek-V4-Pro + DSpark on 8 × H200, DP=8 + EP, vLLM 0.26.0) failed "
            "in prefill with FlashMLA's 'Failed to create tensormap' (closed without a named fix). If this start fails "
            "so, compare it without DSpark",
            plain,
        ))
    sm120 = sorted({name for name in gpu_names if _SM120.search(name)})
    if v41 and sm120:
        traps.append(Trap(
            DSPARK_V41_SM120,
            f"DeepSeek-V4.1 with DSpark on {', '.join(sm120)} (SM120): vllm#56771 reports an illegal memory access in "
            "the sparse-MLA prefill for prompts of about 4K tokens and more, 'Without DSpark this configuration serves "
            "cleanly' (open; fix PR vllm#57388). Short prompts work there; for long ones run without DSpark",
            plain,
        ))
    if v41 and release is not None and release < DSPARK_V41_IDENTITY:
        traps.append(Trap(
            DSPARK_V41_MAP,
            f"DeepSeek-V4.1 with DSpark on vLLM {version}: vllm#56443 reports a CUDA device-side assert in "
            "map_draft_to_target at the draft warm-up (4 × H200, TP4 + EP, a nightly; closed without a named fix); "
            "vLLM 0.34.0 maps draft ids as the identity there. If it fails so, compare it without DSpark",
            plain,
        ))
    gb10 = sorted({name for name in gpu_names if _GB10.search(name)})
    if gb10 and world > 1:
        traps.append(Trap(
            DSPARK_GB10,
            f"DSpark on {world} × {gb10[0]}: vllm#54385 reports Xid 31 on both ranks of DeepSeek-V4 + DSpark at TP=2 on "
            "2 × GB10 at the PIECEWISE CUDA-graph warm-up (open, no workaround found). If it fails so, compare it "
            "without DSpark",
            plain,
        ))
    return traps


def _dspark_sm90(namespace: Any, flags: Sequence[str], *, version: str | None, gpu_names: Sequence[str],
                 dsv4: bool, v41: bool, capabilities: Sequence[tuple[int, int]]) -> list[Trap]:
    """SM90's reports (adaptive verification, vllm#54011 via vllm#56797; 0.27's crashes, vllm#52065 and #54179), and
    the GPU-bound reports named as checks when no GPU is readable here."""
    import json

    spec = _speculative_config(namespace) or {}
    adaptive = spec.get("enable_adaptive_verification") is True
    release = _release(version)
    plain = _command(without_speculation(flags))
    sm90 = sorted({n for n in gpu_names if _SM90.search(n)}) if not capabilities else (
        sorted(set(gpu_names)) if (9, 0) in capabilities else [])
    traps: list[Trap] = []
    if adaptive and sm90:
        off = json.dumps({**spec, "enable_adaptive_verification": False}, separators=(",", ":"))
        traps.append(Trap(
            DSPARK_SM90_ADAPTIVE,
            f"DSpark's adaptive verification on {', '.join(sm90)} (SM90): vllm#56797 (DeepSeek-V4.1-Flash, 2 x 8 H20) "
            "left it off 'because adaptive DSpark is currently broken on SM90 ([#54011])' (vllm#54011). Turn it off",
            _command([*without_speculation(flags), "--speculative-config", off]),
        ))
    if sm90 and dsv4 and release == (0, 27):
        traps.append(Trap(
            DSPARK_SM90_027,
            f"DeepSeek-V4 with DSpark on {', '.join(sm90)} (SM90), vLLM {version}: vllm#52065 (0.27.0, 8 x H100) "
            "reports DeepGEMM's CUDA_ERROR_ILLEGAL_ADDRESS minutes after 'DSpark draft model loaded' ('works on "
            "0.26.0', open); vllm#54179 FlashMLA's SM90 sparse-prefill assertion (phase1.cuh:614) on a replay step of "
            "512 tokens or fewer, where 'The released v0.28.0 image also starts cleanly'. If it fails so, compare it "
            "without DSpark",
            plain,
        ))
    if not gpu_names:
        world = (_int(namespace, "tensor_parallel_size") * _int(namespace, "pipeline_parallel_size")
                 * _int(namespace, "data_parallel_size"))
        checks = [c for c, on in (
            ("SM90 (H100/H200/H20) with adaptive verification (vllm#54011, via vllm#56797)", adaptive),
            ("SM90 on vLLM 0.27 (vllm#52065, vllm#54179)", dsv4 and release == (0, 27)),
            ("SM120 with prompts of about 4K tokens and more (vllm#56771)", v41),
            ("more than one GB10 (vllm#54385: Xid 31 at TP=2)", world > 1),
        ) if on]
        if checks:
            traps.append(Trap(
                DSPARK_GPUS_UNKNOWN,
                "DSpark: no GPU readable here, so the reported crashes tied to GPUs are checks to make on the GPU "
                f"box (a dry run there names those that apply): {'; '.join(checks)}. If it fails so, compare it "
                "without DSpark",
                plain,
            ))
    return traps


def _command(flags: Sequence[str], add: Sequence[str] = (), env: str = "") -> str:
    return f"{env}dsv4ctl serve {shlex.join([*flags, *add])}"


def find_traps(
    namespace: Any, flags: Sequence[str], *, version: str | None, gpu_names: Sequence[str],
    environ: Mapping[str, str], dsv4: bool, v41: bool | None = None, capabilities: Sequence[tuple[int, int]] = (),
) -> list[Trap]:
    """The traps this launch walks into, each with the command that avoids it. Pure. `v41`: whether the model is
    DeepSeek-V4.1 (None: read from its name); `capabilities`: the GPUs' compute capabilities, where known."""
    traps: list[Trap] = []
    release = _release(version)
    spans = multi_node(namespace, len(gpu_names) or None)
    if spans and release in UNGUARDED_MULTI_NODE and not getattr(namespace, "disable_custom_all_reduce", False):
        traps.append(Trap(
            CUSTOM_ALL_REDUCE,
            f"a multi-node group ({spans}) on vLLM {version}: its custom all-reduce enters the cross-node "
            "symmetric-memory rendezvous, where multi-node DeepSeek-V4-Pro starts hang (vllm#53894); vLLM 0.29.0+ "
            "skips it without MNNVL. Turn it off",
            _command(flags, ["--disable-custom-all-reduce"]),
        ))
    h20 = sorted({name for name in gpu_names if _H20.search(name)})
    world = _int(namespace, "tensor_parallel_size") * _int(namespace, "pipeline_parallel_size")
    if (h20 and world > 1 and "TORCH_SYMM_MEM_DISABLE_MULTICAST" not in environ
            and environ.get("VLLM_ALLREDUCE_USE_SYMM_MEM", "1") != "0"):
        traps.append(Trap(
            H20_MULTICAST,
            f"{', '.join(h20)}: torch's symmetric-memory multicast check fails at start on H20 (vllm#53320; "
            "vLLM's check is the same in 0.33.0). Turn torch's multicast off",
            _command(flags, env="TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "),
        ))
    breakable = environ.get("VLLM_USE_BREAKABLE_CUDAGRAPH")
    if dsv4 and breakable is not None and breakable != "1":
        traps.append(Trap(
            BREAKABLE_OFF,
            f"VLLM_USE_BREAKABLE_CUDAGRAPH={breakable} opts DeepSeek-V4 out of the breakable CUDA graphs vLLM turns "
            "on for it, and the start then takes more memory per GPU (vllm#54677: about 4 GiB per GPU, first "
            "taken for a regression). Leave vLLM's default",
            _command(flags, env="env -u VLLM_USE_BREAKABLE_CUDAGRAPH "),
        ))
    traps += dspark_traps(namespace, flags, version=version, gpu_names=gpu_names, dsv4=dsv4, v41=v41,
                          capabilities=capabilities)
    return traps
