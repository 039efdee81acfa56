"""The judgement: readings of one server -> a verdict with its evidence. Pure: no I/O, no clock.

- dead: /health gave no answer, or answered anything but 200 (vLLM answers 503 once its engine is dead,
  `EngineDeadError`), or the server stopped answering during the window.
- wedged: the engine makes no progress while work is pending: requests running or waiting at both ends of
  the window and not one engine counter or gauge moved, or the one-token probe request got no answer in
  its time while no engine counter moved. /health still answers 200 then (vLLM's /health asks the API
  server's client, not the engine core), and the evidence says so.
- degraded: progress under pressure: preemptions during the window, KV cache usage at the cliff, the
  queue growing while running does not, 5xx answers or admission rejections, a probe that waited out its
  time while the engine worked.
- healthy: none of these.
"""

from __future__ import annotations

import json

from dsv4ctl.check import metrics as m
from dsv4ctl.check.model import (
    DEAD,
    DEGRADED,
    HEALTHY,
    WEDGED,
    EngineNumbers,
    HttpAnswer,
    Limits,
    Readings,
    ServerCheck,
)

HEALTH_200 = (
    "/health still answered 200: vLLM's /health only turns 503 when the engine is known dead "
    "(EngineDeadError), not while it is stuck"
)


def judge(readings: Readings, limits: Limits = Limits()) -> ServerCheck:
    """The verdict for one server from what `take_readings` read (or a recording of it)."""
    base = dict(url=readings.url, health=readings.health, window_s=readings.window_s, duration_s=readings.duration_s,
                probe=readings.probe, probe_timeout_s=readings.probe_timeout_s)
    health = readings.health
    if not health.ok:
        if health.status is None:
            why = f"/health: {health.error or 'no answer'}"
        else:
            why = f"/health answered {health.status}" + (" (vLLM's answer once its engine is dead)" if health.status == 503 else "")
        return ServerCheck(verdict=DEAD, evidence=(why,), **base)
    models, max_len = _models(readings.models)
    before, after, notes = _scrapes(readings)
    if readings.metrics_after is not None and readings.metrics_after.status is None and not readings.metrics_after.timed_out:
        why = f"the server stopped answering during the window: /metrics {readings.metrics_after.describe()}"
        return ServerCheck(verdict=DEAD, evidence=(why,), models=models, max_model_len=max_len, notes=tuple(notes), **base)
    engines = _engines(before, after, readings.window_s) if before is not None and after is not None else ()
    http_5xx = _delta(before, after, lambda s: s.http_status_total("5xx"))
    rejections = _delta(before, after, lambda s: s.total(m.ADMISSION_REJECTIONS))
    verdict, evidence = _verdict(readings, engines, http_5xx, rejections, limits, notes)
    return ServerCheck(verdict=verdict, evidence=tuple(evidence), models=models, max_model_len=max_len,
                       engines=engines, http_5xx=http_5xx, admission_rejections=rejections, notes=tuple(notes), **base)


def _verdict(readings: Readings, engines: tuple[EngineNumbers, ...], http_5xx: float | None, rejections: float | None,
             limits: Limits, notes: list[str]) -> tuple[str, list[str]]:
    window = readings.window_s
    stalled = [e for e in engines if e.stalled]
    progressed = any(e.progressed for e in engines)
    probe = readings.probe
    if stalled:
        evidence = [_stalled_sentence(e) for e in stalled]
        if probe is not None and probe.timed_out:
            evidence.append(f"the one-token probe request got no answer in {readings.probe_timeout_s:g} s")
        return WEDGED, [*evidence, HEALTH_200]
    if probe is not None and probe.timed_out:
        if progressed:
            worked = ", ".join(_work(e) for e in engines if e.progressed)
            return DEGRADED, [f"the one-token probe request got no answer in {readings.probe_timeout_s:g} s while "
                              f"the engine worked ({worked}): requests wait long"]
        seen = ("and no engine counter moved in the window" if engines
                else "(no engine metrics to tell whether the engine moved)")
        return WEDGED, [f"the one-token probe request got no answer in {readings.probe_timeout_s:g} s {seen}", HEALTH_200]
    evidence: list[str] = []
    if probe is not None and probe.status is None:
        return DEAD, [f"the probe request: {probe.error or 'no answer'} (the server went away during the check)"]
    if probe is not None and probe.status is not None and probe.status >= 500:
        evidence.append(f"the probe request was answered {probe.status}{_detail(probe)}")
    elif probe is not None and probe.status is not None and probe.status != 200:
        notes.append(f"the probe request was answered {probe.status}{_detail(probe)}: it tells nothing about the engine")
    for e in engines:
        if e.preemptions and e.preemptions > 0:
            evidence.append(f"engine {e.engine}: {e.preemptions:g} preemption(s) in {window:.1f} s (vllm:num_preemptions_total)")
        if e.kv_usage is not None and e.kv_usage >= limits.kv_cliff:
            evidence.append(f"engine {e.engine}: KV cache {e.kv_usage:.1%} in use (vllm:kv_cache_usage_perc; "
                            f"degraded from {limits.kv_cliff:.0%}): new requests wait or preempt others")
        if (e.waiting or 0) > (e.waiting_before or 0) and (e.running or 0) <= (e.running_before or 0):
            evidence.append(f"engine {e.engine}: the queue grew from {e.waiting_before:g} to {e.waiting:g} waiting while "
                            f"running stayed at {e.running:g} (vllm:num_requests_waiting, vllm:num_requests_running)")
    if http_5xx and http_5xx > 0:
        evidence.append(f"{http_5xx:g} request(s) answered 5xx in {window:.1f} s (http_requests_total)")
    if rejections and rejections > 0:
        evidence.append(f"{rejections:g} request(s) rejected by a queue limit in {window:.1f} s (vllm:admission_rejections_total)")
    if evidence:
        return DEGRADED, evidence
    healthy = ["/health answered 200"]
    if probe is not None and probe.ok:
        healthy.append(f"the one-token probe request was answered in {probe.elapsed_s:.2f} s")
    healthy += [_work(e) if e.progressed else f"engine {e.engine}: idle (nothing pending)" for e in engines]
    if engines and not progressed and probe is None:
        notes.append("the engine was idle: a stopped idle engine looks the same; --probe-request sends one request to tell")
    return HEALTHY, healthy


def _stalled_sentence(e: EngineNumbers) -> str:
    return (f"engine {e.engine}: {e.running or 0:g} request(s) running and {e.waiting or 0:g} waiting, and in "
            f"{e.window_s:.1f} s not one token, engine step or preemption was counted and no gauge changed "
            "(vllm:generation_tokens_total, vllm:prompt_tokens_total, vllm:iteration_tokens_total_count frozen)")


def _work(e: EngineNumbers) -> str:
    gen, prompt = e.rate(e.generation_tokens), e.rate(e.prompt_tokens)
    parts = [f"engine {e.engine}:"]
    if gen is not None:
        parts.append(f"{gen:,.0f} generated tokens/s")
    if prompt is not None:
        parts.append(f"{prompt:,.0f} prompt tokens/s")
    parts.append(f"{e.running or 0:g} running, {e.waiting or 0:g} waiting")
    if e.kv_usage is not None:
        parts.append(f"KV {e.kv_usage:.1%}")
    return " ".join(parts[:1]) + " " + ", ".join(parts[1:])


def _detail(answer: HttpAnswer) -> str:
    text = answer.text.strip().replace("\n", " ")
    return f" ({text[:160]})" if text else ""


def _models(answer: HttpAnswer | None) -> tuple[tuple[str, ...], int | None]:
    if answer is None or not answer.ok:
        return (), None
    try:
        data = json.loads(answer.text).get("data") or []
        ids = tuple(str(d.get("id")) for d in data if isinstance(d, dict) and d.get("id"))
        lengths = [d.get("max_model_len") for d in data if isinstance(d, dict) and isinstance(d.get("max_model_len"), int)]
        return ids, (lengths[0] if lengths else None)
    except (ValueError, AttributeError):
        return (), None


def _scrapes(readings: Readings) -> tuple[m.Scrape | None, m.Scrape | None, list[str]]:
    notes: list[str] = []
    out: list[m.Scrape | None] = []
    for label, answer in (("first", readings.metrics_before), ("second", readings.metrics_after)):
        if answer is None:
            out.append(None)
            continue
        if not answer.ok:
            notes.append(f"/metrics ({label}) {answer.describe()}: engine progress unseen")
            out.append(None)
            continue
        try:
            out.append(m.parse_metrics(answer.text))
        except ValueError as exc:
            notes.append(f"/metrics ({label}) is not Prometheus text ({exc}): engine progress unseen")
            out.append(None)
    before, after = out
    if after is not None and not any(after.has(name) for name in m.ENGINE_SAMPLES):
        notes.append("/metrics has no vLLM engine metrics (started with --disable-log-stats?): engine progress unseen; "
                     "--probe-request sends one request instead")
    return before, after, notes


def _engines(before: m.Scrape, after: m.Scrape, window_s: float) -> tuple[EngineNumbers, ...]:
    out = []
    for engine in after.engines():
        now = {name: after.engine_value(name, engine) for name in m.ENGINE_SAMPLES}
        then = {name: before.engine_value(name, engine) for name in m.ENGINE_SAMPLES}
        deltas = {name: _minus(now[name], then[name]) for name in m.PROGRESS}
        counters_moved = any(d is not None and d != 0 for d in deltas.values())  # < 0: the counters restarted
        gauges_moved = any(now[g] != then[g] for g in m.ENGINE_GAUGES if now[g] is not None and then[g] is not None)
        progressed = counters_moved or gauges_moved
        pending_then = (then[m.RUNNING] or 0) + (then[m.WAITING] or 0)
        pending_now = (now[m.RUNNING] or 0) + (now[m.WAITING] or 0)
        out.append(EngineNumbers(
            engine=engine, window_s=window_s,
            running=now[m.RUNNING], waiting=now[m.WAITING], kv_usage=now[m.KV_USAGE],
            running_before=then[m.RUNNING], waiting_before=then[m.WAITING],
            generation_tokens=deltas[m.GENERATION_TOKENS], prompt_tokens=deltas[m.PROMPT_TOKENS],
            steps=deltas[m.STEPS], preemptions=deltas[m.PREEMPTIONS],
            progressed=progressed,
            stalled=pending_then > 0 and pending_now > 0 and not progressed and any(then[n] is not None for n in m.PROGRESS),
        ))
    return tuple(out)


def _minus(now: float | None, then: float | None) -> float | None:
    return None if now is None or then is None else now - then


def _delta(before: m.Scrape | None, after: m.Scrape | None, read) -> float | None:  # type: ignore[no-untyped-def]
    if before is None or after is None:
        return None
    return _minus(read(after), read(before))
