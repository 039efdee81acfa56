"""Output for people (Rich) and for machines (JSON).

stdout is data, stderr is talk: reports and JSON go to stdout; progress, warnings, errors and hints
go to stderr. JSON is written with `json.dumps` straight to stdout, never through Rich (which wraps
long lines when piped). NO_COLOR turns every escape code off (`plain`).

This package holds the shared helpers; each command's renderers live in a module of their own
(`render.diagnose`, `render.fit`, `render.doctor`, `render.serve`), so a renderer sits next to the
data it shows and commands can change their output without touching each other.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Rich loads when a console is made: `check --once`'s process never makes one
    from collections.abc import Sequence

    from rich.console import Console

JSON_SCHEMA_VERSION = 1


class _Stdout:
    """sys.stdout as it is at each write, quiet once its reader has gone (`dsv4ctl diagnose … | head -1`).

    A closed pipe must not turn into a traceback or exit status 1: the rest of the report is dropped and
    the command still ends with its own exit code (the verdict's, for diagnose)."""

    reader_gone = False
    json_written = False

    def write(self, text: str) -> int:
        if not _Stdout.reader_gone:
            try:
                return sys.stdout.write(text)
            except BrokenPipeError:
                stdout_reader_gone()
        return len(text)

    def flush(self) -> None:
        if not _Stdout.reader_gone:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                stdout_reader_gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stdout, name)


STDOUT = _Stdout()

# The blanks Rich pads a line's last cell with (and the style codes around them), before the line's end.
_TRAILING_RE = re.compile(r"(?:[ \t]|\x1b\[[0-9;]*m)*[ \t](?:[ \t]|\x1b\[[0-9;]*m)*(?=\n)")
_STYLE_RE = re.compile(r"\x1b\[[0-9;]*m")


class _Report(_Stdout):
    """stdout for a report: each line without the blanks Rich pads its tables and fills with (a pasted report, a
    diff, a grep `$` never meets them); the style codes among them are kept."""

    def write(self, text: str) -> int:
        if " \n" in text or "\t\n" in text or "m\n" in text:
            text = _TRAILING_RE.sub(lambda m: "".join(_STYLE_RE.findall(m.group(0))), text)
        return super().write(text)


REPORT = _Report()


def reset_stdout() -> None:
    """A fresh command: no JSON document written yet, stdout's reader assumed present."""
    _Stdout.json_written = False
    _Stdout.reader_gone = False


def stdout_reader_gone() -> None:
    """Drop all further output: point file descriptor 1 at /dev/null so no flush (not even the
    interpreter's last one at exit) fails again."""
    _Stdout.reader_gone = True
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (tests), or already closed
        pass


def plain() -> dict[str, Any]:
    """Console settings for NO_COLOR (no-color.org: set and not empty): no escape codes at all, bold and dim
    included (Rich's own NO_COLOR drops colours only); `--help` promises plain output."""
    return {"color_system": None} if os.environ.get("NO_COLOR") else {}


def out_console() -> Console:
    """The console for a command's report (stdout)."""
    from rich.console import Console

    return Console(file=REPORT, highlight=False, soft_wrap=False, **plain())  # type: ignore[arg-type]


def err_console() -> Console:
    """The console for talk: progress, warnings, errors, hints (stderr)."""
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True, **plain())


def emit_json(payload: dict[str, Any]) -> None:
    """Write one JSON document to stdout. Every payload carries `schema_version`."""
    payload = {"schema_version": JSON_SCHEMA_VERSION, **payload}
    _Stdout.json_written = True
    STDOUT.write(json.dumps(payload, indent=2, default=_json_default) + "\n")
    STDOUT.flush()


def emit_json_error(message: str, hint: str | None, exit_code: int) -> None:
    """With `--json`, a failure is a JSON document too: `{"schema_version": 1, "error": {...}}` on stdout.

    Skipped when the command already wrote its document (e.g. `serve --dry-run --json` refusing:
    the decision says why); stdout holds one JSON document either way."""
    if not _Stdout.json_written:
        emit_json({"error": {"message": message, "hint": hint, "exit_code": int(exit_code)}})


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def error_line(message: str, hint: str | None = None) -> None:
    """The one actionable line (plus a hint) that every failure is reduced to.

    Written as it stands where Rich would write the same bytes (stderr not a terminal, no variable that makes Rich
    colour anyway, no tab or control character for Rich to expand or drop), so a probe's error costs no Rich."""
    if _plain_stderr(message, hint):
        sys.stderr.write(f"Error: {message}\n" + (f"Hint: {hint}\n" if hint else ""))
        sys.stderr.flush()
        return
    from rich.text import Text

    console = err_console()
    # The words as they are: a message may hold brackets ("[flags...]", "[Errno 2]") that are not markup.
    console.print(Text.assemble(("Error:", "bold red"), " ", message), highlight=False)
    if hint:
        console.print(Text.assemble(("Hint:", "yellow"), " ", hint), highlight=False)


def _plain_stderr(*texts: str | None) -> bool:
    if any(os.environ.get(name) for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")):
        return False
    try:
        if sys.stderr.isatty():
            return False
    except (AttributeError, ValueError):  # no stderr, or a closed one: Rich's own way
        return False
    return all(t is None or t.isprintable() for t in texts)


def warning_line(message: str) -> None:
    from rich.text import Text

    err_console().print(Text.assemble(("Warning:", "yellow"), " ", message), highlight=False)


# ---------------------------------------------------------------------------------------------
# Width: commands are never wrapped or cut, prose wraps with its indent, evidence is cut around
# (never through) the numbers that matter. Any terminal width, 80 columns when piped.
# ---------------------------------------------------------------------------------------------

MIN_WRAP_WIDTH = 40
ELLIPSIS = "…"
# A number with its unit, as logs print them: 980224, 1,048,576, 9.81 GiB, 168.2 s, 14%, 0.92.
NUMBER_RE = re.compile(r"\d[\d,]*(?:\.\d+)?(?: ?(?:GiB|MiB|KiB|GB|MB|KB|B|s|ms|%|x))?(?![\w.])")


def print_command(console: Console, command: str, indent: str = "  ") -> None:
    """A command on a line of its own, never wrapped or cropped at any width: it pastes and runs."""
    console.print(indent + command, markup=False, highlight=False, soft_wrap=True, crop=False)


def wrap_prose(text: str, width: int, indent: str = "", subsequent_indent: str | None = None) -> list[str]:
    """Wrap at spaces only; continuation lines keep the indent (or the hanging indent given).

    Words longer than a line (paths, flags, numbers) are never split: such a line runs long."""
    lines = textwrap.wrap(
        text,
        width=max(width, MIN_WRAP_WIDTH),
        initial_indent=indent,
        subsequent_indent=indent if subsequent_indent is None else subsequent_indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [indent.rstrip()]


def print_prose(console: Console, text: str, indent: str = "", subsequent_indent: str | None = None,
                style: str | None = None) -> None:
    """Print `text` wrapped to the console's width by `wrap_prose` (Rich does no wrapping of its own)."""
    for line in wrap_prose(text, console.width, indent, subsequent_indent):
        console.print(line, markup=False, highlight=False, soft_wrap=True, style=style)


# A command inside a note: the environment it sets, then dsv4ctl's or vLLM's command line, to the end.
NOTE_COMMAND_RE = re.compile(r"(?:[A-Z][A-Z0-9_]*=\S+ )*(?:env -u \S+ )?(?:dsv4ctl [a-z][a-z-]*|vllm serve) \S.*$")


def print_note(console: Console, label: str, text: str) -> None:
    """`Note: …` (or `Warning: …`) wrapped to the console's width with a hanging indent; a command the text ends
    with goes on a line of its own, whole, so that it can be copied."""
    m = NOTE_COMMAND_RE.search(text)
    prose, command = (text[: m.start()].rstrip(), m.group(0)) if m else (text, None)
    print_prose(console, f"{label} {prose}" if prose else label, subsequent_indent="  ")
    if command:
        print_command(console, command)


def cut_around(text: str, width: int, keep: Sequence[str] = ()) -> str:
    """Shorten a quoted log line to about `width` characters around what matters, with `…` at the cuts.

    What matters: the first match of a `keep` regex (the evidence pattern), else the numbers. Cuts
    fall between words, so no number, path piece or flag is cut through; when the part that matters
    is itself wider than `width` it is kept whole (a long line beats a wrong number)."""
    if len(text) <= width:
        return text
    focus = None
    for pattern in keep:
        match = re.search(pattern, text)
        if match:
            focus = (match.start(), match.end())
            break
    numbers = [m.span() for m in NUMBER_RE.finditer(text)]
    if focus is None:
        if not numbers:
            focus = (0, 0)
        else:
            start, end = numbers[0]
            for n_start, n_end in numbers[1:]:  # as many numbers as fit
                if n_end - start > width - 2:
                    break
                end = n_end
            focus = (start, end)
    start, end = _whole_words(text, *focus)
    budget = width - (end - start) - 2  # the two ellipses
    if budget <= 0:
        return (ELLIPSIS if start > 0 else "") + text[start:end].strip() + (ELLIPSIS if end < len(text) else "")
    right_room = len(text) - end
    left = min(start, max(budget // 2, budget - right_room))
    right = min(right_room, budget - left)
    new_start, new_end = _whole_words(text, start - left, end + right, shrink=True)
    new_start, new_end = min(new_start, start), max(new_end, end)
    head = ELLIPSIS if new_start > 0 else ""
    tail = ELLIPSIS if new_end < len(text) else ""
    return head + text[new_start:new_end].strip() + tail


def _whole_words(text: str, start: int, end: int, shrink: bool = False) -> tuple[int, int]:
    """Move [start, end) to word boundaries: outwards (grow) or inwards (shrink)."""
    start, end = max(start, 0), min(end, len(text))
    if shrink:
        while 0 < start < len(text) and not text[start - 1].isspace():
            start += 1
        while 0 < end < len(text) and not text[end].isspace():
            end -= 1
        return start, max(end, start)
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    while end < len(text) and not text[end].isspace():
        end += 1
    return start, end
