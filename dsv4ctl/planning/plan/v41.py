"""The plan's DeepSeek-V4.1 steps: what vLLM refuses of a V4.1 launch before any memory matters, its KV layout and
layers for this GPU (`mirror/kv_specs_v41.py`), and the Engram tables' host memory (`engram.py`) against the
host's (`dsv4ctl.host`, or the GPU snapshot's record of it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dsv4ctl.errors import Dsv4ctlError, ExitCode
from dsv4ctl.planning.checkpoint.geometry import Dsv4Geometry
from dsv4ctl.planning.mirror.kv_planner import version_key
from dsv4ctl.planning.mirror.kv_specs import KvLayoutChoice, LayerKvSpec
from dsv4ctl.planning.mirror.kv_specs_v41 import build_v41_layer_specs, default_block_size, resolve_v41_layout
from dsv4ctl.planning.plan.engram import EngramHostPlan, parse_engram_config, plan_engram_host
from dsv4ctl.planning.plan.request import FitRequest
from dsv4ctl.units import format_gib

# Releases whose own planner answered for DeepSeek-V4.1 (tests/data/planner/deepseek-v41/, scripts/planner_oracle_v41.py).
RECORDED_RELEASES = ("0.33.0", "0.34.0")
FIRST_RELEASE = "0.30.0"  # the first release whose model registry has DeepseekV41ForCausalLM (0.29.0's has not)
ASSUMED_COMPUTE_MAJOR = 9  # no GPU read: planned as an H200 (SM90), the GPU the field reports run V4.1 on

# vLLM's refusal of `"method": "mtp"` on V4.1, verbatim: 0.34.0 v1/worker/gpu/spec_decode/mtp/config.py:83-88
# (`adapt_draft_model_config`); 0.33.0 config/speculative.py:1479-1485.
CLASSIC_MTP_REFUSAL = ("DeepSeek V4.1 has no classic-MTP draft: its checkpoints ship DSpark stages under mtp.* "
                       "(main_proj/markov_head/confidence_head) and carry no e_proj/h_proj/enorm/hnorm/hc_head weights. "
                       "Use speculative method 'dspark' instead of 'mtp'.")
MTP_SOURCE = "vllm==0.34.0 v1/worker/gpu/spec_decode/mtp/config.py:83-88; vllm==0.33.0 config/speculative.py:1479-1485"


MTP_METHODS = ("mtp", "deepseek_mtp")


def _mtp_refusal() -> Dsv4ctlError:
    return Dsv4ctlError(f"vLLM refuses --speculative-config method 'mtp' for DeepSeek-V4.1: \"{CLASSIC_MTP_REFUSAL}\" "
                        f"({MTP_SOURCE})", hint='use --speculative-config \'{"method": "dspark"}\'',
                        exit_code=ExitCode.DOES_NOT_FIT)


def v41_launch_refusal(
    geometry: Dsv4Geometry, *, tensor_parallel_size: int, data_parallel_size: int, speculative_config: Any,
    engram_config: Any, host: Any = None,
) -> Dsv4ctlError | None:
    """serve's check of a DeepSeek-V4.1 launch from vLLM's parsed flags, before any GPU is read: what vLLM refuses
    at startup (classic MTP, a TP the heads cannot split, an Engram config), and, with `host` (this node's memory,
    `dsv4ctl.host.HostMemory`), a node that cannot pin the Engram tables - whatever the KV plan, which a DSpark
    launch or a node without GPU figures does not get."""
    if geometry.v41 is None:
        return None
    spec = speculative_config
    if isinstance(spec, str):
        import json

        try:
            spec = json.loads(spec)
        except ValueError:
            spec = None
    if isinstance(spec, dict) and spec.get("method", "mtp") in MTP_METHODS:
        return _mtp_refusal()
    refused = _parallel_and_engram_refusal(geometry, tensor_parallel_size, data_parallel_size, engram_config)
    if refused is not None or host is None:
        return refused
    plan = plan_engram_host(geometry.v41, parse_engram_config(engram_config), tensor_parallel_size=tensor_parallel_size,
                            data_parallel_size=data_parallel_size, host=host)
    if plan.verdict != "short":
        return None
    return Dsv4ctlError(f"vLLM would fail to pin DeepSeek-V4.1's Engram tables: {plan.lines[-1]}",
                        hint=HOST_SHORT_HINT, exit_code=ExitCode.DOES_NOT_FIT)


HOST_SHORT_HINT = "a host with more memory, or --engram-config '{\"cpu_offload\": false}' (the tables in GPU memory)"


ENGRAM_MODEL_REFUSAL = ("EngramConfig requires a model with supported Engram embeddings and non-empty n-gram layer "
                        "ids.")  # EngramConfig.verify_model_config, verbatim
ENGRAM_MODEL_SOURCE = ("vllm==0.34.0 config/engram.py:74-89, called from config/vllm.py:1426; 0.33.0 config/engram.py:"
                       "68-83, config/vllm.py:1487; the same check from 0.30.0")
FIRST_ENGRAM_RELEASE = "0.30.0"  # the first release with config/engram.py and --engram-config (0.29.0 has neither)


def engram_config_refusal(geometry: Dsv4Geometry, engram_config: Any, planned: str | None) -> Dsv4ctlError | None:
    """`--engram-config` on a model without Engram tables: vLLM refuses it at config time (a release without the
    flag, at parsing). None when there is no flag, or the model has the tables."""
    if engram_config is None or geometry.v41 is not None:
        return None
    if planned is not None and version_key(planned) < version_key(FIRST_ENGRAM_RELEASE):
        return Dsv4ctlError(f"vLLM {planned} has no --engram-config (vllm/config/engram.py is in the releases from "
                            f"{FIRST_ENGRAM_RELEASE}): its argument parser refuses the flag",
                            hint="drop --engram-config", exit_code=ExitCode.USAGE)
    return Dsv4ctlError(f"vLLM refuses --engram-config for {geometry.model} ({geometry.architecture}): "
                        f"\"{ENGRAM_MODEL_REFUSAL}\" ({ENGRAM_MODEL_SOURCE})",
                        hint="drop --engram-config: only DeepSeek-V4.1 has Engram tables", exit_code=ExitCode.DOES_NOT_FIT)


def missing_model_refusal(geometry: Dsv4Geometry, planned: str | None) -> Dsv4ctlError | None:
    """A release without DeepSeek-V4.1 in its model registry: not a memory verdict, the release cannot run the model."""
    if geometry.v41 is None or planned is None or version_key(planned) >= version_key(FIRST_RELEASE):
        return None
    return Dsv4ctlError(
        f"vLLM {planned} cannot run {geometry.model}: DeepseekV41ForCausalLM is in the model registry from vLLM "
        f"{FIRST_RELEASE} (vllm/model_executor/models/registry.py; {planned}'s has not)",
        hint=f"plan it as vLLM {FIRST_RELEASE} or later: --vllm-version {RECORDED_RELEASES[-1]}", exit_code=ExitCode.USAGE)


def v41_refusal(geometry: Dsv4Geometry, request: FitRequest) -> Dsv4ctlError | None:
    """What vLLM refuses of a DeepSeek-V4.1 launch before memory matters: classic MTP, a TP its `wo_a` groups cannot
    split, an Engram config it rejects. None when nothing is refused (or the model is not V4.1)."""
    if geometry.v41 is None:
        return None
    if request.num_speculative_tokens > 0:
        return _mtp_refusal()
    return _parallel_and_engram_refusal(geometry, request.tensor_parallel_size, request.data_parallel_size,
                                        request.engram_config)


def _parallel_and_engram_refusal(geometry: Dsv4Geometry, tp: int, dp: int, engram_config: Any) -> Dsv4ctlError | None:
    facts = geometry.v41
    if facts.num_attention_heads % tp or facts.o_groups % tp:
        ok = [t for t in range(1, facts.o_groups + 1) if facts.o_groups % t == 0 and facts.num_attention_heads % t == 0]
        return Dsv4ctlError(
            f"-tp {tp}: vLLM cannot split DeepSeek-V4.1's {facts.num_attention_heads} heads and {facts.o_groups} output "
            "groups over it (models/deepseek_v41/attention.py asserts n_heads % tp == 0; DeepseekV4GroupedWoA divides "
            "o_groups by tp, models/deepseek_v4/common/grouped_wo_a.py)",
            hint="tensor-parallel sizes that split them: " + ", ".join(map(str, ok)), exit_code=ExitCode.DOES_NOT_FIT)
    settings = parse_engram_config(engram_config)  # bad JSON is bad input (exit 2), not a refusal
    try:
        plan_engram_host(facts, settings, tensor_parallel_size=tp, data_parallel_size=dp, host=None)
    except Dsv4ctlError as exc:
        return Dsv4ctlError(exc.message, hint=exc.hint, exit_code=ExitCode.DOES_NOT_FIT)
    return None


def v41_layout_and_specs(
    request: FitRequest, geometry: Dsv4Geometry, compute_major: int | None, notes: list[str]
) -> tuple[KvLayoutChoice, dict[str, LayerKvSpec]]:
    """The FlashMLA layout and V4.1's KV layers on this GPU family, at vLLM's block size unless one is given."""
    if compute_major is None:
        compute_major = ASSUMED_COMPUTE_MAJOR
        notes.append("no GPU read: DeepSeek-V4.1's KV layout planned for an H200 (SM90: 584-byte records, 64-token "
                     "blocks); --gpus plans another GPU's")
    layout = resolve_v41_layout(request.kv_cache_dtype, request.attention_backend, compute_major)
    block = request.block_size or default_block_size(compute_major)
    if block > default_block_size(compute_major):
        notes.append(f"--block-size {block} is larger than the {default_block_size(compute_major)}-token kernel block: vLLM "
                     "rounds every pool block up to the lcm of the kernel blocks' pages (the bytes per block below); "
                     f"leave --block-size unset for {default_block_size(compute_major)}")
    specs = build_v41_layer_specs(geometry.compress_ratios, geometry.v41, sliding_window=geometry.sliding_window,
                                  compute_capability_major=compute_major, block_size=block)
    return layout, specs


def host_memory_for(snapshot: Any, given: int | None = None, this_host: bool = False) -> Any:
    """The host memory to plan against: `--host-memory` where given; a snapshot file's record of its host (None when
    it has none); this machine's (read now) only when the plan reads this machine's GPUs (NVML: the machine planned);
    else unknown (None) - a plan from --kv-cache-memory or --weights-memory alone may be for another machine.
    `this_host`: the plan is for this machine (serve), its memory read whatever GPUs are."""
    from dsv4ctl import host

    if given is not None:
        return host.HostMemory(given, given, "", "--host-memory")
    if this_host:  # serve: the plan is for the node it runs on
        return host.read_host_memory()
    if snapshot is None:
        return None
    if getattr(snapshot, "source", None) == "file":
        return getattr(snapshot, "host_memory", None)
    return host.read_host_memory()


def with_engram_host(result: Any, request: FitRequest, geometry: Dsv4Geometry, snapshot: Any) -> Any:
    """The plan with the Engram tables' host memory: a host that cannot hold them is a plan that does not fit (its
    arithmetic the reason); one that holds the data but not the allocator's rounding, a warning."""
    plan: EngramHostPlan = plan_engram_host(
        geometry.v41, parse_engram_config(request.engram_config), tensor_parallel_size=request.tensor_parallel_size,
        data_parallel_size=request.data_parallel_size,
        host=host_memory_for(snapshot, request.host_memory_bytes, request.plans_this_host),
        unknown_why="the GPU snapshot carries none; --host-memory SIZE gives it" if snapshot is not None else
        "no GPUs read here, so not this machine's; --host-memory SIZE gives the planned node's")
    result = replace(result, engram_host=plan)
    if result.version.planned not in RECORDED_RELEASES:
        result = replace(result, warnings=(*result.warnings, (
            f"DeepSeek-V4.1's KV layout is checked against the planners of vLLM {' and '.join(RECORDED_RELEASES)}; "
            f"planned as {result.version.planned} on the assumption that it builds the same layers")))
    weights = request.checkpoint_bytes is not None or type(geometry.weights).__name__ == "CheckpointWeights"
    if plan.mode != "gpu" and weights and request.weights_bytes_per_rank is None:
        result = replace(result, warnings=(*result.warnings, (
            f"the checkpoint's bytes include the Engram tables ({format_gib(plan.table_bytes)}), which stay in host "
            "memory: the GPU weights predicted include their share; --weights-memory gives one GPU's share without them")))
    if plan.verdict == "short":
        return replace(result, verdict="does_not_fit", why=plan.lines[-1])
    if plan.verdict in ("tight", "unknown"):
        return replace(result, warnings=(*result.warnings, plan.lines[-1]))
    return result
