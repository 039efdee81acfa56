"""Weights from the hub's headers, before the download: a hub on 127.0.0.1 (tests/hubkit.py) serving real
safetensors files, pointed to by HF_ENDPOINT; nothing beyond loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("safetensors")

from fitkit import FLASH, builtin_config, h200, no_hf_cache, snapshot  # noqa: F401 - autouse fixture
from hubkit import COMMIT, EXPERT_BYTES, MTP_BYTES, TOTAL_BYTES, FakeHub, write_repo

from dsv4ctl.errors import ExitCode, InputError
from dsv4ctl.gpu import save_snapshot
from dsv4ctl.planning import FitRequest, load_geometry, plan_fit
from dsv4ctl.planning.checkpoint.geometry import CheckpointWeights
from dsv4ctl.planning.checkpoint.hub import tensor_bytes

OTHER = "someorg/DeepSeek-V4-Test"
TOKEN = "hf_dsv4ctl_test_token"
GiB = 1 << 30
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo_files(tmp_path):
    return write_repo(tmp_path / "checkpoint", builtin_config(FLASH))


@pytest.fixture
def hub(tmp_path, monkeypatch, repo_files):
    """The fake hub, serving FLASH and OTHER (the same files), with the hub switched back on."""
    server = FakeHub({FLASH: repo_files, OTHER: dict(repo_files)}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    import huggingface_hub.constants

    # huggingface_hub fixes HF_HUB_OFFLINE when imported (constants.py:194); this process may have imported it
    # while tests/unit/conftest.py had the hub switched off.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    yield server
    server.stop()


@pytest.fixture
def gpus(tmp_path):
    path = tmp_path / "snap.json"
    save_snapshot(snapshot(*(h200(i) for i in range(2))), path)
    return str(path)


def _plan(cli, model, *flags):
    result = cli("fit-length", model, *flags, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _weights_term(doc):
    return next(t for t in doc["available_kv_bytes"]["terms"] if t["name"] == "weights")


def test_plan_weights_from_the_hubs_headers_split_as_a_local_checkpoint(cli, hub, gpus, tmp_path):
    flags = ("--gpus", gpus, "-tp", "2", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')
    doc = _plan(cli, FLASH, *flags)
    local = _plan(cli, str(tmp_path / "checkpoint"), *flags)
    dense = TOTAL_BYTES - EXPERT_BYTES - MTP_BYTES
    per_rank = dense // 2 + EXPERT_BYTES // 2 + MTP_BYTES // 2
    assert [g["weights_bytes"] for g in doc["gpus"]] == [g["weights_bytes"] for g in local["gpus"]] == [per_rank] * 2
    assert doc["kv_cache_memory_bytes"] == local["kv_cache_memory_bytes"]
    assert _weights_term(doc)["basis"] == "checkpoint"
    geometry = doc["geometry"]
    assert geometry["source"] == "hub" and geometry["revision"] == COMMIT
    assert geometry["weights"] == local["geometry"]["weights"] == {
        "total_bytes": TOTAL_BYTES, "expert_bytes": EXPERT_BYTES, "mtp_bytes": MTP_BYTES, "num_files": 3}
    assert geometry["hub"]["read_from"] == "hub" and geometry["hub"]["endpoint"] == hub.endpoint
    assert COMMIT in geometry["checkpoint"] and "safetensors headers" in geometry["checkpoint"]
    # Headers only: each shard read by a range request, never in whole.
    shard_gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("-of-00003.safetensors")]
    assert len(shard_gets) == 3 and all(r.headers.get("range", "").startswith("bytes=") for r in shard_gets)


def test_planning_api_reads_the_hub_only_when_asked(hub, tmp_path):
    geometry = load_geometry(FLASH)
    assert geometry.source == "builtin" and geometry.to_json()["weights"] is None and hub.requests == []
    local = load_geometry(tmp_path / "checkpoint").weights
    assert geometry.weights.total_bytes == TOTAL_BYTES  # the first size asked reads the hub
    assert CheckpointWeights(geometry.weights.total_bytes, geometry.weights.expert_bytes, geometry.weights.mtp_bytes,
                             geometry.weights.num_files) == local
    assert geometry.planned_source == "hub" and geometry.planned_revision == COMMIT
    result = plan_fit(FitRequest(model=FLASH, tensor_parallel_size=2, enable_expert_parallel=True),
                      snapshot=snapshot(h200(0), h200(1)), geometry=geometry)
    dense = TOTAL_BYTES - EXPERT_BYTES - MTP_BYTES
    assert [g.weights_bytes for g in result.gpus] == [dense // 2 + EXPERT_BYTES // 2] * 2
    # The read leaves no thread behind (no tqdm monitor): diagnose's parallel scan forks only without threads.
    hub.stop()
    for thread in [t for t in threading.enumerate() if t is not threading.main_thread()]:
        thread.join(timeout=5)
    assert threading.active_count() == 1, threading.enumerate()


def test_second_run_works_from_the_cache_with_the_hub_gone(cli, hub, gpus, monkeypatch):
    first = _plan(cli, FLASH, "--gpus", gpus, "-tp", "2")
    other = _plan(cli, OTHER, "--kv-cache-memory", "9.81GiB")  # a hub id: its config.json came from the hub
    hub.stop()
    again = _plan(cli, FLASH, "--gpus", gpus, "-tp", "2")
    assert again["gpus"] == first["gpus"] and again["geometry"]["weights"] == first["geometry"]["weights"]
    assert again["geometry"]["hub"]["read_from"] == "cache"
    assert "not reachable" in again["geometry"]["hub"]["cache_reason"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = _plan(cli, FLASH, "--gpus", gpus, "-tp", "2")
    assert offline["gpus"] == first["gpus"] and offline["geometry"]["hub"]["cache_reason"] == "HF_HUB_OFFLINE is set"
    assert _plan(cli, OTHER, "--kv-cache-memory", "9.81GiB")["geometry"] == {
        **other["geometry"], "hub": {**other["geometry"]["hub"], "read_from": "cache", "cache_reason": "HF_HUB_OFFLINE is set"},
        "checkpoint": other["geometry"]["checkpoint"].replace("the hub", "dsv4ctl's cache (HF_HUB_OFFLINE is set)")}


def test_offline_with_nothing_cached_is_one_line_and_exit_1(cli, hub, gpus, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = cli("fit-length", FLASH, "--gpus", gpus)
    assert result.exit_code == ExitCode.ERROR
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("Hint: ")
    assert "the weight size per GPU is unknown" in lines[0] and "HF_HUB_OFFLINE is set" in lines[0]
    for flag in ("checkpoint directory", "--checkpoint-size", "--weights-memory", "--from-log", "--kv-cache-memory"):
        assert flag in lines[1]
    assert hub.requests == []
    other = cli("fit-length", OTHER, "--kv-cache-memory", "9.81GiB")
    assert other.exit_code == ExitCode.ERROR and "cannot be read from the hub (HF_HUB_OFFLINE is set" in other.stderr


def test_unreachable_hub_with_nothing_cached(cli, hub, gpus):
    hub.stop()
    result = cli("fit-length", FLASH, "--gpus", gpus)
    assert result.exit_code == ExitCode.ERROR
    assert f"{hub.endpoint} is not reachable" in result.stderr and "--weights-memory" in result.stderr


def test_kv_cache_memory_never_contacts_the_hub(cli, hub):
    doc = _plan(cli, FLASH, "--kv-cache-memory", "9.81GiB")
    log = _plan(cli, FLASH, "--from-log", "dsv4ctl/examples/healthy.log") if Path("dsv4ctl/examples").is_dir() else None
    assert hub.requests == []
    assert doc["geometry"]["source"] == "builtin" and doc["geometry"]["weights"] is None
    assert "built-in preset" in doc["geometry"]["checkpoint"] and "revision unknown" in doc["geometry"]["checkpoint"]
    assert log is None or log["geometry"]["source"] == "builtin"
    # A hub id that is not built in needs its config.json (its KV layout), never its safetensors.
    other = _plan(cli, OTHER, "--kv-cache-memory", "9.81GiB")
    assert other["geometry"]["source"] == "hub" and other["geometry"]["weights"] is None
    assert hub.requests and not any("safetensors" in p for p in hub.paths())


def test_the_token_is_sent_as_authorization(cli, hub, gpus):
    _plan(cli, FLASH, "--gpus", gpus)
    repo_requests = [r for r in hub.requests if "/resolve/" in r.path]
    assert repo_requests and all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in repo_requests)


def test_huggingface_hub_is_not_imported_without_a_hub_read(tmp_path):
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom dsv4ctl.cli import app\n"
        f"r = CliRunner().invoke(app, ['fit-length', {FLASH!r}, '--kv-cache-memory', '9.81GiB'])\n"
        "assert r.exit_code == 0, r.output\nprint('huggingface_hub' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_preset_that_differs_from_the_hubs_config_is_refused(hub, repo_files):
    config = builtin_config(FLASH)
    config["sliding_window"] = 256
    hub.repos[FLASH] = {**repo_files, "config.json": json.dumps(config).encode()}
    geometry = load_geometry(FLASH)
    with pytest.raises(InputError, match="differs from dsv4ctl's built-in preset \\(the layout planned\\): sliding_window 256 \\(preset 128\\)"):
        geometry.weights.total_bytes


def test_a_partial_local_snapshot_reads_the_same_commits_headers(hub, tmp_path, monkeypatch):
    snap = tmp_path / "hf" / "models--someorg--DeepSeek-V4-Test" / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(builtin_config(FLASH)))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    geometry = load_geometry(OTHER)
    assert geometry.source == "hf-cache" and geometry.revision == COMMIT and hub.requests == []
    assert geometry.weights.expert_bytes == EXPERT_BYTES
    assert all(COMMIT in p for p in hub.paths() if "/resolve/" in p)


def test_hub_answers_are_input_errors(hub):
    with pytest.raises(InputError, match="no such model"):
        load_geometry("nobody/NoSuchModel")


def test_tensor_bytes_from_dtype_and_shape_checked_against_the_span():
    assert tensor_bytes("BF16", [4, 8], (0, 64), "t") == 64
    assert tensor_bytes("F4", [3, 3], (0, 5), "t") == 5  # 4-bit elements, packed
    assert tensor_bytes("F32", [], (8, 12), "t") == 4  # a scalar
    assert tensor_bytes("X9", [7], (0, 21), "t") == 21  # a dtype not known: the span
    with pytest.raises(InputError, match="F16 x \\[4\\] is 8 bytes but its data_offsets span 6"):
        tensor_bytes("F16", [4], (0, 6), "t")


def test_without_huggingface_hub_the_weights_need_another_source(cli, hub, gpus, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "huggingface_hub" else real(name, *a))
    result = cli("fit-length", FLASH, "--gpus", gpus)
    assert result.exit_code == ExitCode.ERROR and "huggingface_hub is not installed" in result.stderr
    assert "--weights-memory" in result.stderr and hub.requests == []
