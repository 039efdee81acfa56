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


# ---- a log that stops before ready ----------------------------------------------------------------


def test_a_log_that_stops_loading_the_weights_says_how_far_and_what_to_check(cli):
    d = diagnose([REPORTS / "stops_loading_weights.log"])
    assert d.verdict == "inconclusive" and d.root_cause is None
    note = next(f for f in d.findings if f.id == "log_ends_before_ready")
    assert note.title == "The log ends while loading the weights"
    assert note.details["progress"] == {"shards_done": 6, "shards_total": 46, "percent": 13, "elapsed": "00:51",
                                        "remaining": "05:40", "rate": "8.51s/it", "line": 17}
    assert "6 of 46 shards (13%) after 00:51" in note.meaning and "10-21 09:00:51" in note.meaning
    assert note.evidence[0].line == 17 and "6/46" in note.evidence[0].text  # the bar's last redraw, as logged
    checks = " ".join(note.actions)
    for words in ("still running", "slow or network storage", "OOM killer", "dmesg", "/dev/shm", "probe"):
        assert words in checks
    # Checks, not fixes: the log shows none of these causes.
    assert all(a.startswith(("Check", "In a container, check", "If a startup")) for a in note.actions)
    text = report(cli, str(REPORTS / "stops_loading_weights.log"))
    assert "What to do:" in text and "pgrep -af vllm" in text
    assert text.index("The log ends while loading the weights") < text.index("Startup timeline")


def test_a_log_that_stops_capturing_names_the_capture_and_leaves_the_storage_alone():
    note = next(f for f in diagnose([FIXTURES / "inconclusive_capture.log"]).findings if f.id == "log_ends_before_ready")
    assert "capturing CUDA graphs" in note.title and "40 of 83" in note.meaning
    assert not any("storage" in a for a in note.actions)


def test_a_local_checkpoints_storage_is_checked_by_its_path(tmp_path):
    log = tmp_path / "local.log"
    log.write_text((REPORTS / "stops_loading_weights.log").read_text().replace("deepseek-ai/DeepSeek-V4-Flash",
                                                                                "/models/DeepSeek V4"))
    note = next(f for f in diagnose([log]).findings if f.id == "log_ends_before_ready")
    assert any(a.endswith("df -hT '/models/DeepSeek V4'") for a in note.actions)


def test_the_shards_bar_is_read_at_its_last_redraw():
    from dsv4ctl.logs.reader import iter_log_lines
    from dsv4ctl.logs.timeline import StartupTracker

    tracker = StartupTracker()
    events = [e for line in iter_log_lines([REPORTS / "stops_loading_weights.log"]) for e in tracker.feed(line)]
    assert events[-1].text == "Loading weights 6/46 shards"  # was the first redraw's 0/46


# ---- the safe length of a checkpoint this machine cannot read ---------------------------------------


def test_a_local_checkpoint_is_planned_as_the_geometry_its_log_shows():
    """A checkpoint directory of the server's, not on this machine: the log's architecture and its auto-fit (980,224
    tokens in 9.81 GiB) are Flash's, so the length is Flash's plan, the one the hub id gets, and says so."""
    hub = diagnose([EXAMPLES / "stale-max-model-len.log"]).root_cause.details
    local = diagnose([REPORTS / "stale_local_path.log"])
    details = local.root_cause.details
    assert details["safe_len"] == hub["safe_len"] == 840704
    assert details["safe_length"]["estimate"] is False
    assert details["safe_length"]["basis"].startswith("planned as deepseek-ai/DeepSeek-V4-Flash, the geometry the log shows")
    assert local.next_command.startswith("dsv4ctl serve /models/DeepSeek-V4-Flash ")
    assert local.next_command.endswith("--max-model-len 840704")


def test_a_log_no_geometry_matches_gets_an_estimate_that_says_so(tmp_path):
    """The same log with an auto-fit no built-in geometry gives at that memory (another DeepSeek-V4 variant): no plan,
    so the length is scaled, an upper bound, and the report says it is an estimate."""
    log = tmp_path / "variant.log"
    log.write_text((REPORTS / "stale_local_path.log").read_text().replace("1048576 to 980224", "1048576 to 700416"))
    safe = diagnose([log]).root_cause.details["safe_length"]
    assert safe["estimate"] is True and safe["autofit_max_model_len"] == 700416
    assert safe["line"].startswith("safe length at most ") and ", an estimate (no plan for this model" in safe["line"]
    assert "0.50 GiB" in safe["line"] and "a 0.50 GiB margin" not in safe["line"]


def test_the_report_says_where_the_safe_length_comes_from(cli):
    text = report(cli, str(REPORTS / "stale_local_path.log"), width=200)
    assert "Safe length 840,704 (planned as deepseek-ai/DeepSeek-V4-Flash, the geometry the log shows" in text
