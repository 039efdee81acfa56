"""Where each vLLM process stood: its Python stacks, written before anything ends it (`serve --watchdog`) or on
request (`check --dump`).

Two ways, the first that is here:
- `py-spy dump --nonblocking --pid P` (reads the process's memory, stops nothing): its output comes back as lines;
- Python's faulthandler through STACK_SIGNAL: dsv4ctl's `vllm.general_plugins` plugin registers it in every vLLM
  process (`dsv4ctl/fixes/stacks.py`), writing every thread's stack to that process's own stderr (under
  `dsv4ctl serve`, the log). A signal is sent only to a process whose kernel status shows the signal caught
  (/proc/PID/status `SigCgt`): to any other, SIGUSR2's default action would end it. A stopped process (SIGSTOP)
  runs its handler only once continued; `resume_stopped` says whether to continue it (the watchdog, which ends
  the server next, does; `check --dump` never does).

vLLM's processes are told by their titles (vllm/utils/system_utils.py `set_process_title`: `VLLM::EngineCore`,
`VLLM::EngineCore_DP0`, `VLLM::Worker_TP0`, `VLLM::APIServer_0`, `VLLM::DPCoordinator`; the prefix is
`VLLM_PROCESS_NAME_PREFIX`, "VLLM" by default).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

STACK_SIGNAL = signal.SIGUSR2  # vLLM 0.27.1-0.34.0 handle SIGINT, SIGTERM, SIGQUIT, SIGTSTP; none SIGUSR1/2
PY_SPY_TIMEOUT_S = 20.0
WRITE_WAIT_S = 1.0  # for the signalled processes to write their stacks (faulthandler writes at once, in C)
_TITLE = re.compile(r"^\w+::(?:EngineCore|Worker|APIServer|DPCoordinator)")


@dataclass(frozen=True)
class Target:
    pid: int
    title: str


def vllm_processes(root_pid: int | None = None) -> list[Target]:
    """vLLM's processes by title: `root_pid`'s descendants (serve knows its own), or every process of this host."""
    import psutil

    if root_pid is not None:
        try:
            procs: Iterable[Any] = psutil.Process(root_pid).children(recursive=True)
        except psutil.Error:
            return []
    else:
        procs = psutil.process_iter()
    out = []
    for proc in procs:
        try:
            name = proc.name()
        except psutil.Error:
            continue
        if _TITLE.match(name):
            out.append(Target(proc.pid, name))
    return sorted(out, key=lambda t: t.pid)


def compiler_processes(root_pid: int, names: frozenset[str]) -> list[tuple[int, str, str]]:
    """Compilers running under `root_pid`'s vLLM processes (pid, name, command line), oldest first."""
    import psutil

    found = []
    for target in vllm_processes(root_pid):
        try:
            children = psutil.Process(target.pid).children(recursive=True)
        except psutil.Error:
            continue
        for proc in children:
            try:
                name = proc.name()
                command = " ".join(proc.cmdline()) if name in names else ""
                if command:  # no command line: a process between fork and exec, or ending (nothing compiling)
                    found.append((proc.create_time(), proc.pid, name, command))
            except psutil.Error:
                continue
    return [(pid, name, command) for _, pid, name, command in sorted(found)]


def catches(pid: int, signum: int = STACK_SIGNAL) -> bool | None:
    """Whether the process has a handler for the signal (/proc/PID/status SigCgt); None where unreadable."""
    return _status_mask(pid, "SigCgt", signum)


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and line.split()[1] in ("T", "t") for line in f)
    except OSError:
        return False


def _status_mask(pid: int, field: str, signum: int) -> bool | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return bool(int(line.split()[1], 16) >> (int(signum) - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def dump_stacks(targets: list[Target], *, resume_stopped: bool = False, py_spy: str | None = None,
                say: Callable[[str], None] | None = None) -> list[str]:
    """The stacks of each target, as lines for the log: py-spy's output where py-spy is installed; otherwise what
    was signalled (the processes write their own stacks to their stderr). `say` is called with each line before
    the signal it announces is sent, so a log shows the line, then the process's stacks."""
    out: list[str] = []

    def tell(line: str) -> None:
        out.append(line)
        if say is not None:
            say(line)

    py_spy = py_spy if py_spy is not None else shutil.which("py-spy")
    if not targets:
        tell("no vLLM process found (titles VLLM::EngineCore, VLLM::Worker…): no stacks")
        return out
    if py_spy:
        for line in _py_spy(py_spy, targets):
            tell(line)
        return out
    name, sent = signal.Signals(STACK_SIGNAL).name, 0
    for target in targets:
        who = f"pid {target.pid} ({target.title})"
        caught = catches(target.pid)
        if not caught:
            why = "unreadable" if caught is None else "not caught"
            tell(f"{who}: {name} {why} there (dsv4ctl's vLLM plugin not loaded in it?): no stacks; install py-spy "
                 "for them")
            continue
        was_stopped = stopped(target.pid)
        if was_stopped and not resume_stopped:
            tell(f"{who}: stopped (SIGSTOP): {name} sent; it writes its stacks once continued")
        elif was_stopped:
            tell(f"{who}: stopped (SIGSTOP): {name} sent and continued (SIGCONT) so that it writes every thread's "
                 "stack to its stderr (the server's log):")
        else:
            tell(f"{who}: {name} sent: faulthandler writes every thread's stack to its stderr (the server's log):")
        try:
            os.kill(target.pid, STACK_SIGNAL)
            if was_stopped and resume_stopped:
                os.kill(target.pid, signal.SIGCONT)
        except OSError as exc:
            tell(f"{who}: {exc.strerror or exc}: no stacks")
            continue
        sent += 1
        time.sleep(WRITE_WAIT_S if was_stopped else 0.0)  # one process's stacks at a time when it was stopped
    if sent:
        time.sleep(WRITE_WAIT_S)
    return out


def _py_spy(py_spy: str, targets: list[Target]) -> list[str]:
    lines = []
    for target in targets:
        lines.append(f"py-spy dump --pid {target.pid} ({target.title}):")
        try:
            done = subprocess.run([py_spy, "dump", "--nonblocking", "--pid", str(target.pid)], capture_output=True,
                                  text=True, timeout=PY_SPY_TIMEOUT_S)
            text = (done.stdout + done.stderr).rstrip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            text = f"py-spy failed: {exc}"
        lines += [f"  {line}" for line in text.splitlines()]
    return lines


def dump_this_process(file: Any) -> None:
    """This process's threads (serve's own: vLLM's API server), written by faulthandler to `file`."""
    import faulthandler

    faulthandler.dump_traceback(file=file, all_threads=True)
