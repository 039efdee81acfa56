"""The readings: the HTTP exchanges of one look at one or more servers (httpx, the client in our tree).

One look at a server, within `window + 2 x timeout` seconds:
1. GET /health, GET /v1/models, GET /metrics: together within `timeout` (a dead server stops after /health, and
   what is not vLLM's API server after the three: `judge.not_vllm`);
2. the window: with `probe`, one POST /v1/completions of one token, started now, given `probe_timeout`
   (default: the window);
3. GET /metrics again after the window, within `timeout`.
Several servers are looked at at once (one thread each), so a group takes as long as one server. The URLs are
parsed before any thread starts (`urls.parse_urls`: a bad one is a usage error), and whatever a thread raises is
raised again by `check_group` in the caller's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from dsv4ctl.check.judge import judge, not_vllm
from dsv4ctl.check.model import GroupCheck, HttpAnswer, Limits, Readings, ServerCheck
from dsv4ctl.check.urls import ServerUrl, parse_url, parse_urls

PROBE_PROMPT = "1"  # one prompt token or two, whatever the tokenizer


def take_readings(url: str | ServerUrl, *, window_s: float, timeout_s: float = 1.0, probe: bool = False,
                  probe_timeout_s: float | None = None, api_key: str | None = None) -> Readings:
    """Read one server (see the module's docstring). Never raises for the server's failures: they are readings."""
    import httpx

    started = time.monotonic()
    server = url if isinstance(url, ServerUrl) else parse_url(url)
    base = server.base
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    probe_timeout = window_s if probe_timeout_s is None else probe_timeout_s
    with httpx.Client(base_url=base, headers=headers, verify=False, trust_env=False) as client:
        pre_deadline = started + timeout_s
        health = _get(client, "/health", pre_deadline, server)
        if health.status is None or health.status >= 500:  # no HTTP answer, or the server's own failure
            return Readings(url=server.shown, health=health, duration_s=time.monotonic() - started)
        models = _get(client, "/v1/models", pre_deadline, server)
        first = _get(client, "/metrics", pre_deadline, server)
        if not health.ok or not_vllm(health, models, first) is not None:  # nothing to judge: no window, no probe
            return Readings(url=server.shown, health=health, models=models, metrics_before=first,
                            duration_s=time.monotonic() - started)
        window_start = time.monotonic()
        probe_box: list[HttpAnswer] = []
        prober = None
        if probe:
            model = _first_model(models)
            prober = threading.Thread(target=lambda: probe_box.append(_probe(server, headers, model, probe_timeout)),
                                      name="dsv4ctl-check-probe", daemon=True)
            prober.start()
        time.sleep(max(0.0, window_start + window_s - time.monotonic()))
        second = _get(client, "/metrics", time.monotonic() + timeout_s, server)
        window = time.monotonic() - window_start
        if prober is not None:
            prober.join(max(0.0, window_start + probe_timeout + 0.5 - time.monotonic()))
    probe_answer = probe_box[0] if probe_box else (
        HttpAnswer(None, probe_timeout, error=f"no answer within {probe_timeout:g} s", timed_out=True) if probe else None)
    return Readings(url=server.shown, health=health, models=models, metrics_before=first, metrics_after=second,
                    window_s=window, probe=probe_answer, probe_timeout_s=probe_timeout if probe else None,
                    duration_s=time.monotonic() - started)


def check_server(url: str | ServerUrl, *, window_s: float, timeout_s: float = 1.0, probe: bool = False,
                 probe_timeout_s: float | None = None, api_key: str | None = None, limits: Limits = Limits()) -> ServerCheck:
    return judge(take_readings(url, window_s=window_s, timeout_s=timeout_s, probe=probe, probe_timeout_s=probe_timeout_s,
                               api_key=api_key), limits)


def check_group(urls: Sequence[str | ServerUrl], *, window_s: float, timeout_s: float = 1.0, probe: bool = False,
                probe_timeout_s: float | None = None, api_key: str | None = None, limits: Limits = Limits()) -> GroupCheck:
    """Every server at once; the results in the order of `urls`."""
    servers = parse_urls(urls)
    checked_at, started = time.time(), time.monotonic()
    results: list[Any] = [None] * len(servers)
    raised: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = check_server(servers[i], window_s=window_s, timeout_s=timeout_s, probe=probe,
                                      probe_timeout_s=probe_timeout_s, api_key=api_key, limits=limits)
        except BaseException as exc:  # noqa: BLE001 - raised again below, in the caller's thread
            raised.append(exc)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(servers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if raised:
        raise raised[0]
    return GroupCheck(servers=tuple(results), duration_s=time.monotonic() - started, checked_at=checked_at, limits=limits)


def _get(client: Any, path: str, deadline: float, server: ServerUrl) -> HttpAnswer:
    import httpx

    budget = max(deadline - time.monotonic(), 0.05)
    t = time.monotonic()
    try:
        response = client.get(path, timeout=httpx.Timeout(budget))
        return _answer(response, time.monotonic() - t)
    except httpx.TimeoutException:
        return HttpAnswer(None, time.monotonic() - t, error=f"no answer within {budget:.1f} s", timed_out=True)
    except httpx.HTTPError as exc:
        return _failed(exc, time.monotonic() - t, server)


def _probe(server: ServerUrl, headers: dict[str, str], model: str | None, timeout_s: float) -> HttpAnswer:
    import httpx

    body: dict[str, Any] = {"prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0}
    if model:
        body["model"] = model
    t = time.monotonic()
    try:
        with httpx.Client(base_url=server.base, headers=headers, verify=False, trust_env=False) as client:
            response = client.post("/v1/completions", json=body, timeout=httpx.Timeout(timeout_s))
        return _answer(response, time.monotonic() - t, keep_text=response.status_code != 200)
    except httpx.TimeoutException:
        return HttpAnswer(None, time.monotonic() - t, error=f"no answer within {timeout_s:g} s", timed_out=True)
    except httpx.HTTPError as exc:
        return _failed(exc, time.monotonic() - t, server)


def _answer(response: Any, elapsed_s: float, keep_text: bool = True) -> HttpAnswer:
    kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return HttpAnswer(response.status_code, elapsed_s, text=response.text if keep_text else "", content_type=kind)


def _first_model(models: HttpAnswer) -> str | None:
    import json

    try:
        data = json.loads(models.text).get("data") or []
        return str(data[0]["id"]) if data else None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def _failed(exc: BaseException, elapsed_s: float, server: ServerUrl) -> HttpAnswer:
    """No HTTP answer, and why, in the operator's words: the OS's reason rather than httpx's errno text; a host
    name that does not resolve named; an answer that is not HTTP (or not TLS, for https) said to be one."""
    import socket
    import ssl

    import httpx

    for cause in _chain(exc):
        if isinstance(cause, socket.gaierror):
            if cause.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
                return HttpAnswer(None, elapsed_s, error=f"the host name {server.host!r} does not resolve "
                                                         f"({cause.strerror})")
            return HttpAnswer(None, elapsed_s, error=f"the host name {server.host!r} could not be resolved "
                                                     f"({cause.strerror})")
        if isinstance(cause, ssl.SSLError):
            reason = cause.reason or cause.strerror or type(cause).__name__
            if reason == "WRONG_VERSION_NUMBER":  # the other side answered, but not in TLS
                return HttpAnswer(None, elapsed_s, not_http=True,
                                  error="TLS failed: the server does not speak TLS on this port (http:// rather than https://?)")
            return HttpAnswer(None, elapsed_s, error=f"TLS failed: {reason}")
        if isinstance(cause, ConnectionRefusedError):
            return HttpAnswer(None, elapsed_s, error="connection refused")
        if isinstance(cause, OSError) and cause.strerror:
            return HttpAnswer(None, elapsed_s, error=cause.strerror[:1].lower() + cause.strerror[1:])
    if isinstance(exc, httpx.RemoteProtocolError) and not str(exc).startswith("Server disconnected"):
        return HttpAnswer(None, elapsed_s, not_http=True, error="the answer is not HTTP")
    if isinstance(exc, httpx.RemoteProtocolError):
        return HttpAnswer(None, elapsed_s, error="the server closed the connection without an answer")
    return HttpAnswer(None, elapsed_s, error=str(exc) or type(exc).__name__)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in out:
        out.append(cause)
        cause = cause.__cause__ or cause.__context__
    return out
