"""Every file a command writes, and every log it reads, through the CLI: a path that cannot be written is exit 1
with `cannot write PATH: why` and the option to change (in text and with --json, never "this is a bug"); a
compressed, UTF-16 or binary input gets its own answer, never "not a vLLM log" (exit 5)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLE = REPO / "dsv4ctl" / "examples" / "kv-cache-insufficient.log"
HEAD = FIXTURES / "logs" / "group" / "real_v032_cpu_dp_head.log"
NODE = FIXTURES / "logs" / "real_v032_cpu_headless_engine_killed.log"
SNAPSHOT = FIXTURES / "gpus" / "h200-snapshot.json"


def _places(tmp_path: Path, name: str) -> dict[str, tuple[Path, str]]:
    """Where a file cannot be written, each with the words that say why."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {
        "directory": (tmp_path, "it is a directory"),
        "missing-directory": (tmp_path / "missing" / name, f"no such directory: {tmp_path / 'missing'}"),
        "under-a-file": (a_file / name, f"{a_file} is a file, not a directory"),
        "proc": (Path("/proc") / name, ""),
        "full-disk": (Path("/dev/full"), "no space left on the device"),
    }


# Each writer: (the command line with the path last, the option its hint names, a good file name).
WRITERS = {
    "collect -o": (lambda p: ["collect", str(EXAMPLE), "-o", str(p)], "choose another -o", "b.tar.gz"),
    "diagnose --svg": (lambda p: ["diagnose", str(HEAD), str(NODE), "--svg", str(p)], "choose another --svg", "g.svg"),
    "gpus --save": (lambda p: ["gpus", "--snapshot", str(SNAPSHOT), "--save", str(p)], "choose another --save", "s.json"),
    "serve --log-file": (lambda p: ["serve", "some/model", "--log-file", str(p)], "choose another --log-file", "s.log"),
}


@pytest.mark.parametrize("place", ["directory", "missing-directory", "under-a-file", "proc", "full-disk"])
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_file_that_cannot_be_written_is_one_line_and_exit_1(cli, tmp_path, writer, place):
    argv, hint, name = WRITERS[writer]
    path, why = _places(tmp_path, name)[place]
    if writer == "serve --log-file" and place == "full-disk":
        pytest.skip("a device is written in place: serve would start vLLM (the full disk is tested on the capture)")
    result = cli(*argv(path))
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-2].startswith(f"Error: cannot write {path}: ") and why in lines[-2], result.stderr
    assert lines[-1].startswith(f"Hint: {hint}")
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "missing").exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.parametrize("writer", ["collect -o", "diagnose --svg", "gpus --save"])
def test_with_json_the_error_is_a_document_that_does_not_say_bug(cli, tmp_path, writer):
    argv, hint, name = WRITERS[writer]
    result = cli(*argv(Path("/dev/full")), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)  # the one document on stdout
    assert doc["error"] == {"message": "cannot write /dev/full: no space left on the device",
                            "hint": doc["error"]["hint"], "exit_code": 1}
    assert doc["error"]["hint"].startswith(hint) and "bug" not in result.output


def test_each_writer_writes_a_whole_file_where_it_can(cli, tmp_path):
    bundle, svg, snap = tmp_path / "b.tar.gz", tmp_path / "g.svg", tmp_path / "s.json"
    assert cli(*WRITERS["collect -o"][0](bundle)).exit_code == 0
    assert cli(*WRITERS["diagnose --svg"][0](svg)).exit_code == 3
    assert cli(*WRITERS["gpus --save"][0](snap)).exit_code == 0
    with tarfile.open(bundle) as tar:
        assert tar.getnames() == ["logs/file/kv-cache-insufficient.log", "manifest.json"]
    assert svg.read_text().startswith("<svg") and json.loads(snap.read_text())["kind"] == "dsv4ctl.gpus"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz", "g.svg", "s.json"]


# -- reading ---------------------------------------------------------------------------------------------------


def _packed(tmp_path: Path, kind: str) -> Path:
    data = EXAMPLE.read_bytes()
    made = {
        "vllm.log.gz": gzip.compress(data),
        "vllm.log.xz": lzma.compress(data),
        "vllm.log.bz2": bz2.compress(data),
        "vllm.log": data.decode().encode("utf-16"),  # PowerShell's `>`: UTF-16LE with its mark, and a .log name
        "renamed.txt": lzma.compress(data),  # told from its bytes, not its name
    }
    path = tmp_path / kind
    path.write_bytes(made[kind])
    return path


@pytest.mark.parametrize("kind", ["vllm.log.gz", "vllm.log.xz", "vllm.log.bz2", "vllm.log", "renamed.txt"])
def test_a_compressed_or_utf16_log_is_diagnosed_as_the_plain_one(cli, tmp_path, kind):
    plain = json.loads(cli("diagnose", EXAMPLE, "--json").stdout)
    result = cli("diagnose", _packed(tmp_path, kind), "--json")
    assert result.exit_code == 3, result.output
    got = json.loads(result.stdout)
    assert got["root_cause"] == plain["root_cause"] == "kv_cache_insufficient"
    assert got["lines_read"] == plain["lines_read"] and got["summary"] == plain["summary"]


def test_a_binary_file_is_exit_1_not_inconclusive(cli):
    result = cli("diagnose", "/bin/sh")
    assert result.exit_code == 1
    assert "Error: /bin/sh is a binary file, not a log" in result.stderr and "Not a vLLM log" not in result.output


def test_zstd_says_how_to_decompress_it(cli, tmp_path):
    zst = tmp_path / "vllm.log.zst"
    zst.write_bytes(bytes.fromhex("28b52ffd") + b"\x00" * 64)  # zstd's frame magic: dsv4ctl has no zstd reader
    result = cli("diagnose", zst, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["message"] == f"{zst} is zstd-compressed: run zstd -d {zst}"


def test_a_group_of_compressed_logs_is_read_as_one(cli, tmp_path):
    head, node = tmp_path / "head.log.xz", tmp_path / "node.log.bz2"
    head.write_bytes(lzma.compress(HEAD.read_bytes()))
    node.write_bytes(bz2.compress(NODE.read_bytes()))
    plain = json.loads(cli("diagnose", HEAD, NODE, "--json").stdout)
    result = cli("diagnose", head, node, "--json")
    assert result.exit_code == 3
    got = json.loads(result.stdout)
    keys = ("id", "ranks", "line", "time", "text")
    assert got["kind"] == "group" and [got["root_cause"][k] for k in keys] == [plain["root_cause"][k] for k in keys]
    assert [(m["ranks"], m["role"]) for m in got["members"]] == [(m["ranks"], m["role"]) for m in plain["members"]]


def test_collect_decodes_compressed_logs_so_their_secrets_are_redacted(cli, tmp_path):
    log = tmp_path / "serve.log.xz"
    log.write_bytes(lzma.compress(b"INFO 12-01 10:00:00 [x.py:1] export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWx12\n"))
    out = tmp_path / "b.tar.gz"
    result = cli("collect", log, "/bin/sh", "-o", out, "--json")
    assert result.exit_code == 1  # /bin/sh is not collected
    manifest = json.loads(result.stdout)
    assert manifest["unreadable"] == [{"source": "/bin/sh", "error": "/bin/sh is a binary file, not a log"}]
    with tarfile.open(out) as tar:
        body = tar.extractfile("logs/file/serve.log.xz").read()
    assert body == b"INFO 12-01 10:00:00 [x.py:1] export HF_TOKEN=***redacted***\n"


def test_a_full_temporary_disk_is_one_line_and_no_bundle(cli, tmp_path, monkeypatch):
    # collect keeps each log in a temporary file before it enters the bundle: those files on a full disk
    # (/dev/full behind them) are the same one line, and no half bundle is left.
    import tempfile

    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *args, **kwargs: open("/dev/full", "w+b"))  # noqa: SIM115
    out = tmp_path / "b.tar.gz"
    result = cli("collect", EXAMPLE, "-o", out)
    assert result.exit_code == 1, result.output
    assert "Error: cannot write a temporary file in " in result.stderr and "no space left on the device" in result.stderr
    assert "Hint: free space in the temporary directory, or point TMPDIR at one with room" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_temporary_directory_that_cannot_be_made_is_one_line(cli, tmp_path, monkeypatch):
    import tempfile

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    result = cli("collect", EXAMPLE, "-o", tmp_path / "b.tar.gz")
    assert result.exit_code == 1
    assert f"Error: cannot write {blocker / 'tmp' / 'dsv4ctl-collect-…'}: {blocker} is a file, not a directory" in result.stderr
