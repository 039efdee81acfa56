"""`dsv4ctl check --once`: one GET /health, no window, for an exec liveness probe. Against loopback stand-ins started
here (tests/checkkit.py); the process's own fast path (`__main__.py`, no Typer) in a subprocess, the Typer path
in-process, with the same words and codes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from checkkit import FileServer, NotHttp, StandIn, refused_url
from dsv4ctl.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    env.pop("DSV4CTL_DEBUG", None)
    return subprocess.run([sys.executable, *flags, "-m", "dsv4ctl", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_alive_is_exit_0_and_one_line_and_only_health_was_asked():
    with StandIn(["idle.prom"]) as server:
        done = run("check", "--once", server.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.strip()]
    assert done.stdout.startswith(f"alive {server.url}: /health answered 200 in ") and done.stderr == ""
    assert server.requests == ["GET /health"]


def test_the_typer_path_says_the_same(cli):
    with StandIn(["idle.prom"]) as server:
        result = cli("check", server.url, "--once", "--json")
        fast = run("check", "--once", server.url, "--json")
    assert result.exit_code == 0 == fast.returncode
    typer_doc, fast_doc = json.loads(result.stdout), json.loads(fast.stdout)
    for doc in (typer_doc, fast_doc):
        for volatile in ("checked_at", "duration_s"):
            doc["check"].pop(volatile)
        doc["check"]["servers"][0]["health"].pop("elapsed_s")
        doc["check"]["servers"][0]["evidence"] = [e.rsplit(" in ", 1)[0] for e in doc["check"]["servers"][0]["evidence"]]
    assert typer_doc == fast_doc


def test_json_contract():
    with StandIn(["idle.prom"]) as server:
        done = run("check", "--once", server.url, "--json", "--timeout", "2")
    doc = json.loads(done.stdout)
    assert doc["schema_version"] == 1
    check = doc["check"]
    assert check["once"] is True and check["verdict"] == "alive" and check["exit_code"] == 0
    assert set(check) == {"once", "verdict", "exit_code", "checked_at", "duration_s", "servers"}
    (one,) = check["servers"]
    assert set(one) == {"url", "verdict", "exit_code", "evidence", "notes", "health"}
    assert one["health"]["status"] == 200 and one["url"] == server.url


def test_dead_is_exit_10():
    done = run("check", "--once", refused_url())
    assert done.returncode == ExitCode.DEAD
    assert done.stdout.rstrip().endswith(": /health: connection refused") and done.stdout.startswith("dead ")


def test_a_503_is_dead_as_vllm_means_it():
    with StandIn(["idle.prom"], health=503) as server:
        done = run("check", "--once", server.url, "--json")
    assert done.returncode == ExitCode.DEAD
    (one,) = json.loads(done.stdout)["check"]["servers"]
    assert one["evidence"] == ["/health answered 503 (vLLM's answer once its engine is dead)"]


def test_no_answer_within_the_timeout_is_dead_and_bounded():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts (the kernel's backlog) and never answers
    try:
        done = run("check", "--once", f"127.0.0.1:{listener.getsockname()[1]}", "--timeout", "0.3", "--json")
    finally:
        listener.close()
    assert done.returncode == ExitCode.DEAD
    (one,) = json.loads(done.stdout)["check"]["servers"]
    assert one["health"]["timed_out"] and one["evidence"] == ["/health: no answer within 0.3 s"]
    assert one["health"]["elapsed_s"] < 1.0


def test_not_vllm_is_unknown_12(tmp_path):
    with FileServer(tmp_path) as files:
        done = run("check", "--once", files.url)
    assert done.returncode == ExitCode.UNKNOWN_SERVER
    assert "not a vLLM API server: 404 on /health: wrong URL or port?" in done.stdout
    assert files.requests == ["GET /health"]
    with NotHttp() as other:
        done = run("check", "--once", other.url)
    assert done.returncode == ExitCode.UNKNOWN_SERVER and "not an HTTP server" in done.stdout


def test_a_200_with_a_body_is_alive_with_a_note(tmp_path):
    (tmp_path / "health").write_text("OK\n")
    with FileServer(tmp_path) as files:
        done = run("check", "--once", files.url)
    assert done.returncode == 0
    assert "a body of 3 bytes, and vLLM's /health answers none" in done.stdout


@pytest.mark.parametrize("args, words", [
    (("http://127.0.0.1:abc",), "bad port 'abc'"),
    (("http://a b:8000",), "'a b' is not a host name or address"),
    (("127.0.0.1:8000", "http://127.0.0.1:8000/v1"), "is given twice"),
    (("127.0.0.1:8000", "--timeout", "0"), "--timeout 0: must be more than 0 seconds"),
    (("127.0.0.1:8000", "--window", "2"), "--window with --once"),
])
def test_bad_urls_and_options_are_exit_2_and_one_line(args, words):
    done = run("check", "--once", *args)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr and done.stdout == ""
    with_json = run("check", "--once", *args, "--json")
    assert with_json.returncode == ExitCode.USAGE
    assert json.loads(with_json.stdout)["error"]["exit_code"] == ExitCode.USAGE


def test_group_the_worst_verdict_wins():
    with StandIn(["idle.prom"]) as server:
        done = run("check", "--once", server.url, refused_url())
    assert done.returncode == ExitCode.DEAD
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["alive", "dead"]


def test_liveness_is_taken_and_changes_nothing():
    with StandIn(["idle.prom"]) as server:
        assert run("check", "--once", server.url, "--liveness").returncode == 0


def test_the_probe_process_loads_no_typer_rich_pydantic_httpx_or_prometheus_client():
    with StandIn(["idle.prom"]) as server:
        done = run("check", "--once", server.url, "--json", flags=("-X", "importtime"))
        failing = run("check", "--once", "http://127.0.0.1:abc", flags=("-X", "importtime"))
    assert done.returncode == 0 and failing.returncode == ExitCode.USAGE
    for process in (done, failing):
        loaded = {line.split("|")[2].strip() for line in process.stderr.splitlines() if line.startswith("import time:")}
        assert "dsv4ctl.check.once" in loaded or process is failing
        heavy = {name for name in loaded if name.split(".")[0] in ("typer", "click", "rich", "pydantic", "httpx",
                                                                   "prometheus_client")}
        assert not heavy, sorted(heavy)


def test_an_internal_error_is_the_funnels_line_without_a_traceback(monkeypatch, capsys):
    from dsv4ctl.check import once
    from dsv4ctl.commands.check_once import main_once

    def broken(*args, **kwargs):
        raise RuntimeError("a look that raised")

    monkeypatch.setattr(once, "look_once", broken)
    monkeypatch.delenv("DSV4CTL_DEBUG", raising=False)
    assert main_once([refused_url()], 1.0, True) == ExitCode.ERROR
    out, err = capsys.readouterr()
    assert err.startswith("Error: internal error: RuntimeError: a look that raised\nHint: this is a bug")
    assert "Traceback" not in err and json.loads(out)["error"]["exit_code"] == ExitCode.ERROR


@pytest.mark.parametrize("args, taken", [
    (["check", "--once", "u"], (["u"], 1.0, False)),
    (["check", "u", "v", "--once", "--json", "--timeout=0.5"], (["u", "v"], 0.5, True)),
    (["check", "--once", "u", "--timeout", "2", "--liveness"], (["u"], 2.0, False)),
    (["check", "--once"], None),  # no URL: Typer says so
    (["check", "--once", "u", "--help"], None),
    (["check", "--once", "u", "--window", "1"], None),
    (["check", "--once", "u", "--timeout", "x"], None),
    (["check", "--once", "u", "--timeout", "-1"], None),
    (["check", "--once", "u", "--json", "--json"], None),
    (["check", "--once", "u", "--", "v"], None),
    (["check", "u"], None),
    (["watch", "--once", "u"], None),
])
def test_the_fast_path_takes_only_the_plain_command_line(args, taken):
    from dsv4ctl.commands.check_once import fast_args

    assert fast_args(args) == taken


def test_ctrl_c_is_130_and_one_line():
    import signal
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dsv4ctl", "check", "--once", f"127.0.0.1:{listener.getsockname()[1]}",
                                 "--timeout", "20"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        listener.close()
    assert proc.returncode == ExitCode.INTERRUPTED
    assert err == "Error: interrupted\n" and out == ""


def test_help_says_what_once_cannot_see(cli):
    text = " ".join(cli("check", "--help").stdout.split())
    assert "--once: one GET /health per server" in text and "It cannot see wedged" in text
    assert "vllm/entrypoints/serve/instrumentator/health.py:22-33" in text
    assert "Exit 0 healthy (alive with --once), 11 degraded" in text
