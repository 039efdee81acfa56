"""The generated table of which startup lines each vLLM release prints (dsv4ctl/catalogue/vllm_log_lines.json,
scripts/add_release.py) and its reader: every cited line holds its text in the released wheel's source."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import pytest

from dsv4ctl.catalogue import vllm_log_lines as ll
from dsv4ctl.logs import timeline

REPO = Path(__file__).resolve().parents[2]
SRC = Path("/work/wheels/src")


def known_releases() -> tuple[str, ...]:
    lines = (ln.split("#", 1)[0].strip() for ln in (REPO / "scripts" / "vllm_releases.txt").read_text().splitlines())
    return tuple(ln for ln in lines if ln)


@pytest.fixture(autouse=True)
def _packaged():
    ll.reset()
    yield
    ll.reset()


def test_every_known_release_and_only_timeline_keys():
    assert ll.load_error() is None
    assert ll.releases() == known_releases()
    assert set(ll.keys()) <= set(timeline.line_patterns())
    data = json.loads(ll.DATA.read_text())
    assert data["schema_version"] == 1
    # every key is either printed by some release or listed as another program's line
    assert set(ll.keys()) | set(data["not_vllm"]) == set(timeline.line_patterns())
    assert "startup_complete" in data["not_vllm"]  # uvicorn's


def test_the_v2_runner_line_ends_with_0_34():
    # vllm==0.33.0 vllm/v1/worker/gpu_worker.py:513 logger.info("Using V2 Model Runner"); 0.34.0 removed the V1
    # runner and the line with it (gpu_worker.py `_make_model_runner`, no log)
    assert ll.line("v2_runner", "0.33.0") == ll.LogLine("Using V2 Model Runner", "vllm/v1/worker/gpu_worker.py:513")
    assert ll.prints("v2_runner", "0.33.0") is True
    assert ll.line("v2_runner", "0.34.0") is None and ll.prints("v2_runner", "0.34.0") is False
    assert ll.prints("v2_runner", "9.9.9") is None and ll.prints("no-such-line", "0.34.0") is None
    # vllm==0.34.0 vllm/v1/worker/gpu_worker.py:795 "Available KV cache memory: %s GiB"
    assert ll.line("available_kv", "0.34.0").cite("0.34.0") == "vllm==0.34.0 vllm/v1/worker/gpu_worker.py:795"


def test_each_release_line_matches_its_timeline_regex_once_filled():
    for release in ll.releases():
        for key in ll.keys():
            got = ll.line(key, release)
            if got is None or "{" in got.text or "%" in got.text:
                continue  # a placeholder's value comes at run time
            assert timeline.line_patterns()[key].search(got.text) or key in ("shards", "capture", "capture_bare"), (release, key)


@pytest.mark.skipif(not SRC.is_dir(), reason="needs the releases' unpacked sources under /work/wheels/src")
def test_every_cite_holds_its_text():
    for release in ll.releases():
        for key in ll.keys():
            got = ll.line(key, release)
            if got is None:
                continue
            rel, line = got.where.rsplit(":", 1)
            path = SRC / f"vllm-{release}" / rel
            if not path.is_file():
                pytest.skip(f"{path} not unpacked")
            src = path.read_text(encoding="utf-8").splitlines()
            window = "\n".join(src[int(line) - 1:int(line) + 6])
            word = max(re.findall(r"[A-Za-z_][A-Za-z_0-9.-]{3,}", got.text), key=len)
            assert word in window, (release, key, got.where, word)


def test_a_missing_file_only_turns_the_data_off(tmp_path):
    ll.reset(tmp_path / "absent.json")
    assert ll.releases() == () and ll.line("v2_runner", "0.33.0") is None and ll.prints("v2_runner", "0.33.0") is None
    assert "FileNotFoundError" in ll.load_error()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 99, "releases": {}}))
    ll.reset(bad)
    assert ll.releases() == () and "schema_version 99" in ll.load_error()


def test_the_file_is_package_data():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["dsv4ctl"]
    assert any(fnmatch.fnmatch("catalogue/vllm_log_lines.json", p) for p in patterns), patterns
