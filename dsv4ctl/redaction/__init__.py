"""What counts as a secret, and how it is hidden: one rule for `doctor` (environment variables) and
`collect` (every line of a gathered log). Pure.

A name is secret when it contains one of `SECRET_NAME_PARTS` (an environment variable's name, as `doctor`
shows it) or, inside a log line, when its last word is one (`hf_token`, `api_key`, `Authorization`, but
not `max_num_batched_tokens` or `prompt_token_ids_len`: a log's names are read word by word, a variable's
as a whole). A value is
secret when it is a Hugging Face token, user information in a URL or a URL query parameter with a secret
name. In a log line the value after a secret name (`HF_TOKEN=…`, `--api-key …`, `'api_key': '…'`,
`Authorization: Bearer …`) is replaced by `REDACTED`, as are secret values wherever they stand. A URL a command
shows (`check`'s servers) keeps its user name and hides its password (`hide_url_password`).
"""

from __future__ import annotations

import re

REDACTED = "***redacted***"
SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "SIGNATURE")
# Hugging Face access tokens: `hf_` followed by a long alphanumeric run.
_HF_TOKEN = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{16,}")
# Any user information inside a URL: `user:password@`, `:password@` or a bare `token@`.
_URL_CREDENTIALS = re.compile(r"://[^/\s@]+@")
# A query parameter (`?name=value`, `&name=value`); its name is judged like a variable's name.
_QUERY_PARAM = re.compile(r"[?&;]([^=&;#\s]+)=[^&;#\s]")

# Words of a name inside a log line that make it secret (whole words: TOKENS, TOKENIZER are not).
_SECRET_WORDS = {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS",
                 "AUTH", "AUTHORIZATION", "SIGNATURE", "BEARER", "COOKIE"}
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# name = value, name: value, 'name': 'value', "name": "value", --name=value; and a flag's value: --name value.
# A secret word is looked for first; the name around it is then judged by its last word.
# Over the lower-cased line: a secret word that ends its name (the name's last word).
WORDS = r"(?:token|apikey|key|secret|password|passwd|pass|credentials?|authorization|auth|signature|bearer|cookie)"
_WORD_HIT = re.compile(WORDS + r"(?![a-z0-9_.-])")
_WORD_HIT_ANY_CASE = re.compile(WORDS + r"(?![A-Za-z0-9_.-])", re.IGNORECASE)
# A line without any of these holds nothing the rules change (tested on the lower-cased text).
MAY_HOLD_SECRET = WORDS + r"(?![a-z0-9_.-])|hf_|://|bearer |basic "
# The same as literals: each secret word (which must end a name: the next character is none of NAME_END),
# and the texts that start a secret value.
SECRET_WORDS = ("token", "apikey", "key", "secret", "password", "passwd", "pass", "credential", "credentials",
                "authorization", "auth", "signature", "bearer", "cookie")
SECRET_STARTS = ("hf_", "://", "bearer ", "basic ")
NAME_END = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_VALUE = r"(?P<vq>['\"]?)(?P<value>(?:Bearer |Basic |Token )?[^\s'\",;}\]&)]+)"
_AFTER_NAME = re.compile(r"(?P<sep>['\"]?\s*[:=]\s*)" + _VALUE)
_AFTER_FLAG = re.compile(r"(?P<sep>\s+)(?!-)" + _VALUE)
_HEADER_SCHEME = re.compile(r"(?i)\b(?P<scheme>Bearer|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_URL_USERINFO = re.compile(r"(?P<scheme>://)[^/\s@]+@")
_QUERY_VALUE = re.compile(r"(?P<lead>[?&;](?P<name>[^=&;#\s]+)=)(?P<value>[^&;#\s'\"]+)")
_NOT_A_SECRET = {"none", "null", "true", "false", "", "***", REDACTED.lower(), "<redacted>", "redacted"}


def is_secret_name(name: str) -> bool:
    """An environment variable's name that holds a secret (`HF_TOKEN`, `AWS_SECRET_ACCESS_KEY`)."""
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def is_secret_word_name(name: str) -> bool:
    """A name inside a log line that holds a secret, judged by its last word (`hf_token`, `apiKey`, `--api-key`,
    `AWS_SECRET_ACCESS_KEY`; not `prompt_token_ids_len`, `max_num_batched_tokens`)."""
    words = [w.upper() for w in _WORD_SPLIT.split(name) if w]
    return bool(words) and words[-1] in _SECRET_WORDS


def looks_secret(value: str) -> bool:
    """A Hugging Face token, user information in a URL, or a URL query parameter with a secret name
    (`?token=`, `&api_key=`, `X-Amz-Signature=`...)."""
    if _HF_TOKEN.search(value) or _URL_CREDENTIALS.search(value):
        return True
    return any(is_secret_name(match.group(1)) for match in _QUERY_PARAM.finditer(value))


def hide_url_password(url: str) -> str:
    """A URL as a command may show it: `http://user:pw@host:8000` -> `http://user:***@host:8000`, and a name alone
    (`http://TOKEN@host`, which may be a token) -> `http://***@host`. The user information is everything between
    `://` and the last `@`, so a malformed URL (`http://u:p/w@host`) hides too much rather than too little."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    userinfo, _, host = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}:***" if colon and user and not any(c in user for c in "/?#") else "***"
    return f"{head}://{shown}@{host}"


def redact_line(line: str) -> tuple[str, int]:
    """The line with every secret replaced by `REDACTED`, and how many were replaced."""
    count = 0


    def scheme(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"{m.group('scheme')} {REDACTED}"

    def query(m: re.Match[str]) -> str:
        nonlocal count
        if not is_secret_name(m.group("name")):
            return m.group(0)
        count += 1
        return f"{m.group('lead')}{REDACTED}"

    def fixed(rx: re.Pattern[str], text: str, repl: str) -> str:
        nonlocal count
        text, n = rx.subn(repl, text)
        count += n
        return text

    if not _may_hold_secret(line):
        return line, 0
    line = fixed(_HF_TOKEN, line, REDACTED)
    line = fixed(_URL_USERINFO, line, r"\g<scheme>" + REDACTED + "@")
    line = _QUERY_VALUE.sub(query, line)
    line = _HEADER_SCHEME.sub(scheme, line)
    line, n = _assignments(line)
    return line, count + n


def _assignments(line: str) -> tuple[str, int]:
    """The values after secret names (`name=…`, `name: …`, `'name': '…'`, `--name …`) replaced."""
    out: list[str] = []
    pos = count = 0
    lower = line.lower()
    hits = _WORD_HIT.finditer(lower) if len(lower) == len(line) else _WORD_HIT_ANY_CASE.finditer(line)
    for hit in hits:
        if hit.start() < pos:
            continue
        a, b = hit.start(), hit.end()
        while a > pos and line[a - 1] in _NAME_CHARS:
            a -= 1
        while b < len(line) and line[b] in _NAME_CHARS:
            b += 1
        name = line[a:b]
        if not is_secret_word_name(name):
            continue
        after = (_AFTER_FLAG if name.startswith("--") and not line.startswith("=", b) else _AFTER_NAME).match(line, b)
        if after is None:
            continue
        value = after.group("value")
        if value.lower() in _NOT_A_SECRET or REDACTED in value:
            continue
        out.append(line[pos:after.start("value")])
        out.append(REDACTED)
        pos = after.end("value")
        count += 1
    if not count:
        return line, 0
    out.append(line[pos:])
    return "".join(out), count


_CHEAP = re.compile(MAY_HOLD_SECRET)


def _may_hold_secret(line: str) -> bool:
    """A quick test that skips the full rules on lines without any of their words (most of a log)."""
    return _CHEAP.search(line.lower()) is not None
