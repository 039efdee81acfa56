"""The group's conclusions from its members' readings: the root cause across them, the silent ranks, what
the others saw, and the mismatches between nodes that a group must not have."""

from __future__ import annotations

import re
from datetime import datetime

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.group.model import GroupFinding, GroupReading, MemberReading

# A rank whose log stops this long before the group's last line while the others go on has gone silent.
SILENCE_S = 60
# Flags every node of a data-parallel group must share (each engine builds the same model and KV layout;
# vLLM does not compare them across nodes). By vLLM's argument names, as `non-default args` logs them.
MUST_MATCH = ("model", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
              "enable_expert_parallel", "kv_cache_dtype", "block_size", "dtype", "quantization",
              "speculative_config", "max_num_batched_tokens", "enforce_eager")
# Read from every engine's own config line (a headless node logs no flags): compared on every member.
SETTINGS = ("model", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype",
            "enforce_eager", "enable_expert_parallel")
_FIX_NAME = re.compile(r"(?:^|; )([a-z0-9][a-z0-9-]*) ")


def seconds(stamp: str | None) -> float | None:
    """`MM-DD HH:MM:SS` as seconds (one year assumed: vLLM's record time has none)."""
    if not stamp:
        return None
    try:
        return datetime.strptime("2000-" + stamp, "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


def _rfc_to_stamp(value: str | None) -> str | None:
    m = re.match(r"\d{4}-(\d{2})-(\d{2})T(\d{2}:\d{2}:\d{2})", value or "")
    return f"{m.group(1)}-{m.group(2)} {m.group(3)}" if m else None


def _terminated(r: MemberReading) -> None:
    """A container the runtime ended (OOMKilled, an exit code) with no Python error of its own: the
    termination is the evidence (OOMKilled with nothing printed is the kernel's OOM killer)."""
    t = r.member.termination or {}
    reason = t.get("reason")
    if not reason or reason == "Completed" or (r.verdict == "failed" and r.root_cause not in (None, "unrecognized_error")):
        return
    code = t.get("exit_code")
    sig = BY_ID.get("eco_container_oom_killed") if reason == "OOMKilled" else None
    r.verdict = "failed"
    r.exit_code = 3
    r.root_cause = sig.id if sig else "container_terminated"
    r.root_title = sig.title if sig else f"The container ended: {reason}"
    r.root_text = f"terminated: {reason}" + (f", exit code {code}" if code is not None else "") + \
        (f", at {t['finished_at']}" if t.get("finished_at") else "") + " (the pod's status)"
    r.root_line = None
    r.root_time = _rfc_to_stamp(t.get("finished_at")) or r.last_time


def conclude(readings: list[MemberReading], sources: list[str], bundle: str | None) -> GroupReading:
    for r in readings:
        _terminated(r)
    vllm = [r for r in readings if r.role != "other"]
    failed = [r for r in readings if r.verdict == "failed"]

    def order(r: MemberReading) -> tuple:
        sig = BY_ID.get(r.root_cause or "")
        symptom = sig is not None and sig.role == "symptom"
        t = seconds(r.root_time) or seconds(r.last_time)
        return (symptom, t if t is not None else float("inf"))

    root = min(failed, key=order) if failed else None
    consequences = [r for r in failed if r is not root]
    latest = max((seconds(r.last_time) or 0.0 for r in vllm), default=0.0)
    silent = [r for r in vllm if r not in failed and r.verdict != "healthy" and seconds(r.last_time) is not None
              and latest - (seconds(r.last_time) or 0.0) >= SILENCE_S]
    silent += [r for r in vllm if r.verdict == "stuck" and r not in silent]
    findings = _findings(vllm, silent)
    if root is not None:
        serving = [r for r in vllm if r is not root and r.verdict == "healthy" and
                   any(m.phase in ("ready", "startup_complete") for m in r.milestones)]
        if serving:
            names = ", ".join(f"rank {r.rank_text} ({r.label})" for r in serving)
            findings.insert(0, GroupFinding(
                "group_serves_with_a_dead_rank", f"{names} went on as if nothing happened",
                f"Their own logs look healthy (a head's /health keeps answering 200), but rank {root.rank_text} "
                f"({root.label}) is down: a data-parallel group does not notice a lost rank by itself, so it is "
                "not healthy as a whole.",
                [r.label for r in serving], "Restart the whole group (every node), after fixing the cause above",
            ))
    missing = next((f for f in findings if f.id == "group_rank_missing"), None)
    # Serving: the API server said its startup is complete (a headless node never says it: not judged here).
    waiting = [r for r in vllm if r.role != "headless" and not any(m.phase == "startup_complete" for m in r.milestones)]
    if failed:
        verdict = "failed"
    elif silent or any(r.verdict == "stuck" for r in vllm):
        verdict = "stuck"
    elif missing is not None:
        verdict = "stuck" if waiting else "inconclusive"  # the head waits for the rank, or served without it
    elif vllm and all(r.verdict == "healthy" for r in vllm):
        verdict = "healthy"
    else:
        verdict = "inconclusive"
    reason = None
    if root is not None:
        reason = "terminated" if root.root_line is None and root.member.termination else "the earliest originating error"
    return GroupReading(verdict, readings, root, reason, silent, consequences, findings, sources, bundle)


def _findings(vllm: list[MemberReading], silent: list[MemberReading]) -> list[GroupFinding]:
    out: list[GroupFinding] = []
    sizes = {int(r.args["data_parallel_size"]) for r in vllm if str(r.args.get("data_parallel_size", "")).isdigit()}
    present = {rank for r in vllm for rank in r.ranks}
    if len(sizes) == 1 and (size := sizes.pop()) > 1:
        missing = [rank for rank in range(size) if rank not in present]
        if missing:
            out.append(GroupFinding(
                "group_rank_missing", f"No log of data-parallel rank{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(str, missing))}",
                f"The group has {size} data-parallel ranks (--data-parallel-size {size}); no log here holds "
                f"{', '.join(map(str, missing))}: that node never started, or its log is not in the bundle. The head "
                "waits for every rank before it serves.",
                [], "Start the missing node (its --data-parallel-start-rank), or collect its log too",
            ))
    for r in silent:
        out.append(GroupFinding(
            "group_rank_silent", f"Rank {r.rank_text} ({r.label}) went silent",
            f"Its last line is at {r.last_time}, while other members logged until later; it stopped making "
            "progress (or stopped logging) while the rest of the group went on.",
            [r.label], "Look at that node: its processes (py-spy dump --pid), its GPUs (nvidia-smi) and its network",
        ))
    for key in MUST_MATCH:
        values = {r.label: (r.settings.get(key) if key in r.settings else r.args.get(key)) for r in vllm}
        if key not in SETTINGS and not all(r.args for r in vllm):
            continue  # a flag only `non-default args` shows: compared only when every node logged its flags
        if len(values) > 1 and len({repr(v) for v in values.values()}) > 1:
            shown = "; ".join(f"{label}: {'not set' if v is None else v}" for label, v in values.items())
            if key == "max_model_len":
                lengths = [int(v) for v in values.values() if str(v).lstrip("-").isdigit() and int(v) > 0]
                action = (f"Pass the same --max-model-len on every node: {min(lengths)} (the smallest)" if lengths
                          else "Pass the same explicit --max-model-len on every node")
                out.append(GroupFinding("group_lengths_differ", "The nodes use different --max-model-len", shown,
                                        list(values), action, "each engine's config line (vllm/v1/engine/core.py)"))
            else:
                flag = "--" + key.replace("_", "-")
                out.append(GroupFinding("group_settings_differ", f"The nodes differ in {flag}", shown, list(values),
                                        f"Launch every node with the same {flag}",
                                        "each engine's config line; non-default args (vllm/entrypoints/serve/utils/api_utils.py:286)"))
    versions = {r.label: r.vllm_version for r in vllm if r.vllm_version}
    if len(set(versions.values())) > 1:
        out.append(GroupFinding("group_versions_differ", "The nodes run different vLLM releases",
                                "; ".join(f"{k}: {v}" for k, v in versions.items()), list(versions),
                                "Install the same vLLM release on every node"))
    fixes = {r.label: sorted({n for line in r.fixes for n in _FIX_NAME.findall(line)}) for r in vllm}
    with_fixes = {k: v for k, v in fixes.items() if v}
    if with_fixes and (len({tuple(v) for v in fixes.values()}) > 1):
        shown = "; ".join(f"{k}: {', '.join(v) or 'no dsv4ctl fixes line'}" for k, v in fixes.items())
        out.append(GroupFinding("group_fixes_differ", "The nodes do not run the same dsv4ctl fixes", shown, list(fixes),
                                "Launch every node through dsv4ctl serve with the same --fixes, dsv4ctl installed in "
                                "each node's vLLM environment", "dsv4ctl fixes: (dsv4ctl/fixes/__init__.py LOG_PREFIX)"))
    return out
