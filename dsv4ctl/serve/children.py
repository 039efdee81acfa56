"""Track every process vLLM starts below us, by pid, and make sure none outlives us.

vLLM's EngineCore and workers are children (and grandchildren) of the serving process. A worker
whose parent died is re-parented to init and disappears from `children()`, so the tracker polls the
tree during the whole run and remembers each pid with its start time (a recycled pid with another
start time is someone else's process and is never touched). Nothing is ever looked up or killed by
name.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import psutil


@dataclass(frozen=True)
class TrackedProcess:
    pid: int
    create_time: float
    name: str


@dataclass
class ReapReport:
    """What happened to the processes seen during the run when we stopped."""

    seen: list[TrackedProcess] = field(default_factory=list)
    exited: list[int] = field(default_factory=list)  # gone on their own within the grace period
    terminated: list[int] = field(default_factory=list)  # needed SIGTERM
    killed: list[int] = field(default_factory=list)  # needed SIGKILL
    survivors: list[int] = field(default_factory=list)  # still there after SIGKILL (should be empty)

    def to_json(self) -> dict:
        return {
            "seen": [{"pid": p.pid, "name": p.name} for p in self.seen],
            "exited": self.exited,
            "terminated": self.terminated,
            "killed": self.killed,
            "survivors": self.survivors,
        }


class ChildTracker:
    """Polls this process's descendants every `interval_s` and reaps them on `reap()`."""

    def __init__(self, root_pid: int | None = None, interval_s: float = 0.5) -> None:
        self._root = psutil.Process(root_pid or os.getpid())
        self._interval = interval_s
        self._seen: dict[int, TrackedProcess] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ChildTracker:
        self.poll()
        self._thread = threading.Thread(target=self._loop, name="dsv4ctl-children", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll()

    def poll(self) -> None:
        try:
            children = self._root.children(recursive=True)
        except psutil.Error:
            return
        with self._lock:
            for child in children:
                if child.pid in self._seen:
                    continue
                try:
                    self._seen[child.pid] = TrackedProcess(child.pid, child.create_time(), _safe_name(child))
                except psutil.Error:
                    continue

    @property
    def seen(self) -> list[TrackedProcess]:
        with self._lock:
            return list(self._seen.values())

    def alive(self) -> list[psutil.Process]:
        """The tracked processes that still exist (same pid and same start time), zombies excluded."""
        procs = []
        for tracked in self.seen:
            proc = _same_process(tracked)
            if proc is not None:
                procs.append(proc)
        return procs

    def reap(self, grace_s: float = 10.0, term_s: float = 5.0, exclude: set[int] = frozenset()) -> ReapReport:
        """Wait up to `grace_s` for the tracked processes to end, then SIGTERM, then SIGKILL, by pid.

        Pids in `exclude` are left alone (a helper the caller stops its own way first)."""
        self.poll()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._interval * 2 + 1)
        report = ReapReport(seen=self.seen)
        procs = [p for p in self.alive() if p.pid not in exclude]
        gone, procs = psutil.wait_procs(procs, timeout=grace_s) if procs else ([], [])
        report.exited = [p.pid for p in gone]
        if procs:
            for proc in procs:
                _signal(proc, "terminate")
            gone, procs = psutil.wait_procs(procs, timeout=term_s)
            report.terminated = [p.pid for p in gone]
        if procs:
            for proc in procs:
                _signal(proc, "kill")
            gone, procs = psutil.wait_procs(procs, timeout=term_s)
            report.killed = [p.pid for p in gone]
        report.survivors = [p.pid for p in procs]
        return report


def _same_process(tracked: TrackedProcess) -> psutil.Process | None:
    try:
        proc = psutil.Process(tracked.pid)
        if abs(proc.create_time() - tracked.create_time) > 0.01:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            try:
                if proc.ppid() == os.getpid():
                    os.waitpid(proc.pid, os.WNOHANG)  # ours: collect it so the pid is released
            except (ChildProcessError, OSError):
                pass
            return None
        return proc
    except psutil.Error:
        return None


def _signal(proc: psutil.Process, how: str) -> None:
    try:
        getattr(proc, how)()
    except psutil.Error:
        pass


def _safe_name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"
