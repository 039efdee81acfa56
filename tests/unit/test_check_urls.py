"""check's and watch's URLs: refused at the door (exit 2, one line, never a thread's traceback), each server
once, a host name that does not resolve said so, and a password never shown (text, JSON, errors)."""

from __future__ import annotations

import json
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkkit import StandIn, refused_url
from dsv4ctl.check.urls import parse_url, parse_urls
from dsv4ctl.errors import ExitCode, UsageError


@pytest.mark.parametrize("url, words", [
    ("http://127.0.0.1:abc", "bad port 'abc'"),
    ("http://[::1", "a [ or ] without its pair"),
    ("http://127.0.0.1:9 x", "bad port '9 x'"),
    ("http://127.0.0.1:99999", "bad port '99999': not a number from 1 to 65535"),
    ("http://127.0.0.1:-1", "bad port '-1'"),
    ("http://127.0.0.1:0", "bad port '0'"),
    ("http://", "no host"),
    ("http://:8000", "no host"),
    ("http://a b:8000", "'a b' is not a host name or address"),
    ("http://127.0.0.1:8000/?x=1", "a query or fragment"),
    ("ftp://127.0.0.1:1", "not an http(s) URL"),
    ("", "an empty URL"),
])
@pytest.mark.parametrize("command", ["check", "watch"])
def test_a_url_that_names_no_server_is_a_usage_error(cli, command, url, words):
    result = cli(command, url, "--count", "1") if command == "watch" else cli(command, url)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert words in result.stderr
    assert result.stderr.startswith("Error: ") and len(result.stderr.splitlines()) == 2  # the error and its hint
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert result.stdout == ""


def test_a_bad_url_among_good_ones_is_refused_before_any_look(cli):
    with StandIn(["idle.prom"]) as server:
        result = cli("check", server.url, "http://127.0.0.1:abc", "--json")
    assert result.exit_code == ExitCode.USAGE
    assert json.loads(result.stdout)["error"]["exit_code"] == ExitCode.USAGE
    assert server.requests == []


def test_one_server_given_twice_is_refused():
    with pytest.raises(UsageError, match="given twice"):
        parse_urls(["127.0.0.1:8000", "http://127.0.0.1:8000/v1/"])
    assert [s.base for s in parse_urls(["127.0.0.1:8000", "127.0.0.1:8001"])] == [
        "http://127.0.0.1:8000", "http://127.0.0.1:8001"]


def test_what_is_accepted_is_what_the_client_requests():
    assert parse_url("127.0.0.1:8000/v1/").base == "http://127.0.0.1:8000"
    assert parse_url("http://[::1]:8000").base == "http://[::1]:8000"
    assert parse_url("https://vllm.example:8443/prefix/").base == "https://vllm.example:8443/prefix"
    one = parse_url("http://ops:s3cret@127.0.0.1:8000")
    assert one.base == "http://ops:s3cret@127.0.0.1:8000" and one.shown == "http://ops:***@127.0.0.1:8000"
    assert parse_url("http://hf_token@127.0.0.1:8000/v1").shown == "http://***@127.0.0.1:8000"


def test_credentials_in_a_url_reach_the_server_but_are_never_shown(cli):
    with StandIn(["busy-1.prom", "busy-2.prom"]) as server:
        url = server.url.replace("http://", "http://ops:s3cret@")
        result = cli("check", url, "--window", "0.3", "--json")
    with StandIn(["busy-1.prom", "busy-2.prom"]) as other:
        text = cli("check", other.url.replace("http://", "http://ops:s3cret@"), "--window", "0.3")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["check"]["servers"][0]["url"] == server.url.replace("http://", "http://ops:***@")
    assert "s3cret" not in result.output and "s3cret" not in text.output
    assert "ops:***@127.0.0.1" in text.stdout
    assert server.authorization[0] and server.authorization[0].startswith("Basic ")  # httpx sends them
    refused = cli("check", "http://ops:s3cret@127.0.0.1:abc")
    assert refused.exit_code == ExitCode.USAGE and "s3cret" not in refused.output and "ops:***@" in refused.stderr


def test_a_host_name_that_does_not_resolve_is_dead_and_says_so(cli, monkeypatch):
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):  # the real client; only the resolver's answer is given
        if host == "vllm-0.example":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    result = cli("check", "vllm-0.example:8000", "--json")
    assert result.exit_code == ExitCode.DEAD
    (server,) = json.loads(result.stdout)["check"]["servers"]
    assert server["evidence"] == ["/health: the host name 'vllm-0.example' does not resolve (Name or service not known)"]


def test_a_refused_connection_stays_dead():
    from dsv4ctl.check.http import check_server

    look = check_server(refused_url(), window_s=0.2)
    assert look.verdict == "dead" and look.evidence == ("/health: connection refused",)


def test_a_thread_that_raises_raises_in_the_caller(monkeypatch):
    from dsv4ctl.check import http

    def broken(*args, **kwargs):
        raise RuntimeError("a look that raised")

    monkeypatch.setattr(http, "check_server", broken)
    with pytest.raises(RuntimeError, match="a look that raised"):
        http.check_group([refused_url()], window_s=0.2)


# -- property: a malformed port or host is exit 2 with one line, whatever it holds -----------------------------

def _port_is_valid(text: str) -> bool:
    return text.isascii() and text.isdigit() and 1 <= int(text) <= 65535


BAD_PORTS = st.text(min_size=1, max_size=12).filter(
    lambda t: not _port_is_valid(t.strip("\t\r\n")) and not any(c in t for c in "/?#@")
    and t.strip() != "" and not _port_is_valid(t.strip()))
HOSTS = st.sampled_from(["127.0.0.1", "localhost", "[::1]", "vllm.example", "ops:s3cret@127.0.0.1"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=HOSTS, port=BAD_PORTS, command=st.sampled_from(["check", "watch"]))
def test_any_malformed_port_is_a_usage_error_without_a_traceback(cli, host, port, command):
    url = f"http://{host}:{port}"
    args = [command, url, "--window" if command == "check" else "--interval", "0.2"]
    result = cli(*args, *(["--count", "1"] if command == "watch" else []))
    assert result.exit_code == ExitCode.USAGE, (url, result.output)
    assert result.stderr.startswith("Error: ") and "Traceback" not in result.output
    assert "internal error" not in result.output and "s3cret" not in result.output


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_parse_url_either_names_a_server_or_refuses_with_a_usage_error(text):
    try:
        server = parse_url(text)
    except UsageError as exc:
        assert "\n" not in exc.message
        return
    import httpx

    url = httpx.URL(server.base)  # what the client will request: a host, and a port it can dial
    assert url.host and url.scheme in ("http", "https")
    assert url.port is None or 1 <= url.port <= 65535
