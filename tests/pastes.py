"""Pastes: what operators paste of a log, built from the project's own labelled fixture logs.

A fixture log (its `# ` header dropped) is cut to an *excerpt* (`EXCERPTS`: the whole log, its last 40 lines,
the cause line alone, a window around it, the traceback that holds it without its header, the exception line
with the 6 lines above it) and every line of the excerpt is passed through a *wrapper* (`WRAPPERS`: what
docker compose, kubectl, journald, CI systems, Ray, colour codes or a copy-paste do to a line). The
expected cause line is the fixture's own line; what diagnose must quote is that line's message as
`dsv4ctl.logs.reader.parse_line` reads it in the original log.

Deterministic: timestamps and pids are derived from the line's position, nothing is random.
Used by tests/unit/test_logs_pastes.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dsv4ctl.logs.reader import LogLine, parse_line

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
CATALOGUE_DIR = FIXTURES / "catalogue"
EXAMPLES = ROOT / "dsv4ctl" / "examples"

# ------------------------------------------------------------------------------------------------ fixtures


@dataclass
class Fixture:
    """A labelled log: its content lines (header dropped) and the line that holds the cause.

    kind: "failed" (verdict failed, root cause `expected`), "symptom" (verdict failed, a finding `expected`
    quotes the line; the root cause is what it wraps), "request" (verdict not failed, a finding
    `expected` quotes the line), "control" (verdict not failed; no cause line).
    cause: 0-based index into `lines` (None for controls).
    context: 0-based indices of lines that identify the class besides a line the signature matches (a
    derived signature: all of them must be in the paste for the id to be required).
    """

    stem: str
    path: Path
    kind: str
    expected: str | None
    lines: list[str]
    header: int  # header lines dropped (file line number = index + header + 1)
    cause: int | None = None
    context: tuple[int, ...] = ()
    parsed: list[LogLine] = field(default_factory=list)

    @property
    def cause_message(self) -> str:
        assert self.cause is not None
        return self.parsed[self.cause].message


def read_fixture(path: Path) -> tuple[list[str], int]:
    """The content lines of a fixture log (CR kept: it is not a line end there) and the number of `# ` header
    lines dropped from its top."""
    lines = path.read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header = 0
    while header < len(lines) and lines[header].startswith("# "):
        header += 1
    return lines[header:], header


def make_fixture(path: Path, kind: str, expected: str | None, cause_lineno: int | None = None,
                 cause_text: str | None = None, context_linenos: tuple[int, ...] = ()) -> Fixture:
    """`cause_lineno`: the 1-based line number in the file; or `cause_text`: a substring of the cause line's
    message (the first content line holding it)."""
    lines, header = read_fixture(path)
    parsed = [parse_line(raw, path.name, i + header + 1) for i, raw in enumerate(lines)]
    cause = None
    if cause_lineno is not None:
        cause = cause_lineno - header - 1
        assert 0 <= cause < len(lines), (path.name, cause_lineno)
    elif cause_text is not None:
        cause = next(i for i, ln in enumerate(parsed) if cause_text in ln.message)
    context = tuple(n - header - 1 for n in context_linenos)
    return Fixture(path.stem, path, kind, expected, lines, header, cause, context, parsed)


# ------------------------------------------------------------------------------------------------ wrappers

_TAG_RE = re.compile(r"^(\((?:[A-Za-z_][\w.:-]*(?:\s+rank=\d+)?\s+)?pid=(?:\d+|\.\.\.)(?:,\s*ip=[^)\s]*)?\))( ?)")
_RECORD_RE = re.compile(
    r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)( )(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)? \[[^\]\s]+\])( ?)")
_WORKER_TAG_RE = re.compile(r"\((?:Worker\w*|VllmWorker(?:Process)?[^)]*?) pid=(\d+)\)")
_LEVEL_COLOUR = {"DEBUG": "90", "INFO": "32", "WARNING": "33", "WARN": "33", "ERROR": "31", "CRITICAL": "1;31"}
_ESC_CODES_RE = re.compile(r"\x1b\[[0-9;]*m|\[[0-9]{1,3}(?:;[0-9]{1,3})*m")
_COMPOSE_RE = re.compile(r"^[A-Za-z0-9][\w.-]{0,62}\s*\|")


def _clock(i: int) -> tuple[int, int, int]:
    """(hour, minute, second) of the i-th line: 09:00:01 plus one second every 7 lines."""
    s = 1 + i // 7
    return 9 + s // 3600, (s // 60) % 60, s % 60


def _iso(i: int, digits: int, zone: str) -> str:
    h, m, s = _clock(i)
    frac = f"{(123456789 + 1000 * i) % 10**9:09d}"[:digits]
    return f"2026-11-30T{h:02d}:{m:02d}:{s:02d}.{frac}{zone}"


def compose(line: str, i: int) -> str:
    return f"vllm-1  | {line}"


def kubectl(line: str, i: int) -> str:
    """`kubectl logs --timestamps --prefix` as the brief shows it (time first)."""
    return f"{_iso(i, 9, 'Z')} [pod/vllm-0/vllm] {line}"


def kubectl_prefix_first(line: str, i: int) -> str:
    """`kubectl logs --prefix --timestamps` with the prefix kubectl adds in front of the container's timestamp."""
    return f"[pod/vllm-0/vllm] {_iso(i, 9, 'Z')} {line}"


def journald(line: str, i: int) -> str:
    h, m, s = _clock(i)
    return f"Nov 30 {h:02d}:{m:02d}:{s:02d} gpu-node-3 vllm[2314]: {line}"


def rfc3339(line: str, i: int) -> str:
    return f"{_iso(i, 6, '+00:00')} {line}"


def gha(line: str, i: int) -> str:
    """GitHub Actions' raw log: 7 fractional digits and Z."""
    return f"{_iso(i, 7, 'Z')} {line}"


def buildkite(line: str, i: int) -> str:
    return f"\x1b_bk;t={1764493201000 + 10 * i}\x07{line}"


def _colour(line: str, esc: str) -> str:
    """vLLM's coloured format (VLLM_LOGGING_COLOR): the process tag cyan, the level in its colour, the time and
    location grey. Lines that already carry colour codes are left alone."""
    if _ESC_CODES_RE.search(line):
        return line
    out = ""
    rest = line
    m = _TAG_RE.match(rest)
    if m:
        out += f"{esc}[36m{m.group(1)}{esc}[0m{m.group(2)}"
        rest = rest[m.end():]
    m = _RECORD_RE.match(rest)
    if m:
        c = _LEVEL_COLOUR[m.group(1)]
        out += f"{esc}[{c}m{m.group(1)}{esc}[0m{m.group(2)}{esc}[90m{m.group(3)}{esc}[0m{m.group(4)}"
        rest = rest[m.end():]
    return out + rest


def ansi_esc(line: str, i: int) -> str:
    return _colour(line, "\x1b")


def ansi_bare(line: str, i: int) -> str:
    """The same colour codes with their ESC byte lost in a copy-paste ("[36m(Worker_TP0 pid=80)[0m")."""
    return _colour(line, "")


def ray(line: str, i: int) -> str:
    """Ray's worker prefix in place of vLLM's worker tag: `(RayWorkerWrapper pid=<pid>, ip=10.0.0.2)`. The
    pid is kept, so two workers stay two processes; lines of other processes are left alone."""
    return _WORKER_TAG_RE.sub(lambda m: f"(RayWorkerWrapper pid={m.group(1)}, ip=10.0.0.2)", line)


def _text(ln, indent: str = "") -> str:
    # The CUDA driver's "coredump: " is part of its own text (users keep it); the reader takes it as a tag.
    if not ln.message:
        return ""
    return f"coredump: {indent}{ln.message}" if ln.process == "coredump" else indent + ln.message


def strip(line: str, i: int) -> str:
    """vLLM's record prefix (and any wrapper) removed: the message text as users paste it, its indentation
    (a traceback's frames and code lines) kept."""
    ln = parse_line(line)
    return _text(ln, " " * ln.indent)


def strip_flat(line: str, i: int) -> str:
    """The message text with its indentation lost too (a log viewer's message field, a chat paste)."""
    return _text(parse_line(line))


def quote(line: str, i: int) -> str:
    """A GitHub / e-mail reply quoting the log: `> ` before every line."""
    return f"> {line}"


def crlf(line: str, i: int) -> str:
    """Windows line ends (a paste saved on Windows): CR before every LF."""
    return line if line.endswith("\r") else f"{line}\r"


def srun(line: str, i: int) -> str:
    """Slurm's `srun --label`: the task id before every line of a multi-node job."""
    return f"0: {line}"


def compose_colour(line: str, i: int) -> str:
    """docker compose on a terminal colours the service name: `ESC[36mvllm-1  |ESC[0m `."""
    return f"\x1b[36mvllm-1  |\x1b[0m {line}"


_PID_RE = re.compile(r"^(\([^()]*?pid=)\d+")
_TIME_RE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)? \[")


def elided(line: str, i: int) -> str:
    """What users elide before pasting: the pid (`pid=...`) and the record's time (`ERROR ... [file.py:N]`)."""
    line = _PID_RE.sub(lambda m: m.group(1) + "...", line, count=1)
    m = _TIME_RE.search(line[:200])
    if m:
        line = line[: m.start()] + f"{m.group(1)} ... [" + line[m.end():]
    return line


def docker_json(line: str, i: int) -> str:
    """Docker's json-file driver (the file under /var/lib/docker/containers/): one JSON entry per line."""
    return json.dumps({"log": line + "\n", "stream": "stderr", "time": _iso(i, 9, "Z")}, separators=(",", ":"))


def cri(line: str, i: int) -> str:
    """The CRI log format of /var/log/containers: a long line as the runtime splits it, P parts then its F part."""
    parts = [line[k:k + 80] for k in range(0, len(line), 80)] if len(line) > 120 else [line]
    return "\n".join(f"{_iso(i, 9, 'Z')} stderr {'P' if k < len(parts) - 1 else 'F'} {p}" for k, p in enumerate(parts))


def stacked(*fns: Callable[[str, int], str]) -> Callable[[str, int], str]:
    def wrap(line: str, i: int) -> str:
        for fn in fns:  # innermost first
            line = fn(line, i)
        return line
    return wrap


def plain(line: str, i: int) -> str:
    return line


WRAPPERS: dict[str, Callable[[str, int], str]] = {
    "plain": plain,
    "compose": compose,
    "kubectl": kubectl,
    "kubectl_pf": kubectl_prefix_first,
    "journald": journald,
    "rfc3339": rfc3339,
    "gha": gha,
    "buildkite": buildkite,
    "ansi_esc": ansi_esc,
    "ansi_bare": ansi_bare,
    "ray": ray,
    "strip": strip,
    "compose_ansi": stacked(ansi_esc, compose),  # docker compose with VLLM_LOGGING_COLOR
    "gha_ansi_bare": stacked(ansi_bare, gha),  # a CI log whose colour codes lost their ESC byte
    # beyond the brief's list: other shapes of real pastes
    "strip_flat": strip_flat,
    "crlf": crlf,
    "compose_colour": compose_colour,
    "elided": elided,
    "srun": srun,
    "quote": quote,
    "fenced": plain,  # the excerpt inside a Markdown code fence (the fence lines are added in `pastes`)
    # the files shippers write (dsv4ctl/logs/formats.py unwraps them)
    "docker_json": docker_json,
    "cri": cri,
}
FENCE = ("```text", "```")

# ------------------------------------------------------------------------------------------------ excerpts

_HEADER_RE = re.compile(r"Traceback \(most recent call last\):?\s*$")
_CHAIN_RE = re.compile(r"^(?:The above exception was the direct cause|During handling of the above exception)")
_CARET_RE = re.compile(r"^[\^~]+$")


def traceback_span(fx: Fixture) -> tuple[int, int, int, str] | None:
    """(header, first frame, end, role) of the traceback that holds the cause line, as 0-based indices into
    the content lines; role is "exception" when the cause is the traceback's exception line (the first one
    after the frames), "frame" when it is a frame or code line, "detail" when an indented line under the
    exception. None when the cause is not inside a traceback."""
    c = fx.cause
    assert c is not None
    L = fx.parsed
    proc = L[c].process
    same = [i for i in range(len(L)) if L[i].process == proc]
    headers = [i for i in same if i <= c and _HEADER_RE.search(L[i].message)]
    for h in reversed(headers):
        state = "frames"
        first = end = None
        role = None
        exc_line = None
        for i in same:
            if i <= h:
                continue
            ln = L[i]
            msg, ind = ln.message, ln.indent
            if state == "frames":
                if msg.startswith('File "'):
                    first = i if first is None else first
                    end = i
                    if i == c:
                        role = "frame"
                    continue
                if ind >= 4 or _CARET_RE.match(msg) or msg.startswith("...") or (not msg and first is None):
                    end = i
                    if i == c:
                        role = "frame"
                    continue
                if first is None:
                    break  # no frame: not a traceback
                state, exc_line, end = "exc", i, i
                if i == c:
                    role = "exception"
                continue
            if state == "exc":
                if not msg or _CHAIN_RE.match(msg):
                    state = "chain"
                    continue
                if _HEADER_RE.search(msg):
                    state = "frames"
                    continue
                if ind >= 2:
                    end = i
                    if i == c:
                        role = "detail"
                    continue
                break
            if state == "chain":
                if not msg or _CHAIN_RE.match(msg):
                    continue
                if _HEADER_RE.search(msg):
                    state = "frames"
                    continue
                break
        if first is not None and role is not None and first <= c <= end:
            return h, first, end, role
    return None


def excerpts(fx: Fixture) -> dict[str, tuple[int, int]]:
    """name -> (start, stop) slice of the content lines, for the excerpts that hold the cause line."""
    n = len(fx.lines)
    out: dict[str, tuple[int, int]] = {"whole": (0, n)}
    if fx.cause is None:
        if n > 40:
            out["tail40"] = (n - 40, n)
        return out
    c = fx.cause
    if n - 40 <= c and n > 40:
        out["tail40"] = (n - 40, n)
    out["alone"] = (c, c + 1)
    out["window"] = (max(0, c - 15), min(n, c + 6))
    tb = traceback_span(fx)
    if tb is not None:
        h, first, end, role = tb
        out["tb_headless"] = (first, end + 1)
        if role == "exception" and c - 6 >= 0:
            out["exc_plus6"] = (c - 6, c + 1)
        # from the code line under the first frame: a paste that starts inside a frame
        if first + 1 < c and fx.parsed[first + 1].indent >= 4 and not fx.parsed[first + 1].message.startswith("File "):
            out["tb_mid"] = (first + 1, end + 1)
    if c + 1 < n:
        out["from_cause"] = (c, n)
    if out["window"][0] > 4:
        out["gap"] = (out["window"][0], out["window"][1])  # the first 3 lines, a `...` line, then the window
    return out


# Which wrappers each excerpt is pasted through (a representative set, not the cross product): every wrapper
# on the whole log and on the cause line alone; a few on the rest.
PLAN: dict[str, tuple[str, ...]] = {
    "whole": tuple(WRAPPERS),
    "alone": tuple(WRAPPERS),
    "window": ("plain", "compose", "kubectl", "journald", "ansi_bare", "strip", "strip_flat", "elided", "srun",
               "quote"),
    "tail40": ("plain", "gha", "buildkite", "ray", "compose_ansi"),
    "tb_headless": ("plain", "strip", "compose", "ansi_esc", "kubectl_pf", "strip_flat", "crlf", "fenced", "srun",
                    "quote", "docker_json", "cri"),
    "exc_plus6": ("plain", "strip", "compose", "ansi_bare", "journald", "strip_flat"),
    "tb_mid": ("plain", "strip", "compose", "ansi_bare"),
    "from_cause": ("plain", "kubectl", "strip", "fenced"),
    "gap": ("plain", "compose", "strip", "elided"),
}
CONTROL_PLAN: dict[str, tuple[str, ...]] = {"whole": tuple(WRAPPERS), "tail40": tuple(WRAPPERS)}


@dataclass(frozen=True)
class Paste:
    fixture: str
    excerpt: str
    wrapper: str
    text: bytes
    start: int  # the excerpt's first content line (0-based)
    stop: int
    gap: bool = False  # the first 3 lines and a `...` line come before lines start..stop

    @property
    def id(self) -> str:
        return f"{self.fixture}-{self.excerpt}-{self.wrapper}"

    def holds(self, index: int) -> bool:
        return self.start <= index < self.stop or (self.gap and index < 3)

    def indices(self) -> list[int]:
        return ([0, 1, 2] if self.gap else []) + list(range(self.start, self.stop))


def _already(fx: Fixture, wrapper: str) -> bool:
    """Whether the fixture's lines already carry what the wrapper adds (a compose log, colour codes): the
    paste would add a second layer no tool writes."""
    sample = [ln for ln in fx.lines if ln.strip()][:5]
    if wrapper in ("compose", "compose_ansi", "kubectl", "kubectl_pf") and any(_COMPOSE_RE.match(ln) for ln in sample):
        return True  # compose in compose, or kubectl around compose
    return False


def pastes(fx: Fixture) -> list[Paste]:
    plan = CONTROL_PLAN if fx.kind == "control" else PLAN
    out: list[Paste] = []
    seen: set[tuple[str, bytes]] = set()
    for excerpt, (start, stop) in excerpts(fx).items():
        for wrapper in plan.get(excerpt, ()):
            if _already(fx, wrapper):
                continue
            fn = WRAPPERS[wrapper]
            lines = [fn(raw, i) for i, raw in enumerate(fx.lines[start:stop], start)]
            if excerpt == "gap":
                lines = [fn(raw, i) for i, raw in enumerate(fx.lines[:3])] + ["..."] + lines
            if wrapper == "fenced":
                lines = [FENCE[0], *lines, FENCE[1]]
            text = "".join(ln + "\n" for ln in lines).encode("utf-8")
            if (excerpt, text) in seen:
                continue  # the wrapper changed nothing here (Ray on a log without worker tags)
            seen.add((excerpt, text))
            out.append(Paste(fx.stem, excerpt, wrapper, text, start, stop, gap=excerpt == "gap"))
    return out
