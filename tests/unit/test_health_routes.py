"""serve's probe routes: the judgement (pure), the in-process readings on fakes of vLLM's objects, the ASGI middleware
as vLLM installs it, and the paths against every vLLM release's routes."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsv4ctl.health import judgement as j
from dsv4ctl.health import reading, routes


@dataclass(frozen=True)
class FakeBusy:
    what: str
    since: float
    grace_s: float


LIMITS = j.Limits(grace_s=30.0)


def look(ev: j.Evidence) -> tuple[tuple[int, str], tuple[int, str], tuple[int, str]]:
    a = j.judge_health(ev, LIMITS)
    return (a.liveness.status, a.liveness.verdict), (a.readiness.status, a.readiness.verdict), (a.startup.status, a.startup.verdict)


def engine(rank=0, local=True, answered=99.0, asked=100.0):
    return j.EngineLook(rank, local, answered, asked)


def test_an_engine_that_answers_is_healthy_ready_and_started():
    ev = j.Evidence(now=100.0, pending=0, counters_seen=True, engines=(engine(),), phase="ready")
    assert look(ev) == ((200, j.HEALTHY), (200, j.HEALTHY), (200, "ready"))


def test_a_stall_within_the_grace_is_alive_and_past_it_wedged():
    stalled = j.Evidence(now=100.0, pending=2, stalled_since=90.0, counters_seen=True, engines=(engine(),))
    assert look(stalled)[0] == (200, j.STALLING)
    assert look(stalled)[1] == (503, j.STALLING)  # not ready after min(10, grace) s
    wedged = j.Evidence(now=131.0, pending=2, stalled_since=100.0, counters_seen=True, engines=(engine(asked=131.0),))
    answers = j.judge_health(wedged, LIMITS)
    assert (answers.liveness.status, answers.liveness.verdict) == (503, j.WEDGED)
    assert any("2 request(s) pending and not one engine counter moved for 31 s" in e for e in answers.liveness.evidence)


def test_a_local_engine_that_answers_no_call_is_wedged_after_the_grace_even_idle():
    ev = j.Evidence(now=140.0, pending=0, counters_seen=True, engines=(engine(answered=100.0, asked=105.0),))
    answers = j.judge_health(ev, LIMITS)
    assert answers.liveness.status == 503 and answers.liveness.verdict == j.WEDGED
    assert "engine 0 answered no call for 35 s" in answers.liveness.evidence[0]
    body = json.loads(answers.liveness.body("liveness", answers.extra))
    assert body["schema_version"] == 1 and body["verdict"] == "wedged" and body["grace_s"] == 30.0


def test_a_busy_engine_is_alive_and_not_ready_within_its_own_grace_and_wedged_past_it():
    compiling = FakeBusy("Triton JIT of fp8_einsum", since=100.0, grace_s=120.0)
    ev = j.Evidence(now=150.0, pending=1, stalled_since=100.0, counters_seen=True,
                    engines=(engine(answered=100.0, asked=100.0),), busy=compiling)
    (live, ready, _) = look(ev)
    assert live == (200, j.BUSY) and ready == (503, j.BUSY)
    answers = j.judge_health(ev, LIMITS)
    assert answers.liveness.evidence[0] == "Triton JIT of fp8_einsum for 50 s (grace 120 s)"
    assert answers.extra["busy"] == {"what": "Triton JIT of fp8_einsum", "for_s": 50.0, "grace_s": 120.0}
    past = j.Evidence(now=230.0, pending=1, stalled_since=100.0, counters_seen=True,
                      engines=(engine(answered=100.0, asked=100.0),), busy=compiling)
    answers = j.judge_health(past, LIMITS)
    assert answers.liveness.verdict == j.WEDGED and "past its own grace of 120 s" in answers.liveness.evidence[-1]


def test_a_remote_rank_that_answers_nothing_makes_the_head_not_ready_but_alive():
    ev = j.Evidence(now=100.0, pending=0, counters_seen=True, phase="ready",
                    engines=(engine(), engine(rank=1, local=False, answered=80.0, asked=85.0)))
    answers = j.judge_health(ev, LIMITS)
    assert (answers.liveness.status, answers.readiness.status, answers.readiness.verdict) == (200, 503, j.RANK_DOWN)
    assert answers.readiness.evidence == ("data-parallel rank 1 answered no call for 15 s",)


def test_dead_is_503_on_every_route():
    ev = j.Evidence(now=1.0, dead="vLLM's engine client says its engine is dead", engines=(engine(),))
    assert look(ev) == ((503, j.DEAD),) * 3


def test_startup_phases_and_no_answer_yet_are_not_started():
    loading = j.Evidence(now=1.0, phase="capturing", engines=(engine(answered=None, asked=1.0),))
    assert look(loading)[1:] == ((503, j.STARTING), (503, j.STARTING))
    assert look(loading)[0] == (200, j.HEALTHY)


def test_the_stall_clock_runs_only_while_requests_wait_and_counters_stand():
    clock = j.StallClock()
    assert clock.feed(0.0, 0, (1.0, 2.0)) is None
    assert clock.feed(1.0, 3, (1.0, 2.0)) == 1.0  # pending, nothing moved since the last reading
    assert clock.feed(2.0, 3, (1.0, 2.0)) == 1.0
    assert clock.feed(3.0, 3, (1.0, 3.0)) is None  # a counter moved
    assert clock.feed(4.0, 3, None) is None  # no counters: the clock cannot tell


# -- readings, on fakes of vLLM's objects ----------------------------------------------------------------------


def test_counters_are_read_from_the_registry_vllm_fills():
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    assert reading.counters(registry) is None
    tokens = Counter("vllm:generation_tokens", "", ["engine"], registry=registry)
    tokens.labels("0").inc(5)
    tokens.labels("1").inc(2)
    assert reading.counters(registry) == (7.0, 0.0, 0.0, 0.0)


class FakeCore:
    def __init__(self, answering: set[int]) -> None:
        self.core_engines = [r.to_bytes(2, "little") for r in (0, 1)]
        self.answering = answering
        self.calls: list[tuple[str, bytes]] = []

    async def _call_utility_async(self, method, *args, engine):
        self.calls.append((method, engine))
        if int.from_bytes(engine, "little") not in self.answering:
            await asyncio.sleep(3600)
        return False


class FakeClient:
    def __init__(self, core: FakeCore) -> None:
        self.engine_core = core
        self.errored = False
        self.output_processor = type("P", (), {"get_num_unfinished_requests": lambda self: 0})()
        parallel = type("PC", (), {"data_parallel_size_local": 1})()
        self.vllm_config = type("VC", (), {"parallel_config": parallel})()


def test_engine_calls_one_outstanding_per_engine_and_the_silent_one_ages():
    async def scenario():
        core = FakeCore(answering={0})
        calls = reading.EngineCalls(FakeClient(core))
        assert [(rank, local) for _, rank, local in calls.engines] == [(0, True), (1, False)]
        calls.tick(10.0)
        await asyncio.sleep(0.01)
        looks = calls.tick(11.0)
        await asyncio.sleep(0.01)
        looks = calls.tick(12.0)
        return core, looks

    core, looks = asyncio.run(scenario())
    assert looks[0].answered_at == 12.0 and looks[1].answered_at is None and looks[1].asked_at == 10.0
    assert [e for _, e in core.calls].count((1).to_bytes(2, "little")) == 1  # never a second call while one waits
    assert all(method == "is_sleeping" for method, _ in core.calls)


def test_the_busy_source_is_called_with_the_time_and_its_answer_judged():
    seen = []

    def busy(now):
        seen.append(now)
        return FakeBusy("CUDA graph capture", since=now - 5, grace_s=300.0)

    async def scenario():
        updater = routes.Updater(FakeClient(FakeCore({0, 1})), LIMITS, False, busy=busy, phase=lambda: "ready",
                                 clock=iter([1.0, 2.0, 3.0]).__next__)
        updater.update()
        await asyncio.sleep(0.01)
        updater.update()
        return updater

    updater = asyncio.run(scenario())
    assert seen == [1.0, 2.0]
    status, _, body = updater.answers[routes.LIVENESS]
    doc = json.loads(body)
    assert status == 200 and doc["verdict"] == "busy" and doc["busy"]["what"] == "CUDA graph capture"
    assert updater.answers[routes.READINESS][0] == 503


# -- the middleware as vLLM installs it ---------------------------------------------------------------------------


def _asgi_get(app, path, method="GET", state=None):
    sent = []
    scope = {"type": "http", "path": path, "method": method, "app": type("A", (), {"state": state})()}

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request"}

    asyncio.run(app(scope, receive, send))
    return sent


def test_the_middleware_answers_its_paths_and_passes_everything_else(monkeypatch):
    monkeypatch.delenv(routes.HEALTH_ENV, raising=False)
    passed = []

    async def inner(scope, receive, send):
        passed.append(scope["path"])

    middleware = routes.ProbeRoutes(inner)
    sent = _asgi_get(middleware, routes.LIVENESS)
    assert sent[0]["status"] == 503 and json.loads(sent[1]["body"])["verdict"] == "starting"
    _asgi_get(middleware, "/health")
    _asgi_get(middleware, routes.LIVENESS, method="POST")
    assert passed == ["/health", routes.LIVENESS]


def test_the_health_flag_makes_vllms_health_answer_as_liveness(monkeypatch):
    monkeypatch.setenv(routes.HEALTH_ENV, "1")
    monkeypatch.setenv(routes.GRACE_ENV, "12")

    async def inner(scope, receive, send):
        raise AssertionError("passed on")

    middleware = routes.ProbeRoutes(inner)
    assert middleware.limits.grace_s == 12.0
    sent = _asgi_get(middleware, "/health")
    assert sent[0]["status"] == 503 and json.loads(sent[1]["body"])["probe"] == "liveness"


def test_vllms_middleware_hook_installs_it(monkeypatch):
    """vLLM's own `init_entrypoints_middleware` (the installed release) adds the class named by --middleware."""
    register = pytest.importorskip("vllm.entrypoints.serve.middleware.register")
    from fastapi import FastAPI

    from dsv4ctl.serve.vllm_entry import parse_serve_flags

    namespace = parse_serve_flags(["some/model", "--middleware", routes.MIDDLEWARE])
    app = FastAPI()
    register.init_entrypoints_middleware(namespace, app, ("generate",))
    assert any(mw.cls is routes.ProbeRoutes for mw in app.user_middleware)


WHEELS = Path("/work/wheels/src")


@pytest.mark.skipif(not WHEELS.is_dir(), reason="the vLLM release sources are not unpacked here (/work/wheels/src)")
def test_no_vllm_release_routes_under_the_prefix():
    releases = sorted(WHEELS.glob("vllm-0.*"))
    assert releases
    paths: set[str] = set()
    for release in releases:
        for source in (release / "vllm" / "entrypoints").rglob("*.py"):
            paths.update(re.findall(r"""["'](/[A-Za-z0-9_{}./-]*)["']""", source.read_text(errors="replace")))
    assert "/health" in paths and "/v1/completions" in paths  # the scan sees vLLM's routes
    assert not [p for p in paths if p == routes.PREFIX or p.startswith(routes.PREFIX + "/")]


# -- check --once reads the route ------------------------------------------------------------------------------


class RouteServer:
    """Serves one judgement's encoded answers, as the middleware keeps them, over real HTTP on 127.0.0.1."""

    def __init__(self, answers: j.HealthAnswers) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        table = routes.cached(answers, False)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                status, headers, body = table.get(self.path, (404, [], b'{"detail":"Not Found"}'))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name.decode(), value.decode())
                if not headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize(("evidence", "verdict", "code", "said"), [
    (j.Evidence(now=100.0, pending=0, counters_seen=True, engines=(engine(),), phase="ready"), "alive", 0,
     "/dsv4ctl/livez answered 200 in"),
    (j.Evidence(now=140.0, pending=0, counters_seen=True, engines=(engine(answered=100.0, asked=105.0),)), "wedged", 9,
     "engine 0 answered no call for 35 s"),
    (j.Evidence(now=1.0, dead="vLLM's engine client says its engine is dead"), "dead", 10, "engine is dead"),
])
def test_check_once_takes_the_routes_verdict(evidence, verdict, code, said):
    from dsv4ctl.check.once import look_once
    from dsv4ctl.check.urls import parse_url

    server = RouteServer(j.judge_health(evidence, LIMITS))
    try:
        looked = look_once(parse_url(server.base + routes.LIVENESS, plain=True), 2.0)
        missing = look_once(parse_url(server.base + "/dsv4ctl/nothing", plain=True), 2.0)
    finally:
        server.close()
    assert (looked.verdict, int(looked.exit_code)) == (verdict, code), looked.line()
    assert any(said in e for e in looked.evidence), looked.evidence
    assert missing.verdict == "unknown" and "without serve's JSON verdict" in missing.evidence[0]


def test_the_once_prefix_is_the_routes():
    from dsv4ctl.check.once import SERVE_ROUTES

    assert SERVE_ROUTES == routes.PREFIX + "/"


# -- serve's wiring --------------------------------------------------------------------------------------------


def test_serve_installs_the_routes_through_vllms_middleware_flag_with_its_settings(monkeypatch):
    from argparse import Namespace

    from dsv4ctl.serve.command import ServeOptions, probe_routes, retry_argv

    monkeypatch.delenv(routes.GRACE_ENV, raising=False)
    monkeypatch.delenv(routes.HEALTH_ENV, raising=False)
    monkeypatch.setattr(routes, "_sources", {"busy": None, "phase": None})
    options = ServeOptions(probe_grace=45.0, probe_health=True)
    phase = lambda: "ready"  # noqa: E731
    assert probe_routes(Namespace(headless=False), options, phase=phase) == ["--middleware", routes.MIDDLEWARE]
    import os

    assert os.environ[routes.GRACE_ENV] == "45" and os.environ[routes.HEALTH_ENV] == "1"
    assert routes._sources["phase"] is phase
    assert routes.limits_from_env().grace_s == 45.0
    assert probe_routes(Namespace(headless=True), options) == []  # no API server, no route
    argv = retry_argv(["m"], options, 1024, Path("/tmp/a.log"))
    assert argv[argv.index("--probe-grace") + 1] == "45" and "--probe-health" in argv


def test_a_grace_that_is_not_positive_is_a_usage_error(cli):
    result = cli("serve", "some/model", "--probe-grace", "0")
    assert result.exit_code == 2 and "--probe-grace 0: must be more than 0 seconds" in result.output


def test_an_engine_paused_on_purpose_is_alive_and_not_ready_never_wedged():
    ev = j.Evidence(now=200.0, pending=3, stalled_since=100.0, counters_seen=True,
                    engines=(j.EngineLook(0, True, 199.0, 200.0, paused=True),), phase="ready")
    assert look(ev)[:2] == ((200, j.PAUSED), (503, j.PAUSED))


def test_the_answer_of_is_sleeping_is_kept():
    class Sleeping(FakeCore):
        async def _call_utility_async(self, method, *args, engine):
            return True

    async def scenario():
        calls = reading.EngineCalls(FakeClient(Sleeping(answering={0, 1})))
        calls.tick(1.0)
        await asyncio.sleep(0.01)
        return calls.tick(2.0)

    assert [look.paused for look in asyncio.run(scenario())] == [True, True]


def test_serve_gives_the_routes_the_compile_tracker_its_capture_feeds():
    # serve's one tracker (serve.watchdog.CompileWatch, fed by the captured lines) seen through the routes' seam: a
    # Triton JIT line vLLM's monitor prints makes a stalled engine busy within the cause's grace, not wedged.
    import time

    from dsv4ctl.serve.command import _busy_source
    from dsv4ctl.serve.watchdog import CompileWatch

    compiles = CompileWatch(environ={})
    source = _busy_source(compiles)
    now = time.monotonic()
    assert source(now) is None
    compiles.feed("Triton kernel JIT compilation during inference: _fwd_kernel_stage1. This causes a latency spike; "
                  "consider extending warmup to cover this shape/config.")
    busy = source(time.monotonic())
    assert busy is not None and "_fwd_kernel_stage1" in busy.what and busy.since >= now and busy.grace_s > 0
    ev = j.Evidence(now=busy.since + 40.0, pending=1, stalled_since=busy.since, counters_seen=True,
                    engines=(engine(answered=busy.since, asked=busy.since),), busy=busy)
    (live, ready, _) = look(ev)
    assert live == (200, j.BUSY) and ready == (503, j.BUSY)
