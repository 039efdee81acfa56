"""`dsv4ctl diagnose`: one fixture per signature, through the CLI and json.loads.

The fixture logs (tests/fixtures/logs/) are written from vLLM's own format strings; each file's
header says which source (vLLM file and line, upstream report, torch/DeepGEMM message) it follows.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl.errors import ExitCode
from dsv4ctl.logs import prefilter
from dsv4ctl.advice import diagnose, diagnose_lines, safe_length_from_log
from dsv4ctl.diagnosis.dsv4 import c128a_capacity
from dsv4ctl.logs.reader import iter_log_lines
from dsv4ctl.catalogue.signatures import BY_ID, CATALOGUE

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"

# fixture -> (verdict, exit code, root cause id, ids that must be among the findings)
EXPECTED = {
    "address_in_use": ("failed", 3, "address_in_use", []),
    "cli_arguments_rejected": ("failed", 3, "cli_arguments_rejected", []),
    "autofit_reduced_legacy": ("healthy", 0, None, ["autofit_reduced"]),
    "autofit_reduced_v031": ("healthy", 0, None, ["autofit_reduced"]),
    "autofit_reduced_v032": ("healthy", 0, None, ["autofit_reduced"]),
    "compile_error": ("failed", 3, "compile_error", ["engine_core_failed"]),
    "cuda_driver_too_old": ("failed", 3, "cuda_driver_too_old", []),
    "cuda_illegal_memory_access": ("failed", 3, "cuda_illegal_memory_access", []),
    "cuda_oom_capture": ("failed", 3, "cuda_oom", ["autofit_reduced"]),
    "cuda_oom_load": ("failed", 3, "cuda_oom", []),
    "cuda_oom_profile": ("failed", 3, "cuda_oom", []),
    "cuda_oom_serving": ("failed", 3, "cuda_oom", ["engine_core_failed"]),
    "deep_gemm_missing": ("failed", 3, "deep_gemm_missing", []),
    "deepgemm_metadata_oob_nccl_masked": ("failed", 3, "deepgemm_metadata_oob", ["nccl_error"]),
    "deepgemm_metadata_oob_traced": ("failed", 3, "deepgemm_metadata_oob", []),
    "deepgemm_unsupported_arch": ("failed", 3, "deepgemm_unsupported_arch", []),
    "error_after_startup": ("failed", 4, "unrecognized_error", []),
    "free_memory_below_utilization": ("failed", 3, "free_memory_below_utilization", []),
    "healthy_explicit_len": ("healthy", 0, None, []),
    "inconclusive_capture": ("inconclusive", 5, None, ["autofit_reduced"]),
    # The log ends on the engine's shared-memory broadcast waits (capture never reports again): stuck.
    "inconclusive_engine_waiting": ("stuck", 8, "start_stuck", ["engine_waiting"]),
    "interleaved_multiprocess": ("failed", 3, "cuda_oom", ["engine_core_failed"]),
    "kv_cache_dtype_auto_bf16": ("healthy", 0, None, ["kv_cache_dtype_auto_bf16"]),
    "kv_cache_dtype_unsupported": ("failed", 3, "kv_cache_dtype_unsupported", []),
    "kv_cache_insufficient_cannot_autofit": ("failed", 3, "kv_cache_insufficient", []),
    "kv_cache_insufficient_legacy": ("failed", 3, "kv_cache_insufficient", []),
    "kv_cache_insufficient_no_memory": ("failed", 3, "kv_cache_insufficient", []),
    "mtp_next_n_unsupported": ("failed", 3, "mtp_next_n_unsupported", []),
    "mtp_weights_missing": ("failed", 3, "mtp_weights_missing", []),
    # vLLM's own NCCL wrapper text: the specific ecosystem signature explains it; the generic one stays.
    "nccl_error": ("failed", 3, "eco_nccl_system_error", ["nccl_error"]),
    "no_sparse_mla_backend": ("failed", 3, "no_sparse_mla_backend", []),
    "ray_prefixed": ("failed", 3, "cuda_oom", []),
    "real_v032_cpu_healthy": ("healthy", 0, None, ["shutdown_noise"]),
    "real_v032_cpu_kv_insufficient": ("failed", 3, "kv_cache_insufficient", ["engine_core_failed", "worker_died"]),
    # a headless data-parallel node whose engine was killed: dsv4ctl serve's own line is the only word of it
    "real_v032_cpu_headless_engine_killed": ("failed", 3, "serve_engine_died", ["shutdown_noise"]),
    "shutdown_noise_interrupted": ("inconclusive", 5, None, ["shutdown_noise"]),
    "stale_max_model_len_compose_v029": ("failed", 3, "stale_max_model_len", ["autofit_reduced"]),
    "stale_max_model_len_no_autofit": ("failed", 3, "stale_max_model_len", []),
    # Its AttributeError ('_OpNamespace' '_C' has no attribute …) is answered by a family: vLLM's ops did not load.
    "unrecognized_error": ("failed", 3, "vllm_ops_not_loaded", []),
    "worker_died": ("failed", 3, "eco_host_oom_killed", ["worker_died"]),
    "deepgemm_metadata_oob_coredump": ("failed", 3, "deepgemm_metadata_oob", ["worker_died"]),
    "unrecognized_chained_worker_error": ("failed", 4, "unrecognized_error", ["engine_core_failed"]),
    "unrecognized_quoted_by_wrapper": ("failed", 4, "unrecognized_error", []),
    "request_error_while_serving": ("healthy", 0, None, ["prompt_too_long"]),
    "cuda_fault_while_serving": ("failed", 3, "cuda_illegal_memory_access", ["engine_core_failed"]),
    # vLLM 0.34.0's measured KV cache (tests/fixtures/logs/generate_v034.py; more in test_diagnose_v034.py)
    "v034_measured_autofit_reduced": ("healthy", 0, None, ["autofit_reduced", "measured_kv_uneven"]),
    "v034_measured_explicit_len_refused": ("failed", 3, "kv_cache_insufficient", ["gpu_util_caps_measured_kv"]),
    "v034_extensible_off_estimate": ("healthy", 0, None, ["autofit_reduced", "extensible_kv_cache_disabled"]),
}


def run_json(cli, *args, **kw):
    result = cli("diagnose", *args, "--json", **kw)
    assert "Traceback" not in result.stderr
    return result, json.loads(result.stdout)


def test_every_fixture_has_an_expectation_and_every_signature_a_fixture():
    assert {p.stem for p in FIXTURES.glob("*.log")} == set(EXPECTED)
    covered = {root for _, _, root, _ in EXPECTED.values() if root} | {i for *_, ids in EXPECTED.values() for i in ids}
    # The family modules (signatures_vllm, …) have fixtures of their own under fixtures/logs/catalogue/.
    from dsv4ctl.catalogue import (
        signatures_dspark,
        signatures_dsv4_field,
        signatures_ecosystem,
        signatures_v034,
        signatures_vllm,
        signatures_waits,
    )

    family = {s.id for s in signatures_vllm.SIGNATURES + signatures_ecosystem.SIGNATURES + signatures_waits.SIGNATURES
              + signatures_dsv4_field.SIGNATURES + signatures_v034.SIGNATURES + signatures_dspark.SIGNATURES}
    assert {s.id for s in CATALOGUE} - family <= covered


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_diagnosis(cli, name):
    verdict, code, root, ids = EXPECTED[name]
    result, data = run_json(cli, FIXTURES / f"{name}.log")
    assert result.exit_code == code
    assert data["schema_version"] == 1
    assert data["verdict"] == verdict
    assert data["exit_code"] == code
    assert data["root_cause"] == root
    found = [f["id"] for f in data["findings"]]
    for i in ids:
        assert i in found
    roots = [f for f in data["findings"] if f["is_root_cause"]]
    if root is None:
        assert roots == []
    else:
        assert [f["id"] for f in roots] == [root]
        assert data["findings"][0]["id"] == root  # root cause first
        lines = (FIXTURES / f"{name}.log").read_bytes().decode("utf-8").split("\n")  # CR is not a line end here
        first = roots[0]
        assert isinstance(first["line"], int) and first["evidence"]
        # The evidence quotes the line it points at.
        assert first["evidence"] in lines[first["line"] - 1]
    for f in data["findings"]:
        assert {"id", "severity", "line", "evidence"} <= set(f)
        assert f["severity"] in ("critical", "warning", "info")
    if verdict == "healthy":
        assert not any(f["is_root_cause"] for f in data["findings"])


def test_comment_headers_of_fixtures_are_not_log_lines():
    # The header comments cite sources; they must never be mistaken for evidence.
    for path in list(FIXTURES.glob("*.log")) + list((Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples").glob("*.log")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                assert not prefilter.line_matches(line), (path.name, line)


def test_stale_example_prints_the_arithmetic_from_the_log(cli):
    result, data = run_json(cli, "--example", "stale-max-model-len")
    assert result.exit_code == ExitCode.FAILED_KNOWN_CAUSE
    assert data["autofit"] == {"from": 1048576, "to": 980224, "memory": "9.81 GiB available for KV cache", "memory_gib": 9.81}
    root = data["findings"][0]
    assert root["id"] == "stale_max_model_len"
    d = root["details"]
    assert (d["capacity"], d["requested"]) == (7680, 8192)
    # Operands inside the formula carry no thousands separators (a comma there reads like another
    # argument); the standalone results do.
    assert d["arithmetic"] == "capacity align_up(cdiv(980224, 128), 128) = 7,680 < requested 1048576 // 128 = 8,192"
    assert d["version_status"] == "affected" and d["vllm_version"] == "0.30.0"
    # The one safe-length rule (fit-length's and serve's), planned from the log's 9.81 GiB and TP 2.
    assert d["safe_len"] == 840704 and d["safe_len"] % 256 == 0 and d["safe_len"] < 980224
    assert "costs" in d["safe_length"]["line"] and d["safe_length"]["cliff"] is True
    assert any("--max-model-len 840704" in a for a in root["actions"])
    assert any("--max-num-batched-tokens 4096" in a for a in root["actions"])  # the knob past the cliff
    assert any("0.31.0" in a for a in root["actions"])
    assert data["next_command"] == (
        "dsv4ctl serve deepseek-ai/DeepSeek-V4-Flash --trust-remote-code --tensor-parallel-size 2 "
        "--gpu-memory-utilization 0.85 --kv-cache-dtype fp8 --max-model-len 840704"
    )
    answers = [c["answer"] for c in data["checklist"]]
    assert answers == ["yes", "yes", "yes", "yes", "not in log", "yes"]
    assert all(c["line"] for c in data["checklist"] if c["answer"] != "not in log")


def test_stale_numbers_are_derived_not_hard_coded(cli):
    _, data = run_json(cli, FIXTURES / "stale_max_model_len_compose_v029.log")
    d = data["findings"][0]["details"]
    assert (data["autofit"]["from"], data["autofit"]["to"]) == (1048576, 1017856)
    assert d["capacity"] == c128a_capacity(1017856) == 8064
    assert d["requested"] == 8192
    assert d["arithmetic"] == "capacity align_up(cdiv(1017856, 128), 128) = 8,064 < requested 1048576 // 128 = 8,192"
    assert d["safe_len"] == safe_length_from_log(diagnose([FIXTURES / "stale_max_model_len_compose_v029.log"]).timeline, 1017856).length
    assert data["checklist"][0]["answer"] == "yes"  # 'max_model_len': 'auto'


def test_stale_without_the_reduction_still_names_the_cause(cli):
    _, data = run_json(cli, FIXTURES / "stale_max_model_len_no_autofit.log")
    root = data["findings"][0]
    assert root["id"] == "stale_max_model_len" and "arithmetic" not in root["details"]
    assert data["autofit"] is None
    assert not any("{" in a for a in root["actions"])  # no unfilled placeholders
    # The log does not name its model, and fit-length needs it: no command rather than one that cannot run.
    assert data["next_command"] is None


def test_diagnose_recommends_the_length_fit_length_recommends(cli):
    """One safe-length rule: diagnose's length for a log equals fit-length's for the same memory and flags."""
    _, data = run_json(cli, "--example", "stale-max-model-len")
    example = Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples" / "stale-max-model-len.log"
    fit = json.loads(cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--from-log", example, "--json").stdout)
    assert data["findings"][0]["details"]["safe_len"] == fit["recommended_max_model_len"] == 840704
    # fit-length --from-log plans the log's own deployment, and prints it.
    assert "--tensor-parallel-size 2" in fit["vllm_command"] and "--gpu-memory-utilization 0.85" in fit["vllm_command"]
    assert fit["vllm_command"].endswith("--trust-remote-code")  # the log's other flags too
    mine = json.loads(cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--from-log", example, "-tp", "4", "--json").stdout)
    assert "--tensor-parallel-size 4" in mine["vllm_command"]  # a flag the operator types wins
    # A model dsv4ctl cannot plan: the same memory margin, scaled to tokens from the length the log states.
    _, real = run_json(cli, FIXTURES / "real_v032_cpu_kv_insufficient.log")
    safe = real["findings"][0]["details"]
    assert 0 < safe["safe_len"] < safe["estimated_max_model_len"] and safe["safe_len"] % 256 == 0


def test_deepgemm_attribution_and_nccl_masking(cli):
    _, traced = run_json(cli, FIXTURES / "deepgemm_metadata_oob_traced.log")
    d = traced["findings"][0]["details"]
    assert d["attribution"] == "traced" and d["masked_by_nccl"] is False
    assert any("get_paged_mqa_logits_metadata" in e["text"] for e in traced["findings"][0]["evidence_lines"])
    # the tqdm bar with a record glued to it still gives the capture state
    assert traced["timeline"]["capture"]["desc"] == "Capturing CUDA graphs (decode, FULL)"

    _, masked = run_json(cli, FIXTURES / "deepgemm_metadata_oob_nccl_masked.log")
    root = masked["findings"][0]
    assert root["details"]["attribution"] == "attributable" and root["details"]["masked_by_nccl"] is True
    nccl = next(f for f in masked["findings"] if f["id"] == "nccl_error")
    assert nccl["role"] == "symptom" and nccl["details"]["symptom_of"] == "deepgemm_metadata_oob"

    result, example = run_json(cli, "--example", "deepgemm-ima")
    assert result.exit_code == 3 and example["root_cause"] == "deepgemm_metadata_oob"
    assert "unguarded" in example["findings"][0]["details"]["note"]
    # The IMA on DP1 outranks the NCCL error on DP0 and the EngineCore lines.
    assert "illegal memory access" in example["findings"][0]["evidence"]
    assert example["next_command"] == "dsv4ctl probe deepgemm"

    # An IMA outside FULL capture is not blamed on the scheduler metadata.
    _, eager = run_json(cli, FIXTURES / "cuda_illegal_memory_access.log")
    assert eager["root_cause"] == "cuda_illegal_memory_access"


def test_kv_cache_insufficient_uses_vllms_estimate(cli):
    result, data = run_json(cli, "--example", "kv-cache-insufficient")
    assert result.exit_code == 3
    d = data["findings"][0]["details"]
    assert (d["max_model_len"], d["needed_gib"], d["available_gib"]) == (1048576, 10.06, 8.02)
    assert d["estimated_max_model_len"] == 488704
    assert 0 < d["safe_len"] < 488704
    _, real = run_json(cli, FIXTURES / "real_v032_cpu_kv_insufficient.log")
    assert real["findings"][0]["details"]["estimated_max_model_len"] == 65408  # real vLLM 0.32.0 output
    assert real["timeline"]["last_phase"] == "failed"
    _, legacy = run_json(cli, FIXTURES / "kv_cache_insufficient_legacy.log")
    assert legacy["findings"][0]["details"]["kv_cache_tokens"] == 54736


@pytest.mark.parametrize(
    "name, phase",
    [("cuda_oom_load", "load"), ("cuda_oom_profile", "profile"), ("cuda_oom_capture", "capture"), ("interleaved_multiprocess", "capture")],
)
def test_cuda_oom_phase(cli, name, phase):
    _, data = run_json(cli, FIXTURES / f"{name}.log")
    root = data["findings"][0]
    assert root["id"] == "cuda_oom" and root["details"]["phase"] == phase


def test_an_engine_that_dies_while_serving_fails_the_start_in_phase_serving(cli):
    result, data = run_json(cli, FIXTURES / "cuda_oom_serving.log")
    assert (result.exit_code, data["verdict"], data["phase"]) == (3, "failed", "serving")
    assert data["root_cause"] == "cuda_oom" and data["findings"][0]["details"]["phase"] == "serving"
    result, unknown = run_json(cli, FIXTURES / "error_after_startup.log")
    assert (result.exit_code, unknown["phase"], unknown["root_cause"]) == (4, "serving", "unrecognized_error")
    root = unknown["findings"][0]
    assert root["evidence"] == "KeyError: 'c1a'" and root["details"]["exception"] == "KeyError"


def test_free_memory_numbers(cli):
    _, data = run_json(cli, FIXTURES / "free_memory_below_utilization.log")
    d = data["findings"][0]["details"]
    assert (d["free_gib"], d["total_gib"], d["requested_utilization"]) == (61.17, 139.81, 0.92)
    assert d["suggested_util"] < 61.17 / 139.81


def test_healthy_example_and_timeline(cli):
    result, data = run_json(cli, "--example", "healthy")
    assert result.exit_code == 0 and data["verdict"] == "healthy"
    tl = data["timeline"]
    assert tl["vllm_version"] == "0.32.0" and tl["model"] == "deepseek-ai/DeepSeek-V4-Flash"
    assert (tl["tensor_parallel_size"], tl["kv_cache_dtype"], tl["cudagraph_mode"]) == (2, "fp8", "FULL_AND_PIECEWISE")
    assert (tl["weights_gib"], tl["available_kv_gib"], tl["graph_capture_gib"]) == (73.88, 8.02, 3.12)
    assert tl["capture"]["n"] == tl["capture"]["total"] == 83
    assert tl["ready"] is True and tl["ready_url"] == "http://0.0.0.0:8000"
    assert {f["id"] for f in data["findings"]} == {"autofit_reduced", "shutdown_noise"}


def test_multiple_per_process_files_are_ordered_by_timestamp(cli, tmp_path):
    # Split a log into per-process files and pass them engine-first: the worker error still wins.
    src = [ln + "\n" for ln in (FIXTURES / "cuda_oom_capture.log").read_bytes().decode("utf-8").split("\n")]
    engine = [ln for ln in src if "(EngineCore" in ln or "(APIServer" in ln]
    worker = [ln for ln in src if ln not in engine]
    (tmp_path / "engine.log").write_bytes("".join(engine).encode("utf-8"))
    (tmp_path / "worker.log").write_bytes("".join(worker).encode("utf-8"))
    result, data = run_json(cli, tmp_path / "engine.log", tmp_path / "worker.log")
    assert result.exit_code == 3 and data["root_cause"] == "cuda_oom"
    assert data["findings"][0]["source"].endswith("worker.log")
    assert data["sources"] == [str(tmp_path / "engine.log"), str(tmp_path / "worker.log")]


def test_stdin_gzip_and_crlf_give_the_same_diagnosis(cli, tmp_path):
    path = FIXTURES / "stale_max_model_len_compose_v029.log"
    _, base = run_json(cli, path)
    _, piped = run_json(cli, "-", input=path.read_bytes())
    gz = tmp_path / "x.log.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    _, packed = run_json(cli, gz)
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    _, windows = run_json(cli, crlf)
    for other in (piped, packed, windows):
        assert [(f["id"], f["line"]) for f in other["findings"]] == [(f["id"], f["line"]) for f in base["findings"]]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hyperscan_and_re_paths_agree(name):
    if not prefilter.hyperscan_available():
        pytest.skip("hyperscan not installed")
    path = FIXTURES / f"{name}.log"
    fast = diagnose([path], engine="hyperscan").to_json()
    slow = diagnose([path], engine="re").to_json()
    every = diagnose_lines(iter_log_lines([path])).to_json()
    assert fast == slow == every


def test_human_report_leads_with_the_verdict(cli):
    result = cli("diagnose", "--example", "stale-max-model-len")
    assert result.exit_code == 3
    lines = result.stdout.splitlines()
    assert lines[0].startswith(" FAILED ")
    out = result.stdout
    assert out.index("Root cause") < out.index("Startup timeline") < out.index("checklist") < out.index("Next:")
    assert "7,680 < requested" in out and "--max-model-len 840704" in out
    flat = " ".join(out.split())  # the report may wrap the formula
    assert "align_up(cdiv(980224, 128), 128) = 7,680 < requested 1048576 // 128 = 8,192" in flat
    assert "980,224, 128" not in flat and "1,048,576 //" not in flat
    assert "line 56" in out  # the finding's line number (the _build_c128a_metadata frame)


def test_examples_listing_and_errors(cli):
    listed = cli("diagnose", "--list-examples", "--json")
    names = [e["name"] for e in json.loads(listed.stdout)["examples"]]
    assert "stale-max-model-len" in names and 3 <= len(names) <= 5
    for name in names:
        assert cli("diagnose", "--example", name).exit_code in (0, 3)
    assert "stale-max-model-len" in cli("diagnose", "--list-examples").stdout
    bad = cli("diagnose", "--example", "nope")
    assert bad.exit_code == ExitCode.USAGE and "unknown example" in bad.stderr
    none = cli("diagnose")
    assert none.exit_code == ExitCode.USAGE and "no log given" in none.stderr
    missing = cli("diagnose", "/no/such/file.log")
    assert missing.exit_code == ExitCode.ERROR and "no such log file" in missing.stderr
    assert "Traceback" not in missing.output


def test_example_logs_are_small():
    root = Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples"
    for path in root.glob("*.log"):
        assert path.stat().st_size < 50_000


def test_empty_binary_and_foreign_input_is_not_a_vllm_log(cli):
    for data_in, lines in ((b"", 0), (b"hello\nworld\nan Error of mine\n", 3), (bytes(range(1, 256)) * 64, 65)):
        result, data = run_json(cli, "-", input=data_in)
        assert result.exit_code == ExitCode.INCONCLUSIVE and data["verdict"] == "inconclusive"
        assert [f["id"] for f in data["findings"]] == ["not_a_vllm_log"]
        assert data["findings"][0]["details"]["lines_read"] == lines
        assert data["checklist"] == []
    result = cli("diagnose", "-", input=b"hello\n")
    assert "Not a vLLM log" in result.output and "1 lines" in result.output
    # A NUL byte in its head (as grep tells a binary file): not a log at all, the input's fault (exit 1), not a
    # log that ends before ready (exit 5).
    result = cli("diagnose", "-", "--json", input=bytes(range(256)) * 64)
    assert result.exit_code == ExitCode.ERROR
    assert json.loads(result.stdout)["error"]["message"] == "stdin is a binary file, not a log"


def test_every_signature_keyword_passes_the_prefilter():
    # A line a signature matches must reach the analyzer on the fast path, as logged and as pasted without
    # vLLM's prefix (its message alone).
    examples = Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples"
    for path in [*FIXTURES.glob("*.log"), *(FIXTURES / "catalogue").glob("*.log"), *examples.glob("*.log")]:
        for line in iter_log_lines([path]):
            if not line.message.startswith("#") and any(sig.match(line.message) for sig in CATALOGUE):
                assert prefilter.line_matches(line.raw), (path.name, line.lineno)
                assert prefilter.line_matches(line.message), (path.name, line.lineno)
    assert set(BY_ID) >= {"autofit_reduced", "stale_max_model_len", "deepgemm_metadata_oob", "kv_cache_insufficient", "cuda_oom"}


def test_diagnose_does_not_import_heavy_modules():
    example = Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples" / "healthy.log"
    code = (
        "import atexit, sys, runpy; sys.argv=['dsv4ctl','diagnose', %r];\n"
        # an exit handler: a diagnose process ends without the interpreter's finalization, after its exit handlers
        "atexit.register(lambda: print('HEAVY', [m for m in ('vllm','torch','pynvml') if m in sys.modules]))\n"
        "runpy.run_module('dsv4ctl', run_name='__main__')\n"
    ) % str(example)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out
    assert "HEALTHY" in out


def test_grep_agrees_with_the_prefilter_on_a_fixture():
    # The benchmark hands PATTERNS to grep -E; both must count the same lines.
    grep = shutil.which("grep")
    if grep is None:
        pytest.skip("grep not available")
    path = FIXTURES / "deepgemm_metadata_oob_traced.log"
    args = [grep, "-c", "-E"] + [x for p in prefilter.PATTERNS for x in ("-e", p)] + [str(path)]
    count = int(subprocess.run(args, capture_output=True, text=True, env={"LC_ALL": "C"}).stdout.strip())
    ours = sum(1 for ln in iter_log_lines([path]) if prefilter.line_matches(ln.raw))
    assert count == ours


def test_memory_stays_bounded_on_a_log_full_of_errors():
    import io

    from dsv4ctl.diagnosis import analyzer as core
    from dsv4ctl.diagnosis.conclude import conclude_start
    from dsv4ctl.diagnosis.model import MAX_EVIDENCE
    from dsv4ctl.logs.reader import parse_line

    line = b"(Worker_TP0 pid=1) ERROR 10-21 09:00:00 [x.py:1] RuntimeError: NCCL error: unhandled system error\n"
    analyzer = core.StartAnalyzer(0)
    for n, raw in prefilter.scan_source(io.BytesIO(line * 20000), engine="re"):
        analyzer.feed(parse_line(raw, "big.log", n), n)
    assert len(analyzer.hits) <= core.HIT_CAP * len(CATALOGUE)
    assert len(analyzer.records) <= core.RECORD_CAP
    assert analyzer.occurrences("nccl_error") == 20000
    analyzer.finish()
    result = conclude_start(analyzer, ["big.log"])
    assert result.root_cause.id == "eco_nccl_system_error" and result.root_cause.details["occurrences"] == 20000
    assert len(result.root_cause.evidence) <= MAX_EVIDENCE
