"""`dsv4ctl collect` from this machine: a Ray session laid out as Ray writes it, files and directories,
size bounds and redaction; Docker when an engine runs here."""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import termios
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
REPO = Path(__file__).resolve().parents[2]
# Ray's own lines (the raylet's memory monitor text, ray==2.60.0 node_manager.cc, as in
# tests/fixtures/logs/catalogue/eco_ray_oom_killed__kill.log) in the files Ray names
# (ray==2.49.2 ray/_private/node.py:866-876, ray_constants.py:260-272, log_monitor.py:28).
RAYLET_OOM = (
    "[2026-11-30 09:02:13,402 E 4242 4242] (raylet) node_manager.cc:3071: 1 worker(s) were killed due to the node "
    "running low on memory. Memory on the node (IP: 10.0.0.2, ID: 7b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a) "
    "was 1981.07GB used / 2015.56GB limit (0.982887)\n"
)


def _bundle(path: Path) -> tuple[dict, dict[str, bytes]]:
    with tarfile.open(path) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return json.loads(members["manifest.json"]), members


def _ray_session(root: Path) -> Path:
    session = root / "session_2026-11-30_09-00-01_123456_4242"
    logs = session / "logs"
    (logs / "old").mkdir(parents=True)
    (logs / "raylet.out").write_text(RAYLET_OOM)
    (logs / "raylet.err").write_text("")
    (logs / "gcs_server.out").write_text("[2026-11-30 09:00:01,100 I 4200 4200] (gcs_server) gcs_server_main.cc:100: GCS started\n")
    worker = FIXTURES / "catalogue" / "eco_ray_oom_killed__kill.log"
    (logs / "worker-6d1f0c3a2b5e4d7c8f9a0b1c0200-01000000-7305.err").write_text(worker.read_text())
    (logs / "worker-6d1f0c3a2b5e4d7c8f9a0b1c0200-01000000-7305.out").write_text(":job_id:01000000\n")
    (logs / "python-core-worker-6d1f0c3a2b5e4d7c8f9a0b1c0200_7305.log").write_text("[2026-11-30 09:00:50,000 I 7305 7305] core_worker.cc:1: Constructing CoreWorker\n")
    (logs / "dashboard.log").write_text("2026-11-30 09:00:02,000\tINFO head.py:1 -- Dashboard head starting\n")
    (logs / "old" / "raylet.1.out").write_text(RAYLET_OOM)
    (logs / "events").mkdir()
    (logs / "ray_client_server.pid").write_text("4242\n")  # not a log
    (session / "node_ip_address.json").write_text('{"node_ip_address": "10.0.0.2"}')
    return session


def test_ray_session_logs(cli, tmp_path):
    session = _ray_session(tmp_path)
    out = tmp_path / "b.tar.gz"
    result = cli("collect", "--ray", session, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    manifest, members = _bundle(out)
    names = sorted(Path(e["source"]).name for e in manifest["logs"])
    assert names == sorted([
        "raylet.out", "raylet.err", "gcs_server.out", "dashboard.log", "raylet.1.out",
        "worker-6d1f0c3a2b5e4d7c8f9a0b1c0200-01000000-7305.err", "worker-6d1f0c3a2b5e4d7c8f9a0b1c0200-01000000-7305.out",
        "python-core-worker-6d1f0c3a2b5e4d7c8f9a0b1c0200_7305.log",
    ])
    assert {e["kind"] for e in manifest["logs"]} == {"ray"} and {e["node"] for e in manifest["logs"]} == {"10.0.0.2"}
    raylet = next(e for e in manifest["logs"] if e["source"].endswith("logs/raylet.out"))
    assert members[raylet["path"]].decode() == RAYLET_OOM


def test_files_and_directories_redacted_and_bounded(cli, tmp_path):
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    (logs / "serve-a.log").write_text("INFO 12-01 10:00:00 [x.py:1] start\nexport HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWx12\n"
                                      "curl -H 'Authorization: Bearer abcdefgh12345678' http://127.0.0.1:8000\n"
                                      "INFO 12-01 10:05:00 [x.py:2] 'max_num_batched_tokens': 8192, 'api_key': 'sk-live-1'\n")
    (logs / "notes.bin").write_bytes(b"\x00\x01")  # not a log name: left out
    big = tmp_path / "big.log"
    line = b"INFO 12-01 10:00:00 [x.py:1] " + b"x" * 70 + b"\n"
    with open(big, "wb") as f:
        f.write(b"FIRST LINE\n")
        for _ in range(60_000):  # ~6 MB
            f.write(line)
        f.write(b"LAST LINE\n")
    out = tmp_path / "b.tar.gz"
    result = cli("collect", logs, big, "--max-log-bytes", "1MiB", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    manifest, members = _bundle(out)
    serve = next(e for e in manifest["logs"] if e["source"].endswith("serve-a.log"))
    text = members[serve["path"]].decode()
    assert "hf_AbCd" not in text and "abcdefgh12345678" not in text and "sk-live-1" not in text
    assert "'max_num_batched_tokens': 8192" in text and serve["redactions"] == 3
    assert serve["first_time"] == "12-01 10:00:00" and serve["last_time"] == "12-01 10:05:00"
    assert not any(e["source"].endswith("notes.bin") for e in manifest["logs"])
    cut = next(e for e in manifest["logs"] if e["source"] == str(big))
    body = members[cut["path"]]
    assert cut["truncated"] and cut["bytes"] == len(body) < (1 << 20) + 200
    assert body.startswith(b"FIRST LINE\n") and body.endswith(b"LAST LINE\n")
    assert b"bytes left out here" in body


def test_a_missing_file_is_reported_and_the_rest_kept(cli, tmp_path):
    good = tmp_path / "a.log"
    good.write_text("INFO 12-01 10:00:00 [x.py:1] hello\n")
    out = tmp_path / "b.tar.gz"
    result = cli("collect", good, tmp_path / "missing.log", "-o", out)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "missing.log: no such file or directory" in result.stderr
    assert result.stdout.strip() == str(out)
    manifest, members = _bundle(out)
    assert len(manifest["logs"]) == 1 and manifest["unreadable"][0]["error"] == "no such file or directory"


def _docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _docker_engine(), reason="no Docker engine runs here: docker logs/inspect cannot be exercised")
def test_docker_container_logs_and_state(cli, tmp_path):
    name = "dsv4ctl-collect-test"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    subprocess.run(["docker", "run", "--name", name, "busybox", "sh", "-c", "echo hello; exit 3"], check=False, capture_output=True)
    try:
        out = tmp_path / "b.tar.gz"
        result = cli("collect", "--docker", name, "-o", out, "--json")
        assert result.exit_code == 0, result.output
        entry = json.loads(result.stdout)["logs"][0]
        assert entry["termination"]["exit_code"] == 3
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def test_nothing_to_collect_is_a_usage_error(cli):
    result = cli("collect")
    assert result.exit_code == 2 and "nothing to collect" in result.stderr


def test_a_log_without_line_ends_is_bounded(cli, tmp_path):
    blob = tmp_path / "blob.log"
    blob.write_bytes(b"A" * (12 << 20) + b"\nINFO 12-01 10:00:00 [x.py:1] the end\n")
    out = tmp_path / "b.tar.gz"
    result = cli("collect", blob, "--max-log-bytes", "2MiB", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    manifest, members = _bundle(out)
    [entry] = manifest["logs"]
    body = members[entry["path"]]
    assert entry["truncated"] and len(body) < (2 << 20) + 200
    assert body.endswith(b"INFO 12-01 10:00:00 [x.py:1] the end\n")


def test_a_bundle_is_named_as_diagnose_knows_one(cli, tmp_path):
    log = tmp_path / "a.log"
    log.write_text("INFO 12-01 10:00:00 [x.py:1] hello\n")
    result = cli("collect", log, "-o", tmp_path / "b.zip")
    assert result.exit_code == 2 and "-o " + str(tmp_path / "b.zip") + ": a bundle is a gzip-compressed tar" in result.stderr
    assert f"Hint: -o {tmp_path / 'b.tar.gz'}" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log"]  # nothing written, nothing gathered
    result = cli("collect", log, "-o", tmp_path / "plain.tar")
    assert result.exit_code == 0 and "1 log in " in result.stderr and "1 logs" not in result.stderr
    with tarfile.open(tmp_path / "plain.tar", "r:") as tar:  # uncompressed, as named
        assert tar.getnames() == ["logs/file/a.log", "manifest.json"]


def test_nothing_collected_writes_no_bundle(cli, tmp_path):
    out = tmp_path / "b.tar.gz"
    result = cli("collect", tmp_path / "missing.log", tmp_path / "also-missing.log", "-o", out, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["message"] == "nothing collected, no bundle written: no such file or directory"
    assert "missing.log: no such file or directory" in result.stderr and "also-missing.log" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_ray_takes_the_session_directory(cli, tmp_path):
    help_text = " ".join(cli("collect", "--help").stdout.split())
    assert "--ray SESSION_DIR" in help_text and "--ray /tmp/ray/session_latest" in help_text
    result = cli("collect", "--ray", tmp_path / "nosuchray", "-o", tmp_path / "r.tar.gz")
    assert result.exit_code == 1
    assert (f"not collected: {tmp_path / 'nosuchray'}: no such directory: --ray takes a Ray session directory"
            in result.stderr)
    flag_taken = cli("collect", "--ray", "--docker", "vllm")  # --ray's value forgotten: the next option is no directory
    assert flag_taken.exit_code == 2 and "--ray takes the Ray session's directory, not '--docker'" in flag_taken.stderr
    assert cli("collect", "--ray").exit_code == 2


def test_a_bundle_on_stdout_is_the_only_thing_there(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("INFO 12-01 10:00:00 [x.py:1] hello\n")
    done = subprocess.run([sys.executable, "-m", "dsv4ctl", "collect", str(log), "-o", "/dev/stdout"],
                          capture_output=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr.decode()
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        assert tar.getnames() == ["logs/file/a.log", "manifest.json"]
    assert b"1 log in /dev/stdout" in done.stderr


def _unread(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_an_interrupted_collect_keeps_and_lists_the_log_it_cut_short(tmp_path):
    # A real Ctrl-C to a real collect, while it reads a log that is still being written (a named pipe).
    first, live, out = tmp_path / "a.log", tmp_path / "live.log", tmp_path / "b.tar.gz"
    first.write_text("INFO 12-01 10:00:00 [x.py:1] first\n")
    os.mkfifo(live)
    proc = subprocess.Popen([sys.executable, "-m", "dsv4ctl", "collect", str(first), str(live), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        with open(live, "wb") as writer:  # opens once collect reads it
            writer.write(b"INFO 12-01 10:00:01 [x.py:2] serving HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWx12\n" * 500)
            writer.flush()
            deadline = time.monotonic() + 60
            while _unread(writer.fileno()) and time.monotonic() < deadline:
                time.sleep(0.02)
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
        assert time.monotonic() - started < 20
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr.decode()
    assert b"2 logs in " in stderr and b"interrupted" in stderr and b"Traceback" not in stderr
    manifest, members = _bundle(out)
    assert manifest["interrupted"] is True
    cut = next(e for e in manifest["logs"] if e["source"] == str(live))
    assert cut["error"] == "interrupted: read in part" and cut["lines"] == 500
    assert members[cut["path"]] == b"INFO 12-01 10:00:01 [x.py:2] serving HF_TOKEN=***redacted***\n" * 500
    assert set(members) == {e["path"] for e in manifest["logs"]} | {"manifest.json"}  # the manifest lists every log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log", "b.tar.gz", "live.log"]


def test_ctrl_c_waits_for_the_member_being_written():
    from dsv4ctl.collect.bundle import _whole

    done = []
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own Ctrl-C, whatever ran before
    try:
        with pytest.raises(KeyboardInterrupt):
            with _whole():
                os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C while a member is written
                time.sleep(0.05)
                done.append("the member is whole")
        assert done == ["the member is whole"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_tail_below_zero_is_a_usage_error_and_the_help_shows_no_bounds(cli, tmp_path):
    result = cli("collect", "--tail", "-1", tmp_path)
    assert result.exit_code == 2 and "--tail -1: a number of lines, 0 or more" in result.stderr
    help_text = cli("collect", "--help").stdout
    assert "[x>=0]" not in help_text and "--tail LINES" in help_text
