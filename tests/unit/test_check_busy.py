"""`busy`: a stall while the engine's log says it compiles, within the cause's grace (check.with_busy), through
`check --log` and `watch --log` against a stand-in server answering with /metrics recorded from the real engine."""

from __future__ import annotations

import json
import time

import pytest

from checkkit import StandIn
from dsv4ctl.check import BUSY, HEALTHY, WEDGED, HttpAnswer, ServerCheck, with_busy
from dsv4ctl.check.compiles import CompileTracker
from dsv4ctl.errors import ExitCode

STALLED = ["engine-stopped-1.prom", "engine-stopped-2.prom"]
INDUCTOR = "[compile_fx.py:1302] [0/0] Step 3: torchinductor compiling FORWARDS graph 0"


def _busy(since: float):
    tracker = CompileTracker()
    tracker.feed(INDUCTOR, 0.0)
    return tracker.state(since)


def _check(verdict: str) -> ServerCheck:
    return ServerCheck(url="http://127.0.0.1:1", verdict=verdict, evidence=("engine 0: 2 request(s) running",),
                       health=HttpAnswer(200, 0.01))


def test_a_wedge_while_compiling_within_the_grace_is_busy():
    check = with_busy(_check(WEDGED), _busy(30.0))
    assert check.verdict == BUSY and check.exit_code == ExitCode.BUSY == 13
    assert check.evidence[0].startswith("the engine compiles: torch.compile/Inductor (FORWARDS graph 0) for 30 s, "
                                        "within its grace of 300 s")
    assert check.to_json()["busy"]["what"] == "FORWARDS graph 0"


def test_past_the_grace_it_is_wedged_with_the_compile_said():
    check = with_busy(_check(WEDGED), _busy(301.0))
    assert check.verdict == WEDGED and "past its grace of 300 s" in check.evidence[-1]


def test_other_verdicts_stand_and_no_compile_changes_nothing():
    assert with_busy(_check(HEALTHY), _busy(1.0)).verdict == HEALTHY
    assert with_busy(_check(WEDGED), None) == _check(WEDGED)


def _log(tmp_path, ago_s: float, line: str = INDUCTOR):
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - ago_s))
    path = tmp_path / "serve.log"
    path.write_text(f"(EngineCore pid=7) INFO {stamp} [core.py:1] a line before\n(EngineCore pid=7) INFO {stamp} {line}\n")
    return path


def test_check_log_says_busy_with_what_compiles(cli, tmp_path):
    log = _log(tmp_path, 20)
    with StandIn(STALLED) as server:
        result = cli("check", server.url, "--window", "0.3", "--json", "--log", str(log))
    assert result.exit_code == ExitCode.BUSY, result.output
    one = json.loads(result.stdout)["check"]["servers"][0]
    assert one["verdict"] == "busy" and one["busy"]["cause"] == "torch.compile/Inductor"
    assert 19 <= one["busy"]["since_s"] <= 30 and one["busy"]["grace_s"] == 300
    with StandIn(STALLED) as server:
        assert cli("check", server.url, "--window", "0.3", "--log", str(log), "--liveness").exit_code == 0
        text = cli("check", server.url, "--window", "0.3", "--log", str(log)).stdout
    assert "BUSY" in text and "the engine compiles: torch.compile/Inductor (FORWARDS graph 0)" in text


def test_check_log_of_a_compile_past_vllms_time_out_is_wedged(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "10")
    with StandIn(STALLED) as server:
        result = cli("check", server.url, "--window", "0.3", "--json", "--log", str(_log(tmp_path, 60)))
    assert result.exit_code == ExitCode.WEDGED, result.output
    one = json.loads(result.stdout)["check"]["servers"][0]
    assert one["busy"]["overdue"] and "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=10" in one["evidence"][-1]


def test_a_compile_that_ended_excuses_nothing(cli, tmp_path):
    log = _log(tmp_path, 20)
    with log.open("a") as f:
        f.write("I1204 23:50:08.986000 17676 torch/_dynamo/output_graph.py:3120] [0/0] Step 2: done compiler function inductor\n")
    with StandIn(STALLED) as server:
        assert cli("check", server.url, "--window", "0.3", "--log", str(log)).exit_code == ExitCode.WEDGED


@pytest.mark.parametrize("args, words", [
    (["http://127.0.0.1:1", "http://127.0.0.1:2", "--log", "LOG"], "a log is one server's"),
    (["http://127.0.0.1:1", "--log", "/nonexistent.log"], "no such file"),
])
def test_log_refusals(cli, tmp_path, args, words):
    log = _log(tmp_path, 1)
    result = cli("check", *[str(log) if a == "LOG" else a for a in args])
    assert result.exit_code in (ExitCode.USAGE, ExitCode.ERROR) and words in result.output


def test_watch_log_follows_the_compile_and_its_end(cli, tmp_path):
    log = _log(tmp_path, 5)
    with StandIn(STALLED) as server:
        result = cli("watch", server.url, "--interval", "0.3", "--count", "2", "--json", "--log", str(log))
    assert result.exit_code == ExitCode.BUSY, result.output
    looks = [json.loads(line) for line in result.stdout.splitlines()]
    assert [doc["check"]["servers"][0]["verdict"] for doc in looks] == ["busy", "busy"]
