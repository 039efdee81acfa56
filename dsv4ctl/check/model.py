"""What `check` reads from a server (readings) and what it concludes (verdicts with evidence), as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.errors import ExitCode

HEALTHY = "healthy"
DEGRADED = "degraded"
WEDGED = "wedged"
BUSY = "busy"  # work pending, no engine progress, while the engine's log says it compiles (within the grace)
DEAD = "dead"
UNKNOWN = "unknown"  # what answers is not a vLLM API server: no verdict on a server check cannot see
# The worst verdict of a group is the group's: a server check cannot judge counts above a degraded one, below the
# known failures.
# A compiling engine is no failure yet: below what check cannot judge.
SEVERITY = {HEALTHY: 0, DEGRADED: 1, BUSY: 2, UNKNOWN: 3, WEDGED: 4, DEAD: 5}
EXIT_CODES = {HEALTHY: ExitCode.OK, DEGRADED: ExitCode.DEGRADED, BUSY: ExitCode.BUSY, UNKNOWN: ExitCode.UNKNOWN_SERVER,
              WEDGED: ExitCode.WEDGED, DEAD: ExitCode.DEAD}


@dataclass(frozen=True)
class HttpAnswer:
    """One HTTP exchange: the status (None when no answer came), how long it took, and why it failed."""

    status: int | None
    elapsed_s: float
    error: str | None = None  # "connection refused", "no answer within 1.0 s", ...
    timed_out: bool = False
    text: str = ""
    content_type: str = ""  # the Content-Type header's media type, lower case ("text/html")
    not_http: bool = False  # something answered, but not in the protocol asked (not HTTP, or not TLS for https)

    @property
    def ok(self) -> bool:
        return self.status == 200

    def describe(self) -> str:
        if self.status is not None:
            return f"answered {self.status} in {self.elapsed_s:.3f} s"
        return self.error or "no answer"


@dataclass(frozen=True)
class Readings:
    """Everything one look at one server read, in the order it read it."""

    url: str
    health: HttpAnswer
    models: HttpAnswer | None = None
    metrics_before: HttpAnswer | None = None
    metrics_after: HttpAnswer | None = None
    window_s: float = 0.0  # measured between the two /metrics answers
    probe: HttpAnswer | None = None
    probe_timeout_s: float | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class Limits:
    """Where `degraded` starts (the command's options)."""

    kv_cliff: float = 0.95  # vllm:kv_cache_usage_perc at or above this (1 = every block in use)


@dataclass(frozen=True)
class EngineNumbers:
    """One engine core behind the API server (vLLM's `engine` label) over the window."""

    engine: str
    window_s: float
    running: float | None
    waiting: float | None
    kv_usage: float | None
    running_before: float | None
    waiting_before: float | None
    generation_tokens: float | None  # added during the window
    prompt_tokens: float | None
    steps: float | None
    preemptions: float | None
    progressed: bool  # a counter moved or a gauge changed: the engine core sent statistics
    stalled: bool  # requests pending at both ends of the window and nothing moved

    @property
    def pending(self) -> float | None:
        if self.running is None and self.waiting is None:
            return None
        return (self.running or 0) + (self.waiting or 0)

    def rate(self, delta: float | None) -> float | None:
        return None if delta is None or self.window_s <= 0 else max(delta, 0.0) / self.window_s

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage": self.kv_usage,
            "running_before": self.running_before,
            "waiting_before": self.waiting_before,
            "window_s": round(self.window_s, 3),
            "generation_tokens": self.generation_tokens,
            "prompt_tokens": self.prompt_tokens,
            "engine_steps": self.steps,
            "preemptions": self.preemptions,
            "generation_tokens_per_s": _round(self.rate(self.generation_tokens)),
            "prompt_tokens_per_s": _round(self.rate(self.prompt_tokens)),
            "progressed": self.progressed,
            "stalled": self.stalled,
        }


@dataclass(frozen=True)
class ServerCheck:
    """One server's verdict, the evidence for it (sentences with the numbers) and the numbers themselves."""

    url: str
    verdict: str
    evidence: tuple[str, ...]
    health: HttpAnswer
    models: tuple[str, ...] = ()
    max_model_len: int | None = None
    engines: tuple[EngineNumbers, ...] = ()
    probe: HttpAnswer | None = None
    probe_timeout_s: float | None = None
    http_5xx: float | None = None  # 5xx answers during the window
    admission_rejections: float | None = None
    window_s: float = 0.0
    duration_s: float = 0.0
    notes: tuple[str, ...] = ()
    busy: Any = None  # check.compiles.Busy: what the engine compiles, when its log says so

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_CODES[self.verdict]

    @property
    def health_still_200(self) -> bool:
        return self.health.status == 200

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "verdict": self.verdict,
            "exit_code": int(self.exit_code),
            "evidence": list(self.evidence),
            "notes": list(self.notes),
            "health": _answer_json(self.health),
            "models": list(self.models),
            "max_model_len": self.max_model_len,
            "engines": [e.to_json() for e in self.engines],
            "probe": None if self.probe is None else {**_answer_json(self.probe), "timeout_s": self.probe_timeout_s},
            "http_5xx": self.http_5xx,
            "admission_rejections": self.admission_rejections,
            "window_s": round(self.window_s, 3),
            "duration_s": round(self.duration_s, 3),
            "busy": None if self.busy is None else self.busy.to_json(),
        }


@dataclass(frozen=True)
class GroupCheck:
    """Several servers (a data-parallel group's API servers, several nodes): one verdict each, the worst overall."""

    servers: tuple[ServerCheck, ...]
    duration_s: float = 0.0
    checked_at: float = 0.0  # time.time() when the look began
    limits: Limits = field(default_factory=Limits)

    @property
    def verdict(self) -> str:
        return worst(s.verdict for s in self.servers)

    @property
    def ended_at(self) -> float:
        """time.time() when the look ended: what a verdict describes (the window just past)."""
        return self.checked_at + self.duration_s

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "check": {
                "verdict": self.verdict,
                "exit_code": int(self.exit_code),
                "checked_at": round(self.checked_at, 3),
                "duration_s": round(self.duration_s, 3),
                "kv_cliff": self.limits.kv_cliff,
                "servers": [s.to_json() for s in self.servers],
            }
        }


def worst(verdicts: Any) -> str:
    return max(verdicts, key=SEVERITY.__getitem__, default=HEALTHY)


def _answer_json(answer: HttpAnswer) -> dict[str, Any]:
    return {"status": answer.status, "elapsed_s": round(answer.elapsed_s, 4), "error": answer.error, "timed_out": answer.timed_out,
            "not_http": answer.not_http}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
