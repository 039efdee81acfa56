"""`dsv4ctl collect` from this machine: a Ray session laid out as Ray writes it, files and directories,
size bounds and redaction; Docker when an engine runs here."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
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
