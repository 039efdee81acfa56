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
- busy: what would be wedged while the engine's own log says it compiles or captures (`compiles.Busy`, from a
  `CompileTracker` the caller feeds), within the cause's grace; past the grace it is wedged, the compile in the
  evidence (`with_busy`).
- unknown: what answers is not vLLM's API server, so there is nothing to judge: /health answered with a status
  vLLM never gives there (it answers 200, or 503 once its engine is dead: a 404 is a wrong URL or port, not a
  dead engine), or /health answered 200 while /v1/models lists no models and /metrics has no `vllm:` metrics
  (a static file server, another service's health route), or the answer was not HTTP at all.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from dsv4ctl.check import metrics as m
from dsv4ctl.check.model import (
    BUSY,
    DEAD,
    DEGRADED,
    HEALTHY,
    UNKNOWN,
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
    unknown = not_vllm(readings.health, readings.models, readings.metrics_before)
    if unknown is not None:
        why, notes = unknown
        return ServerCheck(verdict=UNKNOWN, evidence=(why,), notes=tuple(notes), **base)
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


def with_busy(check: ServerCheck, busy: Any) -> ServerCheck:
    """A wedged verdict while the engine compiles (`busy`: a `compiles.Busy`, or None): `busy` within its grace,
    wedged with the compile said past it. Every other verdict stands (the compile is kept as data)."""
    if busy is None:
        return check
    if check.verdict != WEDGED:
        return replace(check, busy=busy)
    if busy.overdue:
        return replace(check, busy=busy, evidence=(*check.evidence, busy.sentence()))
    return replace(check, verdict=BUSY, busy=busy, evidence=(busy.sentence(), *check.evidence))


def not_vllm(health: HttpAnswer, models: HttpAnswer | None,
             metrics: HttpAnswer | None) -> tuple[str, list[str]] | None:
    """Why what answered the first three requests is not vLLM's API server (and notes), or None while it may be.

    vLLM's /health answers 200, or 503 once its engine is dead, and needs no credentials (`--api-key` guards /v1
    only); /v1/models lists the served models (or answers 401 without the key); /metrics carries `vllm:` metrics
    (none with `--disable-log-stats`, but /v1/models still lists)."""
    if health.not_http:
        return f"not an HTTP server: /health: {health.error}: wrong URL or port?", []
    if health.status is None or health.status >= 500:
        return None  # no answer, or the server's own failure: dead, judged by the caller
    sign = _vllm_sign(models, metrics)
    if health.status == 200:
        if sign is not None or _unanswered(models) or _unanswered(metrics):
            return None  # vLLM, or not known to be anything else
        notes = []
        if all(a is not None and a.status == 404 for a in (models, metrics)):
            notes.append("only /health answers: a health endpoint alone, such as vLLM's data-parallel supervisor "
                         "(--data-parallel-supervisor-port), whose API servers listen on vLLM's --port")
        return f"not a vLLM API server: {_answers(health, models, metrics)}: wrong URL or port?", notes
    if sign is not None:
        return (f"/health answered {health.status}, which vLLM's API server never answers there (200, or 503 once its "
                f"engine is dead), while {sign}: something in front of the server (a proxy?) answers for it"), []
    return f"not a vLLM API server: {_answers(health, models, metrics)}: wrong URL or port?", []


def _vllm_sign(models: HttpAnswer | None, metrics: HttpAnswer | None) -> str | None:
    if models is not None and models.ok and _models_listed(models.text):
        return "/v1/models lists models"
    if models is not None and models.status in (401, 403):
        return f"/v1/models answered {models.status} (vLLM's answer without its --api-key)"
    if metrics is not None and metrics.ok:
        try:
            if any(name.startswith("vllm:") for name in m.parse_metrics(metrics.text).samples):
                return "/metrics carries vLLM's metrics"
        except ValueError:
            pass
    return None


def _models_listed(text: str) -> bool:
    try:
        return isinstance(json.loads(text).get("data"), list)
    except (ValueError, AttributeError):
        return False


def _unanswered(answer: HttpAnswer | None) -> bool:
    return answer is None or (answer.status is None and not answer.not_http)


def _answers(health: HttpAnswer, models: HttpAnswer | None, metrics: HttpAnswer | None) -> str:
    """`404 on /health, /v1/models and /metrics`; `/health answered 200; 404 on /v1/models and /metrics`."""
    groups: dict[str, list[str]] = {}
    for path, answer in (("/health", health), ("/v1/models", models), ("/metrics", metrics)):
        if answer is None:
            continue
        if answer.status is None:
            groups.setdefault(f"{path}: {answer.error or 'no answer'}", [])
        elif answer.status != 200:
            groups.setdefault(str(answer.status), []).append(path)
        elif path == "/health":
            groups.setdefault("/health answered 200", [])
        elif path == "/v1/models":
            groups.setdefault(f"/v1/models answered 200 without a model list{_detail(answer)}", [])
        else:
            try:
                m.parse_metrics(answer.text)
                said = ""
            except ValueError:
                said = _detail(answer)
            groups.setdefault(f"/metrics answered 200 without vLLM's metrics{said}", [])
    return "; ".join(f"{key} on {_and(paths)}" if paths else key for key, paths in groups.items())


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


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
    """What an answer's body says, in a few words for the evidence: a JSON error's message, an HTML page's title
    (never its markup), the first line of plain text."""
    said = body_summary(answer)
    return f" ({said})" if said else ""


def body_summary(answer: HttpAnswer, limit: int = 160) -> str:
    text = answer.text.strip()
    if not text:
        return ""
    kind = answer.content_type
    if kind == "application/json" or kind.endswith("+json") or (not kind and text[:1] in "{["):
        try:
            return _clip(_json_message(json.loads(text)) or " ".join(text.split()), limit)
        except ValueError:
            pass
    if kind in ("text/html", "application/xhtml+xml") or text[:1] == "<":
        title = _html_title(text)
        return f"an HTML page titled {_clip(title, limit)!r}" if title else "an HTML page"
    first = next(line.strip() for line in text.splitlines() if line.strip())
    return _clip(first, limit)


def _json_message(doc: object) -> str | None:
    """vLLM's error documents (`{"error": {"message": …}}`, `{"object": "error", "message": …}`), FastAPI's
    `{"detail": …}`."""
    if not isinstance(doc, dict):
        return None
    error = doc.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    for key in ("message", "detail", "error"):
        if isinstance(doc.get(key), str):
            return doc[key]
    return None


def _html_title(text: str) -> str:
    from html.parser import HTMLParser

    class Title(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.inside, self.parts = False, []

        def handle_starttag(self, tag: str, attrs: object) -> None:
            self.inside = self.inside or tag == "title"

        def handle_endtag(self, tag: str) -> None:
            if tag == "title":
                self.inside = False

        def handle_data(self, data: str) -> None:
            if self.inside:
                self.parts.append(data)

    parser = Title()
    parser.feed(text[:65536])
    return " ".join("".join(parser.parts).split())


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
        except ValueError:  # the parser's message quotes the text: say what it was instead
            said = body_summary(answer, 80)
            notes.append(f"/metrics ({label}) is not Prometheus text{f' ({said})' if said else ''}: engine progress unseen")
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
