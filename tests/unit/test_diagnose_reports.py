"""What a `diagnose` report says beyond the root cause: when the stale-length checklist is asked, the phase of a
failure the log does not place, the next step of a log that stops, a crash loop's starts in bounded output, the safe
length of a local checkpoint, and the report's own wording. Fixtures: tests/fixtures/logs/reports/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
REPORTS = FIXTURES / "reports"
EXAMPLES = ROOT / "dsv4ctl" / "examples"


def report(cli, *args: str, width: int = 80) -> str:
    return cli("diagnose", *args, env={"COLUMNS": str(width)}).stdout


# ---- the stale max_model_len checklist ------------------------------------------------------------


def test_the_checklist_is_asked_where_the_failure_could_be_the_stale_length_crash():
    assert diagnose([EXAMPLES / "stale-max-model-len.log"]).checklist  # the assertion itself
    # An AssertionError in FULL capture after auto-fit on 0.30.0, its frames cut off: nothing rules the crash out.
    d = diagnose([REPORTS / "stale_possible_frames_cut.log"])
    assert [c.answer for c in d.checklist] == ["yes", "yes", "not in log", "yes", "not in log", "yes"]
    assert d.checklist[2].note == "the error is quoted without its traceback's frames"


@pytest.mark.parametrize("name", ["address_in_use", "cuda_oom_load", "nccl_error", "cuda_oom_serving",
                                  "unrecognized_chained_worker_error", "inconclusive_capture"])
def test_the_checklist_is_not_asked_where_the_log_rules_that_crash_out(name):
    """A port in use, a CUDA OOM, an NCCL error, a failure while serving, an explicit length, a start that has not
    failed: DeepSeek-V4 starts all, and the checklist's answers would all be "no" or "not in log"."""
    assert diagnose([FIXTURES / f"{name}.log"]).checklist == []


def test_the_checklist_is_not_asked_of_a_healthy_start():
    assert diagnose([EXAMPLES / "healthy.log"]).checklist == []


def test_the_checklist_keeps_identifiers_whole_at_80_columns(cli):
    text = report(cli, "--example", "stale-max-model-len")
    assert "sparse_mla.py::_build_c128a_metadata?" in text
    assert "ModelState.max_model_len" in text


# ---- the phase of a CUDA OOM ----------------------------------------------------------------------


def test_an_oom_with_no_phase_evidence_says_phase_unknown_and_advises_each_phase(cli):
    d = diagnose([REPORTS / "cuda_oom_no_phase.log"])
    oom = d.root_cause
    assert oom.id == "cuda_oom" and d.phase == "startup"
    # "EngineCore failed to start": the engine was starting, so it was not serving; nothing says which step.
    assert oom.details["phase"] == "unknown" and oom.details["possible_phases"] == ["load", "profile", "capture"]
    assert "loading the weights" not in oom.meaning.split(";")[0]
    assert "does not show in which phase" in oom.meaning
    advice = " ".join(oom.actions)
    for words in ("If it ran out loading the weights", "If it ran out profiling memory", "If it ran out capturing CUDA graphs"):
        assert words in advice
    doc = json.loads(cli("diagnose", str(REPORTS / "cuda_oom_no_phase.log"), "--json").stdout)
    root = next(f for f in doc["findings"] if f["is_root_cause"])
    assert doc["phase"] == "startup" and root["details"]["phase"] == "unknown"
    text = report(cli, str(REPORTS / "cuda_oom_no_phase.log"))
    assert "Phase: unknown (one of: load, profile, capture)" in text and "Phase: load" not in text


def test_an_oom_is_placed_by_the_method_a_workers_wrapper_names():
    oom = diagnose([REPORTS / "cuda_oom_worker_method.log"]).root_cause
    assert oom.details["phase"] == "load" and "possible_phases" not in oom.details
    assert oom.meaning == "The GPU ran out of memory while loading the weights."


@pytest.mark.parametrize(("name", "phase"), [("cuda_oom_load", "load"), ("cuda_oom_profile", "profile"),
                                             ("cuda_oom_capture", "capture"), ("cuda_oom_serving", "serving")])
def test_an_oom_with_phase_evidence_keeps_its_phase(name, phase):
    oom = next(f for f in diagnose([FIXTURES / f"{name}.log"]).findings if f.id == "cuda_oom")
    assert oom.details["phase"] == phase
