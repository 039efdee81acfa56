"""The servers' URLs as the operator typed them, refused at the door when they cannot name a server.

`parse_urls` runs in the command, before any look: a URL that names no server (no host, a port that is not a
number from 1 to 65535, a query that would be glued to check's own paths, the same server twice) is a usage
error with one line, never a look that fails later in a thread. A URL is split by the standard library
(`urllib.parse.urlsplit`, whose `port` refuses non-digits and numbers past 65535) and must mean the same to
httpx, the client that sends the requests (httpx quietly turns `http://a b:80` into the host `a%20b`). What
output shows of a URL hides its password (`redaction.hide_url_password`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from dsv4ctl.errors import UsageError
from dsv4ctl.redaction import hide_url_password

HINT = "write it as http://HOST:PORT, vLLM's API server (e.g. http://127.0.0.1:8000)"


@dataclass(frozen=True)
class ServerUrl:
    """One server: where the requests go (`base`, with its credentials) and what output shows (`shown`)."""

    base: str
    shown: str
    host: str

    def __str__(self) -> str:
        return self.shown


def parse_url(url: str, *, plain: bool = False) -> ServerUrl:
    """`127.0.0.1:8000` -> `http://127.0.0.1:8000`; a trailing `/` or `/v1` is dropped (check adds the routes).

    Raises UsageError for a URL that names no server. `plain`: for `check --once`, which sends its one request
    through the standard library's HTTP client, not httpx: the host is held to the standard library's rule instead
    (`_plain_host`), which refuses the hosts httpx would change (a blank, `%`, `<`...), without importing httpx
    (a tenth of a second of CPU)."""
    text = url.strip()
    if not text:
        raise UsageError("an empty URL", hint="dsv4ctl check http://127.0.0.1:8000")
    if "://" not in text:
        text = "http://" + text
    shown = hide_url_password(text)
    scheme = text.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise UsageError(f"{shown}: not an http(s) URL", hint="dsv4ctl check http://HOST:PORT (vLLM's API server)")
    try:
        split = urlsplit(text)
    except ValueError:  # only "Invalid IPv6 URL": a [ or ] without its pair
        raise UsageError(f"invalid URL {shown!r}: a [ or ] without its pair", hint="an IPv6 address is written "
                         "in brackets: http://[::1]:8000") from None
    if split.query or split.fragment or text.endswith(("?", "#")):
        raise UsageError(f"invalid URL {shown!r}: a query or fragment (?…, #…) would be glued to check's own paths "
                         "(/health, /v1/models, /metrics)", hint=HINT)
    if not split.hostname:
        raise UsageError(f"invalid URL {shown!r}: no host", hint=HINT)
    try:
        port = split.port
    except ValueError:
        port = None
        bad = True
    else:
        bad = port == 0
    if bad:
        raise UsageError(f"invalid URL {shown!r}: bad port {_port_text(split.netloc)!r}: not a number from 1 to 65535",
                         hint=HINT)
    if plain:
        if not _plain_host(split.hostname):
            raise UsageError(f"invalid URL {shown!r}: {split.hostname!r} is not a host name or address", hint=HINT)
    else:
        import httpx

        try:
            parsed = httpx.URL(text)
        except httpx.InvalidURL as exc:
            raise UsageError(f"invalid URL {shown!r}: {exc}", hint=HINT) from None
        if parsed.host != split.hostname or (parsed.port or _default_port(scheme)) != (port or _default_port(scheme)):
            raise UsageError(f"invalid URL {shown!r}: {split.hostname!r} is not a host name or address", hint=HINT)
    base = text.rstrip("/")
    base = base[: -len("/v1")] if base.endswith("/v1") else base
    path = urlsplit(base).path
    return ServerUrl(base=base, shown=hide_url_password(f"{scheme}://{split.netloc}") + path, host=split.hostname)


# Characters no host name or address holds, and that httpx would percent-encode or refuse in one.
_NOT_IN_A_HOST = frozenset(' \t\r\n\x0b\x0c"%<>\\^`{|}')


def _plain_host(host: str) -> bool:
    """A host the standard library's resolver is given as it stands: printable, none of `_NOT_IN_A_HOST` (an IPv6
    address comes without its brackets; a name beyond ASCII is resolved through IDNA, as httpx does)."""
    return host.isprintable() and not _NOT_IN_A_HOST.intersection(host)


def parse_urls(urls: Sequence[str | ServerUrl], *, plain: bool = False) -> tuple[ServerUrl, ...]:
    """Every URL parsed (the first bad one refused), each server once (`plain`: see `parse_url`)."""
    servers = tuple(u if isinstance(u, ServerUrl) else parse_url(u, plain=plain) for u in urls)
    if not servers:
        raise UsageError("no URL given", hint="dsv4ctl check http://127.0.0.1:8000 [more URLs of the group]")
    seen: dict[str, ServerUrl] = {}
    for server in servers:
        key = _same_server_plain(server.base) if plain else _same_server(server.base)
        if key in seen:
            raise UsageError(f"{server.shown} is given twice", hint="give each server once")
        seen[key] = server
    return servers


def _same_server(base: str) -> str:
    """Two spellings of one server (`127.0.0.1:8000`, `http://127.0.0.1:8000/v1`) are one key."""
    import httpx

    url = httpx.URL(base)
    return f"{url.scheme}://{url.host}:{url.port or _default_port(url.scheme)}{url.path.rstrip('/')}"


def _same_server_plain(base: str) -> str:
    """`_same_server` by the standard library's reading (host names are compared in lower case)."""
    split = urlsplit(base)
    scheme = split.scheme.lower()
    return f"{scheme}://{split.hostname}:{split.port or _default_port(scheme)}{split.path.rstrip('/')}"


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _port_text(netloc: str) -> str:
    """What stands where the port goes, for the message: after the host, or after an IPv6 address's `]`."""
    host = netloc.rpartition("@")[2]
    if host.startswith("["):
        return host.partition("]")[2].removeprefix(":")
    return host.partition(":")[2]
