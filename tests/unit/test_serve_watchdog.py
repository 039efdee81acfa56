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
from dsv4ctl.serve.watchdog import Watchdog, dump_stacks, server_url, window_for


def test_the_url_is_vllms_host_and_port():
    ns = argparse.Namespace
    assert server_url(ns(host=None, port=8000)) == "http://127.0.0.1:8000"
    assert server_url(ns(host="0.0.0.0", port=9000)) == "http://127.0.0.1:9000"
    assert server_url(ns(host="10.1.2.3", port=8001, ssl_certfile="c.pem")) == "https://10.1.2.3:8001"
    assert server_url(ns(host="::1", port=8000)) == "http://[::1]:8000"
    with pytest.raises(UsageError):
        server_url(ns(host=None, port=8000, uds="/tmp/s.sock"))


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
    assert "py-spy" in text
    assert said[-1].startswith("watchdog: shutting vLLM down")


def test_a_busy_server_is_left_alone():
    dog, said, ended = run_dog(["busy-1.prom", "busy-2.prom", "busy-1.prom", "idle.prom"], limit=1.0, wait=4)
    assert not ended and not dog.fired
    assert said == [f"watchdog: watching {dog.url} (wedged for 1 s ends the server)"]


def test_stacks_say_why_not_without_py_spy(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert dump_stacks() == ["py-spy is not installed: no stack dumps (pip install py-spy, then the next wedge has them)"]
