"""Know when one of vLLM's engine processes dies under `dsv4ctl serve`, and say so in the log.

vLLM starts its EngineCore processes (and, on a data-parallel head, the DP coordinator) with
`multiprocessing` from the serving process, which is this one. When one of them dies, vLLM often says
nothing about it: a headless node's `run_headless` (vllm==0.32.0 vllm/entrypoints/cli/serve.py:258-266)
notes the name in `failed_proc_name`, logs only `Shutting down.` and returns normally, so `vllm serve`
exits 0; a worker under the dead engine logs `Parent process exited, terminating worker queues`
(vllm/v1/executor/multiproc_executor.py:843). Nothing in the log names the process, the signal or the rank.

`EngineWatch` waits on the sentinels of this process's multiprocessing engine children (the same wake-up
vLLM's own `monitor_engine_liveness` uses, vllm/v1/engine/utils.py:350) and, for one that ends with a
non-zero code while nobody asked the server to stop and before vLLM began tearing its engines down,
writes one line through fd 2 (so the log gets it,
in order with vLLM's own lines, before vLLM starts tearing down):

    ERROR 12-02 02:30:01 [engines.py:NN] dsv4ctl serve: engine process EngineCore_DP1 (pid 4242, DP rank 1) was killed by signal 9 (SIGKILL)

The exit status is read with `waitid(..., WNOWAIT)`, which leaves the child for multiprocessing to reap
(vLLM's own `proc.exitcode` stays right), or from multiprocessing's record once vLLM reaped it.

"Nobody asked": SIGTERM, SIGINT, SIGHUP or SIGQUIT reaching this process (whoever's handler is installed:
vLLM and uvicorn install their own; `SignalNotes` wraps every Python handler installed during the run so
the arrival is noted first), or the session's own shutdown. A requested stop ends the engines too, and
that is not a failure.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import connection
from pathlib import Path
from typing import Any

# vLLM's engine processes: `EngineCore`, `EngineCore_DP{rank}` (vllm==0.32.0 vllm/v1/engine/utils.py:284).
ENGINE_NAME = "EngineCore"
# The words the catalogue's `serve_engine_died` signature matches (dsv4ctl/catalogue/signatures.py).
LINE_PREFIX = "dsv4ctl serve: engine process"
# Signals that mean "stop" when they reach the serving process.
STOP_SIGNALS = tuple(s for s in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None), getattr(signal, "SIGQUIT", None)) if s)


@dataclass(frozen=True)
class EngineDeath:
    """One vLLM process that ended on a signal or a non-zero code while the server was meant to run."""

    name: str  # multiprocessing's name: EngineCore, EngineCore_DP1, DPCoordinator, ...
    pid: int
    exit_code: int  # multiprocessing's convention: -N for signal N
    at: float  # time.time() when it was seen

    @property
    def rank(self) -> int | None:
        """The data-parallel rank from vLLM's process name (`EngineCore_DP{rank}`, vllm/v1/engine/utils.py:284)."""
        head, _, tail = self.name.rpartition("_DP")
        return int(tail) if head and tail.isdecimal() else None

    @property
    def signal_name(self) -> str | None:
        if self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    def describe(self) -> str:
        rank = f", DP rank {self.rank}" if self.rank is not None else ""
        if self.exit_code < 0:
            how = f"was killed by signal {-self.exit_code} ({self.signal_name})"
        else:
            how = f"exited with code {self.exit_code}"
        return f"{LINE_PREFIX} {self.name} (pid {self.pid}{rank}) {how}"

    def log_line(self) -> str:
        """vLLM's record format (vllm/logger.py: level, local time, [file:line]); the place is this line."""
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(self.at))
        return f"ERROR {stamp} [{Path(__file__).name}:{sys._getframe().f_lineno}] {self.describe()}\n"

    def to_json(self) -> dict[str, Any]:
        return {"process": self.name, "pid": self.pid, "rank": self.rank, "exit_code": self.exit_code,
                "signal": self.signal_name}


class SignalNotes:
    """While active, every Python handler installed for a stop signal is wrapped so its arrival is noted
    (`received`) before the handler runs. Restores `signal.signal` on exit."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self._real: Any = None

    def note(self, signum: int) -> None:
        try:
            self.received.append(signal.Signals(signum).name)
        except ValueError:
            self.received.append(str(signum))

    def wrap(self, handler: Any) -> Any:
        if not callable(handler) or getattr(handler, "_dsv4ctl_noted", False):
            return handler

        def noted(signum: int, frame: Any) -> Any:
            self.note(signum)
            return handler(signum, frame)

        noted._dsv4ctl_noted = True  # type: ignore[attr-defined]
        noted.__wrapped__ = handler  # type: ignore[attr-defined]
        return noted

    def __enter__(self) -> SignalNotes:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._real = real = signal.signal

        def watched_signal(signum: Any, handler: Any) -> Any:
            return real(signum, self.wrap(handler) if signum in STOP_SIGNALS else handler)

        signal.signal = watched_signal  # type: ignore[assignment]
        for signum in STOP_SIGNALS:  # the handlers already there (Python's own SIGINT handler included)
            current = signal.getsignal(signum)
            if callable(current):
                real(signum, self.wrap(current))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._real is not None:
            signal.signal = self._real  # type: ignore[assignment]
            self._real = None


class EngineWatch:
    """A thread that waits on this process's multiprocessing children and reports the ones that die.

    `write(text)` gets each report's log line; `stopping()` says whether a stop was asked for (then an
    ending child is expected and not reported)."""

    def __init__(self, write: Callable[[str], None], stopping: Callable[[], bool], interval_s: float = 0.5) -> None:
        self._write = write
        self._stopping = stopping
        self._interval = interval_s
        self._known: dict[int, Any] = {}  # pid -> multiprocessing.Process (kept: multiprocessing forgets the dead)
        self._ended: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.deaths: list[EngineDeath] = []  # the first is the one reported; later ones are vLLM's teardown
        self.teardown = False  # vLLM began shutting its engines down: their ends from then on are its own doing

    def start(self) -> EngineWatch:
        global _CURRENT
        _CURRENT = self
        self._thread = threading.Thread(target=self._loop, name="dsv4ctl-engines", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        global _CURRENT
        if _CURRENT is self:
            _CURRENT = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._interval * 2 + 1)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.check(self._interval)

    def check(self, timeout: float = 0.0) -> None:
        """One round: pick up new children, wait up to `timeout` for one to end, report what ended."""
        with self._lock:
            self._check(timeout)

    def _check(self, timeout: float) -> None:
        from multiprocessing import process

        for proc in list(getattr(process, "_children", ())):
            pid = getattr(proc, "pid", None)
            if not str(getattr(proc, "name", "")).startswith(ENGINE_NAME):
                continue  # the API server processes and the DP coordinator end with the engines; not news
            if pid is not None and pid not in self._known:
                self._known[pid] = proc
        waiting = {}
        for pid, proc in self._known.items():
            if pid in self._ended:
                continue
            sentinel = getattr(proc, "_sentinel", None)
            if isinstance(sentinel, int):
                waiting[sentinel] = pid
        if not waiting:
            self._stop.wait(timeout)
            return
        try:
            ready = connection.wait(list(waiting), timeout=timeout)
        except (OSError, ValueError):  # a sentinel closed under us (vLLM closed the process object)
            ready = [s for s in waiting if _closed(s)]
        for sentinel in ready:
            pid = waiting[sentinel]
            self._ended.add(pid)
            code = exit_status(pid, self._known[pid])
            if code is None or code == 0 or self._stopping() or self.teardown:
                continue
            death = EngineDeath(str(getattr(self._known[pid], "name", "?")), pid, code, time.time())
            self.deaths.append(death)
            if len(self.deaths) > 1:
                continue  # after the first death vLLM tears the rest down: consequences, not news
            try:
                self._write(death.log_line())
            except OSError:
                pass


def exit_status(pid: int, proc: Any, wait_s: float = 2.0) -> int | None:
    """The child's exit code (-N for signal N) without reaping it; None if it cannot be known in `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = None  # reaped already (by multiprocessing, for vLLM): its record has the code
            popen = getattr(proc, "_popen", None)
            code = getattr(popen, "returncode", None)
            if code is not None:
                return int(code)
        else:
            if info is not None:
                if info.si_code == os.CLD_EXITED:
                    return int(info.si_status)
                return -int(info.si_status)  # CLD_KILLED, CLD_DUMPED
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def write_fd2(text: str) -> None:
    """Write through fd 2 (the session's capture when it runs): the log and the terminal get it."""
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(2, data):]


_CURRENT: EngineWatch | None = None


def report_before_vllm_teardown() -> None:
    """Make vLLM's engine manager report a death before it tears the rest down.

    vLLM's `CoreEngineProcManager.shutdown` (vllm==0.32.0 vllm/v1/engine/utils.py:335) runs right after its
    liveness monitor saw an engine end, and before the launcher logs `Shutting down.`
    (vllm/entrypoints/cli/serve.py:266). Wrapped here (in this process only, once), it first lets the
    running `EngineWatch` look, so the death line comes before vLLM's shutdown lines, whichever thread
    wakes first. Without that class (another release) the watch's own thread still reports, a moment later.
    """
    try:
        from vllm.v1.engine import utils
    except ImportError:
        return
    manager = getattr(utils, "CoreEngineProcManager", None)
    shutdown = getattr(manager, "shutdown", None)
    if shutdown is None or getattr(shutdown, "_dsv4ctl_reports", False):
        return

    def reporting_shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        watch = _CURRENT
        if watch is not None:
            watch.check(0.0)
            watch.teardown = True
        return shutdown(self, *args, **kwargs)

    reporting_shutdown._dsv4ctl_reports = True  # type: ignore[attr-defined]
    reporting_shutdown.__wrapped__ = shutdown  # type: ignore[attr-defined]
    manager.shutdown = reporting_shutdown
