"""serve's probe routes, in vLLM's API server process: an ASGI middleware that answers three paths from a cache.

vLLM installs it itself: `dsv4ctl serve` passes `--middleware dsv4ctl.health.routes.ProbeRoutes`, vLLM's own hook for
ASGI middleware (every release 0.27.1 to 0.34.0: `init_entrypoints_middleware`, vllm/entrypoints/serve/middleware/
register.py:65 in 0.29.0 to 0.34.0, vllm/entrypoints/openai/api_server.py:339 in 0.27.1, :314 in 0.28.0), which
adds a class with `app.add_middleware` while it builds the app, before the app starts. Nothing of vLLM is changed.

The judgement is made by `Updater`, a task on the server's event loop started with the app (ASGI lifespan): every
`PERIOD_S` it reads the engine client and vLLM's counters (health/reading.py), judges (health/judgement.py) and
swaps in a new dict of path -> (status, headers, body). A look at a route is that dict's `get` and two ASGI sends.

The paths live under `/dsv4ctl/`, a prefix no vLLM release 0.27.1 to 0.34.0 routes (tests/unit/test_health_routes.py
reads their sources): LIVENESS, READINESS, STARTUP. With `DSV4CTL_PROBE_HEALTH=1` (serve --probe-health) vLLM's own
/health answers as LIVENESS does; by default /health stays vLLM's.

Configured from the environment, because vLLM builds the middleware with no arguments (and in every API server
process of `--api-server-count N`): `DSV4CTL_PROBE_GRACE_S`, `DSV4CTL_PROBE_HEALTH`. The busy and phase sources are
set in serve's own process (`set_sources`); an API server process of its own has neither.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from dsv4ctl.health.judgement import (
    DEFAULT_GRACE_S,
    Answer,
    BusySource,
    Evidence,
    HealthAnswers,
    Limits,
    PhaseSource,
    StallClock,
    judge_health,
)

PREFIX = "/dsv4ctl"
LIVENESS = f"{PREFIX}/livez"
READINESS = f"{PREFIX}/readyz"
STARTUP = f"{PREFIX}/startupz"
GRACE_ENV = "DSV4CTL_PROBE_GRACE_S"
HEALTH_ENV = "DSV4CTL_PROBE_HEALTH"
PERIOD_S = 1.0
MIDDLEWARE = "dsv4ctl.health.routes.ProbeRoutes"

_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
_sources: dict[str, Callable[..., Any] | None] = {"busy": None, "phase": None}

Cached = dict[str, tuple[int, list[tuple[bytes, bytes]], bytes]]


def set_sources(busy: BusySource | None = None, phase: PhaseSource | None = None) -> None:
    """What serve's process adds to the evidence: the busy source (what compiles, since when, its grace) and the
    startup phase. Called before vLLM builds its app."""
    _sources["busy"], _sources["phase"] = busy, phase


def limits_from_env(env: dict[str, str] | None = None) -> Limits:
    env = dict(os.environ) if env is None else env
    try:
        grace = float(env.get(GRACE_ENV, "") or DEFAULT_GRACE_S)
    except ValueError:
        grace = DEFAULT_GRACE_S
    return Limits(grace_s=grace if grace > 0 else DEFAULT_GRACE_S)


def cached(answers: HealthAnswers, replace_health: bool) -> Cached:
    """The routes' answers, encoded once per judgement."""
    out: Cached = {}
    for path, probe, answer in ((LIVENESS, "liveness", answers.liveness), (READINESS, "readiness", answers.readiness),
                                (STARTUP, "startup", answers.startup)):
        body = answer.body(probe, answers.extra)
        out[path] = (answer.status, [*_HEADERS, (b"content-length", str(len(body)).encode())], body)
    if replace_health:
        out["/health"] = out[LIVENESS]
    return out


def _starting(replace_health: bool, limits: Limits) -> Cached:
    waiting = Answer(503, "starting", ("the judgement has not run yet: the API server is starting",))
    return cached(HealthAnswers(waiting, waiting, waiting, {"grace_s": limits.grace_s}), replace_health)


class Updater:
    """The background judgement: reads, judges and publishes `answers` every PERIOD_S on the server's loop."""

    def __init__(self, client: Any, limits: Limits, replace_health: bool, *, registry: Any = None,
                 busy: BusySource | None = None, phase: PhaseSource | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from dsv4ctl.health.reading import EngineCalls

        if registry is None:
            from prometheus_client import REGISTRY as registry  # vLLM's own dependency; its stat logger's registry
        self.client, self.limits, self.replace_health = client, limits, replace_health
        self.registry, self.busy, self.phase, self.clock = registry, busy, phase, clock
        self.calls = EngineCalls(client)
        self.stall = StallClock()
        self.answers: Cached = _starting(replace_health, limits)
        self.task: asyncio.Task[None] | None = None

    def evidence(self) -> Evidence:
        from dsv4ctl.health import reading

        now = self.clock()
        pending = reading.pending(self.client)
        counters = reading.counters(self.registry)
        return Evidence(now=now, dead=reading.is_dead(self.client), pending=pending,
                        stalled_since=self.stall.feed(now, pending, counters), counters_seen=counters is not None,
                        engines=self.calls.tick(now), busy=_call(self.busy, now), phase=_call(self.phase))

    def update(self) -> None:
        self.answers = cached(judge_health(self.evidence(), self.limits), self.replace_health)

    async def run(self) -> None:
        while True:
            try:
                self.update()
            except Exception as exc:  # noqa: BLE001 - a judgement that cannot be made says so, and tries again
                said = Answer(503, "unknown", (f"the judgement failed: {type(exc).__name__}: {exc}",))
                self.answers = cached(HealthAnswers(said, said, said, {}), self.replace_health)
            await asyncio.sleep(PERIOD_S)

    def start(self) -> Updater:
        self.task = asyncio.get_running_loop().create_task(self.run(), name="dsv4ctl-probe-judgement")
        return self


def _call(source: Callable[..., Any] | None, *args: Any) -> Any:
    if source is None:
        return None
    try:
        return source(*args)
    except Exception:  # noqa: BLE001 - a source that fails adds nothing
        return None


_STOPPED = Answer(503, "unknown", ("the judgement stopped: no answer can be trusted",))


class ProbeRoutes:
    """The ASGI middleware vLLM installs (`--middleware`): LIVENESS, READINESS and STARTUP answered from the cache,
    every other request passed on untouched."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.replace_health = os.environ.get(HEALTH_ENV) == "1"
        self.limits = limits_from_env()
        self.updater: Updater | None = None
        self._answers = _starting(self.replace_health, self.limits)

    def _start(self, scope: dict[str, Any]) -> None:
        state = getattr(scope.get("app"), "state", None)
        client = getattr(state, "engine_client", None)
        if client is None:
            return  # not set up yet: the next request tries again
        self.updater = Updater(client, self.limits, self.replace_health, busy=_sources["busy"],
                               phase=_sources["phase"]).start()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.updater is None:
                self._start(scope)
            updater = self.updater
            answers = updater.answers if updater is not None else self._answers
            found = answers.get(scope["path"])
            if found is not None and scope["method"] in ("GET", "HEAD"):
                if updater is not None and updater.task is not None and updater.task.done():
                    found = cached(HealthAnswers(_STOPPED, _STOPPED, _STOPPED, {}), False)[LIVENESS]
                status, headers, body = found
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})
                return
        elif kind == "lifespan" and self.updater is None:
            self._start(scope)
        await self.app(scope, receive, send)
