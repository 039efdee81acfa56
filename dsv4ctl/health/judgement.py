"""The judgement serve's probe routes answer: what the API server's process sees of its engines -> three answers
(liveness, readiness, startup), each a status and a JSON body. Pure: no I/O, no clock (the time is given).

The evidence is `dsv4ctl check`'s (dsv4ctl/check/judge.py), read in the process instead of over HTTP:
- dead: vLLM's engine client says its engine is dead (`EngineClient.errored`; vLLM's own /health answers 503 then).
- wedged: requests pending and not one engine counter moved (`StallClock`, on vLLM's own counters), or an engine
  of this node that answers no call (a utility call, vLLM's engine-core RPC) for the grace; unless the busy source
  names a compile or a capture still within its own grace (`busy`).
- a DP rank of the group that answers no call: not ready (the head's /health still says 200 then).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

SCHEMA_VERSION = 1
DEFAULT_GRACE_S = 60.0  # liveness: a stall this long is wedged (serve --probe-grace)
READY_AFTER_S = 10.0  # readiness: a stall or an unanswered call this long (or the grace, if shorter) is not ready

# Verdicts
HEALTHY = "healthy"
STALLING = "stalling"  # no progress yet, within the grace: still alive
BUSY = "busy"  # the engine compiles or captures: alive, not ready
WEDGED = "wedged"
DEAD = "dead"
RANK_DOWN = "rank_down"  # a data-parallel rank of the group answers nothing: alive, not ready
STARTING = "starting"  # no engine has answered yet, or the startup phases are not over
PAUSED = "paused"  # vLLM's own pause or sleep mode (asked of it): not progressing on purpose, alive, not ready

# serve's startup phases (dsv4ctl/logs/timeline_model.py PHASES) before the engine can take requests.
NOT_READY_PHASES = frozenset({"starting", "loading_weights", "weights_loaded", "profiling", "kv_cache", "capturing"})


class Busy(Protocol):
    """What the busy source says while an engine compiles or captures: what, since when, and how long it may."""

    @property
    def what(self) -> str: ...  # e.g. "Triton JIT of fp8_einsum"

    @property
    def since(self) -> float: ...  # time.monotonic() seconds

    @property
    def grace_s(self) -> float: ...  # how long this cause may stall the engine before it counts as wedged


BusySource = Callable[[float], "Busy | None"]  # called with time.monotonic(); None while nothing compiles
PhaseSource = Callable[[], "str | None"]  # serve's startup phase, one of timeline_model.PHASES


@dataclass(frozen=True)
class EngineLook:
    """One engine core as this API server calls it: the last answer and the call still unanswered."""

    rank: int
    local: bool  # an engine of this node (the head's own), not a remote data-parallel rank
    answered_at: float | None = None
    asked_at: float | None = None  # when the call still unanswered was sent; None when none is outstanding
    paused: bool = False  # its last answer: vLLM's scheduler paused or the executor asleep (`is_sleeping`)


@dataclass(frozen=True)
class Evidence:
    now: float
    dead: str | None = None  # why the engine client says dead
    pending: int | None = None  # requests the API server holds unfinished
    stalled_since: float | None = None  # requests pending and no engine counter moved since then
    counters_seen: bool = False  # vLLM's counters are there (not --disable-log-stats)
    engines: tuple[EngineLook, ...] = ()
    busy: Busy | None = None
    phase: str | None = None


@dataclass(frozen=True)
class Limits:
    grace_s: float = DEFAULT_GRACE_S

    @property
    def ready_after_s(self) -> float:
        return min(READY_AFTER_S, self.grace_s)


@dataclass(frozen=True)
class Answer:
    status: int  # 200 or 503
    verdict: str
    evidence: tuple[str, ...]

    def body(self, probe: str, extra: dict[str, object]) -> bytes:
        doc = {"schema_version": SCHEMA_VERSION, "probe": probe, "status": self.status, "verdict": self.verdict,
               "evidence": list(self.evidence), **extra}
        return json.dumps(doc).encode()


@dataclass(frozen=True)
class HealthAnswers:
    liveness: Answer
    readiness: Answer
    startup: Answer
    extra: dict[str, object]  # what every body carries: phase, busy, pending, grace


class StallClock:
    """Since when requests are pending while not one of vLLM's engine counters moved (None: not stalled)."""

    def __init__(self) -> None:
        self.counters: tuple[float, ...] | None = None
        self.since: float | None = None

    def feed(self, now: float, pending: int | None, counters: tuple[float, ...] | None) -> float | None:
        moved = counters != self.counters
        self.counters = counters
        if not pending or counters is None or moved:
            self.since = None
        elif self.since is None:
            self.since = now
        return self.since


def judge_health(ev: Evidence, limits: Limits = Limits()) -> HealthAnswers:
    extra = _extra(ev, limits)
    if ev.dead is not None:
        dead = Answer(503, DEAD, (ev.dead,))
        return HealthAnswers(dead, dead, dead, extra)
    stuck, why = _stuck(ev)
    busy = ev.busy
    busy_for = ev.now - busy.since if busy is not None else 0.0
    busy_within = busy is not None and busy_for < busy.grace_s
    paused = [e.rank for e in ev.engines if e.local and e.paused]
    if paused:
        said = (f"engine {', '.join(map(str, paused))} says it is paused or asleep (vLLM's pause or sleep mode): "
                "no progress is expected", *why)
        liveness = Answer(200, PAUSED, said)
        return HealthAnswers(liveness, Answer(503, PAUSED, said), _startup(ev, liveness), extra)
    if stuck is not None and stuck >= limits.grace_s and not busy_within:
        said = [*why, f"no progress for {stuck:.0f} s, past the grace of {limits.grace_s:g} s"]
        if busy is not None:
            said.append(f"{busy.what} for {busy_for:.0f} s, past its own grace of {busy.grace_s:g} s")
        liveness = Answer(503, WEDGED, tuple(said))
    elif busy is not None:
        liveness = Answer(200, BUSY, (f"{busy.what} for {busy_for:.0f} s (grace {busy.grace_s:g} s)", *why))
    elif stuck is not None and stuck > 0:
        liveness = Answer(200, STALLING, (*why, f"no progress for {stuck:.0f} s, within the grace of {limits.grace_s:g} s"))
    else:
        liveness = Answer(200, HEALTHY, _healthy(ev))
    readiness = _readiness(ev, limits, liveness, stuck, why)
    startup = _startup(ev, liveness)
    return HealthAnswers(liveness, readiness, startup, extra)


def _stuck(ev: Evidence) -> tuple[float | None, list[str]]:
    """How long this node's engines have shown no progress, and the sentences that say so."""
    why: list[str] = []
    ages: list[float] = []
    if ev.stalled_since is not None:
        age = ev.now - ev.stalled_since
        ages.append(age)
        why.append(f"{ev.pending} request(s) pending and not one engine counter moved for {age:.0f} s "
                   "(vllm:generation_tokens, vllm:prompt_tokens, vllm:iteration_tokens_total, vllm:num_preemptions)")
    for e in ev.engines:
        if e.local and e.asked_at is not None and ev.now - e.asked_at >= 1.0:
            age = ev.now - e.asked_at
            ages.append(age)
            why.append(f"engine {e.rank} answered no call for {age:.0f} s")
    return (max(ages) if ages else None), why


def _remote_down(ev: Evidence, limits: Limits) -> list[str]:
    return [f"data-parallel rank {e.rank} answered no call for {ev.now - e.asked_at:.0f} s"
            for e in ev.engines if not e.local and e.asked_at is not None and ev.now - e.asked_at >= limits.ready_after_s]


def _readiness(ev: Evidence, limits: Limits, liveness: Answer, stuck: float | None, why: list[str]) -> Answer:
    if liveness.status != 200:
        return liveness
    if liveness.verdict == BUSY:
        return Answer(503, BUSY, liveness.evidence)
    down = _remote_down(ev, limits)
    if down:
        return Answer(503, RANK_DOWN, tuple(down))
    if stuck is not None and stuck >= limits.ready_after_s:
        return Answer(503, STALLING, (*why, f"no progress for {stuck:.0f} s: not ready after {limits.ready_after_s:g} s"))
    if ev.phase in NOT_READY_PHASES:
        return Answer(503, STARTING, (f"serve's startup phase: {ev.phase}",))
    if ev.engines and not any(e.answered_at is not None for e in ev.engines if e.local):
        return Answer(503, STARTING, ("no engine has answered a call yet",))
    return Answer(200, liveness.verdict, liveness.evidence)


def _startup(ev: Evidence, liveness: Answer) -> Answer:
    if liveness.status != 200:
        return liveness
    if ev.phase in NOT_READY_PHASES:
        return Answer(503, STARTING, (f"serve's startup phase: {ev.phase}",))
    if ev.engines and not any(e.answered_at is not None for e in ev.engines if e.local):
        return Answer(503, STARTING, ("no engine has answered a call yet",))
    return Answer(200, ev.phase or "serving", ("the API server serves and its engine answers",))


def _healthy(ev: Evidence) -> tuple[str, ...]:
    said = [f"{ev.pending or 0} request(s) pending"]
    if ev.engines:
        said.append(f"{len(ev.engines)} engine(s) answering calls")
    if not ev.counters_seen:
        said.append("vLLM's counters are absent (--disable-log-stats?): engine progress seen by calls only")
    return tuple(said)


def _extra(ev: Evidence, limits: Limits) -> dict[str, object]:
    busy = None
    if ev.busy is not None:
        busy = {"what": ev.busy.what, "for_s": round(ev.now - ev.busy.since, 1), "grace_s": ev.busy.grace_s}
    return {"phase": ev.phase, "pending": ev.pending, "busy": busy, "grace_s": limits.grace_s,
            "ready_after_s": limits.ready_after_s}
