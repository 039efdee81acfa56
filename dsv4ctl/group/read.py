"""`read_group(paths)`: each member diagnosed on its own (`dsv4ctl.advice.diagnose`, one pass per log), its
identity read from its head and tail (`group.scan`), then the group's conclusions (`group.conclude`)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO, Any

from dsv4ctl import stamps
from dsv4ctl.collect.bundle import is_bundle
from dsv4ctl.collect.names import MANIFEST
from dsv4ctl.errors import InputError
from dsv4ctl.files import decoded
from dsv4ctl.group.conclude import conclude
from dsv4ctl.group.detect import distinct
from dsv4ctl.group.model import GroupReading, Member, MemberReading, Milestone
from dsv4ctl.group.scan import HEAD_BYTES, TAIL_BYTES, Identity, from_parts, scan

# A launch's own line: vLLM logs its flags once per `vllm serve` (vllm==0.32.0
# vllm/entrypoints/serve/utils/api_utils.py:286), a headless node instead says it launches its engines
# (vllm/entrypoints/cli/serve.py:239); two files with one each are two launches.
# The milestones of the per-rank timeline, by the keys of the startup timeline's line references.
MILESTONES = (("engine_config", "engine configured"), ("kv_cache_size", "KV cache sized"),
              ("init_engine", "engine initialised"), ("ready", "ready"), ("startup_complete", "serving"))


class _Kept(io.RawIOBase):
    """A member's stream as `diagnose` reads it, keeping its first HEAD_BYTES and its last TAIL_BYTES for the
    identity scan: the bundle is read once, never extracted."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.head = b""
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self.size = 0

    @property
    def tail(self) -> bytes:
        data = b"".join(self._tail)
        return data[-TAIL_BYTES:] if len(data) > TAIL_BYTES else data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.size += n
        if len(self.head) < HEAD_BYTES:
            room = HEAD_BYTES - len(self.head)
            self.head += data[:room]
            data = data[room:]
        if data:
            self._tail.append(data)
            self._tail_bytes += len(data)
            while self._tail_bytes - len(self._tail[0]) >= TAIL_BYTES:
                self._tail_bytes -= len(self._tail.popleft())
        return n


class _Slice(io.RawIOBase):
    """A member of an uncompressed tar read straight from the archive's file (os.pread: no copy through tarfile)."""

    def __init__(self, fd: int, offset: int, size: int) -> None:
        self._fd, self._pos, self._end = fd, offset, offset + size
        self.start, self.size = offset, size

    def parts(self) -> tuple[bytes, bytes]:
        """The member's first HEAD_BYTES and last TAIL_BYTES, read in place."""
        head = os.pread(self._fd, min(HEAD_BYTES, self.size), self.start)
        tail_from = max(self.size - TAIL_BYTES, len(head))
        tail = os.pread(self._fd, self.size - tail_from, self.start + tail_from) if self.size > tail_from else b""
        return head, tail

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._end - self._pos)
        if n <= 0:
            return 0
        data = os.pread(self._fd, n, self._pos)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _archive_members(path: str) -> Iterator[tuple[tarfile.TarInfo, IO[bytes]]]:
    """The archive's files in order, each as a stream: a plain tar's read in place, a compressed one's as
    they come out of the decompressor (1 MiB reads: the archive's 10 KiB records cost)."""
    try:
        tar = tarfile.open(path, "r:")
    except tarfile.ReadError:
        tar = None
    if tar is not None:
        with tar, open(path, "rb") as f:
            for member in tar.getmembers():
                if member.isfile():
                    yield member, io.BufferedReader(_Slice(f.fileno(), member.offset_data, member.size), 1 << 20)
        return
    with tarfile.open(path, "r|*", bufsize=1 << 20) as stream_tar:
        for member in stream_tar:
            stream = stream_tar.extractfile(member) if member.isfile() else None
            if stream is not None:
                yield member, stream


def _read_bundle(path: str, progress: Callable[[int], None] | None, done: int) -> tuple[list[MemberReading], int]:
    """A bundle read once, front to back: each log as it comes out of the archive, then the manifest (written
    last) says where each came from; the events log and logs of no bytes are left out."""
    readings: dict[str, MemberReading] = {}
    manifest: dict[str, Any] = {}
    for member, stream in _archive_members(path):
        if member.name == MANIFEST:
            manifest = json.loads(stream.read())
            continue
        if not member.name.startswith("logs/") or not member.size:
            continue
        report = (lambda n, base=done: progress(base + n)) if progress else None
        reading, size = _read_member(Member(name=member.name, path=f"{path}:{member.name}"), stream, report)
        readings[member.name] = reading
        done += size
    out = []
    for entry in manifest.get("logs", []):
        reading = readings.pop(entry.get("path"), None)
        if reading is None or entry.get("kind") == "k8s-events":
            continue
        m = reading.member
        m.node, m.pod, m.container, m.instance = entry.get("node"), entry.get("pod"), entry.get("container"), entry.get("instance")
        m.termination, m.restart_count, m.last_time_hint = entry.get("termination"), entry.get("restart_count"), entry.get("last_time")
        reading.last_time = reading.last_time or stamps.from_iso(m.last_time_hint)
        out.append(reading)
    return out + list(readings.values()), done


def read_group(paths: list[str], progress: Callable[[int], None] | None = None) -> GroupReading:
    """Read the logs (or bundles) as one deployment, each log once (a file given twice is one log).
    `progress(bytes)` as `diagnose`'s (a bundle's logs counted as they come out of the archive)."""
    readings: list[MemberReading] = []
    done = 0
    for p in distinct(paths):
        if is_bundle(p):
            more, done = _read_bundle(p, progress, done)
            readings += more
            continue
        if not os.path.isfile(p):
            raise InputError(f"cannot read {p}: no such file")
        report = (lambda n, base=done: progress(base + n)) if progress else None
        with open(p, "rb") as f:
            text = decoded(f, p)  # type: ignore[arg-type]
            if text is f:
                reading, size = _read_member(Member(name=p, path=p), p, report)
            else:  # compressed or UTF-16: its text read once, its head and tail kept on the way
                reading, _ = _read_member(Member(name=p, path=p), text, report)
                size = os.path.getsize(p)
        readings.append(reading)
        done += size
    if not readings:
        raise InputError("no logs in the bundle", hint="the manifest lists what could not be collected, and why")
    bundle = next((p for p in paths if is_bundle(p)), None)
    return conclude(readings, sources=[r.member.name for r in readings], bundle=bundle)


def _read_member(member: Member, source: IO[bytes] | str, progress: Callable[[int], None] | None) -> tuple[MemberReading, int]:
    """One member: its diagnosis (one pass) and its identity (its head and tail); and its size."""
    from dsv4ctl.advice import diagnose

    if isinstance(source, str):
        d = diagnose([source], progress=progress)
        ident = scan(source, d.lines_read)
        size = os.path.getsize(source)
    elif isinstance(source, io.BufferedReader) and isinstance(source.raw, _Slice):
        d = diagnose([source], progress=progress)
        head, tail = source.raw.parts()
        ident = from_parts(head, tail, source.raw.size, d.lines_read)
        size = source.raw.size
    else:
        kept = _Kept(source)
        d = diagnose([io.BufferedReader(kept, 1 << 20)], progress=progress)
        ident = from_parts(kept.head, kept.tail, kept.size, d.lines_read)
        size = kept.size
    tl = d.timeline
    args: dict[str, Any] = dict(tl.serve_args or {})
    args_logged = "nondefault_args" in tl.refs  # vLLM printed the launch's flags (a headless node never does)
    ranks, basis = _ranks(args, ident.dp_tags)
    role = "headless" if args.get("headless") or ident.headless else ("head" if ranks else "single")
    ties = _ties(args, ident, args_logged)
    if ties["ray"] == "worker":
        role = "ray_worker"  # a Ray worker node's log: its workers' lines, no launch of its own
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
        root_time=ident.time_at(root_line), first_time=ident.first_time,
        last_time=ident.last_time or stamps.from_iso(member.last_time_hint),
        vllm_version=tl.vllm_version or ident.vllm_version,
        max_model_len=tl.effective_max_model_len or tl.max_model_len or args.get("max_model_len"),
        fixes=ident.fixes, args=args, settings=_settings(tl, args), milestones=milestones, dp_leader_lines=ident.dp_leader, summary=d.summary,
        args_logged=args_logged, **ties,
    ), size


def _ties(args: dict[str, Any], ident: Identity, args_logged: bool) -> dict[str, Any]:
    """What ties the log to one run (group.runs): the data-parallel head it is or joins, the multi-node master,
    its part in a Ray launch."""
    def port(value: Any) -> str | None:
        return str(value) if value not in (None, "") else None

    dp_head = ident.head_address
    if dp_head is None and args.get("data_parallel_address") and (_int(args.get("data_parallel_size")) or 1) > 1:
        dp_head = (str(args["data_parallel_address"]), port(args.get("data_parallel_rpc_port")))
    master = None
    if (_int(args.get("nnodes")) or 1) > 1 and args.get("master_addr"):
        master = (str(args["master_addr"]), port(args.get("master_port")))
    ray = None
    if str(args.get("distributed_executor_backend") or "") == "ray":
        ray = "launch"
    elif not args_logged and not ident.headless and ident.ray_workers:
        ray = "worker"
    return {"dp_head": dp_head, "master": master, "ray": ray}


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
