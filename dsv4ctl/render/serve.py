"""What `dsv4ctl serve` shows: the preflight decision, live progress, the outcome and the diagnosis.

While vLLM runs, fds 1 and 2 belong to the capture; this view writes to the original terminal
(`FdTee.terminal_fd`). On a terminal (stdout and stderr both TTYs, colour allowed) vLLM's lines are
printed through a Rich console with a status line underneath that follows the startup phases; when
output is not a terminal (systemd, Kubernetes, a pipe), vLLM's bytes pass through unchanged and each
phase adds one plain `dsv4ctl serve: …` line on stderr.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
from typing import Any

from rich.console import Console
from rich.text import Text

from dsv4ctl.render import plain
from dsv4ctl.serve.capture import write_all

PHASE_LABELS = {
    "starting": "starting",
    "loading_weights": "loading weights",
    "weights_loaded": "weights loaded",
    "profiling": "profiling memory",
    "kv_cache": "KV cache",
    "capturing": "capturing CUDA graphs",
    "ready": "ready",
    "failed": "failed",
    "shutdown": "shutting down",
}

PREFIX = "dsv4ctl serve:"


def terminal_is_interactive() -> bool:
    try:
        return os.isatty(sys.stdout.fileno()) and os.isatty(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


class ServeConsole:
    """The `ServeView` of `dsv4ctl.serve.session` plus the one-shot messages of the command."""

    def __init__(self, live: bool | None = None) -> None:
        self.live = terminal_is_interactive() if live is None else live
        self._tee: Any = None
        self._console = Console(file=sys.stderr, highlight=False, soft_wrap=True, **plain())
        self._status: Any = None
        self._pending: dict[int, bytes] = {}
        self._lock = threading.RLock()
        self._last_capture_step: tuple[str, int] | None = None

    # -- ServeView -------------------------------------------------------------------------------------

    def attach(self, tee: Any) -> None:
        self._tee = tee
        if tee is not None:
            stream = open(tee.terminal_fd(2), "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)  # noqa: SIM115
            self._console = Console(file=stream, highlight=False, soft_wrap=True, force_terminal=self.live or None, **plain())
        if self.live:
            self._status = self._console.status("starting vLLM…", spinner="dots")
            self._status.start()

    def detach(self) -> None:
        with self._lock:
            for fd, rest in list(self._pending.items()):
                if rest:
                    self._console.print(Text.from_ansi(rest.decode("utf-8", "replace")))
            self._pending.clear()
            if self._status is not None:
                self._status.stop()
                self._status = None
            try:
                self._console.file.flush()
            except (OSError, ValueError):
                pass
            self._tee = None
            self._console = Console(file=sys.stderr, highlight=False, soft_wrap=True, **plain())

    def echo(self, fd: int, chunk: bytes) -> None:
        """vLLM's bytes for the terminal (called by the capture's reader threads, serialised)."""
        if not self.live:
            write_all(self._tee.terminal_fd(fd) if self._tee else fd, chunk)
            return
        with self._lock:
            data = self._pending.get(fd, b"") + chunk
            *lines, rest = data.split(b"\n")
            self._pending[fd] = rest
            for raw in lines:
                text = raw.decode("utf-8", "replace").split("\r")[-1]  # a tqdm bar: keep its last redraw
                if text:
                    self._console.print(Text.from_ansi(text), soft_wrap=True)

    def progress(self, event: Any) -> None:
        phase = str(getattr(event, "phase", ""))
        text = str(getattr(event, "text", "") or PHASE_LABELS.get(phase, phase))
        label = PHASE_LABELS.get(phase, phase)
        shown = text if text.lower().startswith(label.lower()) else f"{label}: {text}" if text and text != label else label
        with self._lock:
            if self.live and self._status is not None:
                self._status.update(shown)
                if phase in ("ready", "failed", "kv_cache", "weights_loaded"):
                    self._console.print(Text(f"{PREFIX} {shown}", style=_phase_style(phase)))
            elif phase != "capturing" or self._capture_step_changed(text):
                self.say(shown)

    def _capture_step_changed(self, text: str) -> bool:
        """Plain output: a capture bar's n/N only at its start, each quarter and its end."""
        m = re.search(r"^(.*?)\s*(\d+)/(\d+)$", text)
        if not m or int(m.group(3)) == 0:
            return True
        desc, n, total = m.group(1), int(m.group(2)), int(m.group(3))
        step = (desc, 4 * n // total)
        if step == self._last_capture_step:
            return False
        self._last_capture_step = step
        return True

    # -- one-shot messages -----------------------------------------------------------------------------

    def say(self, message: str, style: str | None = None) -> None:
        line = f"{PREFIX} {message}"
        with self._lock:
            if self._tee is not None and not self.live:
                self._tee.write_terminal(2, (line + "\n").encode("utf-8", "replace"))
            else:
                self._console.print(Text(line, style=style or ""))

    def decision(self, decision: Any) -> None:
        self.say(f"model {decision.model}; --max-model-len requested: {decision.requested_text}")
        self.say(f"preflight: {decision.reason}", style="bold" if decision.action != "refuse" else "bold red")
        basis = getattr(decision, "basis", None)
        planned = (getattr(decision, "plan", None) or {}).get("vllm_version_planned")
        if basis and planned:
            self.say(f"preflight basis: {basis} KV budget; planned as vLLM {planned}")
        for note in decision.notes:
            self.say(f"preflight note: {note}")

    def dry_run(self, decision: Any) -> None:
        """`--dry-run`: the decision on stderr; on stdout (data) the command serve would run, with the environment it
        sets (the fixes the plan may rely on), so that it runs the same by itself; nothing when serve refuses."""
        self.decision(decision)
        command = decision.command_line()
        if command is not None:
            sys.stdout.write(command + "\n")
            sys.stdout.flush()

    def outcome(self, outcome: Any, interrupted_exit: int) -> None:
        children = outcome.reap
        survivors = children.survivors if children else []
        forced = (children.terminated + children.killed) if children else []
        if outcome.status == "stopped":
            self.say("vLLM shut down cleanly")
        elif outcome.status == "interrupted":
            self.say("interrupted before vLLM was serving" if not outcome.reached_ready else "stopped")
        else:
            self.say(f"vLLM failed: {outcome.error or 'no error text'}", style="bold red")
        if outcome.autofit_to is not None:
            self.say(f"vLLM auto-fit reduced max_model_len from {outcome.autofit_from:,} to {outcome.autofit_to:,}")
        if forced:
            self.say(f"stopped {len(forced)} leftover vLLM process(es) by pid: {', '.join(map(str, forced))}")
        if survivors:
            self.say(f"could not stop pid(s) {', '.join(map(str, survivors))}", style="bold red")
        self.say(f"log: {outcome.log_file} ({outcome.log_bytes:,} bytes)")


def _phase_style(phase: str) -> str:
    return {"ready": "bold green", "failed": "bold red"}.get(phase, "cyan")


def render_diagnosis(diagnosis: Any) -> None:
    """The diagnosis on stderr (the report of `serve` is talk; stdout stays vLLM's)."""
    from dsv4ctl.render.diagnose import render_diagnosis as render_diagnose

    render_diagnose(diagnosis, Console(file=sys.stderr, highlight=False, soft_wrap=True, **plain()))


def render_last_good(last: Any) -> None:
    """serve's failed start against the last good start of its launch (serve/recall.py `LastGood`), on stderr: the
    top ranked differences, each with both values and their lines, and why it ranks there; the notes; the `diff`
    command that shows the whole comparison. What the comparison does not show is not said."""
    console = Console(file=sys.stderr, highlight=False, soft_wrap=True, **plain())
    good = last.good
    if good is not None and last.differences is not None:
        console.print(Text(f"Against the last good start of this launch (GOOD: ready {good.ready_at}, {good.log_file}; "
                           "BAD: this start):",
                           style="bold"))
        if not last.differences:
            console.print("  no difference in what dsv4ctl compares (dsv4ctl diff lists what it compares)")
        for d in last.differences:
            console.print(Text.assemble(f"  {d.rank}. ", (d.name, "bold"), f" {d.status}: "
                                        f"{_shown(d, d.good)} -> {_shown(d, d.bad)}"))
            if d.bearing:
                console.print(f"     {d.bearing}")
        more = last.total - len(last.differences)
        if more > 0:
            console.print(f"  ({more} more difference{'s' if more != 1 else ''})")
    for note in last.notes:
        console.print(f"  note: {note}" if good is not None else f"Against the last good start: {note}")
    if last.diff_command:
        console.print(Text.assemble("  the whole comparison: ", (last.diff_command, "bold")))


def _shown(d: Any, seen: Any) -> str:
    """A side's value with the line it rests on (diff's value_of: `not in log`, or the default)."""
    from dsv4ctl.compare import value_of

    where = f" (line {seen.line})" if seen is not None and seen.line else ""
    return f"{value_of(d, seen)}{where}"
