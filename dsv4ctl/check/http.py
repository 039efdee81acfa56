"""The readings: the HTTP exchanges of one look at one or more servers (httpx, the client in our tree).

One look at a server, within `window + 2 x timeout` seconds:
1. GET /health, GET /v1/models, GET /metrics: together within `timeout` (a dead server stops here);
2. the window: with `probe`, one POST /v1/completions of one token, started now, given `probe_timeout`
   (default: the window);
3. GET /metrics again after the window, within `timeout`.
Several servers are looked at at once (one thread each), so a group takes as long as one server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from dsv4ctl.check.judge import judge
from dsv4ctl.check.model import GroupCheck, HttpAnswer, Limits, Readings, ServerCheck
from dsv4ctl.errors import UsageError

PROBE_PROMPT = "1"  # one prompt token or two, whatever the tokenizer


def normalize_url(url: str) -> str:
    """`127.0.0.1:8000` -> `http://127.0.0.1:8000`; a trailing `/` or `/v1` is dropped (the routes are added)."""
    text = url.strip()
    if not text:
        raise UsageError("an empty URL", hint="dsv4ctl check http://127.0.0.1:8000")
    if "://" not in text:
        text = "http://" + text
    scheme = text.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise UsageError(f"{url}: not an http(s) URL", hint="dsv4ctl check http://HOST:PORT (vLLM's API server)")
    text = text.rstrip("/")
    return text[: -len("/v1")] if text.endswith("/v1") else text


def take_readings(url: str, *, window_s: float, timeout_s: float = 1.0, probe: bool = False,
                  probe_timeout_s: float | None = None, api_key: str | None = None) -> Readings:
    """Read one server (see the module's docstring). Never raises for the server's failures: they are readings."""
    import httpx

    started = time.monotonic()
    base = normalize_url(url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    probe_timeout = window_s if probe_timeout_s is None else probe_timeout_s
    with httpx.Client(base_url=base, headers=headers, verify=False, trust_env=False) as client:
        pre_deadline = started + timeout_s
        health = _get(client, "/health", pre_deadline)
        if not health.ok:
            return Readings(url=base, health=health, duration_s=time.monotonic() - started)
        models = _get(client, "/v1/models", pre_deadline)
        first = _get(client, "/metrics", pre_deadline)
        window_start = time.monotonic()
        probe_box: list[HttpAnswer] = []
        prober = None
        if probe:
            model = _first_model(models)
            prober = threading.Thread(target=lambda: probe_box.append(_probe(base, headers, model, probe_timeout)),
                                      name="dsv4ctl-check-probe", daemon=True)
            prober.start()
        time.sleep(max(0.0, window_start + window_s - time.monotonic()))
        second = _get(client, "/metrics", time.monotonic() + timeout_s)
        window = time.monotonic() - window_start
        if prober is not None:
            prober.join(max(0.0, window_start + probe_timeout + 0.5 - time.monotonic()))
    probe_answer = probe_box[0] if probe_box else (
        HttpAnswer(None, probe_timeout, error=f"no answer within {probe_timeout:g} s", timed_out=True) if probe else None)
    return Readings(url=base, health=health, models=models, metrics_before=first, metrics_after=second,
                    window_s=window, probe=probe_answer, probe_timeout_s=probe_timeout if probe else None,
                    duration_s=time.monotonic() - started)


def check_server(url: str, *, window_s: float, timeout_s: float = 1.0, probe: bool = False,
                 probe_timeout_s: float | None = None, api_key: str | None = None, limits: Limits = Limits()) -> ServerCheck:
    return judge(take_readings(url, window_s=window_s, timeout_s=timeout_s, probe=probe, probe_timeout_s=probe_timeout_s,
                               api_key=api_key), limits)


def check_group(urls: Sequence[str], *, window_s: float, timeout_s: float = 1.0, probe: bool = False,
                probe_timeout_s: float | None = None, api_key: str | None = None, limits: Limits = Limits()) -> GroupCheck:
    """Every server at once; the results in the order of `urls`."""
    bases = [normalize_url(u) for u in urls]
    if not bases:
        raise UsageError("no URL given", hint="dsv4ctl check http://127.0.0.1:8000 [more URLs of the group]")
    checked_at, started = time.time(), time.monotonic()
    results: list[Any] = [None] * len(bases)

    def one(i: int) -> None:
        results[i] = check_server(bases[i], window_s=window_s, timeout_s=timeout_s, probe=probe,
                                  probe_timeout_s=probe_timeout_s, api_key=api_key, limits=limits)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(bases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return GroupCheck(servers=tuple(results), duration_s=time.monotonic() - started, checked_at=checked_at, limits=limits)


def _get(client: Any, path: str, deadline: float) -> HttpAnswer:
    import httpx

    budget = max(deadline - time.monotonic(), 0.05)
    t = time.monotonic()
    try:
        response = client.get(path, timeout=httpx.Timeout(budget))
        return HttpAnswer(response.status_code, time.monotonic() - t, text=response.text)
    except httpx.TimeoutException:
        return HttpAnswer(None, time.monotonic() - t, error=f"no answer within {budget:.1f} s", timed_out=True)
    except httpx.HTTPError as exc:
        return HttpAnswer(None, time.monotonic() - t, error=_reason(exc))


def _probe(base: str, headers: dict[str, str], model: str | None, timeout_s: float) -> HttpAnswer:
    import httpx

    body: dict[str, Any] = {"prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0}
    if model:
        body["model"] = model
    t = time.monotonic()
    try:
        with httpx.Client(base_url=base, headers=headers, verify=False, trust_env=False) as client:
            response = client.post("/v1/completions", json=body, timeout=httpx.Timeout(timeout_s))
        return HttpAnswer(response.status_code, time.monotonic() - t, text=response.text if response.status_code != 200 else "")
    except httpx.TimeoutException:
        return HttpAnswer(None, time.monotonic() - t, error=f"no answer within {timeout_s:g} s", timed_out=True)
    except httpx.HTTPError as exc:
        return HttpAnswer(None, time.monotonic() - t, error=_reason(exc))


def _first_model(models: HttpAnswer) -> str | None:
    import json

    try:
        data = json.loads(models.text).get("data") or []
        return str(data[0]["id"]) if data else None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def _reason(exc: BaseException) -> str:
    """`connection refused` rather than httpx's errno text."""
    text = str(exc) or type(exc).__name__
    for cause in (exc.__cause__, exc.__context__):
        if isinstance(cause, ConnectionRefusedError) or "Connection refused" in text:
            return "connection refused"
    return text
