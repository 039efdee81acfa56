"""`serve --watchdog SECONDS`: serve checks its own server and ends a wedged one, so a supervisor restarts it.

A thread in the serve process runs `dsv4ctl check`'s look (`check.http.check_server`) on the server vLLM
listens on, once it answers /health. While requests are pending the two /metrics scrapes tell progress;
while the engine looks idle the next look adds the one-token probe request (a stopped idle engine looks
idle). When the looks say `wedged` without a break for SECONDS (from the start of the first wedged
look's window), the watchdog writes the evidence to serve's output (the log), the stacks of this process and
of each vLLM process (`check.dumps`: py-spy where installed, else each process's faulthandler through a signal,
written to the log), and sends this process SIGTERM: vLLM's own graceful shutdown
(`vllm/entrypoints/launchers/launcher.py`, its signal handler stops the engine client, then the HTTP
server). uvicorn then waits for every open connection, and a request the engine never answered keeps
its connection open until its client gives up (measured: as long as the client's own timeout); after
FORCE_AFTER_S the watchdog sets uvicorn's `force_exit`. serve's session then reaps every process left,
and serve exits with ExitCode.WEDGED.

A stall the engine's own log explains is no wedge: serve feeds every line it captures to a `CompileWatch`
(`check.compiles.CompileTracker` behind a lock: the capture's thread feeds, the watchdog's reads), and, at each
look that would be wedged, the compilers running under vLLM's processes (nvcc, ptxas, g++: a JIT that prints
nothing; `check.dumps.compiler_processes`). A look
that would be wedged while a compile or capture runs within its grace is `busy` (`check.with_busy`): the
watchdog says so once per compile and does not count it. Past the grace (bounded by vLLM's own
VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, read from this process's environment, which vLLM's is) the looks are
wedged again, and SECONDS count from there.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dsv4ctl.errors import UsageError

MAX_WINDOW_S = 5.0  # a look's window: at most this, at least 1 s, a third of the limit in between
FORCE_AFTER_S = 10.0  # after the SIGTERM; measured with the engine stopped: vLLM kills it and stops its client in 2 s


def server_url(namespace: Any) -> str:
    """Where vLLM's API server listens, from vLLM's own parsed flags (host, port, TLS)."""
    if getattr(namespace, "uds", None):
        raise UsageError("--watchdog needs a TCP port; vLLM was given --uds", hint="drop --uds, or drop --watchdog")
    host = getattr(namespace, "host", None) or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    scheme = "https" if getattr(namespace, "ssl_certfile", None) else "http"
    url = f"{scheme}://{host}:{int(getattr(namespace, 'port', 8000) or 8000)}"
    from dsv4ctl.check.urls import parse_url

    try:  # refused here, in serve's own thread, rather than by the watchdog's thread once vLLM runs
        return parse_url(url).base
    except UsageError as exc:
        raise UsageError(f"--watchdog cannot look at vLLM's --host/--port: {exc.message}",
                         hint="give vLLM a host name or address and a port from 1 to 65535, or drop --watchdog") from None


def window_for(limit_s: float) -> float:
    return max(1.0, min(MAX_WINDOW_S, limit_s / 3))


class CompileWatch:
    """The compile tracker fed by serve's capture (any thread) and read by the watchdog's."""

    def __init__(self, environ: Any = None) -> None:
        from dsv4ctl.check.compiles import CompileTracker, bounds_from

        self._tracker = CompileTracker(bounds=bounds_from(os.environ if environ is None else environ))
        self._lock = threading.Lock()

    def feed(self, line: str) -> None:
        with self._lock:
            self._tracker.feed(line, time.monotonic())

    def progressed(self, since: float) -> None:
        """The engine moved in a window begun at `since` (time.monotonic())."""
        with self._lock:
            self._tracker.progressed(time.monotonic(), since=since)

    def look_at_processes(self, root_pid: int) -> None:
        """The compilers running under vLLM's processes now (check.dumps.compiler_processes)."""
        from dsv4ctl.check.compiles import COMPILERS
        from dsv4ctl.check.dumps import compiler_processes

        found = compiler_processes(root_pid, COMPILERS)
        with self._lock:
            self._tracker.saw_compilers(found, time.monotonic())

    def state(self) -> Any:
        with self._lock:
            return self._tracker.state(time.monotonic())

    def busy_reason(self) -> str | None:
        """Why a stall now is no wedge (a compile within its grace), or None: for whoever judges in-process."""
        busy = self.state()
        return None if busy is None or busy.overdue else busy.sentence()


class Watchdog:
    def __init__(self, url: str, limit_s: float, say: Callable[[str], None], *, api_key: str | None = None,
                 timeout_s: float = 2.0, end: Callable[[], None] | None = None,
                 compiles: CompileWatch | None = None) -> None:
        from dsv4ctl.check.urls import parse_url

        if not limit_s > 0:
            raise UsageError(f"--watchdog {limit_s:g}: must be more than 0 seconds")
        self.server = parse_url(url)  # a usage error now, not in the thread
        self.url = self.server.shown
        self.limit_s = limit_s
        self.window_s = window_for(limit_s)
        self.timeout_s = timeout_s
        self.api_key = api_key
        self._say = say
        self._end = end or _sigterm_this_process
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.compiles = compiles
        self.fired = False
        self.last: Any = None  # the last look (a check.ServerCheck)
        self._said_busy: tuple[str, str] | None = None

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self._loop, name="dsv4ctl-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.window_s + 2 * self.timeout_s + 2)

    def _loop(self) -> None:
        from dsv4ctl.check import DEAD, UNKNOWN, WEDGED
        from dsv4ctl.check.http import check_server

        ready, probe, wedged_since = False, False, None
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                look = check_server(self.server, window_s=self.window_s, timeout_s=self.timeout_s, probe=probe,
                                    api_key=self.api_key)
            except Exception as exc:  # noqa: BLE001 - said in the log: a thread's traceback would say it nowhere useful
                self._say(f"watchdog: stopped watching {self.url}: {type(exc).__name__}: {exc}")
                return
            if self._stop.is_set():
                return
            if not ready:
                if look.verdict in (DEAD, UNKNOWN):  # not vLLM's server yet: the start is not the watchdog's business
                    self._stop.wait(1.0)
                    continue
                ready = True
                self._say(f"watchdog: watching {self.url} (wedged for {self.limit_s:g} s ends the server)")
            look = self._with_compiles(look, started)
            self.last = look
            if look.verdict == WEDGED:
                wedged_since = started if wedged_since is None else wedged_since
                if time.monotonic() - wedged_since >= self.limit_s:
                    self._fire(look, time.monotonic() - wedged_since)
                    return
            else:
                wedged_since = None
            probe = bool(look.engines) and not any(e.progressed or (e.pending or 0) > 0 for e in look.engines)
            self._stop.wait(max(0.0, self.window_s - (time.monotonic() - started)))  # a dead look is quick

    def _with_compiles(self, look: Any, started: float) -> Any:
        """The look judged with what the engine's log says compiles: busy within the grace, said once a compile."""
        if self.compiles is None:
            return look
        from dsv4ctl.check import BUSY, WEDGED, with_busy

        if any(e.progressed for e in look.engines):
            self.compiles.progressed(since=started)
        elif look.verdict == WEDGED:
            self.compiles.look_at_processes(os.getpid())
        look = with_busy(look, self.compiles.state())
        busy = look.busy if look.verdict == BUSY else None
        key = None if busy is None else (busy.cause, busy.what)
        if key is not None and key != self._said_busy:
            self._say(f"watchdog: not wedged, busy: {busy.sentence()}")
        self._said_busy = key
        return look

    def _fire(self, look: Any, wedged_s: float) -> None:
        self.fired = True
        self._say(f"watchdog: the server is wedged ({wedged_s:.0f} s without engine progress, limit "
                  f"{self.limit_s:g} s); the evidence:")
        for line in look.evidence:
            self._say(f"watchdog:   {line}")
        self._dump()
        self._say("watchdog: shutting vLLM down (SIGTERM to this process); serve exits with the wedged code")
        self._end()
        # vLLM stops its engine client, then uvicorn waits for every open connection, and the requests the
        # stopped engine never answered keep theirs open until their clients give up. After a grace, do
        # what uvicorn's own second Ctrl-C does (vLLM's signal handler swallows it): force_exit.
        if not self._stop.wait(FORCE_AFTER_S):
            try:
                servers, connections = force_http_exit()
            except Exception as exc:  # noqa: BLE001 - said in the log; serve's session still reaps at the end
                self._say(f"watchdog: could not force vLLM's HTTP server to exit: {type(exc).__name__}: {exc}")
                return
            self._say(f"watchdog: vLLM still running {FORCE_AFTER_S:g} s after the SIGTERM; its HTTP server waited for "
                      f"{connections} open connection(s) (requests the engine never answered): uvicorn's force_exit "
                      f"set on {servers} server(s)")


    def _dump(self) -> None:
        """Where each process stood, into the log before anything ends: this process's threads (vLLM's API
        server), then each vLLM process's (check.dumps)."""
        from dsv4ctl.check.dumps import dump_stacks, dump_this_process, vllm_processes

        self._say(f"watchdog: the stacks of this process (pid {os.getpid()}, vLLM's API server), by faulthandler:")
        try:
            sys.stderr.flush()
            dump_this_process(sys.stderr)
        except (OSError, ValueError, AttributeError) as exc:
            self._say(f"watchdog: no stacks of this process: {exc}")
        dump_stacks(vllm_processes(os.getpid()), resume_stopped=True, say=lambda line: self._say(f"watchdog: {line}"))


def force_http_exit() -> tuple[int, int]:
    """Set `force_exit` on every uvicorn server of this process (what uvicorn's second Ctrl-C sets, uvicorn
    0.54 server.py `handle_exit`); returns the servers and the connections they were still waiting for."""
    import gc
    import sys

    uvicorn = sys.modules.get("uvicorn")
    if uvicorn is None:
        return 0, 0
    server_class = uvicorn.Server
    servers = connections = 0
    frozen = gc.get_freeze_count() > 0  # vLLM freezes its heap after startup: get_objects skips frozen objects
    if frozen:
        gc.unfreeze()
    try:
        for obj in gc.get_objects():
            if issubclass(type(obj), server_class):  # type(), not isinstance: no proxy's __class__ is asked
                servers += 1
                connections += len(getattr(getattr(obj, "server_state", None), "connections", ()) or ())
                obj.force_exit = True
    finally:
        if frozen:
            gc.freeze()
    return servers, connections


def _sigterm_this_process() -> None:
    """vLLM's own shutdown path: its signal handler on the event loop (launcher.py) stops the engine client,
    then the HTTP server."""
    os.kill(os.getpid(), signal.SIGTERM)
