"""`dsv4ctl diff GOOD BAD`: the seed's pair, a real log's two starts, alignment with facts one log lacks, the
arguments and environment, start numbers, the JSON contract and 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4ctl.compare import compare, parse_pair, parse_spec
from dsv4ctl.errors import ExitCode, UsageError

REPO = Path(__file__).resolve().parents[2]
GOOD = REPO / "tests/fixtures/diff/stale-good.log"  # README.md there: vLLM's lines and where they come from
BAD = REPO / "dsv4ctl/examples/stale-max-model-len.log"
REAL = Path("/work/shared/real-logs/logs")
# Two real excerpts that each hold a start marker, one after the other as a log file appended to by two launches
# (no excerpt of the corpus holds two starts on its own; r4-05's "two runs" are fragments without a marker).
REAL_PAIR = ("r5-01-dsv4-flash-windows-powershell-startup-stops-before-deepgemm-error-inconclusive.log",
             "r1-024-dsv32-rtxpro6000-no-valid-sparse-mla-backend.log")

HEAD = ("(APIServer pid={pid}) INFO 09-24 10:02:11 [api_utils.py:330]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.30.0\n"
        "(APIServer pid={pid}) INFO 09-24 10:02:11 [utils.py:286] non-default args: {args}\n")


def _log(tmp_path: Path, name: str, *starts: tuple[int, str, str]) -> Path:
    """A log of starts, each (pid, non-default args dict as vLLM prints it, further lines)."""
    text = "".join(HEAD.format(pid=pid, args=args) + rest for pid, args, rest in starts)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_seeds_pair_ranks_the_autofit_reduction_first_and_pins_the_planned_length(cli):
    from dsv4ctl.advice import diagnose

    result = cli("diff", GOOD, BAD, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    first = doc["differences"][0]
    assert first["name"] == "auto-fit" and first["status"] == "changed"
    assert first["bad"] == {"value": "reduced 1048576 -> 980224", "source": str(BAD), "line": 36}
    assert first["good"]["value"] == "full length 1048576 fits" and first["good"]["line"] == 35
    assert "stale-length assertion" in first["bearing"]
    by_name = {d["name"]: d for d in doc["differences"]}
    assert (by_name["available KV cache memory"]["good"]["value"], by_name["available KV cache memory"]["bad"]["value"]) \
        == ("12.3 GiB", "9.81 GiB")
    assert doc["bad"]["root_cause"] == "stale_max_model_len" and doc["good"]["verdict"] == "healthy"
    # The length to pin is the one the advice path plans for BAD's own figures, not a number of this test's.
    planned = next(f for f in diagnose([str(BAD)]).findings if f.id == "stale_max_model_len").details["safe_len"]
    assert doc["pin_max_model_len"] == planned
    assert f"--max-model-len {planned}" in doc["headline"] and "stale max_model_len" in doc["headline"]
    assert "0.30.0 has the bug" in doc["headline"]
    assert doc["parting"]["phase"] == "capturing" and "after capturing CUDA graphs (line" in doc["parting"]["text"]
    assert doc["explicit_length"]["answer"] == "not shown"  # neither start gave an explicit length
    assert {d["name"] for d in doc["same"]} >= {"vLLM", "--max-model-len", "model"}


def test_the_human_report_fits_80_columns_and_keeps_the_command_whole(cli):
    result = cli("diff", GOOD, BAD, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0
    command = next(line for line in result.stdout.splitlines() if line.strip().startswith("dsv4ctl serve "))
    assert command.strip().endswith("--max-model-len " + str(json.loads(cli("diff", GOOD, BAD, "--json").stdout)
                                                            ["pin_max_model_len"]))
    for line in result.stdout.splitlines():
        assert len(line) <= 80 or line == command, line
    assert result.stdout.index(" 1. auto-fit") < result.stdout.index("available KV cache memory")
    assert result.stderr == ""


def test_a_real_logs_two_starts(cli, tmp_path):
    if not REAL.is_dir():
        pytest.skip("the real-log corpus is not here")
    log = tmp_path / "two-launches.log"
    log.write_bytes(b"".join((REAL / name).read_bytes() for name in REAL_PAIR))
    doc = json.loads(cli("diff", f"{log}#1", f"{log}#2", "--json").stdout)
    assert (doc["good"]["start"], doc["bad"]["start"], doc["bad"]["starts"]) == (1, 2, 2)
    assert doc["bad"]["first_line"] == doc["good"]["last_line"] + 1
    by_name = {d["name"]: d for d in doc["differences"]}
    assert (by_name["vLLM"]["good"]["value"], by_name["vLLM"]["bad"]["value"]) == ("0.24.0", "0.13.0")
    assert by_name["--max-model-len"]["status"] == "changed"
    assert by_name["--tensor-parallel-size"]["status"] == "added" and by_name["--tensor-parallel-size"]["good"] is None
    assert doc["bad"]["root_cause"] == "no_sparse_mla_backend"
    assert "after starting (line" in doc["parting"]["text"]
    assert "both gave an explicit length" in doc["explicit_length"]["note"]
    assert any("GOOD did not reach a healthy end" in n for n in doc["notes"])
    last = json.loads(cli("diff", f"{log}#1", f"{log}#-1", "--json").stdout)
    assert last["bad"]["start"] == 2


def test_a_fact_one_log_lacks_is_not_in_log_never_equal(tmp_path):
    args = "{'model': 'm', 'max_model_len': 4096}"
    good = _log(tmp_path, "good.log", (11, args, "(Worker_TP0 pid=12) INFO 09-24 10:03:00 [gpu_worker.py:626] "
                                                  "Available KV cache memory: 12.3 GiB\n"))
    bad = _log(tmp_path, "bad.log", (21, args, ""))
    c = compare(*parse_pair(str(good), str(bad)))
    kv = next(f for f in c.facts if f.name == "available KV cache memory")
    assert kv.status == "only in GOOD's log" and kv.bad is None and kv.good.line == 3
    assert kv in c.differences
    assert all(f.name != "vLLM" or f.status == "same" for f in c.facts)  # both banners say 0.30.0


def test_args_added_removed_and_changed_and_the_explicit_length_answer(tmp_path):
    ready = "(APIServer pid={pid}) INFO 09-24 10:05:00 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000\n"
    good = _log(tmp_path, "good.log", (11, "{'model': 'm', 'max_model_len': 4096, 'enforce_eager': True}",
                                       ready.format(pid=11)))
    bad = _log(tmp_path, "bad.log", (21, "{'model': 'm', 'max_model_len': -1, 'block_size': 64}",
                                     "(APIServer pid=21) ERROR 09-24 10:03:00 [core.py:1] EngineCore failed to start.\n"))
    c = compare(*parse_pair(str(good), str(bad)))
    status = {f.name: f.status for f in c.facts}
    assert status["--max-model-len"] == "changed"
    assert status["--enforce-eager"] == "removed" and status["--block-size"] == "added"
    answer = c.explicit_length
    assert answer.answer == "yes" and "--max-model-len 4096" in answer.note and "(line 2)" in answer.note


def test_environment_variables_the_logs_show(tmp_path):
    env = ("(Worker_TP0 pid={pid}) INFO 09-24 10:02:12 [system_utils.py:35] Overwriting environment variable "
           "NCCL_P2P_DISABLE from '0' to '{value}'\n")
    good = _log(tmp_path, "good.log", (11, "{'model': 'm'}", env.format(pid=12, value="0") + "+ export VLLM_USE_V2=1\n"))
    bad = _log(tmp_path, "bad.log", (21, "{'model': 'm'}", env.format(pid=22, value="1")))
    c = compare(*parse_pair(str(good), str(bad)))
    facts = {f.name: f for f in c.facts}
    assert facts["env NCCL_P2P_DISABLE"].status == "changed"
    assert (facts["env NCCL_P2P_DISABLE"].good.value, facts["env NCCL_P2P_DISABLE"].bad.value) == ("0", "1")
    assert facts["env VLLM_USE_V2"].status == "only in GOOD's log" and facts["env VLLM_USE_V2"].good.line == 4


def test_two_starts_of_one_log_and_start_numbers(tmp_path, cli):
    log = _log(tmp_path, "loop.log", (11, "{'model': 'm', 'max_model_len': 4096}", ""),
               (21, "{'model': 'm', 'max_model_len': 8192}", ""), (31, "{'model': 'm', 'max_model_len': 16}", ""))
    c = compare(parse_spec(f"{log}#1"), parse_spec(f"{log}#2"))
    assert (c.good.number, c.bad.number, c.bad.count) == (1, 2, 3)
    arg = next(f for f in c.facts if f.name == "--max-model-len")
    assert (arg.good.value, arg.good.line, arg.bad.value, arg.bad.line) == ("4096", 2, "8192", 4)
    result = cli("diff", f"{log}#1", f"{log}#9")
    assert result.exit_code == ExitCode.USAGE
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"Error: {log}#9: {log} holds 3 starts" and f"{log}#3" in lines[1] and len(lines) == 2
    as_json = cli("diff", f"{log}#1", f"{log}#9", "--json")
    assert json.loads(as_json.stdout)["error"]["exit_code"] == 2


@pytest.mark.parametrize("spec, words", [("a.log#0", "numbered from 1"), ("a.log#x", "is a number"),
                                         ("a.log#", "is a number")])
def test_start_numbers_that_are_not_one(spec, words):
    with pytest.raises(UsageError, match=words):
        parse_spec(spec)


def test_a_file_named_with_a_hash_is_that_file(tmp_path):
    path = tmp_path / "odd#2"
    path.write_text("x")
    assert parse_spec(str(path)).number is None and parse_spec(f"{tmp_path}/b.log#-1").number == -1


def test_stdin_once(cli):
    result = cli("diff", GOOD, "-", input=BAD.read_bytes())
    assert result.exit_code == 0 and json.loads(cli("diff", GOOD, "-", "--json", input=BAD.read_bytes()).stdout)[
        "bad"]["source"] == "-"
    twice = cli("diff", "-", "-", input=b"")
    assert twice.exit_code == ExitCode.USAGE and "stdin (-) can be read once" in twice.stderr


def test_unreadable_input_is_one_line(cli, tmp_path):
    missing = cli("diff", tmp_path / "nope.log", BAD)
    assert missing.exit_code == ExitCode.ERROR and "no such log file" in missing.stderr
    assert "Traceback" not in missing.stderr and missing.stdout == ""
    junk = tmp_path / "junk.log"
    junk.write_text("hello\nworld\n")
    foreign = cli("diff", junk, BAD)
    assert foreign.exit_code == ExitCode.ERROR and "Not a vLLM log" in foreign.stderr
