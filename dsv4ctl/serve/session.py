"""One `dsv4ctl serve` run: capture, progress, launch in this process, shutdown, outcome.

`ServeSession` is a context manager. Entering it starts the fd-level tee into the log file, the
child-process tracker and a SIGTERM handler that turns an early SIGTERM into KeyboardInterrupt (vLLM
installs its own handlers once its server starts; signals reach it directly because it runs in this
process, in the main thread). Leaving it, on every path, reaps vLLM's processes by pid, drains the
pipes, fsyncs and closes the log, and puts the terminal back.

The session never prints: dsv4ctl's own lines go to a `ServeView` (implemented by
`dsv4ctl.render.serve`), vLLM's bytes go through the tee.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dsv4ctl.errors import Dsv4ctlError, InputError
from dsv4ctl.files import cannot_write
from dsv4ctl.serve.capture import FdTee, flush_python_streams
from dsv4ctl.serve.children import ChildTracker, ReapReport
from dsv4ctl.serve.engines import EngineDeath, EngineWatch, SignalNotes, write_fd2

# A log file that cannot be written (dsv4ctl.files).
LOG_HINT = "choose another --log-file (or set DSV4CTL_LOG_DIR)"

# Outcome statuses
STOPPED = "stopped"  # vLLM returned normally (a requested shutdown)
INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM before vLLM could shut down on its own
FAILED = "failed"  # vLLM raised or exited non-zero


class ServeView(Protocol):
    """Where the session sends dsv4ctl's own output (the renderer implements it)."""

    def attach(self, tee: FdTee | None) -> None: ...

    def echo(self, fd: int, chunk: bytes) -> None: ...

    def progress(self, event: Any) -> None: ...

    def detach(self) -> None: ...


@dataclass
class ServeOutcome:
    status: str
    vllm_exit_status: int | None
    error: str | None
    log_file: Path
    log_bytes: int
    reached_ready: bool
    last_phase: str | None
    events: list[tuple[float, str, str]] = field(default_factory=list)  # (seconds since start, phase, text)
    reap: ReapReport | None = None
    duration_s: float = 0.0
    autofit_from: int | None = None  # vLLM's own auto-fit, as it logged it
    autofit_to: int | None = None
    ready_url: str | None = None
    engine_deaths: list[EngineDeath] = field(default_factory=list)  # vLLM processes that died unasked
    log_error: str | None = None  # the log could not be written to its end (a full disk): why

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "vllm_exit_status": self.vllm_exit_status,
            "error": self.error,
            "log_file": str(self.log_file),
            "log_bytes": self.log_bytes,
            "reached_ready": self.reached_ready,
            "last_phase": self.last_phase,
            "events": [{"t_s": round(t, 3), "phase": p, "text": x} for t, p, x in self.events],
            "children": self.reap.to_json() if self.reap else None,
            "duration_s": round(self.duration_s, 3),
            "autofit": {"from": self.autofit_from, "to": self.autofit_to} if self.autofit_to is not None else None,
            "ready_url": self.ready_url,
            "engine_deaths": [d.to_json() for d in self.engine_deaths],
            "log_error": self.log_error,
        }


class _ProgressFeed:
    """Complete lines from the tee -> the diagnose log parser -> StartupTracker -> view.progress."""

    def __init__(self, source: str, on_event: Callable[[Any], None], started: float,
                 on_ready: Callable[[], None] | None = None) -> None:
        from dsv4ctl.logs.reader import parse_line
        from dsv4ctl.logs.timeline import StartupTracker

        self._parse_line = parse_line
        self._tracker = StartupTracker()
        self._source = source
        self._on_event = on_event
        self._lineno = 0
        self._lock = threading.Lock()
        self._started = started
        self._on_ready = on_ready
        self.events: list[tuple[float, str, str]] = []
        self.phases: set[str] = set()
        self.listeners: list[Callable[[str], None]] = []  # each captured line's text, as read (the watchdog's compiles)

    def feed(self, text: str, fd: int, terminator: str) -> None:
        for listener in self.listeners:
            listener(text)
        with self._lock:
            self._lineno += 1
            line = self._parse_line(text, self._source, self._lineno)
            for event in self._tracker.feed(line) or ():
                phase = str(getattr(event, "phase", ""))
                self.phases.add(phase)
                self.events.append((time.monotonic() - self._started, phase, str(getattr(event, "text", ""))))
                self._on_event(event)
                if phase == "ready" and self._on_ready is not None:
                    on_ready, self._on_ready = self._on_ready, None  # once
                    on_ready()

    @property
    def timeline(self) -> Any:
        return getattr(self._tracker, "timeline", None)


class ServeSession:
    """Capture + child tracking + signal handling around one in-process vLLM run."""

    def __init__(self, log_file: Path, view: ServeView, *, append: bool = False, grace_s: float = 10.0,
                 make_dirs: bool = True, on_ready: Callable[[], None] | None = None) -> None:
        self.log_file = Path(log_file)
        self._make_dirs = make_dirs
        self._on_ready = on_ready  # called once, from the capture's reader thread, when vLLM's ready line is read
        self._grace_s = grace_s
        self.view = view
        self._append = append
        self._tee: FdTee | None = None
        self._children: ChildTracker | None = None
        self._engines: EngineWatch | None = None
        self._signal_notes = SignalNotes()
        self._closing = False
        self._feed: _ProgressFeed | None = None
        self._saved_handlers: dict[int, Any] = {}
        self._started = time.monotonic()
        self.signals_received: list[str] = []
        self.outcome: ServeOutcome | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> ServeSession:
        self._feed = _ProgressFeed(str(self.log_file), self.view.progress, self._started, self._on_ready)
        self._tee = FdTee(self.log_file, on_line=self._feed.feed, echo=self.view.echo, append=self._append,
                          make_dirs=self._make_dirs, hint=LOG_HINT)
        try:
            self._tee.start()  # a log that cannot be written: OutputError, with LOG_HINT
        except OSError as exc:
            raise InputError(f"cannot capture vLLM's output: {exc.strerror or exc}") from None
        try:
            self.view.attach(self._tee)
            self._children = ChildTracker().start()
            self._install_handlers(self._interrupt)
            self._signal_notes.__enter__()  # a stop signal reaching vLLM's own handlers is noted too
            self._engines = EngineWatch(write_fd2, self._stop_requested).start()
        except BaseException:
            # `with` does not call __exit__ when __enter__ fails: give the terminal back and close the log here.
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        # From here on a second SIGTERM/Ctrl-C must not cut the cleanup short.
        self._closing = True
        self._install_handlers(self._note_only)
        try:
            if exc is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit, Dsv4ctlError)):
                traceback.print_exception(exc_type, exc, tb, file=sys.stderr)  # into the log
            elif isinstance(exc, Dsv4ctlError):
                self.note_in_log(f"error: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
            self.shutdown()
        finally:
            self._signal_notes.__exit__()
            self._restore_handlers()
        return False

    def phase(self) -> str | None:
        """The startup phase the latest of vLLM's lines showed (logs.timeline PHASES); None before the first. Read
        from other threads: one list index."""
        events = self._feed.events if self._feed is not None else []
        return events[-1][1] if events else None

    def listen(self, listener: Callable[[str], None]) -> None:
        """Call `listener` with every line captured from here on (from the capture's reader thread: it must be quick
        and must not raise)."""
        if self._feed is not None:
            self._feed.listeners.append(listener)

    def note_in_log(self, text: str) -> None:
        """A line of dsv4ctl's own for the log only (`dsv4ctl serve: <text>`), after all of vLLM's: why a start
        ended before vLLM ran, which the terminal shows as the command's error."""
        if self._tee is not None:
            self._tee.last_words(f"dsv4ctl serve: {text}\n")

    def shutdown(self) -> ReapReport:
        """Reap vLLM's processes, then (whatever the reaping did) drain and close the log, detach the
        view and give the terminal back."""
        reap = ReapReport()
        self._closing = True
        if self._engines is not None:
            self._engines.stop()
        try:
            if self._children is not None:
                # vLLM's processes first; then this process's multiprocessing resource tracker, which
                # exits on its own once told (it cleans up what they left), and anything still there.
                tracker_pid = _resource_tracker_pid()
                reap = self._children.reap(grace_s=self._grace_s, exclude={tracker_pid} if tracker_pid else set())
                _stop_resource_tracker()
                rest = self._children.reap(grace_s=2.0)
                reap.exited += [p for p in rest.exited if p not in reap.exited]
                reap.terminated += rest.terminated
                reap.killed += rest.killed
                reap.survivors = rest.survivors
        finally:
            try:
                if self._tee is not None:
                    self._tee.stop()  # flushes, fsyncs and closes the log
                self.view.detach()
            finally:
                if self._tee is not None:
                    self._tee.close_terminal()
        if self.outcome is not None:
            self.outcome.reap = reap
            self._complete_outcome()  # every line has been parsed now
            failed = self._tee.log_error if self._tee is not None else None
            if failed is not None:
                self.outcome.log_error = cannot_write(self.log_file, failed, LOG_HINT).message
        return reap

    def _complete_outcome(self) -> None:
        outcome, feed = self.outcome, self._feed
        if outcome is None:
            return
        outcome.log_bytes = self.log_file.stat().st_size if self.log_file.exists() else 0
        outcome.duration_s = time.monotonic() - self._started
        if feed is None:
            return
        outcome.events = list(feed.events)
        outcome.reached_ready = "ready" in feed.phases
        outcome.last_phase = feed.events[-1][1] if feed.events else None
        timeline = feed.timeline
        autofit = getattr(timeline, "autofit", None)
        if autofit is not None:
            outcome.autofit_from, outcome.autofit_to = autofit.from_len, autofit.to_len
        outcome.ready_url = getattr(timeline, "ready_url", None)

    # -- running vLLM --------------------------------------------------------------------------------

    def run(self, launch: Callable[[], int]) -> ServeOutcome:
        """Run `launch()` (vLLM's CLI main) and classify how it ended. Never raises for vLLM errors."""
        status, exit_status, error = FAILED, None, None
        try:
            exit_status = launch()
            status = STOPPED if exit_status == 0 else FAILED
            if exit_status != 0:
                error = f"vLLM exited with status {exit_status}"
        except KeyboardInterrupt:
            status = INTERRUPTED
        except Exception as exc:  # noqa: BLE001 - any vLLM failure is diagnosed, not re-raised
            traceback.print_exc(file=sys.stderr)  # through fd 2: into the log, where diagnose reads it
            error = f"{type(exc).__name__}: {exc}"
        finally:
            flush_python_streams()
        deaths = self._engine_deaths()
        if deaths and status != INTERRUPTED:
            status, error = FAILED, deaths[0].describe().removeprefix("dsv4ctl serve: ")  # vLLM may have exited 0
        self.outcome = ServeOutcome(
            status=status,
            vllm_exit_status=exit_status,
            error=error,
            log_file=self.log_file,
            log_bytes=0,
            reached_ready=False,
            last_phase=None,
            engine_deaths=deaths,
        )
        self._complete_outcome()
        return self.outcome

    def _engine_deaths(self) -> list[EngineDeath]:
        """The vLLM processes that died while nobody asked to stop (their ends seen to the last one)."""
        if self._engines is None:
            return []
        self._engines.check(0.0)
        return list(self._engines.deaths)

    def _stop_requested(self) -> bool:
        return self._closing or bool(self.signals_received) or bool(self._signal_notes.received)

    # -- signals ---------------------------------------------------------------------------------------

    def _interrupt(self, signum: int, frame: Any) -> None:
        self.signals_received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def _note_only(self, signum: int, frame: Any) -> None:
        self.signals_received.append(signal.Signals(signum).name)

    def _install_handlers(self, handler: Callable[[int, Any], None]) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.signal(sig, handler)
            self._saved_handlers.setdefault(sig, previous)

    def _restore_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._saved_handlers.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._saved_handlers.clear()


def _resource_tracker_pid() -> int | None:
    from multiprocessing import resource_tracker

    return getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)


def _stop_resource_tracker() -> None:
    from multiprocessing import resource_tracker

    tracker = getattr(resource_tracker, "_resource_tracker", None)
    stop = getattr(tracker, "_stop", None)  # CPython >= 3.8: close its pipe and wait for it
    if stop is not None and getattr(tracker, "_pid", None) is not None:
        try:
            stop()
        except Exception:  # noqa: BLE001 - the reaper below handles a tracker that will not stop
            pass


def apply_environment(fixes: str | None, env: dict[str, str] | None = None, release: str | None = None) -> dict[str, str]:
    """The environment changes `serve` makes before vLLM starts; returns what it set.

    - `DSV4CTL_FIXES`: `--fixes` if given, else the caller's `DSV4CTL_FIXES`, else `all`.
    - Ray workers get the environment only for the prefixes vLLM copies; `DSV4CTL_` is added to
      `VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY` so the plugin in a Ray worker sees the same choice.
    - `VLLM_ENABLE_STARTUP_PLAN=1` where the release (`release`: the one a dry run plans for; default: the installed
      vLLM, the one that runs) has startup plans and the operator did not set the variable: every GPU worker records the KV memory it measured and re-applies it at the next start
      when free memory allows (dsv4ctl/planning/mirror/startup_plans.py), so restarts get the same length.
    """
    from dsv4ctl.fixes import FIXES_ENV
    from dsv4ctl.planning import installed_vllm_version, startup_plans

    env = os.environ if env is None else env
    changed: dict[str, str] = {}
    if fixes is not None:
        changed[FIXES_ENV] = fixes
    elif FIXES_ENV not in env:
        changed[FIXES_ENV] = "all"
    if startup_plans.ENV not in env and startup_plans.available_in(release or installed_vllm_version()):
        changed[startup_plans.ENV] = "1"
    prefixes = [p for p in env.get("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", "").split(",") if p.strip()]
    if "DSV4CTL_" not in prefixes:
        changed["VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"] = ",".join([*prefixes, "DSV4CTL_"])
    env.update(changed)
    return changed
