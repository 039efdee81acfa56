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
