"""check knows what it talks to: what is not a vLLM API server is `unknown` (exit 12) with the reason, a 404 on
/health is a wrong URL or port and not a dead engine, and no answer's raw HTML reaches the evidence.

Against the standard library's own file server (`python -m http.server`, tests/checkkit.py) and a port that answers
in HTTP/2 frames, with the real HTTP client; the judgement on recorded readings (tests/fixtures/check)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkkit import FileServer, NotHttp, StandIn
from dsv4ctl.check import DEAD, HEALTHY, UNKNOWN, HttpAnswer, Readings, judge
from dsv4ctl.errors import ExitCode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "check"
URL = "http://127.0.0.1:8000"
HTML_404 = """<!DOCTYPE HTML>
<html lang="en">
    <head>
        <meta charset="utf-8">
        <title>Error response</title>
    </head>
    <body>
        <h1>Error response</h1>
        <p>Error code: 404</p>
    </body>
</html>
"""


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def page(status: int, body: str = HTML_404, kind: str = "text/html") -> HttpAnswer:
    return HttpAnswer(status, 0.01, text=body, content_type=kind)


def test_a_file_server_is_unknown_not_dead(cli, tmp_path):
    with FileServer(tmp_path) as server:
        result = cli("check", server.url, "--window", "0.3")
    assert result.exit_code == ExitCode.UNKNOWN_SERVER, result.output
    assert "UNKNOWN" in result.stdout and "DEAD" not in result.stdout
    assert "not a vLLM API server: 404 on /health, /v1/models and /metrics: wrong URL or port?" in result.stdout
    assert "<" not in result.stdout


def test_a_file_server_with_a_health_file_is_unknown_not_healthy_and_gets_no_probe(cli, tmp_path):
    (tmp_path / "health").write_text("ok\n")
    with FileServer(tmp_path) as server:
        result = cli("check", server.url, "--window", "0.3", "--probe-request", "--json")
    assert result.exit_code == ExitCode.UNKNOWN_SERVER, result.output
    (one,) = json.loads(result.stdout)["check"]["servers"]
    assert one["verdict"] == "unknown" and one["exit_code"] == ExitCode.UNKNOWN_SERVER
    assert one["evidence"] == ["not a vLLM API server: /health answered 200; 404 on /v1/models and /metrics: "
                               "wrong URL or port?"]
    assert any("--data-parallel-supervisor-port" in n for n in one["notes"])
    assert server.requests == ["GET /health", "GET /v1/models", "GET /metrics"]  # no window, no probe


def test_a_group_with_a_wrong_port_is_not_healthy(cli, tmp_path):
    with StandIn(["busy-1.prom", "busy-2.prom"]) as vllm, FileServer(tmp_path) as other:
        result = cli("check", vllm.url, other.url, "--window", "0.3")
    assert result.exit_code == ExitCode.UNKNOWN_SERVER, result.output
    assert "2 servers: 1 healthy, 1 unknown  (exit 12)" in result.stdout


def test_a_port_that_does_not_speak_http_is_unknown(cli):
    with NotHttp() as server:
        result = cli("check", server.url, "--json")
    assert result.exit_code == ExitCode.UNKNOWN_SERVER, result.output
    (one,) = json.loads(result.stdout)["check"]["servers"]
    assert one["evidence"] == ["not an HTTP server: /health: the answer is not HTTP: wrong URL or port?"]
    assert one["health"]["not_http"] is True


def test_https_to_a_plain_http_server_says_so(cli):
    with StandIn(["idle.prom"]) as server:
        result = cli("check", server.url.replace("http://", "https://"), "--json")
    assert result.exit_code == ExitCode.UNKNOWN_SERVER, result.output
    evidence = json.loads(result.stdout)["check"]["servers"][0]["evidence"][0]
    assert "does not speak TLS on this port (http:// rather than https://?)" in evidence


def test_watch_shows_the_unknown_verdict_and_goes_on(cli, tmp_path):
    with FileServer(tmp_path) as server:
        result = cli("watch", server.url, "--interval", "0.2", "--count", "2")
    assert result.exit_code == ExitCode.UNKNOWN_SERVER, result.output
    lines = result.stdout.splitlines()
    assert any(line.endswith(f"{server.url} is UNKNOWN") for line in lines)
    assert sum(f"{server.url} unknown not a vLLM API server" in line for line in lines) == 2


# -- the judgement, on recorded readings -------------------------------------------------------------------------

def readings(health: HttpAnswer, models: HttpAnswer | None, metrics: HttpAnswer | None) -> Readings:
    return Readings(url=URL, health=health, models=models, metrics_before=metrics)


def ok(body: str, kind: str = "text/plain") -> HttpAnswer:
    return HttpAnswer(200, 0.01, text=body, content_type=kind)


def test_a_404_on_health_is_never_dead():
    check = judge(readings(page(404), page(404), page(404)))
    assert check.verdict == UNKNOWN and check.exit_code == ExitCode.UNKNOWN_SERVER
    assert check.evidence == ("not a vLLM API server: 404 on /health, /v1/models and /metrics: wrong URL or port?",)


def test_a_proxy_that_answers_health_for_a_vllm_behind_it_is_named():
    check = judge(readings(page(404), ok(text("models.json"), "application/json"), ok(text("idle.prom"))))
    assert check.verdict == UNKNOWN
    assert check.evidence[0].startswith("/health answered 404, which vLLM's API server never answers there")
    assert "/v1/models lists models" in check.evidence[0]


@pytest.mark.parametrize("models, metrics", [
    (HttpAnswer(401, 0.01, text='{"error":"Unauthorized"}', content_type="application/json"), page(404)),  # --api-key
    (ok(text("models.json"), "application/json"), page(404)),  # /metrics behind a path the proxy does not pass
    (page(404), ok(text("idle.prom"))),  # /v1/models not routed, vLLM's metrics there
    (HttpAnswer(None, 1.0, error="no answer within 1.0 s", timed_out=True), page(404)),  # cannot tell
])
def test_a_vllm_sign_or_a_missing_answer_is_not_called_unknown(models, metrics):
    check = judge(Readings(url=URL, health=ok(""), models=models, metrics_before=metrics, metrics_after=metrics,
                           window_s=1.0))
    assert check.verdict == HEALTHY


def test_503_and_other_5xx_on_health_stay_dead():
    for status in (500, 502, 503):
        assert judge(readings(HttpAnswer(status, 0.01), None, None)).verdict == DEAD


def test_a_probe_answered_with_an_html_page_shows_its_title_not_its_markup():
    r = Readings(url=URL, health=ok(""), models=ok(text("models.json"), "application/json"),
                 metrics_before=ok(text("idle.prom")), metrics_after=ok(text("idle.prom")), window_s=1.0,
                 probe=page(502, HTML_404.replace("Error response", "502 Bad Gateway")), probe_timeout_s=1.0)
    check = judge(r)
    assert check.evidence[0] == "the probe request was answered 502 (an HTML page titled '502 Bad Gateway')"
    assert not any("<" in line for line in (*check.evidence, *check.notes))


def test_a_probe_answered_with_vllms_error_document_shows_its_message():
    body = json.dumps({"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", "code": 404}})
    r = Readings(url=URL, health=ok(""), models=ok(text("models.json"), "application/json"),
                 metrics_before=ok(text("idle.prom")), metrics_after=ok(text("idle.prom")), window_s=1.0,
                 probe=HttpAnswer(404, 0.01, text=body, content_type="application/json"), probe_timeout_s=1.0)
    check = judge(r)
    assert "the probe request was answered 404 (The model `x` does not exist.)" in check.notes[0]


def test_metrics_that_are_an_html_page_are_noted_without_the_markup():
    html = ok(HTML_404, "text/html")
    r = Readings(url=URL, health=ok(""), models=ok(text("models.json"), "application/json"), metrics_before=html,
                 metrics_after=html, window_s=1.0)
    check = judge(r)
    assert check.verdict == HEALTHY
    assert "/metrics (first) is not Prometheus text (an HTML page titled 'Error response'): engine progress unseen" in check.notes
    assert not any("<" in n for n in check.notes)
