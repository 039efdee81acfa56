"""Which suggested commands fit this deployment: none that repeats what the start already uses or fails on its
vLLM release, and the next command to run."""

from __future__ import annotations

import re
import shlex
from typing import Any

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.dsv4 import stale_bug_status
from dsv4ctl.diagnosis.evidence import command_parts, fill, plans_from_log
from dsv4ctl.diagnosis.model import Diagnosis
from dsv4ctl.logs import deployment
from dsv4ctl.logs.timeline import StartupTimeline


def settings_of(d: Diagnosis) -> dict[str, Any]:
    """What `applicable` checks an action against: the launch's settings as the log shows them."""
    tl = d.timeline
    return {
        "kv_cache_dtype": tl.kv_cache_dtype,
        "enforce_eager": tl.enforce_eager,
        "cudagraph_mode": tl.cudagraph_mode,
        "vllm_version": tl.vllm_version,
        "stale_fix_active": d.facts.get("stale_fix_active", False),
        "dsv4": d.facts.get("dsv4", False),
        "tensor_parallel_size": tl.tensor_parallel_size,
        # The launch's own flags that suggested commands repeat: not a recommendation.
        "carried": [flags for key, flags in command_parts(tl, "<log>").items() if key.startswith("_") and flags],
    }


def applicable(action: str, settings: dict[str, Any]) -> bool:
    """False when `action` recommends what this start already uses, or what fails on its version."""
    for carried in sorted(settings.get("carried") or (), key=len, reverse=True):
        action = action.replace(carried, " ")
    if "--enforce-eager" in action and settings.get("enforce_eager"):
        return False
    if re.search(r"--kv-cache-dtype[ =]fp8\b", action) and str(settings.get("kv_cache_dtype") or "").startswith("fp8"):
        return False
    if '"cudagraph_mode": "PIECEWISE"' in action and (settings.get("cudagraph_mode") or "").upper() == "PIECEWISE":
        return False
    if '"cudagraph_mode": "FULL_DECODE_ONLY"' in action:
        return False  # still captures FULL decode graphs: avoids nothing a FULL capture fault is about
    if re.search(r"--max-model-len[ =](?:auto|-1)\b", action):
        # Auto-fit with a stale length trips the sparse-MLA assertion on 0.29-0.30 unless dsv4ctl's fix is active.
        if stale_bug_status(settings.get("vllm_version")) == "affected" and settings.get("dsv4", True) and not settings.get("stale_fix_active"):
            return False
    m = re.search(r"--tensor-parallel-size[ =]([0-9]+)", action)
    if m and settings.get("tensor_parallel_size") == int(m.group(1)):
        return False
    return True


def fit_from_log_command(tl: StartupTimeline, log: str) -> str | None:
    """`dsv4ctl fit-length MODEL --from-log LOG` with the launch's flags, when the log names its model (the
    argument is required) and is a file."""
    if not tl.model or log == "<log>" or not plans_from_log(tl):
        return None
    return f"dsv4ctl fit-length {deployment.model_arg(tl)} --from-log {shlex.quote(log)}{deployment.fit_length_flags(tl)}"


def next_command(d: Diagnosis, settings: dict[str, Any]) -> str | None:
    """The one command to run next: the root cause's own (a `dsv4ctl serve` with the safe length), else what
    fit-length makes of the log; None when it would repeat what this start already does."""
    tl, root, log = d.timeline, d.root_cause, d.facts.get("log", "<log>")
    command = None
    if root is not None:
        sig = BY_ID.get(root.id)
        if root.details.get("_next"):
            command = root.details["_next"]  # the next look an answer read from the error's own words
        elif sig is not None and sig.next_command:
            command = fill(sig.next_command, root.details)
        if root.id == "stale_max_model_len" and "safe_len" not in root.details:
            command = fit_from_log_command(tl, log)
    elif d.verdict == "healthy" and tl.autofit is not None:
        command = fit_from_log_command(tl, log)
    if command is not None and not applicable(command, settings):
        return None
    return command
