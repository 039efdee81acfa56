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

# The releases whose custom all-reduce enters the cross-node rendezvous on every multi-node group (read:
# vllm 0.27.1 and 0.28.0 custom_all_reduce.py; 0.26.0 returns early, 0.29.0 checks _group_can_attempt_mnnvl).
UNGUARDED_MULTI_NODE = ((0, 27), (0, 28))
_H20 = re.compile(r"\bH20\b")  # "NVIDIA H20" and "H20-3e", never "H200"


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


def _command(flags: Sequence[str], add: Sequence[str] = (), env: str = "") -> str:
    return f"{env}dsv4ctl serve {shlex.join([*flags, *add])}"


def find_traps(
    namespace: Any, flags: Sequence[str], *, version: str | None, gpu_names: Sequence[str],
    environ: Mapping[str, str], dsv4: bool,
) -> list[Trap]:
    """The traps this launch walks into, each with the command that avoids it. Pure."""
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
    return traps
