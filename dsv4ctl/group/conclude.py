"""The group's conclusions from its members' readings: whether they are one run at all (group.runs), the root
cause across them (a member's own error before a consequence, a consequence before an echo of another rank's
failure, then the earliest), the silent ranks, what the others saw, and the mismatches between nodes that a
group must not have (on what the logs show, never against a log that does not show it)."""

from __future__ import annotations

import re
from typing import Any

from dsv4ctl import stamps
from dsv4ctl.catalogue import vllm_flags
from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.group.model import GroupFinding, GroupReading, MemberReading
from dsv4ctl.group.runs import runs

# A rank whose log stops this long before the group's last line while the others go on has gone silent.
SILENCE_S = 60
# Flags every node of a data-parallel group must share (each engine builds the same model and KV layout;
# vLLM does not compare them across nodes). By vLLM's argument names, as `non-default args` logs them; each is
# compared on the logs that show it (`shown_value`: the engine's config line, which a headless node logs too,
# else the flags).
MUST_MATCH = ("model", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
              "enable_expert_parallel", "kv_cache_dtype", "block_size", "dtype", "quantization",
              "speculative_config", "max_num_batched_tokens", "enforce_eager")
_FIX_NAME = re.compile(r"(?:^|; )([a-z0-9][a-z0-9-]*) ")


def seconds(stamp: str | None) -> int | None:
    """A member's time (`MM-DD HH:MM:SS`) as seconds (`dsv4ctl.stamps`: one year assumed, the stamp has none)."""
    return stamps.seconds(stamp)


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
    r.root_time = stamps.from_iso(t.get("finished_at")) or r.last_time


def _rank(r: MemberReading) -> int:
    """How far a failed member's root cause is from the origin: its own error 0, a consequence of its own
    (engine core failed, a worker died) 1, an echo of another rank's failure (a collective's time-out) 2."""
    sig = BY_ID.get(r.root_cause or "")
    if sig is not None and sig.echo:
        return 2
    return 1 if sig is not None and sig.role == "symptom" else 0


def conclude(readings: list[MemberReading], sources: list[str], bundle: str | None) -> GroupReading:
    for r in readings:
        _terminated(r)
        r.echo = r.verdict == "failed" and _rank(r) == 2
    vllm = [r for r in readings if r.role != "other"]
    failed = [r for r in readings if r.verdict == "failed"]
    launches, apart = runs(vllm)
    if len(launches) > 1:
        verdict = next((v for v in ("failed", "stuck", "inconclusive") if any(r.verdict == v for r in vllm)), "healthy")
        return GroupReading(verdict, readings, None, None, [], [], [], sources, bundle, launches=launches, apart=apart)

    def order(r: MemberReading) -> tuple:
        t = seconds(r.root_time) or seconds(r.last_time)
        return (_rank(r), t if t is not None else float("inf"))

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
    # Serving: the API server said its startup is complete (a headless node, a Ray worker node never say it).
    waiting = [r for r in vllm if r.role not in ("headless", "ray_worker") and
               not any(m.phase == "startup_complete" for m in r.milestones)]
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
        if root.root_line is None and root.member.termination:
            reason = "terminated"
        elif root.echo:
            reason = "the earliest failure, an echo: no log here holds the error of the rank it waited for"
        else:
            reason = "the earliest originating error"
    return GroupReading(verdict, readings, root, reason, silent, consequences, findings, sources, bundle,
                        launches=launches)


def _findings(vllm: list[MemberReading], silent: list[MemberReading]) -> list[GroupFinding]:
    out: list[GroupFinding] = []
    sizes = {int(r.args["data_parallel_size"]) for r in vllm if str(r.args.get("data_parallel_size", "")).isdecimal()}
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
        shown = [(r, value) for r in vllm if (value := shown_value(r, key)) is not _UNKNOWN]
        if len(shown) < 2 or len({repr(v) for _, v in shown}) < 2:
            continue  # compared only where at least two logs show it, never against a log that does not
        detail = "; ".join(f"{r.label}: {v}" for r, v in shown)
        labels = [r.label for r, _ in shown]
        if key == "max_model_len":
            out.append(GroupFinding("group_lengths_differ", "The nodes use different --max-model-len", detail, labels,
                                    f"Pass the same --max-model-len on every node: {min(int(v) for _, v in shown)} (the smallest)",
                                    "each engine's config line (vllm/v1/engine/core.py)"))
        else:
            flag = "--" + key.replace("_", "-")
            out.append(GroupFinding("group_settings_differ", f"The nodes differ in {flag}", detail, labels,
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


_UNKNOWN = object()


def shown_value(r: MemberReading, key: str) -> Any:
    """The value of the flag `key` as the log shows it: the engine's config line, else `non-default args`; a flag
    those args leave out is at vLLM's default for the log's release (vllm_flags) when the log printed them, and
    unknown when it printed none (a headless node, a Ray worker node). A value decided only later (a length or
    dtype of `auto`, -1, no default) is unknown too: two logs are compared on what each shows."""
    value = r.settings.get(key)
    if value is None:
        value = r.args.get(key)
    if value is None and key not in r.args:
        if not r.args_logged:
            return _UNKNOWN
        info = vllm_flags.flag("--" + key.replace("_", "-"), r.vllm_version)
        value = info.default if info is not None and info.has_default else None
    return _normal(key, value)


def _normal(key: str, value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().removeprefix("torch.")
        if re.fullmatch(r"-?[0-9]+", text):  # ASCII digits only: str.isdecimal() also takes '²', which int() refuses
            value = int(text)
        elif text in ("True", "False", "true", "false"):
            value = text.lower() == "true"
        else:
            value = text
    if value is None or value == "auto" or (key == "max_model_len" and (not isinstance(value, int) or value <= 0)):
        return _UNKNOWN
    return value
