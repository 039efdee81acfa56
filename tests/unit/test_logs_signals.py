"""Stopping a big `dsv4ctl diagnose`: SIGTERM and SIGHUP end its scanning processes too.

A real command in a subprocess scans a generated 64 MiB log with two processes (the size at which the
parallel scan starts). The log is made of short error lines, so every one of its ~2 million lines is
selected: the scanning child fills its pipe and waits on it while diagnose goes through its own half
(seconds, however cheap the analysis of a line becomes), which is the state in which a stopped diagnose
used to leave the child behind (re-parented, blocked on the pipe forever, holding the caller's stdout open).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dsv4ctl.logs import parallel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and fork: Linux")

REPO = Path(__file__).resolve().parents[2]
LINES = ("ERROR 11:00:{s:02d} boom\n", "ValueError: {s}\n", 'File "x.py", line {s}\n', "Traceback {s}\n")


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("signals") / "errors.log"
    block = "".join(line.format(s=s) for s in range(60) for line in LINES).encode() * 900  # ~1 MiB
    with open(path, "wb") as f:
        while f.tell() < parallel.PARALLEL_MIN_BYTES + len(block):
            f.write(block)
    return path


def _start(log: Path) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """`python -m dsv4ctl diagnose LOG --json` with two scanning processes, once its child is scanning."""
    env = {**os.environ, parallel.WORKERS_ENV: "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsv4ctl", "diagnose", str(log), "--json"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    children: list[psutil.Process] = []
    while time.monotonic() < deadline and proc.poll() is None:
        children = me.children(recursive=True)
        if children:
            break
        time.sleep(0.01)
    assert children, "diagnose never started a scanning process"
    time.sleep(0.3)  # the child fills its pipe and blocks on it
    assert proc.poll() is None, "diagnose ended before it could be signalled; the test log is too small"
    return proc, children


def _gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(procs: list[psutil.Process], timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in procs if not _gone(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in procs if not _gone(p)]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_ends_diagnose_and_its_scanners(big_log, sig, code):
    proc, children = _start(big_log)
    try:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)  # EOF on stdout: nothing holds it open any more
        assert proc.returncode == code, err.decode(errors="replace")
        assert _wait_gone(children) == []
        assert b"stopped by " + signal.Signals(sig).name.encode() in err
        assert b'"exit_code": ' + str(code).encode() in out  # --json: the error is a JSON document too
    finally:
        for p in [psutil.Process(proc.pid)] if proc.poll() is None else []:
            p.kill()
        for p in children:
            if not _gone(p):
                p.kill()


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_as_soon_as_the_scanners_start_ends_diagnose_alike(big_log, sig, code):
    # The process entry forks the scanners before the CLI loads: a signal in that start-up ends diagnose as one later
    # does (its scanners gone, one error line, the JSON error document), whichever handler takes it.
    env = {**os.environ, parallel.WORKERS_ENV: "2"}
    proc = subprocess.Popen([sys.executable, "-m", "dsv4ctl", "diagnose", str(big_log), "--json"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    children: list[psutil.Process] = []
    while time.monotonic() < deadline and proc.poll() is None and not children:
        children = me.children(recursive=True)
    assert children, "diagnose never started a scanning process"
    try:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == code, err.decode(errors="replace")
        assert _wait_gone(children) == []
        words = b"interrupted" if sig == signal.SIGINT else b"stopped by " + signal.Signals(sig).name.encode()
        assert words in err and b"Traceback" not in err
        assert b'"exit_code": ' + str(code).encode() in out
    finally:
        for p in [me] if proc.poll() is None else []:
            p.kill()
        for p in children:
            if not _gone(p):
                p.kill()


def test_scanners_die_with_a_killed_diagnose(big_log):
    # SIGKILL cannot be handled: the kernel ends the children when their parent dies (Linux).
    proc, children = _start(big_log)
    try:
        proc.kill()
        proc.wait(timeout=30)
        assert _wait_gone(children) == []
    finally:
        for p in children:
            if not _gone(p):
                p.kill()
        proc.stdout.close()
        proc.stderr.close()


def _wait_blocked(p: psutil.Process, timeout: float = 60.0) -> None:
    """Until `p` sleeps without using CPU for 0.3 s (blocked on its read: its handlers are in place)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        cpu = sum(p.cpu_times()[:2])
        if p.status() == psutil.STATUS_SLEEPING and cpu == last:
            return
        last = cpu
        time.sleep(0.3)
    raise AssertionError("diagnose never settled on reading stdin")


def test_sigterm_while_reading_stdin_exits_143():
    # One process, blocked on a pipe that never ends: the signal still ends it, with its exit code.
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsv4ctl", "diagnose", "-"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        proc.stdin.write(b"(APIServer pid=1) INFO 10-21 09:00:02 [api_utils.py:330] vLLM server version 0.32.0\n")
        proc.stdin.flush()
        _wait_blocked(psutil.Process(proc.pid))  # started, and waiting for more input
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 143, err.decode(errors="replace")
        assert b"stopped by SIGTERM" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _driver(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, parallel.WORKERS_ENV: "2", "PYTHONPATH": str(REPO)})


def test_sigint_while_the_command_line_is_parsed_is_interrupted(big_log):
    # Typer's first parse of the command line (tens of ms: its type adapters load) catches Ctrl-C itself and exits
    # 130 without a word; a real SIGINT delivered right there must still be the error line and the JSON document.
    done = _driver(
        "import os, signal, sys\n"
        "import typer.core\n"
        "parse = typer.core.TyperGroup.make_context\n"
        "def make_context(self, *args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return parse(self, *args, **kwargs)\n"
        "typer.core.TyperGroup.make_context = make_context\n"
        "sys.argv = ['dsv4ctl', 'diagnose', sys.argv[1], '--json']\n"
        "from dsv4ctl.__main__ import main\n"
        "raise SystemExit(main())\n", str(big_log))
    assert done.returncode == 130, done.stderr.decode()
    assert done.stderr.decode().strip() == "Error: interrupted"
    assert json.loads(done.stdout)["error"] == {"message": "interrupted", "hint": None, "exit_code": 130}


def test_sigint_where_python_would_drop_it_is_taken_after():
    # In a `__del__` (and the import system's weakref callback) an exception is printed and dropped: the command
    # would run on as if Ctrl-C had not been pressed.
    done = _driver(
        "import os, signal, time\n"
        "from dsv4ctl.__main__ import _interrupt\n"
        "signal.signal(signal.SIGINT, _interrupt)\n"
        "class Dropped:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        sum(range(100000))\n"
        "try:\n"
        "    Dropped()\n"
        "    time.sleep(5)\n"
        "    print('ran on')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n")
    assert done.stdout.decode().strip() == "interrupted" and b"Exception ignored" not in done.stderr


def test_sigint_in_the_first_moments_of_diagnose(big_log):
    # Ctrl-C (to the process group, as a terminal sends it) at moments through the start-up of
    # `python -m dsv4ctl diagnose BIGLOG --json`: the imports, the scanners' fork, the parse, the scan.
    env = {**os.environ, parallel.WORKERS_ENV: "2", "PYTHONPATH": str(REPO)}
    seen = 0
    for delay in [0.04 + 0.045 * k for k in range(13)]:
        proc = subprocess.Popen([sys.executable, "-m", "dsv4ctl", "diagnose", str(big_log), "--json"], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        if b"dsv4ctl" not in err and proc.returncode != 130:
            continue  # the interpreter's own start-up (site, runpy), before dsv4ctl's first line: Python's traceback
        seen += 1
        assert proc.returncode == 130, (delay, err.decode(errors="replace"))
        assert err.decode().strip() == "Error: interrupted", (delay, err.decode(errors="replace"))
        assert json.loads(out)["error"]["exit_code"] == 130, (delay, out)
    assert seen >= 8
