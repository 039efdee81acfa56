"""The fd-level capture, the child reaper and the session's exit paths, with plain subprocesses (no vLLM).

Each scenario runs in a driver subprocess (pytest itself owns fds 1 and 2): the driver starts the
capture, runs children that write to the inherited fds, and is stopped by a signal or a crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]


def _driver(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(body))
    return script


def _run(script: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, timeout=timeout, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_tee_copies_child_stdout_and_stderr_to_log_terminal_and_line_callback(tmp_path):
    log = tmp_path / "out.log"
    script = _driver(tmp_path, f"""
        import json, os, signal, subprocess, sys, time
        from dsv4ctl.serve.capture import FdTee
        lines = []
        tee = FdTee({str(log)!r}, on_line=lambda text, fd, end: lines.append([fd, text, end])).start()
        print("parent says hi", flush=True)
        child = subprocess.Popen(["sh", "-c", "echo child-out; echo child-err >&2; printf 'bar 1/3\\\\rbar 3/3\\\\n'; exec sleep 60"])
        deadline = time.time() + 20
        while time.time() < deadline and b"bar 3/3" not in open({str(log)!r}, "rb").read():
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        child.wait()
        tee.stop()
        print(json.dumps({{"lines": lines, "rc": child.returncode, "bytes": tee.bytes_logged}}))
    """)
    result = _run(script)
    assert result.returncode == 0, result.stderr.decode()
    # The terminal still gets every byte, on the stream it was written to.
    out, err = result.stdout.decode(), result.stderr.decode()
    report = json.loads(out.strip().splitlines()[-1])
    out = "\n".join(out.strip().splitlines()[:-1])
    assert "parent says hi" in out and "child-out" in out and "child-err" not in out
    assert "child-err" in err
    assert report["rc"] == -signal.SIGTERM
    text = log.read_bytes().decode()  # not read_text(): universal newlines would turn \r into \n
    for expected in ("parent says hi\n", "child-out\n", "child-err\n", "bar 1/3\rbar 3/3\n"):
        assert expected in text
    assert report["bytes"] == len(log.read_bytes())
    got = {(fd, line) for fd, line, _ in report["lines"]}
    assert (1, "child-out") in got and (2, "child-err") in got and (1, "parent says hi") in got
    # tqdm-style carriage returns end a line too, so progress updates arrive as they are drawn.
    assert [1, "bar 1/3", "\r"] in report["lines"] and [1, "bar 3/3", "\n"] in report["lines"]


SESSION_DRIVER = """
    import json, os, subprocess, sys, time
    from pathlib import Path
    from dsv4ctl.render.serve import ServeConsole
    from dsv4ctl.serve.session import ServeSession

    log, mode, pidfile = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])

    def launch():
        # like vLLM: a child and a grandchild that share our fds, then we wait on the child
        child = subprocess.Popen([sys.executable, "-c", (
            "import subprocess, sys, time\\n"
            "g = subprocess.Popen(['sleep', '300'])\\n"
            "print('grandchild', g.pid, flush=True)\\n"
            "i = 0\\n"
            "while True:\\n"
            "    i += 1\\n"
            "    print(f'line {i}', flush=True)\\n"
            "    print(f'err {i}', file=sys.stderr, flush=True)\\n"
            "    time.sleep(0.01)\\n")])
        while not pidfile.exists():
            time.sleep(0.05)
            if b"line 20" in log.read_bytes():
                pidfile.write_text(str(child.pid))
        if mode == "crash":
            raise RuntimeError("engine exploded on purpose")
        child.wait()
        return child.returncode

    with ServeSession(log, ServeConsole(live=False), grace_s=1.0) as session:
        outcome = session.run(launch)
    print(json.dumps(outcome.to_json()))
"""


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_session_signal_reaps_children_and_leaves_a_complete_log(tmp_path, how):
    log, pidfile = tmp_path / "serve.log", tmp_path / "child.pid"
    script = _driver(tmp_path, SESSION_DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(log), "signal", str(pidfile)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        _wait_for(pidfile.exists)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert len(descendants) >= 2  # child and grandchild
        proc.send_signal(getattr(signal, how))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()
    outcome = json.loads(out.decode().strip().splitlines()[-1])
    assert outcome["status"] == "interrupted"
    # No descendant survives: each one is gone, by pid.
    time.sleep(0.2)
    for p in descendants:
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE, f"pid {p.pid} survived"
    seen = {c["pid"] for c in outcome["children"]["seen"]}
    assert {p.pid for p in descendants} <= seen
    assert outcome["children"]["survivors"] == []
    # The log holds every line the child wrote, in order, with no gap, both streams.
    text = log.read_text()
    numbers = [int(line.split()[1]) for line in text.splitlines() if line.startswith("line ")]
    assert numbers[:20] == list(range(1, 21))
    assert numbers == list(range(1, len(numbers) + 1))
    assert "err 1\n" in text
    assert outcome["log_bytes"] == len(log.read_bytes())


def test_session_crash_writes_traceback_into_log_and_reports_failure(tmp_path):
    log, pidfile = tmp_path / "serve.log", tmp_path / "child.pid"
    script = _driver(tmp_path, SESSION_DRIVER)
    result = _run(script, str(log), "crash", str(pidfile))
    assert result.returncode == 0, result.stderr.decode()
    outcome = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert outcome["status"] == "failed"
    assert outcome["error"] == "RuntimeError: engine exploded on purpose"
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: engine exploded on purpose" in text
    assert outcome["children"]["survivors"] == []
    # the still-running child had to be stopped by pid, and the grandchild with it
    assert len(outcome["children"]["terminated"]) + len(outcome["children"]["killed"]) >= 1


def test_child_tracker_ignores_a_recycled_pid(tmp_path):
    from dsv4ctl.serve.children import ChildTracker, TrackedProcess, _same_process

    tracker = ChildTracker()
    me = psutil.Process()
    # Same pid, different start time: someone else's process, never touched.
    assert _same_process(TrackedProcess(me.pid, me.create_time() - 100.0, "x")) is None
    assert _same_process(TrackedProcess(me.pid, me.create_time(), "x")) is not None
    assert tracker.reap(grace_s=0.1).survivors == []


LIVE_DRIVER = """
    import subprocess, sys
    from pathlib import Path
    from dsv4ctl.render.serve import ServeConsole
    from dsv4ctl.serve.session import ServeSession

    log = Path(sys.argv[1])
    def launch():
        return subprocess.Popen(["sh", "-c",
            "echo '(APIServer pid=1) INFO 11-30 00:13:29 [api_utils.py:347] vLLM server version 0.32.0, serving model x';"
            "echo 'INFO:     Application startup complete.'; sleep 0.3"]).wait()
    view = ServeConsole()  # decides by itself: both stdout and stderr are the pty
    with ServeSession(log, view, grace_s=1) as session:
        outcome = session.run(launch)
    view.outcome(outcome, 130)
    print("LIVE=" + str(view.live), "STATUS=" + outcome.status)
"""


def test_live_status_line_on_a_terminal(tmp_path):
    import pty

    log = tmp_path / "live.log"
    script = _driver(tmp_path, LIVE_DRIVER)
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ["PYTHONPATH"] = str(REPO)
        os.environ.pop("NO_COLOR", None)
        os.execv(sys.executable, [sys.executable, str(script), str(log)])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "LIVE=True STATUS=stopped" in text
    assert "vLLM server version 0.32.0" in text  # vLLM's lines printed above the status line
    assert "\x1b[2K" in text  # the status line redraws in place
    assert "dsv4ctl serve: vLLM shut down cleanly" in text
    assert "Application startup complete." in log.read_text()


def test_tee_that_fails_to_start_gives_the_fds_back_and_closes_the_log(tmp_path):
    from dsv4ctl.serve.capture import FdTee

    import resource

    unused = resource.getrlimit(resource.RLIMIT_NOFILE)[0] + 10  # never open: dup() of it fails
    before = os.fstat(1)
    tee = FdTee(tmp_path / "out.log", fds=(1, unused))
    with pytest.raises(OSError):
        tee.start()
    after = os.fstat(1)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)  # fd 1 is not left on a pipe
    assert tee._log is not None and tee._log.closed
    tee.stop()  # a second stop is a no-op


FULL_DISK_DRIVER = """
    import json, subprocess, sys
    from pathlib import Path
    from dsv4ctl.render.serve import ServeConsole
    from dsv4ctl.serve.session import ServeSession

    def launch():  # like vLLM: a child writing to the inherited fds
        return subprocess.Popen(["sh", "-c", "for i in 1 2 3; do echo line $i; echo err $i >&2; done"]).wait()

    with ServeSession(Path("/dev/full"), ServeConsole(live=False), grace_s=1.0, make_dirs=False) as session:
        outcome = session.run(launch)
    print(json.dumps(outcome.to_json()))
"""


def test_a_log_on_a_full_disk_is_said_at_once_and_the_terminal_keeps_everything(tmp_path):
    result = _run(_driver(tmp_path, FULL_DISK_DRIVER))
    assert result.returncode == 0, result.stderr.decode()
    out, err = result.stdout.decode(), result.stderr.decode()
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome["log_error"] == "cannot write /dev/full: no space left on the device"
    assert err.count("dsv4ctl serve: cannot write /dev/full: no space left on the device; vLLM's output goes on "
                     "to the terminal only") == 1
    for n in (1, 2, 3):
        assert f"line {n}" in out and f"err {n}" in err
    assert "Traceback" not in err


ERROR_DRIVER = """
    import sys
    from pathlib import Path
    from dsv4ctl.errors import EngineUnavailableError
    from dsv4ctl.render.serve import ServeConsole
    from dsv4ctl.serve.session import ServeSession

    try:
        with ServeSession(Path(sys.argv[1]), ServeConsole(live=False), grace_s=1.0) as session:
            print("vLLM's parser ran", flush=True)
            raise EngineUnavailableError("vLLM is installed but cannot be imported: No module named 'torch'",
                                         hint="run `python -c 'import vllm'` in this environment to see why")
    except EngineUnavailableError as exc:
        print("raised:", exc.message)
"""


def test_the_error_that_ends_a_start_is_in_its_log(tmp_path):
    log = tmp_path / "serve.log"
    result = _run(_driver(tmp_path, ERROR_DRIVER), str(log))
    assert result.returncode == 0, result.stderr.decode()
    assert log.read_text() == (
        "vLLM's parser ran\n"
        "dsv4ctl serve: error: vLLM is installed but cannot be imported: No module named 'torch' "
        "(run `python -c 'import vllm'` in this environment to see why)\n"
    )
