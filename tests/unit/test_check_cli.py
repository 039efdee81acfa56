"""`dsv4ctl check` and `dsv4ctl watch` on the command line, against a stand-in server on 127.0.0.1 that answers
with /metrics text recorded from the real engine (tests/checkkit.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkkit import StandIn, refused_url
from dsv4ctl.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]


def test_check_json_of_a_busy_server(cli):
    with StandIn(["busy-1.prom", "busy-2.prom"]) as server:
        result = cli("check", server.url, "--window", "0.3", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    (one,) = doc["check"]["servers"]
    assert one["verdict"] == "healthy" and one["url"] == server.url
    assert one["engines"][0]["generation_tokens"] > 0
    assert server.requests[:3] == ["GET /health", "GET /v1/models", "GET /metrics"]


def test_check_says_wedged_and_that_health_still_said_200(cli):
    with StandIn(["engine-stopped-1.prom", "engine-stopped-2.prom"]) as server:
        result = cli("check", server.url, "--window", "0.3")
    assert result.exit_code == ExitCode.WEDGED, result.output
    assert "WEDGED" in result.stdout and "/health still answered 200" in result.stdout
    assert "(exit 9," in result.stdout


def test_the_probe_request_is_one_token_of_the_served_model_and_its_timeout_counts(cli):
    with StandIn(["idle.prom"], completion_delay_s=2.0) as server:
        started = time.monotonic()
        result = cli("check", server.url, "--window", "0.5", "--probe-request", "--json")
        took = time.monotonic() - started
    assert result.exit_code == ExitCode.WEDGED, result.output
    probe = [r for r in server.requests if r.startswith("POST")]
    assert probe == ['POST /v1/completions {"max_tokens": 1, "model": "/tmp/chk/llama", "prompt": "1", "temperature": 0}']
    doc = json.loads(result.stdout)["check"]["servers"][0]
    assert doc["probe"]["timed_out"] and doc["probe"]["timeout_s"] == 0.5
    assert took < 0.5 + 2 * 1.0


def test_a_group_has_one_verdict_per_server_and_the_worst_overall(cli):
    with StandIn(["busy-1.prom", "busy-2.prom"]) as healthy, StandIn(["engine-stopped-1.prom", "engine-stopped-2.prom"]) as wedged:
        dead = refused_url()
        result = cli("check", healthy.url, wedged.url, dead, "--window", "0.3", "--json")
    with StandIn(["busy-1.prom", "busy-2.prom"]) as healthy:  # a fresh one: frozen numbers would be a wedge
        text = cli("check", healthy.url, dead, "--window", "0.3")
    assert result.exit_code == ExitCode.DEAD
    verdicts = [s["verdict"] for s in json.loads(result.stdout)["check"]["servers"]]
    assert verdicts == ["healthy", "wedged", "dead"]
    assert "overall:" in text.stdout and "2 servers: 1 healthy, 1 dead" in text.stdout
    assert "connection refused" in text.stdout


def test_liveness_lets_a_degraded_server_pass_and_still_shows_why(cli):
    with StandIn(["kv-pressure-1.prom", "kv-pressure-2.prom"]) as server:
        strict = cli("check", server.url, "--window", "0.3")
    with StandIn(["kv-pressure-1.prom", "kv-pressure-2.prom"]) as server:
        live = cli("check", server.url, "--window", "0.3", "--liveness")
    assert strict.exit_code == ExitCode.DEGRADED
    assert live.exit_code == 0 and "DEGRADED" in live.stdout and "preemption(s)" in live.stdout


@pytest.mark.parametrize("args, words", [
    (["--window", "0"], "--window/--interval 0: must be more than 0 seconds"),
    (["--kv-cliff", "95"], "--kv-cliff 95"),
])
def test_bad_options_are_one_line_and_exit_2(cli, args, words):
    result = cli("check", "http://127.0.0.1:1", *args)
    assert result.exit_code == ExitCode.USAGE
    assert words in result.stderr and "Traceback" not in result.output


def test_a_url_that_is_not_http_is_refused(cli):  # more in test_check_urls.py
    result = cli("check", "ftp://127.0.0.1:1")
    assert result.exit_code == ExitCode.USAGE and "not an http(s) URL" in result.stderr


def test_watch_piped_prints_a_line_per_look_and_the_verdict_change_as_an_event(cli):
    with StandIn(["busy-1.prom", "busy-2.prom", "engine-stopped-1.prom", "engine-stopped-2.prom"]) as server:
        result = cli("watch", server.url, "--interval", "0.3", "--count", "2")
    assert result.exit_code == ExitCode.WEDGED, result.output
    lines = result.stdout.splitlines()
    assert any(" is " in line and "HEALTHY" in line for line in lines)
    assert any("healthy -> " in line and "WEDGED" in line for line in lines)
    looks = [line for line in lines if server.url in line and ("last step" in line or "no step" in line)]
    assert len(looks) == 2 and " wedged " in looks[1]


def test_watch_json_is_one_document_per_look(cli):
    with StandIn(["idle.prom"]) as server:
        result = cli("watch", server.url, "--interval", "0.2", "--count", "2", "--json")
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(docs) == 2 and all(d["schema_version"] == 1 for d in docs)
    assert docs[0]["events"][0]["after"] == docs[0]["check"]["verdict"]
    assert docs[1]["events"] == []


def test_watch_reads_the_log_tail_with_diagnose_when_the_server_is_dead(cli, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text((REPO / "dsv4ctl" / "examples" / "kv-cache-insufficient.log").read_text())
    result = cli("watch", refused_url(), "--interval", "0.2", "--count", "1", "--log", str(log))
    assert result.exit_code == ExitCode.DEAD
    assert f"diagnose's reading of the tail of {log}:" in result.stdout
    assert "FAILED" in result.stdout
    event = next(line for line in result.stdout.splitlines() if line.endswith(" is DEAD"))
    assert "  " not in event
    look = next(line for line in result.stdout.splitlines() if " dead " in line)
    assert "step" not in look and look.endswith("dead /health: connection refused")


def test_watch_stops_on_ctrl_c_with_130_and_a_summary():
    with StandIn(["idle.prom"]) as server:
        proc = subprocess.Popen([sys.executable, "-m", "dsv4ctl", "watch", server.url, "--interval", "0.3"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)
        proc.send_signal(2)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert "watch stopped after" in err and "Traceback" not in err
    assert "; no verdict changed" in err  # the first look's verdict is not a change
    assert "healthy" in out
