"""Hub ids on a real node: the checkpoint in the Hugging Face cache is found (never downloaded)."""

from __future__ import annotations

import builtins
import json
import sys
from pathlib import Path

import pytest

from fitkit import FLASH, builtin_config, make_checkpoint, no_hf_cache  # noqa: F401 - autouse fixture

from dsv4ctl.planning.checkpoint.hub_cache import find_snapshot, hub_cache_dir

SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures" / "gpus" / "h200-snapshot.json"
GiB = 1 << 30


def _cache(hub: Path, rev: str = "abc123", weights: dict[str, int] | None = None, ref: bool = True) -> Path:
    repo = hub / "models--deepseek-ai--DeepSeek-V4-Flash"
    make_checkpoint(repo / "snapshots" / rev, builtin_config(FLASH), [weights or {"model.layers.0.attn.wq.weight": 4096}])
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(rev)
    return repo / "snapshots" / rev


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"HF_HUB_CACHE": "/c/hub", "HF_HOME": "/h"}, "/c/hub"),
        ({"HUGGINGFACE_HUB_CACHE": "/legacy", "HF_HOME": "/h"}, "/legacy"),
        ({"HF_HOME": "/h"}, "/h/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
        ({}, str(Path("~/.cache/huggingface/hub").expanduser())),
    ],
)
def test_cache_dir_precedence_is_huggingface_hubs(env, expected):
    assert hub_cache_dir(env) == Path(expected)


def test_hf_home_is_honoured(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    snap = _cache(tmp_path / "home" / "hub")
    assert find_snapshot(FLASH) == snap


def test_uses_huggingface_hubs_cache_api_when_installed(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    import huggingface_hub

    calls = []
    real = huggingface_hub.try_to_load_from_cache

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", spy)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _cache(tmp_path / "hub", rev="old")
    snap = _cache(tmp_path / "hub", rev="new")  # refs/main now names "new"
    assert find_snapshot(FLASH) == snap
    assert calls and calls[0][0][0] == FLASH and calls[0][1]["cache_dir"] == str(tmp_path / "hub")


def test_plain_scan_without_huggingface_hub(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name.startswith("huggingface_hub"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hub)
    monkeypatch.delitem(sys.modules, "huggingface_hub", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snap = _cache(tmp_path / "hub", ref=False)  # no refs/main: the newest snapshot with a config.json
    assert find_snapshot(FLASH) == snap


def test_not_cached_and_not_an_id(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    assert find_snapshot(FLASH) is None
    assert find_snapshot("../etc") is None and find_snapshot("a/b/c") is None


def test_fit_length_reads_the_cached_weights_instead_of_failing(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    weights = {"model.layers.0.attn.wq.weight": 20 * GiB, "model.layers.0.ffn.experts.0.w1.weight": 100 * GiB}
    _cache(tmp_path / "home" / "hub", weights=weights)
    result = cli("fit-length", FLASH, "--gpus", str(SNAPSHOT), "-tp", "1", "--json")
    assert "weight size per GPU is unknown" not in result.output
    doc = json.loads(result.stdout)
    assert doc["geometry"]["source"] == "hf-cache"
    assert doc["gpus"][0]["weights_bytes"] == 120 * GiB
