"""`read_group(paths)`: each member diagnosed on its own (`dsv4ctl.advice.diagnose`, one pass per log), its
identity read from its head and tail (`group.scan`), then the group's conclusions (`group.conclude`)."""

from __future__ import annotations

import os
import re
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsv4ctl.collect import is_bundle, read_manifest
from dsv4ctl.errors import InputError
from dsv4ctl.group.conclude import conclude
from dsv4ctl.group.model import GroupReading, Member, MemberReading, Milestone
from dsv4ctl.group.scan import scan

# A launch's own line: vLLM logs its flags once per `vllm serve` (vllm==0.32.0
# vllm/entrypoints/serve/utils/api_utils.py:286), a headless node instead says it launches its engines
# (vllm/entrypoints/cli/serve.py:239); two files with one each are two launches.
_LAUNCH = re.compile(rb"non-default args: \{|data parallel engine\(s\) in headless mode")
# The milestones of the per-rank timeline, by the keys of the startup timeline's line references.
MILESTONES = (("engine_config", "engine configured"), ("kv_cache_size", "KV cache sized"),
              ("init_engine", "engine initialised"), ("ready", "ready"), ("startup_complete", "serving"))


def is_group(paths: list[str]) -> bool:
    """A bundle, or two or more logs of separate launches (each with its own `non-default args` line)."""
    if len(paths) == 1:
        return is_bundle(paths[0])
    if any(is_bundle(p) for p in paths):
        return True
    launches = 0
    for p in paths:
        if p == "-" or not os.path.isfile(p) or p.endswith(".gz"):
            return False
        with open(p, "rb") as f:
            if _LAUNCH.search(f.read(4 << 20)):
                launches += 1
    return launches >= 2


def _members(paths: list[str], tmp: str) -> tuple[list[Member], str | None]:
    members: list[Member] = []
    bundle = None
    for p in paths:
        if not is_bundle(p):
            if not os.path.isfile(p):
                raise InputError(f"cannot read {p}: no such file")
            members.append(Member(name=p, path=p))
            continue
        bundle = p
        manifest = read_manifest(p)
        entries = {e["path"]: e for e in manifest.get("logs", []) if e.get("bytes")}
        with tarfile.open(p) as tar:
            for member in tar:
                entry = entries.get(member.name)
                if entry is None or entry.get("kind") == "k8s-events" or not member.isfile():
                    continue
                target = Path(tmp) / f"{len(members):04d}.log"
                source = tar.extractfile(member)
                assert source is not None
                with open(target, "wb") as out:
                    while block := source.read(1 << 20):
                        out.write(block)
                members.append(Member(
                    name=member.name, path=str(target), node=entry.get("node"), pod=entry.get("pod"),
                    container=entry.get("container"), instance=entry.get("instance"),
                    termination=entry.get("termination"), restart_count=entry.get("restart_count"),
                    last_time_hint=entry.get("last_time"),
                ))
    return members, bundle


def read_group(paths: list[str], progress: Callable[[int], None] | None = None) -> GroupReading:
    """Read the logs (or bundles) as one deployment. `progress(bytes)` as `diagnose`'s."""
    with tempfile.TemporaryDirectory(prefix="dsv4ctl-group-") as tmp:
        members, bundle = _members(paths, tmp)
        if not members:
            raise InputError("no logs in the bundle", hint="the manifest lists what could not be collected, and why")
        readings = []
        done = 0
        for member in members:
            size = os.path.getsize(member.path)
            report = (lambda n, base=done: progress(base + n)) if progress else None
            readings.append(_read_member(member, report))
            done += size
        return conclude(readings, sources=[m.name for m in members], bundle=bundle)


def _read_member(member: Member, progress: Callable[[int], None] | None) -> MemberReading:
    from dsv4ctl.advice import diagnose

    d = diagnose([member.path], progress=progress)
    ident = scan(member.path, d.lines_read)
    tl = d.timeline
    args: dict[str, Any] = dict(tl.serve_args or {})
    ranks, basis = _ranks(args, ident.dp_tags)
    role = "headless" if args.get("headless") or ident.headless else ("head" if ranks else "single")
    if not tl.vllm_version and not args and d.verdict == "inconclusive" and not ident.fixes:
        role = "other"
    root = d.root_cause
    root_line = root.evidence[0].line if root is not None and root.evidence else None
    milestones = []
    for key, label in MILESTONES:
        ref = tl.refs.get(key) or (tl.ready_ref if key == "ready" else None)
        if ref is not None:
            milestones.append(Milestone(key, ident.time_at(ref.line), ref.line, label))
    if root is not None:
        milestones.append(Milestone("failed", ident.time_at(root_line), root_line, root.title))
    return MemberReading(
        member=member, ranks=ranks, rank_basis=basis, role=role, verdict=d.verdict, exit_code=int(d.exit_code),
        root_cause=root.id if root else None, root_title=root.title if root else None, root_line=root_line,
        root_text=root.evidence[0].text if root is not None and root.evidence else None,
        root_time=ident.time_at(root_line), first_time=ident.first_time, last_time=ident.last_time or member.last_time_hint,
        vllm_version=tl.vllm_version or ident.vllm_version,
        max_model_len=tl.effective_max_model_len or tl.max_model_len or args.get("max_model_len"),
        fixes=ident.fixes, args=args, settings=_settings(tl, args), milestones=milestones, dp_leader_lines=ident.dp_leader, summary=d.summary,
    )


def _settings(tl: Any, args: dict[str, Any]) -> dict[str, Any]:
    """What every engine of the group must share, as this log shows it: the startup timeline's reading of the
    engine's own config line (every process logs it, a headless node included), else the launch's flags."""
    out: dict[str, Any] = {}
    for key, value in (("model", tl.model), ("max_model_len", tl.effective_max_model_len or tl.max_model_len),
                       ("tensor_parallel_size", tl.tensor_parallel_size), ("pipeline_parallel_size", tl.pipeline_parallel_size),
                       ("kv_cache_dtype", tl.kv_cache_dtype), ("enforce_eager", tl.enforce_eager),
                       ("enable_expert_parallel", tl.enable_expert_parallel)):
        out[key] = value if value is not None else args.get(key)
    return out


def _ranks(args: dict[str, Any], tags: set[int]) -> tuple[list[int], str]:
    """The data-parallel ranks of a launch: from its flags (`--data-parallel-start-rank` on a headless node,
    0 on the head, `--data-parallel-size-local` of them; `--data-parallel-rank` for one external rank), else
    from its engines' process tags."""
    size = _int(args.get("data_parallel_size"))
    if size and size > 1:
        if args.get("data_parallel_rank") is not None:
            return [int(args["data_parallel_rank"])], "args"
        local = _int(args.get("data_parallel_size_local")) or size
        start = _int(args.get("data_parallel_start_rank")) or 0
        return list(range(start, start + local)), "args"
    if tags:
        return sorted(tags), "process tags"
    return [], "none"


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
