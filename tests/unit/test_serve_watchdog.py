"""serve --watchdog's thread against a stand-in server on 127.0.0.1 answering with /metrics recorded from
the real engine (tests/checkkit.py); the engine tier (tests/engine/test_check_engine.py) stops a real
EngineCore and checks the exit code and that no process is left."""

from __future__ import annotations

import argparse
import threading
import time

import pytest

from checkkit import StandIn
from dsv4ctl.errors import UsageError
from dsv4ctl.serve.watchdog import CompileWatch, Watchdog, server_url, window_for


def test_the_url_is_vllms_host_and_port():
    ns = argparse.Namespace
    assert server_url(ns(host=None, port=8000)) == "http://127.0.0.1:8000"
    assert server_url(ns(host="0.0.0.0", port=9000)) == "http://127.0.0.1:9000"
    assert server_url(ns(host="10.1.2.3", port=8001, ssl_certfile="c.pem")) == "https://10.1.2.3:8001"
    assert server_url(ns(host="::1", port=8000)) == "http://[::1]:8000"
    with pytest.raises(UsageError):
        server_url(ns(host=None, port=8000, uds="/tmp/s.sock"))


@pytest.mark.parametrize("host, port", [("a b", 8000), ("127.0.0.1", 70000)])
def test_a_host_or_port_check_cannot_look_at_is_refused_before_the_thread_starts(host, port):
    with pytest.raises(UsageError, match="--watchdog cannot look at vLLM's --host/--port"):
        server_url(argparse.Namespace(host=host, port=port))
    with pytest.raises(UsageError, match="bad port"):
        Watchdog("http://127.0.0.1:abc", 10.0, print)


def test_what_is_not_vllm_is_not_watched(tmp_path):
    from checkkit import FileServer

    said: list[str] = []
    ended = threading.Event()
    (tmp_path / "health").write_text("ok\n")
    with FileServer(tmp_path) as server:
        dog = Watchdog(server.url, 1.0, said.append, timeout_s=1.0, end=ended.set).start()
        time.sleep(2.5)
        dog.stop()
    assert said == [] and not dog.fired


def test_a_look_that_raises_is_said_in_the_log_and_the_watch_ends(monkeypatch):
    from dsv4ctl.check import http

    def broken(*args, **kwargs):
        raise RuntimeError("a look that raised")

    monkeypatch.setattr(http, "check_server", broken)
    said: list[str] = []
    with StandIn(["idle.prom"]) as server:
        dog = Watchdog(server.url, 1.0, said.append, timeout_s=1.0).start()
        dog._thread.join(5)
    assert said == [f"watchdog: stopped watching {server.url}: RuntimeError: a look that raised"]


def test_the_window_is_a_third_of_the_limit_between_1_and_5_seconds():
    assert [window_for(s) for s in (1, 6, 30, 600)] == [1.0, 2.0, 5.0, 5.0]


def run_dog(metrics: list[str], limit: float, wait: float) -> tuple[Watchdog, list[str], bool]:
    said: list[str] = []
    ended = threading.Event()
    with StandIn(metrics) as server:
        dog = Watchdog(server.url, limit, said.append, timeout_s=1.0, end=ended.set).start()
        ended.wait(wait)
        dog.stop()
    return dog, said, ended.is_set()


def test_a_wedge_that_lasts_the_limit_ends_the_server_with_the_evidence_written():
    started = time.monotonic()
    dog, said, ended = run_dog(["engine-stopped-1.prom", "engine-stopped-2.prom"], limit=2.0, wait=15)
    assert ended and dog.fired
    assert time.monotonic() - started >= 2.0
    text = "\n".join(said)
    assert "watchdog: the server is wedged" in text and "/health still answered 200" in text
    assert "watchdog: the stacks of this process" in text  # and of vLLM's processes: none behind a stand-in
    assert "no vLLM process found" in text
    assert said[-1].startswith("watchdog: shutting vLLM down")


def test_a_busy_server_is_left_alone():
    dog, said, ended = run_dog(["busy-1.prom", "busy-2.prom", "busy-1.prom", "idle.prom"], limit=1.0, wait=4)
    assert not ended and not dog.fired
    assert said == [f"watchdog: watching {dog.url} (wedged for 1 s ends the server)"]


def run_compiling_dog(limit: float, wait: float, environ: dict[str, str]) -> tuple[Watchdog, list[str], bool, float]:
    said: list[str] = []
    ended = threading.Event()
    compiles = CompileWatch(environ)
    # torch 2.13's step line (TORCH_LOGS=inductor) as the engine prints it while Inductor compiles
    compiles.feed("I1204 23:49:49.078000 17676 torch/_inductor/compile_fx.py:1302] [0/0] Step 3: torchinductor "
                  "compiling FORWARDS graph 0")
    started = time.monotonic()
    with StandIn(["engine-stopped-1.prom", "engine-stopped-2.prom"]) as server:
        dog = Watchdog(server.url, limit, said.append, timeout_s=1.0, end=ended.set, compiles=compiles).start()
        ended.wait(wait)
        dog.stop()
    return dog, said, ended.is_set(), time.monotonic() - started


def test_a_stall_while_the_engine_compiles_within_its_grace_is_busy_and_left_alone():
    dog, said, ended, _ = run_compiling_dog(limit=1.0, wait=5, environ={})
    assert not ended and not dog.fired
    assert dog.last.verdict == "busy" and dog.last.busy.what == "FORWARDS graph 0"
    busy = [line for line in said if "not wedged, busy" in line]
    assert len(busy) == 1 and "torch.compile/Inductor (FORWARDS graph 0)" in busy[0]  # said once per compile


def test_past_vllms_own_time_out_the_compile_no_longer_excuses_the_stall():
    dog, said, ended, took = run_compiling_dog(limit=1.0, wait=15, environ={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "2"})
    assert ended and dog.fired
    assert took >= 2.0 + 1.0 - window_for(1.0)  # the grace, then the limit
    text = "\n".join(said)
    assert "past its grace of 2 s" in text and "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=2" in text


def test_the_busy_reason_for_an_in_process_judge():
    compiles = CompileWatch({})
    assert compiles.busy_reason() is None
    compiles.feed("(EngineCore pid=7) INFO 12-04 10:00:01 [monitor.py:40] Starting torch.compile")
    assert compiles.busy_reason().startswith("the engine compiles: torch.compile/Inductor for 0 s, within its grace")
    compiles.feed("(EngineCore pid=7) INFO 12-04 10:01:01 [monitor.py:62] torch.compile took 60.02 s in total")
    assert compiles.busy_reason() is None
