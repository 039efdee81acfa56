"""What a `diagnose` report says beyond the root cause: when the stale-length checklist is asked, the phase of a
failure the log does not place, the next step of a log that stops, a crash loop's starts in bounded output, the safe
length of a local checkpoint, and the report's own wording. Fixtures: tests/fixtures/logs/reports/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    assert oom.details["phase"] == "profile" and "possible_phases" not in oom.details
    assert oom.meaning == "The GPU ran out of memory while profiling memory / allocating the KV cache."


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


# ---- a crash loop's starts --------------------------------------------------------------------------


def _loop(tmp_path: Path, *parts: tuple[Path, int]) -> Path:
    """A log of starts: each fixture (its comment lines left out) repeated so many times, in order."""
    text = []
    for path, times in parts:
        one = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                      if not line.startswith("#"))
        text.append(one * times)
    log = tmp_path / "loop.log"
    log.write_text("".join(text), encoding="utf-8")
    return log


def test_a_crash_loop_is_summarised_in_bounded_output(cli, tmp_path):
    log = _loop(tmp_path, (REPORTS / "port_in_use_start.log", 300))
    text = report(cli, str(log))
    section = text[text.index("Starts in this log"):text.index("Startup timeline")]
    assert section.splitlines()[0] == "Starts in this log: 300, the report is about the last"
    assert re.search(r"^\s*300\s+failed\s+address_in_use\s+#1\s+#300$", section, re.M)  # counted by how they ended
    assert re.search(r"^\s*…\s+294 more$", section, re.M)
    rows = re.findall(r"^\s*(\d+)\s+\d+–\d+\s", section, re.M)
    assert rows == ["1", "2", "3", "298", "299", "300"]  # the first and the last few
    assert len(text.splitlines()) < 60
    doc = json.loads(cli("diagnose", str(log), "--json").stdout)
    assert len(doc["starts"]) == 300  # the JSON lists every start
    assert doc["start_kinds"] == [{"verdict": "failed", "phase": "startup", "root_cause": "address_in_use",
                                   "count": 300, "first_start": 1, "last_start": 300}]


def test_a_start_begins_at_its_own_first_line(tmp_path):
    """The platform line vLLM prints before its banner, and the logo's whole record, belong to the start they open."""
    d = diagnose([_loop(tmp_path, (REPORTS / "port_in_use_start.log", 3))])
    assert [(st.first.line, st.last.line) for st in d.starts] == [(1, 18), (19, 36), (37, 54)]
    healthy = _loop(tmp_path, (EXAMPLES / "healthy.log", 3))
    lines = healthy.read_text().count("\n") // 3
    starts = diagnose([healthy]).starts
    assert [(st.first.line, st.last.line) for st in starts] == [(1 + k * lines, (k + 1) * lines) for k in range(3)]


def test_the_starts_title_does_not_wrap_at_80_columns(cli, tmp_path):
    text = report(cli, str(_loop(tmp_path, (REPORTS / "port_in_use_start.log", 3))))
    assert "Starts in this log: 3, the report is about the last\n" in text


LOOP_PARTS = [REPORTS / "port_in_use_start.log", FIXTURES / "cuda_oom_load.log", EXAMPLES / "stale-max-model-len.log",
              FIXTURES / "compile_error.log", EXAMPLES / "healthy.log", FIXTURES / "inconclusive_capture.log"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.tuples(st.sampled_from(range(len(LOOP_PARTS))), st.integers(1, 4)), min_size=1, max_size=6))
def test_a_start_that_repeats_the_one_before_concludes_as_it_would_alone(order, tmp_path, monkeypatch):
    """A repeated start takes the conclusion of the one before it without being analysed: the report (every start's
    lines, verdict and cause, the last start's findings) is the one a full analysis of every start gives."""
    from dsv4ctl.diagnosis import repeats

    log = _loop(tmp_path, *((LOOP_PARTS[i], n) for i, n in order))
    fast = diagnose([log]).to_json()
    monkeypatch.setattr(repeats, "PRINT_MAX_LINES", 0)  # no start compared: each analysed
    assert diagnose([log]).to_json() == fast


def test_a_crash_loop_analyses_its_distinct_starts_only(tmp_path):
    from dsv4ctl.diagnosis.run import LogPass

    feed = LogPass.feed_raw
    passes = []

    def spy(self, *args, **kwargs):
        passes.append(self)
        return feed(self, *args, **kwargs)

    log = _loop(tmp_path, (REPORTS / "port_in_use_start.log", 50))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LogPass, "feed_raw", spy)
        d = diagnose([log])
    assert len(d.starts) == 50
    # the first start analysed, the second too (its first line, the platform line, was the first start's last
    # line before the split), every other repeat taken as is, the last read in full for the report
    assert passes[0].replayed == 47


# ---- the report's own wording -----------------------------------------------------------------------


def test_ids_are_shown_without_the_catalogues_prefix(cli):
    path = FIXTURES / "catalogue" / "eco_hf_gated_repo.log"
    text = report(cli, str(path))
    assert "(hf_gated_repo, line" in text and "eco_" not in text
    assert json.loads(cli("diagnose", str(path), "--json").stdout)["root_cause"] == "eco_hf_gated_repo"


def test_a_title_with_placeholders_is_filled():
    title = diagnose([FIXTURES / "address_in_use.log"]).root_cause.title
    assert "{" not in title and title == "The address is already taken"


def test_the_engines_wrapper_says_what_failed():
    serving = next(f for f in diagnose([FIXTURES / "cuda_oom_serving.log"]).findings if f.id == "engine_core_failed")
    assert serving.meaning.startswith("The engine reported that it died while serving.")
    starting = next(f for f in diagnose([FIXTURES / "compile_error.log"]).findings if f.id == "engine_core_failed")
    assert starting.meaning.startswith("The engine reported that its startup failed.")


def test_evidence_is_listed_in_the_logs_order(cli):
    text = report(cli, str(FIXTURES / "catalogue" / "eco_hf_gated_repo.log"), width=200)
    numbers = [int(m) for m in re.findall(r"^\s{4,}(\d+)  ", text.split("What to do")[0], re.M)]
    assert len(numbers) > 2 and numbers == sorted(numbers)


def test_an_empty_input_says_it_is_empty(cli, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    result = cli("diagnose", str(empty))
    assert result.exit_code == 5
    assert "The input is empty" in result.stdout and "read 0 lines" not in result.stdout


def test_stdin_from_a_terminal_is_asked_for(monkeypatch, capsys):
    import sys

    from dsv4ctl.commands import diagnose as command

    class Terminal:
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    command._prompt_for_stdin(["-"])
    assert "Reading the log from stdin" in capsys.readouterr().err
    command._prompt_for_stdin(["vllm.log"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("args", [("--example", "stale-max-model-len"), ("--example", "healthy"), ("--list-examples",),
                                  (str(FIXTURES / "catalogue" / "eco_hf_gated_repo.log"),)])
def test_no_report_line_ends_in_blanks(cli, args):
    for width in (80, 120):
        text = report(cli, *args, width=width)
        assert [line for line in text.splitlines() if line != line.rstrip()] == []


def test_a_deployments_tables_pad_their_cells(cli):
    logs = sorted((FIXTURES / "group").glob("*.log"))
    text = report(cli, *map(str, logs), width=120)
    assert "┃ log " in text and "┃log" not in text
