"""check.dumps: vLLM's processes by title, a signal sent only where it is caught, a stopped process continued only
when asked, py-spy's output where it is installed; the plugin's faulthandler registration in a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from dsv4ctl.check import dumps
from dsv4ctl.fixes import stacks

REPO = Path(__file__).resolve().parents[2]
CHILD = textwrap.dedent("""
    import sys, time
    if sys.argv[1] == "plugin":
        import dsv4ctl.fixes
        dsv4ctl.fixes.register()  # what vLLM does in each of its processes
    def waiting_here(n):
        if n == 0:
            print("ready", flush=True)
            time.sleep(60)
        waiting_here(n - 1)
    waiting_here(2)
""")


def _child(mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSV4CTL_STACKS", None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout.readline() == "ready\n"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while not dumps.stopped(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _end(proc: subprocess.Popen) -> str:
    proc.kill()
    return proc.communicate(timeout=30)[1]


def test_the_signal_is_the_one_the_plugin_registers():
    assert dumps.STACK_SIGNAL == stacks.STACK_SIGNAL


def test_a_process_with_the_plugin_writes_its_stacks_even_when_stopped_and_continued():
    proc = _child("plugin")
    try:
        assert dumps.catches(proc.pid) is True
        _stop(proc)
        lines = dumps.dump_stacks([dumps.Target(proc.pid, "VLLM::EngineCore")], resume_stopped=True, py_spy="")
    finally:
        err = _end(proc)
    assert lines == [f"pid {proc.pid} (VLLM::EngineCore): stopped (SIGSTOP): SIGUSR2 sent and continued (SIGCONT) so "
                     "that it writes every thread's stack to its stderr (the server's log):"]
    assert "most recent call first" in err and "in waiting_here" in err


def test_a_stopped_process_is_not_continued_unless_asked():
    proc = _child("plugin")
    try:
        _stop(proc)
        lines = dumps.dump_stacks([dumps.Target(proc.pid, "VLLM::EngineCore")], py_spy="")
        time.sleep(0.5)
        assert dumps.stopped(proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        _end(proc)
    assert lines == [f"pid {proc.pid} (VLLM::EngineCore): stopped (SIGSTOP): SIGUSR2 sent; it writes its stacks once "
                     "continued"]


def test_no_signal_to_a_process_that_would_die_of_it():
    proc = _child("bare")
    try:
        assert dumps.catches(proc.pid) is False
        lines = dumps.dump_stacks([dumps.Target(proc.pid, "VLLM::Worker_TP0")], py_spy="")
        assert proc.poll() is None  # alive: nothing was sent
    finally:
        _end(proc)
    assert "SIGUSR2 not caught there" in lines[0] and "py-spy" in lines[0]


def test_the_plugin_leaves_the_signal_alone_when_asked(monkeypatch):
    monkeypatch.setenv("DSV4CTL_STACKS", "off")
    assert stacks.register_stack_signal() is False


def test_py_spy_where_installed(tmp_path):
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho \"Thread 1 (idle): MainThread\"\necho \"    wait (threading.py:320)\"\n")
    fake.chmod(0o755)
    lines = dumps.dump_stacks([dumps.Target(os.getpid(), "VLLM::EngineCore")], py_spy=str(fake))
    assert lines == [f"py-spy dump --pid {os.getpid()} (VLLM::EngineCore):", "  Thread 1 (idle): MainThread",
                     "      wait (threading.py:320)"]


def test_vllm_processes_are_told_by_their_titles():
    proc = subprocess.Popen([sys.executable, "-c", "import setproctitle, time; setproctitle.setproctitle("
                             "'VLLM::EngineCore'); print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        found = dumps.vllm_processes(os.getpid())
        assert dumps.Target(proc.pid, "VLLM::EngineCore") in found
        assert dumps.Target(proc.pid, "VLLM::EngineCore") in dumps.vllm_processes()
    finally:
        proc.kill()
        proc.wait()
    said: list[str] = []
    assert dumps.dump_stacks([], py_spy="", say=said.append) == said == [
        "no vLLM process found (titles VLLM::EngineCore, VLLM::Worker…): no stacks"]


def test_a_compiler_running_under_a_vllm_process_is_found(tmp_path):
    source = tmp_path / "big.cpp"
    source.write_text("".join(f"int f{i}(int x) {{ return x * {i} + f{i - 1}(x - 1); }}\n" if i else "int f0(int x) { return x; }\n"
                              for i in range(6000)))
    worker = textwrap.dedent(f"""
        import setproctitle, subprocess, sys
        setproctitle.setproctitle("VLLM::Worker_TP0")
        print("ready", flush=True)
        subprocess.run(["g++", "-O2", "-c", {str(source)!r}, "-o", {str(tmp_path / 'big.o')!r}])
    """)
    proc = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        found, deadline = [], time.monotonic() + 20
        while not found and time.monotonic() < deadline and proc.poll() is None:
            found = dumps.compiler_processes(os.getpid(), frozenset({"g++", "cc1plus", "as"}))
            time.sleep(0.05)
    finally:
        import psutil

        for child in psutil.Process(proc.pid).children(recursive=True):  # g++ and cc1plus, by pid
            child.kill()
        proc.kill()
        proc.wait()
    assert found, "g++ ran and was not seen"
    pid, name, command = found[0]
    assert name in ("g++", "cc1plus") and "big" in command
