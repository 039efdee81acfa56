"""The safe --max-model-len for a start a log shows: planned by `dsv4ctl.planning` from the log's own figures."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from dsv4ctl.logs import deployment
from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.units import GiB, format_tokens

if TYPE_CHECKING:
    from dsv4ctl.planning import SafeLength


# How close the planner's auto-fit for a built-in geometry must come to the length the log's auto-fit chose for the log
# to be that geometry (the mirror plans from the logged memory, rounded to 0.01 GiB: within 0.3 % on every fixture;
# Flash and Pro differ by a factor of 6 or more at the same memory).
PRESET_MATCH = 0.01


def safe_length_from_log(tl: StartupTimeline, fits: int) -> "SafeLength":
    """The explicit --max-model-len to recommend when the log says `fits` tokens fit: what
    `fit-length MODEL --from-log LOG` recommends (the one safe-length rule, planned from the log's KV
    memory and the launch's own flags). A model this machine cannot read (a checkpoint directory of the
    server's) is planned as the built-in DeepSeek-V4 geometry the log's own figures show it is
    (`_planned_as_preset`); else the length is scaled from `fits`, an estimate that says so."""
    from dsv4ctl.planning import safe_length_scaled  # the planner only when a length is asked

    if tl.model and tl.kv_memory_gib and tl.kv_memory_gib > 0.005:
        args = json.dumps(deployment.launch_args(tl), sort_keys=True, default=str)
        planned = _planned_safe_length(tl.model, tl.kv_memory_gib, tl.vllm_version, args, *_measured(tl))
        if planned is not None and planned.ceiling > 0:
            return planned
        planned = _planned_as_preset(tl, args)
        if planned is not None:
            return planned
    # vLLM logs the memory rounded to 0.01 GiB: the margin is taken from the low end of that interval.
    memory = int(round(tl.kv_memory_gib * GiB) - 0.005 * GiB) if tl.kv_memory_gib and tl.kv_memory_gib > 0.005 else None
    return safe_length_scaled(fits, memory, tl.max_model_len)


def _measured(tl: StartupTimeline) -> tuple[str | None, int | None, int | None, str | None]:
    """The log's sizing mode; in vLLM 0.34's measured mode the blocks committed after capture and the tentative
    auto-fit (the final fit's upper bound), as `logs.facts.from_timeline` gives them to fit-length --from-log; and the
    release the printed fit-length names (`deployment.planned_release`)."""
    measured, tentative = tl.measured, tl.tentative_autofit
    return (tl.sizing_mode_known, measured.blocks if measured is not None else None,
            tentative.to_len if tentative is not None else None, deployment.planned_release(tl))


@functools.lru_cache(maxsize=32)
def _planned_safe_length(model: str, available_kv_gib: float, vllm_version: str | None, args: str,
                         sizing_mode: str | None = None, measured_blocks: int | None = None,
                         tentative_autofit_to: int | None = None, plan_as: str | None = None) -> "SafeLength | None":
    """fit-length's plan for a log's figures; one per configuration (the starts of a crash loop repeat one). In vLLM
    0.34's measured mode the memory is the blocks committed after capture, exact (blocks x the plan's block stride, as
    fit-length --from-log takes them, not their bytes rounded to 0.01 GiB), and the tentative auto-fit bounds the
    final one: one safe length for diagnose and fit-length."""
    from dsv4ctl.errors import Dsv4ctlError
    from dsv4ctl.logs.facts import LogCalibration
    from dsv4ctl.planning import FitRequest, plan_fit

    calibration = LogCalibration(
        path="<log>", available_kv_bytes=int(round(available_kv_gib * GiB)), weights_bytes=None, graph_bytes=None,
        autofit_from=None, autofit_to=None, max_model_len=None, vllm_version=vllm_version, serve_args=json.loads(args),
        sizing_mode=sizing_mode,
        measured_kv_bytes=int(round(available_kv_gib * GiB)) if sizing_mode == "measured" else None,
        measured_kv_blocks=measured_blocks, tentative_autofit_to=tentative_autofit_to,
    )
    try:
        return plan_fit(FitRequest(model=model, inherit_from_log=True, vllm_version=plan_as),
                        log_facts=calibration).safe_length
    except Dsv4ctlError:
        return None


def _planned_as_preset(tl: StartupTimeline, args: str) -> "SafeLength | None":
    """The plan for the one built-in DeepSeek-V4 geometry the log shows: its architecture is DeepSeek-V4's, its length
    is the geometry's, and the planner's auto-fit at the log's KV memory gives the length the log's auto-fit chose
    (within PRESET_MATCH). None when the log shows no auto-fit to compare, or no geometry or more than one matches."""
    from dataclasses import replace

    from dsv4ctl.planning import builtin_model_ids, load_geometry

    if tl.autofit is None or "DeepseekV4" not in (tl.architecture or ""):
        return None
    matches = []
    for model_id in builtin_model_ids():
        planned = _planned_safe_length(model_id, tl.kv_memory_gib, tl.vllm_version, args, *_measured(tl))
        if planned is None or planned.ceiling <= 0:
            continue
        if tl.max_model_len and load_geometry(model_id).model_max_model_len != tl.max_model_len:
            continue
        if abs(planned.ceiling - tl.autofit.to_len) <= PRESET_MATCH * tl.autofit.to_len:
            matches.append((model_id, planned))
    if len(matches) != 1:
        return None
    model_id, planned = matches[0]
    basis = (f"planned as {model_id}, the geometry the log shows: its {tl.architecture} auto-fit "
             f"{format_tokens(tl.autofit.to_len)} tokens in {tl.kv_memory_gib} GiB, and {model_id} plans "
             f"{format_tokens(planned.ceiling)} there")
    return replace(planned, basis=basis)


def safe_length_details(tl: StartupTimeline, fits: int) -> dict[str, Any]:
    """What a finding shows of the safe length: `safe_len`, the plan (`safe_length`) and, past the cliff, the
    setting that recovers what the margin costs (`knob_action`)."""
    safe = safe_length_from_log(tl, fits)
    d: dict[str, Any] = {}
    if safe.length > 0:
        d["safe_len"] = safe.length
        d["safe_length"] = safe.to_json()
    if safe.knobs:
        k = safe.knobs[0]
        d["knob_action"] = (
            f"Keep more context with the same memory ({format_tokens(k.length)} becomes safe, {k.cost}): {k.flags}"
        )
    return d
