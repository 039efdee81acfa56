"""DSV4CTL_FIXES parsing, the pure plan, the report line and the plugin's import cost (no vLLM needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl.fixes import (
    APPLIED,
    DEEPGEMM_METADATA_CLAMP,
    FIX_NAMES,
    NOT_NEEDED,
    NOT_REQUESTED,
    SKIPPED,
    STALE_MAX_MODEL_LEN,
    FixCheck,
    FixOutcome,
    parse_selection,
    plan,
    summary_line,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", [None, "", "none", "NONE", " none ", "off"])
def test_unset_or_none_selects_nothing(value):
    selection = parse_selection(value)
    assert selection.mode == "none"
    assert not any(selection.requested(name) for name in FIX_NAMES)


def test_all_selects_every_fix_without_forcing():
    selection = parse_selection("all")
    assert selection.mode == "all"
    assert all(selection.requested(name) for name in FIX_NAMES)
    assert not any(selection.forced(name) for name in FIX_NAMES)


def test_named_list_forces_only_those_and_keeps_unknown_aside():
    selection = parse_selection(" Stale-Max-Model-Len , bogus,stale-max-model-len")
    assert selection.mode == "named"
    assert selection.names == (STALE_MAX_MODEL_LEN,)
    assert selection.forced(STALE_MAX_MODEL_LEN)
    assert not selection.requested(DEEPGEMM_METADATA_CLAMP)
    assert selection.unknown == ("bogus",)


def test_only_unknown_names_select_nothing():
    selection = parse_selection("typo-fix")
    assert selection.mode == "none" and selection.unknown == ("typo-fix",)


CHECK_NEEDED = FixCheck(STALE_MAX_MODEL_LEN, True, True, "caches an attribute")
CHECK_NOT_NEEDED = FixCheck(STALE_MAX_MODEL_LEN, True, False, "read-only property")
CHECK_UNKNOWN = FixCheck(STALE_MAX_MODEL_LEN, True, None, "could not tell")
CHECK_MISSING = FixCheck(STALE_MAX_MODEL_LEN, False, None, "target missing")


@pytest.mark.parametrize(
    ("value", "check", "status"),
    [
        (None, CHECK_NEEDED, NOT_REQUESTED),
        ("all", CHECK_NEEDED, APPLIED),
        ("all", CHECK_NOT_NEEDED, NOT_NEEDED),
        ("all", CHECK_UNKNOWN, APPLIED),
        ("all", CHECK_MISSING, SKIPPED),
        ("stale-max-model-len", CHECK_NOT_NEEDED, APPLIED),
        ("stale-max-model-len", CHECK_MISSING, SKIPPED),
        ("deepgemm-metadata-clamp", CHECK_NEEDED, NOT_REQUESTED),
    ],
)
def test_plan(value, check, status):
    assert plan(parse_selection(value), check).status == status


def test_plan_says_why_a_forced_fix_is_applied():
    outcome = plan(parse_selection("stale-max-model-len"), CHECK_NOT_NEEDED)
    assert "requested by name although not needed" in outcome.reason and "read-only property" in outcome.reason


def test_summary_line_starts_with_the_literal_prefix_and_names_every_fix():
    line = summary_line({
        STALE_MAX_MODEL_LEN: FixOutcome(STALE_MAX_MODEL_LEN, APPLIED, "wrapped X"),
        DEEPGEMM_METADATA_CLAMP: FixOutcome(DEEPGEMM_METADATA_CLAMP, NOT_NEEDED, "guarded"),
    })
    assert line.startswith("dsv4ctl fixes: ")
    assert "stale-max-model-len applied (wrapped X)" in line
    assert "deepgemm-metadata-clamp not needed (guarded)" in line
    landed = summary_line({STALE_MAX_MODEL_LEN: FixOutcome(STALE_MAX_MODEL_LEN, APPLIED, "wrapped X")}, "vllm.a.b")
    assert landed == "dsv4ctl fixes: stale-max-model-len applied (wrapped X) on import of vllm.a.b"


def _run_register(env: dict[str, str], count: int = 1) -> list[subprocess.Popen]:
    code = ("import sys, json\nimport dsv4ctl.fixes as f\nf.register()\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch'))))\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("DSV4CTL_")}
    base["PYTHONPATH"] = str(REPO)
    return [subprocess.Popen([sys.executable, "-c", code], env={**base, **env}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(count)]


def test_concurrent_processes_append_one_whole_json_line_each(tmp_path):
    report = tmp_path / "fixes.jsonl"
    procs = _run_register({"DSV4CTL_FIXES_REPORT": str(report)}, count=8)
    pids = set()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out) == []  # nothing requested: neither vLLM nor torch imported
        pids.add(proc.pid)
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == 8
    assert {line["pid"] for line in lines} == pids
    for line in lines:
        assert set(line) >= {"event", "pid", "ppid", "process", "argv0", "requested", "module", "fixes"}
        assert line["event"] == "register" and line["module"] is None
        assert line["process"] == "MainProcess" and line["argv0"] == "-c"
        assert set(line["fixes"]) == set(FIX_NAMES)
        assert {v["status"] for v in line["fixes"].values()} == {NOT_REQUESTED}


def test_import_of_the_plugin_module_is_cheap():
    code = ("import sys\nimport dsv4ctl.fixes\n"
            "heavy = [m for m in ('vllm', 'torch', 'multiprocessing', 'dsv4ctl.probe') if m in sys.modules]\n"
            "print(heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.strip() == "[]", proc.stderr
