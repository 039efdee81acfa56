"""The length decision `serve` makes before vLLM starts.

Rules (docs/serve.md explains them for operators):

* Not a DeepSeek-V4 model (or its config cannot be read here): dsv4ctl has no planner for it, so the
  flags pass through unchanged and vLLM decides (including its own auto-fit for `auto`/`-1`).
* DeepSeek-V4, length `auto`/`-1` or not given: dsv4ctl plans the fit for this node and these flags
  (`dsv4ctl.planning.plan_fit`, with the planner of the vLLM release that will run) and acts on evidence:
  - `auto` stays `auto` when it is safe: the stale-length fix is active in this serve (the default), or
    the release does not have the stale-length crash (all but 0.29-0.30). vLLM then computes the length
    exactly from the memory it measures; the predicted value is printed. "Not given" becomes `auto`.
  - An explicit planned length is pinned only with `--pin-length`, or on 0.29-0.30 with the stale fix off
    (vLLM would shrink the length after building its state and crash in CUDA-graph capture).
  With `--keep-auto` the flags always pass through unchanged.
* DeepSeek-V4, explicit length: checked against the plan. When vLLM would refuse it, serve refuses early
  (exit 6) only when the plan's inputs are exact: the KV budget is `--kv-cache-memory-bytes` (or vLLM's
  CPU budget), the length exceeds the model's maximum, or the free memory NVML reports now is below the
  request. When the KV budget is an estimate (weights + an overhead estimate), serve warns and starts.
* `basis` says which: `exact` (a KV budget given), `estimated` (predicted from the GPUs).
* No NVIDIA GPU here (NVML unavailable, e.g. the CPU build): the GPU-memory parts of the plan are
  skipped; with `--kv-cache-memory-bytes` the KV budget is known without a GPU and the plan still runs.

Pure: reads the model's config and (through `snapshot_reader`) the GPU snapshot; never prints.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.errors import Dsv4ctlError, ExitCode, GpuUnavailableError, InputError
from dsv4ctl.planning import STALE_LENGTH_RELEASES  # the releases with the stale-length crash: one home
from dsv4ctl.serve.flags import set_max_model_len
from dsv4ctl.units import GiB

# Actions
PASS_THROUGH = "pass-through"  # flags unchanged, vLLM decides
SET_LENGTH = "set-length"  # we pass --max-model-len <planned>
KEEP_AUTO = "keep-auto"  # `auto` stays: vLLM auto-fits (safe here, or --keep-auto); flags unchanged
SET_AUTO = "set-auto"  # no length given: we pass --max-model-len auto (safe here)
EXPLICIT_OK = "explicit-ok"  # the user's explicit length fits the plan
EXPLICIT_UNVERIFIED = "explicit-unverified"  # the estimate says it does not fit; not exact, so warn and start
REFUSE = "refuse"  # vLLM would refuse: stop before starting it

# Bases of a decision: how sure the plan's KV budget is.
EXACT = "exact"  # --kv-cache-memory-bytes (or VLLM_CPU_KVCACHE_SPACE on vLLM's CPU backend)
ESTIMATED = "estimated"  # requested − weights − an overhead estimate
CALIBRATED = "calibrated"  # measured by an earlier start of this host and configuration (planning/plan/calibration.py)
MEASURED = "measured"  # vLLM's own startup plans of an earlier start of this configuration (planning/mirror/startup_plans.py)

AUTO = -1  # vLLM's parser turns `auto` and `-1` into -1


@dataclass
class PreflightDecision:
    model: str
    requested_max_model_len: int | None  # None: not given; -1: auto
    action: str
    max_model_len: int | None  # the explicit value serve passes (SET_LENGTH), else None
    reason: str
    flags: list[str]  # the vLLM flags to launch with
    notes: list[str] = field(default_factory=list)
    plan: dict[str, Any] | None = None  # FitResult.to_json() when a plan was made
    refusal: Dsv4ctlError | None = None
    basis: str | None = None  # EXACT | ESTIMATED when a plan was made
    stale_fix_active: bool | None = None
    environment: dict[str, str] = field(default_factory=dict)  # what serve sets before vLLM starts

    @property
    def requested_text(self) -> str:
        if self.requested_max_model_len is None:
            return "not given (the model's full length)"
        if self.requested_max_model_len == AUTO:
            return "auto"
        return str(self.requested_max_model_len)

    def command_line(self) -> str | None:
        """The shell command serve would run: the environment it sets, then `vllm serve` with the flags; None when
        serve refuses (no command that vLLM would refuse)."""
        import shlex

        if self.action == REFUSE:
            return None
        # DSV4CTL_FIXES=none is the plugin's own default (it does nothing unless asked): not worth a word, and then
        # neither is the Ray prefix serve adds only to carry DSV4CTL_FIXES to Ray's workers.
        plain = self.environment.get("DSV4CTL_FIXES") == "none"
        skip = {"DSV4CTL_FIXES", "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"} if plain else set()
        env = [f"{k}={shlex.quote(v)}" for k, v in self.environment.items() if k not in skip]
        return " ".join([*env, shlex.join(["vllm", "serve", *self.flags])])

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "requested_max_model_len": self.requested_max_model_len,
            "action": self.action,
            "max_model_len": self.max_model_len,
            "basis": self.basis,
            "vllm_version_planned": (self.plan or {}).get("vllm_version_planned"),
            "stale_fix_active": self.stale_fix_active,
            "reason": self.reason,
            "notes": list(self.notes),
            "environment": dict(self.environment),
            "plan": self.plan,
            "vllm_argv": ["vllm", "serve", *self.flags] if self.action != REFUSE else None,
            "command": self.command_line(),
        }


SnapshotReader = Callable[[], Any]


def _default_snapshot_reader() -> Any:
    from dsv4ctl.gpu import read_snapshot

    return read_snapshot()


def decide(
    namespace: argparse.Namespace,
    flags: list[str],
    *,
    keep_auto: bool = False,
    snapshot_reader: SnapshotReader | None = None,
    pin_length: bool = False,
    fixes: str | None = None,
    vllm_version: str | None = None,
    no_calibration: bool = False,
) -> PreflightDecision:
    """Decide the `--max-model-len` to launch with, from vLLM's parsed flags and this node, and note the
    launch's traps (`dsv4ctl.serve.traps`).

    `fixes`: serve's --fixes (None: $DSV4CTL_FIXES, else all, as serve sets it); `vllm_version`: plan as this
    release (None: the installed vLLM)."""
    _refuse_below_one(namespace)
    decision = _decide(namespace, flags, keep_auto=keep_auto, snapshot_reader=snapshot_reader, pin_length=pin_length,
                       fixes=fixes, vllm_version=vllm_version, no_calibration=no_calibration)
    decision.notes.extend(_trap_notes(namespace, flags, decision, snapshot_reader, vllm_version))
    return decision


# vLLM's configs take these at 1 or more (pydantic `Field(ge=1)`, vllm==0.32.0 vllm/config/parallel.py:139,141,146,
# vllm/config/scheduler.py:48,62): its parser takes any int, and the engine's config refuses the value before any load.
_AT_LEAST_ONE = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_num_batched_tokens",
                 "max_num_seqs")


def _refuse_below_one(namespace: argparse.Namespace) -> None:
    from dsv4ctl.errors import UsageError

    for name in _AT_LEAST_ONE:
        value = getattr(namespace, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"vLLM would refuse {flag} {value}: its config takes 1 or more (Field(ge=1))",
                             hint=f"{flag} 1 or more")


def _trap_notes(namespace: argparse.Namespace, flags: list[str], decision: PreflightDecision,
                snapshot_reader: SnapshotReader | None, vllm_version: str | None) -> list[str]:
    from dsv4ctl.planning import installed_vllm_version, load_geometry
    from dsv4ctl.serve.traps import find_traps

    try:
        devices = (snapshot_reader or _default_snapshot_reader)().devices
    except Dsv4ctlError:
        devices = []
    names = [d.name for d in devices]
    capabilities = sorted({tuple(d.compute_capability) for d in devices if getattr(d, "compute_capability", None)})
    try:
        geometry = load_geometry(decision.model)
    except InputError:
        geometry = None
    dsv4 = decision.plan is not None or bool(geometry)
    # DeepSeek-V4.1 by the checkpoint's architecture where it is read, else by the model's name.
    architecture = getattr(geometry, "architecture", None)
    v41 = architecture == "DeepseekV41ForCausalLM" if architecture else None
    version = (decision.plan or {}).get("vllm_version_planned") or vllm_version or installed_vllm_version()
    traps = find_traps(namespace, flags, version=version, gpu_names=names, environ=os.environ, dsv4=dsv4, v41=v41,
                       capabilities=capabilities)
    return [trap.note() for trap in traps]


def _decide(
    namespace: argparse.Namespace, flags: list[str], *, keep_auto: bool, snapshot_reader: SnapshotReader | None,
    pin_length: bool, fixes: str | None, vllm_version: str | None, no_calibration: bool,
) -> PreflightDecision:
    model = str(getattr(namespace, "model", None) or "")
    requested = getattr(namespace, "max_model_len", None)
    planned = _plan(namespace, flags, model, requested, snapshot_reader, vllm_version, no_calibration)
    if isinstance(planned, PreflightDecision):
        return planned
    result, notes, kv_bytes = planned
    ctx = _Context(model, requested, list(flags), notes, result, kv_bytes, stale_fix_active(fixes))
    if not result.fits:
        return _does_not_fit(ctx, keep_auto=keep_auto)
    if requested is None or requested == AUTO:
        return _auto_length(ctx, keep_auto=keep_auto, pin_length=pin_length)
    return ctx.decision(
        EXPLICIT_OK, None,
        f"--max-model-len {requested:,} fits (auto-fit ceiling {ctx.autofit:,}; recommended {ctx.recommended:,}; "
        f"basis {ctx.basis})",
        list(flags),
    )


def _plan(
    namespace: argparse.Namespace, flags: list[str], model: str, requested: Any, snapshot_reader: SnapshotReader | None,
    vllm_version: str | None, no_calibration: bool,
) -> PreflightDecision | tuple[Any, list[str], int | None]:
    """fit-length's plan for this launch on this node (with its notes and the KV budget it was given), or the
    decision to pass the length through (not a DeepSeek-V4 model, nothing to plan with) or to refuse."""

    def passthrough(reason: str, notes: list[str] | None = None) -> PreflightDecision:
        return PreflightDecision(model, requested, PASS_THROUGH, None, reason, list(flags), notes or [])

    try:
        from dsv4ctl.planning import load_geometry

        geometry = load_geometry(model)
    except InputError as exc:
        return passthrough(f"no DeepSeek-V4 plan ({exc.message}): --max-model-len passes through unchanged")
    notes: list[str] = []
    refused = _checkpoint_refusal(namespace, geometry, vllm_version)
    if refused is not None:  # the checkpoint itself, whatever the memory: refused with or without GPU figures
        return _refuse(model, requested, flags, notes, None, refused)
    snapshot = None
    kv_bytes = getattr(namespace, "kv_cache_memory_bytes", None)
    try:
        snapshot = (snapshot_reader or _default_snapshot_reader)()
    except GpuUnavailableError as exc:
        notes.append(f"no NVIDIA GPU readable here ({exc.message}): GPU-memory checks skipped")
        cpu_space = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
        if cpu_space.isdecimal() and int(cpu_space) > 0:
            # vLLM's CPU backend takes its KV budget from this variable (GiB), over --kv-cache-memory-bytes.
            kv_bytes = int(cpu_space) * GiB
            notes.append(f"KV budget from VLLM_CPU_KVCACHE_SPACE={cpu_space} (GiB), as vLLM's CPU backend does")
        if kv_bytes is None:
            return passthrough(
                "cannot plan without GPU memory figures or --kv-cache-memory-bytes: "
                "--max-model-len passes through unchanged",
                notes,
            )
    try:
        from dsv4ctl.planning import plan_fit

        request = fit_request_from(namespace, model, kv_cache_memory_bytes=kv_bytes, vllm_version=vllm_version)
        if no_calibration:
            import dataclasses

            request = dataclasses.replace(request, no_calibration=True)
        result = plan_fit(request, snapshot=snapshot, geometry=geometry)
    except Dsv4ctlError as exc:  # e.g. TP×PP×DP needs more GPUs than this node has
        if exc.exit_code == ExitCode.DOES_NOT_FIT:
            return _refuse(model, requested, flags, notes, None, exc)
        return passthrough(f"could not plan ({exc.message}): --max-model-len passes through unchanged", notes)
    notes.extend(str(w) for w in result.warnings)
    return result, notes, kv_bytes


# vLLM's refusal of DBO / microbatching with DeepSeek-V4.1's Engram, verbatim (`parallel_config.use_ubatching`:
# --enable-dbo or --ubatch-size > 1, config/parallel.py:720-721).
V41_DBO_REFUSAL = ("DeepSeek V4.1 Engram does not support DBO or microbatching. Disable --enable-dbo and set "
                   "--ubatch-size to 0.")


def _this_host() -> Any:
    """This node's memory (serve runs here), or None where it cannot be read."""
    from dsv4ctl import host

    try:
        return host.read_host_memory()
    except OSError:
        return None


def _checkpoint_refusal(namespace: argparse.Namespace, geometry: Any, vllm_version: str | None = None) -> Dsv4ctlError | None:
    """What vLLM refuses of this checkpoint at the launch's parallel sizes (fit-length's check: heads, the attention
    output groups on 0.34+, FP8 blocks; and EPLB's even spread of the experts), before any memory is read.
    `vllm_version`: the release that runs (None: the installed one)."""
    from dsv4ctl.planning import checkpoint_refusal

    def size(name: str) -> int:
        value = getattr(namespace, name, None)
        return int(value) if isinstance(value, int) and value > 0 else 1

    ep = bool(getattr(namespace, "enable_expert_parallel", False))
    refused = checkpoint_refusal(geometry, size("tensor_parallel_size"), ep, vllm_version)
    if refused is None and getattr(geometry, "v41", None) is None:
        from dsv4ctl.planning import engram_config_refusal

        refused = engram_config_refusal(geometry, getattr(namespace, "engram_config", None), vllm_version)
    if refused is None and getattr(geometry, "v41", None) is not None:
        from dsv4ctl.planning import v41_launch_refusal

        refused = v41_launch_refusal(
            geometry, tensor_parallel_size=size("tensor_parallel_size"), data_parallel_size=size("data_parallel_size"),
            speculative_config=getattr(namespace, "speculative_config", None),
            engram_config=getattr(namespace, "engram_config", None), host=_this_host())
        if refused is None and (getattr(namespace, "enable_dbo", False) or size("ubatch_size") > 1):
            refused = Dsv4ctlError(f"vLLM refuses this launch: \"{V41_DBO_REFUSAL}\" (vllm==0.34.0 config/vllm.py:1418-1421, "
                                   "0.33.0 :1479-1482)", hint="drop --enable-dbo and --ubatch-size",
                                   exit_code=ExitCode.DOES_NOT_FIT)
    if refused is None and ep and getattr(namespace, "enable_eplb", False):
        refused = _eplb_refusal(geometry.extra, size("tensor_parallel_size") * size("data_parallel_size"))
    return refused


def _eplb_refusal(extra: dict[str, Any], ep_size: int) -> Dsv4ctlError | None:
    """vLLM's refusal of --enable-eplb when the routed experts do not spread evenly over the EP ranks (TP x DP):
    "EPLB currently only supports even distribution of experts across ranks. Got {n} experts and {ep} EP ranks."
    (vllm==0.33.0 vllm/model_executor/layers/fused_moe/layer.py:274-279). Without EPLB an uneven split is allowed."""
    experts = extra.get("n_routed_experts")
    if not isinstance(experts, int) or experts <= 0 or ep_size <= 1 or experts % ep_size == 0:
        return None
    even = [n for n in range(2, 4 * ep_size + 1) if experts % n == 0][:12]
    return Dsv4ctlError(
        f"--enable-eplb with {ep_size} EP ranks (tensor x data parallel): this model's {experts} routed experts do not "
        f"spread evenly, and vLLM refuses it while building the MoE layers (\"EPLB currently only supports even "
        f"distribution of experts across ranks. Got {experts} experts and {ep_size} EP ranks.\")",
        hint=f"EP sizes that spread them evenly: {', '.join(map(str, even))}; or start without --enable-eplb",
        exit_code=ExitCode.DOES_NOT_FIT)


class _Context:
    """One launch's plan and what the decision says of it: the basis of its KV memory, the length predicted."""

    def __init__(
        self, model: str, requested: Any, flags: list[str], notes: list[str], result: Any, kv_bytes: int | None,
        stale_fix: bool,
    ) -> None:
        self.model, self.requested, self.flags, self.notes, self.result = model, requested, flags, notes, result
        self.plan = result.to_json()
        self.recommended = int(result.recommended_max_model_len)
        self.autofit = int(result.autofit_max_model_len)
        self.basis = EXACT if kv_bytes is not None else (
            # --num-gpu-blocks-override: vLLM sizes the cache as those blocks exactly (planning's "override" source)
            {"calibrated": CALIBRATED, "startup_plan": MEASURED, "override": EXACT}.get(result.kv_cache_memory_source,
                                                                                        ESTIMATED))
        self.version = result.version.planned
        self.stale_fix = stale_fix
        predicted = (f"predicted {self.autofit:,} on vLLM {self.version}'s planner" if self.autofit > 0
                     else "predicted: not one token fits")
        if self.basis == ESTIMATED:
            predicted += " from an estimate of the KV memory (the non-KV overhead is estimated)"
            if result.autofit_range and result.autofit_range[0] != result.autofit_range[1]:
                low, high = result.autofit_range
                predicted += f"; {low:,}–{high:,} across the estimate's range"
        self.predicted = predicted

    @property
    def given(self) -> str:
        return "auto" if self.requested == AUTO else "not given"

    def decision(self, action: str, length: int | None, reason: str, out_flags: list[str]) -> PreflightDecision:
        return PreflightDecision(self.model, self.requested, action, length, reason, out_flags, self.notes, self.plan,
                                 None, self.basis, self.stale_fix)


def _does_not_fit(ctx: _Context, *, keep_auto: bool = False) -> PreflightDecision:
    """The plan does not fit: vLLM would refuse it, or would start with a length no margin leaves safe. Refused on
    measured evidence; on an estimate, warn and let vLLM decide; with --keep-auto, auto stays where vLLM would start."""
    result, autofit, requested = ctx.result, ctx.autofit, ctx.requested
    if result.refusal is None and keep_auto and requested in (None, AUTO):
        ctx.notes.append(f"{result.why}; --keep-auto: vLLM auto-fits it anyway (planned ceiling {autofit:,})")
        out = list(ctx.flags) if requested == AUTO else set_max_model_len(ctx.flags, "auto")
        return ctx.decision(KEEP_AUTO if requested == AUTO else SET_AUTO, None,
                            f"--keep-auto: vLLM auto-fits the length itself (planned ceiling {autofit:,}; it will shrink "
                            "the length after building its state)", out)
    if result.refusal is None:
        message = f"nothing safe to start: {result.why}"
        hint = (f"--keep-auto starts it anyway, at the auto-fit of {autofit:,} tokens with no margin; or give it more KV "
                "memory (dsv4ctl fit-length shows what would fit)")
    else:
        message = f"vLLM would refuse this: {result.refusal}"
        hint = (
            f"the largest length that fits is {autofit:,} (recommended: --max-model-len {ctx.recommended})"
            if autofit > 0 and ctx.recommended > 0
            else "not even one token of KV cache fits: free memory, raise --gpu-memory-utilization or add GPUs"
            if autofit <= 0 else f"the largest length that fits is {autofit:,}"
        )
    err = Dsv4ctlError(message, hint=hint, exit_code=ExitCode.DOES_NOT_FIT)
    if ctx.basis in (EXACT, CALIBRATED, MEASURED) or _refusal_is_measured(result, requested):
        refused = _refuse(ctx.model, requested, ctx.flags, ctx.notes, ctx.plan, err)
        refused.basis, refused.stale_fix_active = ctx.basis, ctx.stale_fix
        return refused
    ctx.notes.append(
        f"the estimate says it does not fit ({result.why}); the KV memory is an estimate, so serve "
        f"starts vLLM and lets it decide ({err.hint}); --kv-cache-memory-bytes makes the check exact"
    )
    if requested is not None and requested != AUTO:
        return ctx.decision(EXPLICIT_UNVERIFIED, None,
                            f"--max-model-len {requested:,}: the estimate says it does not fit ({ctx.predicted}); "
                            "starting anyway", list(ctx.flags))
    out = list(ctx.flags) if requested == AUTO else set_max_model_len(ctx.flags, "auto")
    return ctx.decision(KEEP_AUTO if requested == AUTO else SET_AUTO, None,
                        f"length {ctx.given}: vLLM auto-fits ({ctx.predicted})", out)


def _auto_length(ctx: _Context, *, keep_auto: bool, pin_length: bool) -> PreflightDecision:
    """No explicit length: keep auto where auto-fit is safe on this release, else pin the plan's safe length."""
    result, autofit, version, stale_fix = ctx.result, ctx.autofit, ctx.version, ctx.stale_fix
    if keep_auto:
        shrink = f"; vLLM will shrink it to {autofit:,} after building its state" if result.will_shrink else ""
        reason = f"--keep-auto: vLLM auto-fits the length itself (planned ceiling {autofit:,}{shrink})"
        return ctx.decision(KEEP_AUTO, None, reason, list(ctx.flags))
    if (stale_fix or version not in STALE_LENGTH_RELEASES) and not pin_length:
        why = (
            "the stale-length fix is active in every vLLM process" if stale_fix and version in STALE_LENGTH_RELEASES
            else f"vLLM {version} has no stale-length crash after auto-fit"
        )
        verb = "keeping" if ctx.requested == AUTO else "adding"
        reason = (
            f"length {ctx.given}: {verb} --max-model-len auto ({why}); "
            f"vLLM fits the length to its own KV memory figure at start, {ctx.predicted}"
        )
        if ctx.requested == AUTO:
            return ctx.decision(KEEP_AUTO, None, reason, list(ctx.flags))
        return ctx.decision(SET_AUTO, None, reason, set_max_model_len(ctx.flags, "auto"))
    safe = result.safe_length
    chosen, why = ctx.recommended, safe.line() if safe else f"the plan's safe length below the auto-fit ceiling {autofit:,}"
    ctx.notes.extend([safe.cliff_line()] if safe and safe.cliff else [])
    if chosen <= 0:
        chosen, why = autofit, "the auto-fit ceiling itself (no length survives the planning margin)"
    pinned_because = (
        "--pin-length" if pin_length
        else f"vLLM {version} crashes after auto-fit shrinks the length and the stale-length fix is off"
    )
    reason = (
        f"length {ctx.given}: passing --max-model-len {chosen:,} ({pinned_because}), "
        f"{why}, so vLLM never shrinks the length after start-up"
    )
    if ctx.basis == ESTIMATED:
        reason += " (the length rests on an estimate of the KV memory)"
    return ctx.decision(SET_LENGTH, chosen, reason, set_max_model_len(ctx.flags, chosen))


def stale_fix_active(fixes: str | None) -> bool:
    """Whether serve enables the stale max_model_len fix: --fixes, else $DSV4CTL_FIXES, else all."""
    from dsv4ctl.fixes import FIXES_ENV, STALE_MAX_MODEL_LEN, parse_selection

    value = fixes if fixes is not None else os.environ.get(FIXES_ENV, "all")
    return STALE_MAX_MODEL_LEN in parse_selection(value).names


def _refusal_is_measured(result: Any, requested: int | None) -> bool:
    """Refusals that do not rest on the KV estimate: the length above the model's maximum (config.json),
    and free memory below the request (NVML's figure now, the check vLLM makes at start)."""
    if requested is not None and requested != AUTO and requested > result.model_max_model_len:
        return True
    return any(g.refusal for g in result.gpus) or str(result.refusal or "").startswith("Free memory on device")


def _refuse(
    model: str, requested: int | None, flags: list[str], notes: list[str], plan: dict | None, err: Dsv4ctlError
) -> PreflightDecision:
    decision = PreflightDecision(model, requested, REFUSE, None, err.message, list(flags), notes, plan)
    decision.refusal = err
    return decision


# FitRequest fields that are dsv4ctl's own planning inputs, never vLLM flags.
_DSV4CTL_ONLY_FIELDS = {
    "model", "margin", "weights_bytes_per_rank", "checkpoint_bytes", "non_kv_overhead_bytes", "gpus", "from_log",
    "vllm_version", "no_calibration", "host_memory_bytes", "plans_this_host",
}


def fit_request_from(
    namespace: argparse.Namespace, model: str, kv_cache_memory_bytes: int | None = None, vllm_version: str | None = None
) -> Any:
    """A planning `FitRequest` from vLLM's parsed serve flags (the field names are vLLM's).

    Plans this node: with multi-node data parallelism the node runs `--data-parallel-size-local`
    replicas, so that is the data-parallel size planned against this node's GPUs."""
    import dataclasses

    from dsv4ctl.planning import FitRequest, speculative_tokens

    values: dict[str, Any] = {"model": model, "plans_this_host": True}  # serve plans the node it runs on
    for f in dataclasses.fields(FitRequest):
        if f.name in _DSV4CTL_ONLY_FIELDS:
            continue
        value = getattr(namespace, f.name, None)
        if value is not None:
            values[f.name] = value
    local_dp = getattr(namespace, "data_parallel_size_local", None)
    if local_dp:
        values["data_parallel_size"] = int(local_dp)
    if kv_cache_memory_bytes is not None:
        values["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
    if vllm_version is not None:
        values["vllm_version"] = vllm_version
    spec = getattr(namespace, "speculative_config", None)
    if spec is not None:
        values["num_speculative_tokens"] = speculative_tokens(spec)  # only MTP is planned; others raise
    return FitRequest(**values)
