"""What counts as a secret, and how it is hidden: one rule for `doctor` (environment variables) and
`collect` (every line of a gathered log). Pure.

A name is secret when it contains one of `SECRET_NAME_PARTS` (an environment variable's name, as `doctor`
shows it) or, inside a log line, when one of its words is one (`hf_token`, `api_key`, `Authorization`, but
not `max_num_batched_tokens`: a log's names are read word by word, a variable's as a whole). A value is
secret when it is a Hugging Face token, user information in a URL or a URL query parameter with a secret
name. In a log line the value after a secret name (`HF_TOKEN=…`, `--api-key …`, `'api_key': '…'`,
`Authorization: Bearer …`) is replaced by `REDACTED`, as are secret values wherever they stand.
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
# name = value, name: value, 'name': 'value', "name": "value", --name=value; and a flag's value: --name value
_VALUE = r"(?P<vq>['\"]?)(?P<value>(?:Bearer |Basic |Token )?[^\s'\",;}\]&)]+)"
_ASSIGNMENT = re.compile(r"(?P<lead>(?P<nq>['\"]?)(?P<name>-{0,2}[A-Za-z_][\w.-]*)(?P=nq)\s*[:=]\s*)" + _VALUE)
_FLAG = re.compile(r"(?P<lead>(?<![\w-])(?P<name>--[A-Za-z][\w-]*)\s+)(?!-)" + _VALUE)
_HEADER_SCHEME = re.compile(r"(?i)\b(?P<scheme>Bearer|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_URL_USERINFO = re.compile(r"(?P<scheme>://)[^/\s@]+@")
_QUERY_VALUE = re.compile(r"(?P<lead>[?&;](?P<name>[^=&;#\s]+)=)(?P<value>[^&;#\s'\"]+)")
_NOT_A_SECRET = {"none", "null", "true", "false", "", "***", REDACTED.lower(), "<redacted>", "redacted"}


def is_secret_name(name: str) -> bool:
    """An environment variable's name that holds a secret (`HF_TOKEN`, `AWS_SECRET_ACCESS_KEY`)."""
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def is_secret_word_name(name: str) -> bool:
    """A name inside a log line that holds a secret, judged by its words (`hf_token`, `apiKey`, `--api-key`)."""
    words = {w.upper() for w in _WORD_SPLIT.split(name) if w}
    return bool(words & _SECRET_WORDS)


def looks_secret(value: str) -> bool:
    """A Hugging Face token, user information in a URL, or a URL query parameter with a secret name
    (`?token=`, `&api_key=`, `X-Amz-Signature=`...)."""
    if _HF_TOKEN.search(value) or _URL_CREDENTIALS.search(value):
        return True
    return any(is_secret_name(match.group(1)) for match in _QUERY_PARAM.finditer(value))


def redact_line(line: str) -> tuple[str, int]:
    """The line with every secret replaced by `REDACTED`, and how many were replaced."""
    count = 0

    def assignment(m: re.Match[str]) -> str:
        nonlocal count
        value = m.group("value")
        if not is_secret_word_name(m.group("name")) or value.lower() in _NOT_A_SECRET or REDACTED in value:
            return m.group(0)
        count += 1
        return f"{m.group('lead')}{m.group('vq')}{REDACTED}"

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
    line = _ASSIGNMENT.sub(assignment, line)
    line = _FLAG.sub(assignment, line)
    return line, count


_CHEAP = re.compile(r"(?i)hf_|://|token|key|secret|pass|credential|auth|signature|bearer|basic|cookie")


def _may_hold_secret(line: str) -> bool:
    """A quick test that skips the full rules on lines without any of their words (most of a log)."""
    return _CHEAP.search(line) is not None
