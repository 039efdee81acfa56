"""`check --once`: one GET /health per server, no window, for a liveness probe that runs every few seconds.

The request goes through the standard library's HTTP client (`http.client`, `ssl` for https), not httpx: a probe
process pays for its imports on every look, and httpx's cost about 0.1 s of CPU, more than the rest of the look
(`http.client` about 0.015 s). Only the status line and headers are read: vLLM's /health answers an empty 200, or an empty 503 once its engine is dead
(`vllm/entrypoints/serve/instrumentator/health.py:22-33` in 0.32.0).

What is judged is what `judge.judge` makes of /health alone (the window's look judges /health the same way):
- 200: `alive` (exit 0). vLLM's /health asks the API server's engine client, which says dead only once it has
  marked the engine dead (`AsyncLLM.check_health`, `vllm/v1/engine/async_llm.py:1089` in 0.32.0): a stopped,
  hung or paused engine answers 200 here. Telling that apart takes the window (`check` without --once).
- no answer within the timeout, a refused or reset connection, a host name that does not resolve, a 5xx: `dead`.
- a 3xx or 4xx (never vLLM's answer there) or an answer that is not HTTP: `unknown`, not a vLLM API server. A 200
  from another service's health route cannot be told from vLLM's without more requests (/v1/models, /metrics),
  which --once does not send; a 200 with a body (vLLM's has none) is said in a note.

A URL whose path is one of `dsv4ctl serve`'s probe routes (under SERVE_ROUTES, e.g. `http://HOST:PORT/dsv4ctl/livez`,
dsv4ctl/health/routes.py) is asked as it stands, and its JSON body is the verdict: serve's judgement of the engine's
progress, made in vLLM's process (docs/serve.md, "Probe routes"). 200: `alive`, with the route's own verdict (healthy,
busy, stalling) in the evidence; 503: the route's `wedged` or `dead`, anything else it says `unknown`.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from dsv4ctl.check.judge import judge
from dsv4ctl.check.model import DEAD, EXIT_CODES, HEALTHY, SEVERITY, UNKNOWN, WEDGED, HttpAnswer, Readings, _answer_json
from dsv4ctl.check.urls import ServerUrl
from dsv4ctl.errors import ExitCode

ALIVE = "alive"  # what --once can say of a 200: the API server answers; the engine's progress is unseen
SERVE_ROUTES = "/dsv4ctl/"  # serve's probe routes (dsv4ctl.health.routes.PREFIX); their bodies carry the verdict
BODY_LIMIT = 65536  # a route's body is a few hundred bytes; a larger one is not serve's


@dataclass(frozen=True)
class OnceCheck:
    """One server's verdict from its /health alone."""

    url: str
    verdict: str  # alive, dead, unknown
    evidence: tuple[str, ...]
    health: HttpAnswer
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.verdict == ALIVE else EXIT_CODES[self.verdict]

    def line(self) -> str:
        """`alive http://127.0.0.1:8000: /health answered 200 in 0.002 s`: one line per server."""
        return f"{self.verdict} {self.url}: {'; '.join((*self.evidence, *self.notes))}"

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "verdict": self.verdict, "exit_code": int(self.exit_code),
                "evidence": list(self.evidence), "notes": list(self.notes), "health": _answer_json(self.health)}


def look_once(server: ServerUrl, timeout_s: float = 1.0) -> OnceCheck:
    """GET /health within `timeout_s` (connection, TLS and answer together), judged. Never raises for the server's
    failures: they are the verdict."""
    if serve_route(server):
        return _look_route(server, timeout_s)
    health, body_bytes = get_health(server, timeout_s)
    judged = judge(Readings(url=server.shown, health=health, duration_s=health.elapsed_s))
    if judged.verdict != HEALTHY:
        return OnceCheck(server.shown, judged.verdict, judged.evidence, health, judged.notes)
    notes: tuple[str, ...] = ()
    if body_bytes:
        size = f" of {body_bytes} bytes" if body_bytes > 0 else ""
        notes = (f"the 200 came with a body{size}, and vLLM's /health answers none (another service's health "
                 "route?)",)
    return OnceCheck(server.shown, ALIVE, (f"/health answered 200 in {health.elapsed_s:.3f} s",), health, notes)


def serve_route(server: ServerUrl) -> bool:
    from urllib.parse import urlsplit

    return urlsplit(server.base).path.startswith(SERVE_ROUTES)


def _look_route(server: ServerUrl, timeout_s: float) -> OnceCheck:
    """GET of serve's probe route itself; its body's verdict is the look's."""
    import json

    health, body = _get(server, timeout_s, "", read_body=True)
    if health.status is None:
        return OnceCheck(server.shown, judge(Readings(url=server.shown, health=health)).verdict,
                         (f"{_route(server)}: {health.error or 'no answer'}",), health)
    try:
        doc = json.loads(body)
        verdict, evidence = str(doc["verdict"]), tuple(str(e) for e in doc.get("evidence") or ())
    except (ValueError, KeyError, TypeError):
        return OnceCheck(server.shown, UNKNOWN, (f"{_route(server)} answered {health.status} without serve's JSON verdict: "
                                                 "not a dsv4ctl serve probe route",), health)
    said = f"{_route(server)} answered {health.status} in {health.elapsed_s:.3f} s: {verdict}"
    if health.status == 200:
        return OnceCheck(server.shown, ALIVE, (said, *evidence), health)
    return OnceCheck(server.shown, verdict if verdict in (WEDGED, DEAD) else UNKNOWN, (said, *evidence), health)


def _route(server: ServerUrl) -> str:
    from urllib.parse import urlsplit

    return urlsplit(server.base).path


def worst_once(looks: list[OnceCheck]) -> OnceCheck:
    """The look whose verdict is the worst (alive counts as healthy)."""
    return max(looks, key=lambda c: SEVERITY.get(c.verdict, 0))


def get_health(server: ServerUrl, timeout_s: float) -> tuple[HttpAnswer, int]:
    """(the answer, the body's length as its Content-Length says: 0 when it says none, -1 for a chunked body)."""
    health, body = _get(server, timeout_s, "/health")
    return health, body if isinstance(body, int) else len(body)


def _get(server: ServerUrl, timeout_s: float, suffix: str, read_body: bool = False) -> tuple[HttpAnswer, Any]:
    """GET the server's path + `suffix`: (the answer, the body's length, or with `read_body` its first BODY_LIMIT bytes).

    Through the standard library's HTTP client (`http.client`: its status line and header parsing, 1xx answers
    skipped); `timeout_s` bounds the connection (TLS included) and then what is left of it each read."""
    import http.client
    from urllib.parse import quote, unquote, urlsplit

    split = urlsplit(server.base)
    https = split.scheme.lower() == "https"
    port = split.port or (443 if https else 80)
    path = quote(split.path.rstrip("/") + suffix, safe="/%:@!$&'()*+,;=~")
    headers = {"User-Agent": "dsv4ctl-check-once", "Accept": "*/*", "Connection": "close"}
    if split.username is not None:  # http://user:password@host: basic authentication, as httpx sends it
        import base64

        pair = f"{unquote(split.username)}:{unquote(split.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    started = time.monotonic()
    deadline = started + timeout_s
    conn: http.client.HTTPConnection
    if https:
        conn = http.client.HTTPSConnection(server.host, port, timeout=max(timeout_s, 0.001), context=_tls_context())
    else:
        conn = http.client.HTTPConnection(server.host, port, timeout=max(timeout_s, 0.001))
    try:
        conn.connect()
        conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        conn.request("GET", path, headers=headers)
        conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        response = conn.getresponse()
        length = response.getheader("Content-Length", "") or ""
        chunked = "chunked" in (response.getheader("Transfer-Encoding", "") or "").lower()
        body_bytes = int(length) if length.strip().isdecimal() else (-1 if chunked else 0)
        kind = (response.getheader("Content-Type", "") or "").split(";", 1)[0].strip().lower()
        body: Any = response.read(BODY_LIMIT) if read_body else body_bytes
        return HttpAnswer(response.status, time.monotonic() - started, content_type=kind), body
    except (socket.timeout, TimeoutError):
        return HttpAnswer(None, time.monotonic() - started, error=f"no answer within {timeout_s:.1f} s",
                          timed_out=True), 0
    except http.client.RemoteDisconnected:
        return HttpAnswer(None, time.monotonic() - started, error="the server closed the connection without an answer"), 0
    except http.client.HTTPException:  # BadStatusLine, a header block past the client's limits: not HTTP as vLLM speaks it
        return HttpAnswer(None, time.monotonic() - started, not_http=True, error="the answer is not HTTP"), 0
    except OSError as exc:
        return _failed(exc, time.monotonic() - started, server), 0
    except UnicodeError:  # a name beyond ASCII that IDNA cannot write
        return HttpAnswer(None, time.monotonic() - started,
                          error=f"the host name {server.host!r} could not be resolved (not a valid IDNA name)"), 0
    finally:
        conn.close()


def _tls_context() -> Any:
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False  # as the window's look: no certificate is verified (docs/check.md)
    context.verify_mode = ssl.CERT_NONE
    return context


def _failed(exc: OSError, elapsed_s: float, server: ServerUrl) -> HttpAnswer:
    """No HTTP answer, in the words the window's look uses (`http._failed`)."""
    if isinstance(exc, socket.gaierror):
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            return HttpAnswer(None, elapsed_s, error=f"the host name {server.host!r} does not resolve ({exc.strerror})")
        return HttpAnswer(None, elapsed_s, error=f"the host name {server.host!r} could not be resolved ({exc.strerror})")
    import ssl

    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or exc.strerror or type(exc).__name__
        if reason == "WRONG_VERSION_NUMBER":
            return HttpAnswer(None, elapsed_s, not_http=True,
                              error="TLS failed: the server does not speak TLS on this port (http:// rather than https://?)")
        return HttpAnswer(None, elapsed_s, error=f"TLS failed: {reason}")
    if isinstance(exc, ConnectionRefusedError):
        return HttpAnswer(None, elapsed_s, error="connection refused")
    if exc.strerror:
        return HttpAnswer(None, elapsed_s, error=exc.strerror[:1].lower() + exc.strerror[1:])
    return HttpAnswer(None, elapsed_s, error=str(exc) or type(exc).__name__)
