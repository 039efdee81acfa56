"""diagnose in the open world: several starts in one input, errors no signature knows, failures while
serving, and text that is not a vLLM log. Fixture logs are written by tests/fixtures/logs/generate.py
from the printing sources (each file's header names them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4ctl.advice import applicable, diagnose
from dsv4ctl.logs.reader import parse_line
from dsv4ctl.logs.grammars import demangle, kernel_of
from dsv4ctl.logs.records import ErrorAssembler, generic_error
from dsv4ctl.logs.starts import StartSplitter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
EXAMPLES = Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples"


def concat(tmp_path: Path, *names: str, folder: Path = FIXTURES) -> Path:
    out = tmp_path / "joined.log"
    out.write_bytes(b"".join((folder / n).read_bytes() for n in names))
    return out


# ----------------------------------------------------------------------------------------- starts


def test_healthy_then_failed_restart_is_failed_with_the_second_starts_numbers(tmp_path):
    joined = concat(tmp_path, "autofit_reduced_v032.log", "kv_cache_insufficient_cannot_autofit.log")
    d = diagnose([joined])
    assert (d.verdict, int(d.exit_code), d.root_cause.id) == ("failed", 3, "kv_cache_insufficient")
    assert [s.verdict for s in d.starts] == ["healthy", "failed"]
    # No number of the first start leaks into the second's report.
    first = diagnose([FIXTURES / "autofit_reduced_v032.log"]).timeline
    assert first.autofit is not None and d.timeline.autofit is None
    assert d.timeline.ready is False and d.timeline.ready_url is None
    assert d.starts[1].first.line > d.starts[0].last.line


def test_failed_then_healthy_restart_is_healthy_and_lists_the_failure(tmp_path, cli):
    joined = concat(tmp_path, "kv_cache_insufficient_cannot_autofit.log", "autofit_reduced_v032.log")
    result = cli("diagnose", str(joined), "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["verdict"] == "healthy" and data["root_cause"] is None
    assert [(s["index"], s["verdict"], s["root_cause"]) for s in data["starts"]] == [
        (0, "failed", "kv_cache_insufficient"),
        (1, "healthy", None),
    ]
    assert all({"first_line", "last_line", "phase"} <= set(s) for s in data["starts"])
    assert data["autofit"]["to"] == 488704


def test_the_same_start_through_stdin_and_three_restarts(tmp_path, cli):
    names = ["cuda_oom_load.log", "healthy_explicit_len.log", "error_after_startup.log"]
    joined = concat(tmp_path, *names)
    result = cli("diagnose", "-", "--json", input=joined.read_bytes())
    data = json.loads(result.stdout)
    assert [s["verdict"] for s in data["starts"]] == ["failed", "healthy", "failed"]
    assert (data["verdict"], data["phase"], result.exit_code) == ("failed", "serving", 4)


def test_lines_of_one_launch_stay_one_start():
    # Per-process tags of several workers and DP ranks (4 EngineCores each initialise an engine).
    assert len(diagnose([EXAMPLES / "deepgemm-ima.log"]).starts) == 1
    # Ray's (RayWorkerWrapper pid=…, ip=…) workers of several nodes.
    assert len(diagnose([FIXTURES / "ray_prefixed.log"]).starts) == 1
    for name in ("interleaved_multiprocess", "real_v032_cpu_healthy", "stale_max_model_len_compose_v029"):
        assert len(diagnose([FIXTURES / f"{name}.log"]).starts) == 1, name


def test_per_process_files_of_one_launch_are_one_start(tmp_path):
    lines = (EXAMPLES / "stale-max-model-len.log").read_text().splitlines(keepends=True)
    api = [ln for ln in lines if ln.startswith("(APIServer")]
    rest = [ln for ln in lines if not ln.startswith("(APIServer")]
    (tmp_path / "api.log").write_text("".join(api))
    (tmp_path / "engine.log").write_text("".join(rest))
    d = diagnose([tmp_path / "api.log", tmp_path / "engine.log"])
    assert len(d.starts) == 1 and d.root_cause.id == "stale_max_model_len"


def test_per_node_files_repeating_the_banner_within_the_launch_are_one_start(tmp_path):
    banner = "(APIServer pid=1) INFO 10-21 09:00:02 [api_utils.py:330] vLLM server version 0.32.0, serving model m\n"
    node0 = banner + "(EngineCore_DP0 pid=2) INFO 10-21 09:00:20 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='m'\n"
    node1 = banner.replace("09:00:02", "09:00:05") + "(EngineCore_DP1 pid=2) INFO 10-21 09:00:21 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='m'\n"
    (tmp_path / "node0.log").write_text(node0)
    (tmp_path / "node1.log").write_text(node1)
    assert len(diagnose([tmp_path / "node0.log", tmp_path / "node1.log"]).starts) == 1


def _line(text: str, source: str = "a.log", n: int = 1):
    return parse_line(text, source, n)


def test_splitter_rules():
    sp = StartSplitter()
    rec = "({tag} pid={pid}) INFO 10-21 {ts} [x.py:1] {msg}"
    route = lambda tag, pid, ts, msg, settled=False: sp.route(_line(rec.format(tag=tag, pid=pid, ts=ts, msg=msg)), settled)
    assert route("APIServer", 10, "09:00:00", "non-default args: {}") == (0, False)
    assert route("EngineCore_DP0", 11, "09:00:10", "Initializing a V1 LLM engine (v0.32.0)") == (0, False)
    assert route("EngineCore_DP1", 12, "09:00:10", "Initializing a V1 LLM engine (v0.32.0)") == (0, False)
    # A new pid for the same role opens a new start, even without a banner.
    assert route("EngineCore_DP0", 99, "09:05:00", "Starting to load model m...") == (1, True)
    # The clock going back in the same file opens one too.
    assert route("EngineCore_DP0", 99, "08:00:00", "Starting to load model m...") == (2, True)
    # A repeated marker in the same file opens one.
    assert route("APIServer", 77, "08:00:01", "non-default args: {}") == (2, False)
    assert route("APIServer", 77, "08:00:02", "non-default args: {}") == (3, True)


# ----------------------------------------------------------------------------------------- records


def _assemble(text: str) -> list:
    asm = ErrorAssembler()
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        out += asm.feed(parse_line(raw, "x.log", n), n)
    return out + asm.close()


def test_a_chained_traceback_is_one_record_whose_origin_is_the_first_exception():
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "/v/loader.py", line 10, in load',
        "KeyError: 'w13'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/v/executor.py", line 445, in collective_rpc',
        "RuntimeError: Worker failed with error 'w13', please check the stack trace above for the root cause",
        "INFO 10-21 09:00:00 [x.py:1] next",
    ])
    (rec,) = _assemble(text)
    assert rec.kind == "python" and rec.type == "KeyError" and rec.origin.message == "'w13'"
    assert [e.type for e in rec.exceptions] == ["KeyError", "RuntimeError"]
    assert rec.origin.last_frame.function == "load" and rec.line.lineno == 3
    assert not rec.is_wrapper


def test_wrappers_and_what_they_quote():
    (rec,) = _assemble(
        "Traceback (most recent call last):\n"
        "RuntimeError: Worker failed with error 'CUDA driver error: unknown error', please check the stack trace above for the root cause\n"
    )
    assert rec.is_wrapper and rec.quoted == "CUDA driver error: unknown error"


@pytest.mark.parametrize(
    "text, kind, key, value",
    [
        ("RuntimeError: CUDA error: an illegal memory access was encountered", None, None, None),  # a Python exception line
        ("CUDA error: device-side assert triggered", "cuda", "cuda_error", "device-side assert triggered"),
        ("Cuda error /src/flashinfer/norm.cuh:120 'an illegal memory access was encountered'", "cuda", "where", "/src/flashinfer/norm.cuh:120"),
        ("F1130 10:00:00.1 123 op.cc:42] Check failed: x.is_cuda() ", "cpp", "condition", "x.is_cuda()"),
        ("terminate called after throwing an instance of 'c10::DistBackendError'", "cpp", "cpp_type", "c10::DistBackendError"),
        ("node1:123:456 [0] NCCL WARN NET/IB : Got completion from peer with error 12", "nccl", "nccl_warn", "NET/IB : Got completion from peer with error 12"),
        ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
         "nccl", "collective", None),
        ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use", "os", "errno", "98"),
        ("Killed", "killed", None, None),
        ("Fatal Python error: Segmentation fault", "crash", "fatal", "Segmentation fault"),
        ("[11:12:22.535653] coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_OUT_OF_RANGE_ADDRESS (5)",
         "coredump", "exception", "CUDBG_EXCEPTION_WARP_OUT_OF_RANGE_ADDRESS"),
        ("INFO 10-21 09:00:00 [x.py:1] all good", None, None, None),
    ],
)
def test_generic_errors_are_recognised_by_their_wording(text, kind, key, value):
    line = _line(text)
    rec = generic_error(line) if not text.startswith("RuntimeError") else None
    if kind is None:
        assert rec is None or line.level == "INFO"
        return
    assert rec is not None and rec.kind == kind
    if key:
        assert key in rec.details
        if value is not None:
            assert rec.details[key] == value
    from dsv4ctl.logs import prefilter

    assert prefilter.line_matches(text)  # the fast path selects it


def test_the_faulting_kernel_is_named_from_the_core_dump():
    dump = (Path(__file__).resolve().parents[2] / "benchmarks/results/h200-2026-11-30/coredump-deepgemm-0.27.1-stderr.txt").read_text()
    names = [k for ln in dump.splitlines() if (k := kernel_of(ln))]
    assert names == ["deep_gemm::sched::sm90_paged_mqa_logits_metadata"]
    gdb = (Path(__file__).resolve().parents[2] / "benchmarks/results/h200-2026-11-30/coredump-deepgemm-0.27.1-cuda-gdb.txt").read_text()
    assert {kernel_of(ln) for ln in gdb.splitlines()} - {None} == {"deep_gemm::sched::sm90_paged_mqa_logits_metadata"}
    assert demangle("_ZN4vllm24reshape_and_cache_kernelIfEEvPKT_") == "vllm::reshape_and_cache_kernel"
    assert demangle("_Z17dsv4ctl_bad_writePi") == "dsv4ctl_bad_write"
    assert demangle("not_mangled") == "not_mangled"


def test_deepgemm_fault_in_a_core_dump_names_the_kernel_line():
    d = diagnose([FIXTURES / "deepgemm_metadata_oob_coredump.log"])
    root = d.root_cause
    assert root.id == "deepgemm_metadata_oob" and root.details["attribution"] == "traced"
    assert root.details["kernel"] == "deep_gemm::sched::sm90_paged_mqa_logits_metadata"
    assert "_ZN9deep_gemm5sched30sm90_paged_mqa_logits_metadata" in root.evidence[0].text
    assert any("CUDBG_EXCEPTION_WARP_OUT_OF_RANGE_ADDRESS" in e.text for e in root.evidence)


def test_a_workers_own_error_outranks_the_wrappers_that_repeat_it():
    d = diagnose([FIXTURES / "unrecognized_chained_worker_error.log"])
    root = d.root_cause
    assert root.id == "unrecognized_error" and root.details["exception"] == "KeyError"
    assert root.evidence[0].text == "KeyError: 'layers.3.ffn.experts.w13_weight_scale_inv'"
    assert root.evidence[0].process == "Worker_TP1"
    assert root.details["chain"][0].startswith("KeyError") and "Failed to load weights" in root.details["chain"][1]
    assert "KeyError" in d.summary and int(d.exit_code) == 4


def test_only_a_wrapper_in_the_log_quotes_the_workers_error():
    d = diagnose([FIXTURES / "unrecognized_quoted_by_wrapper.log"])
    assert d.verdict == "failed" and d.root_cause.id == "unrecognized_error"
    assert d.root_cause.details["message"] == "CUDA driver error: unknown error"


# ----------------------------------------------------------------------------------------- phase


def test_request_errors_while_serving_keep_the_start_healthy_with_a_warning():
    d = diagnose([FIXTURES / "request_error_while_serving.log"])
    assert (d.verdict, d.phase, int(d.exit_code)) == ("healthy", None, 0)
    warn = [f for f in d.findings if f.severity == "warning"]
    assert warn and "maximum context length" in warn[0].evidence[0].text


def test_an_engine_dying_while_serving_fails_in_phase_serving():
    d = diagnose([FIXTURES / "cuda_fault_while_serving.log"])
    assert (d.verdict, d.phase) == ("failed", "serving")
    assert d.root_cause.id == "cuda_illegal_memory_access"
    assert "illegal memory access" in d.root_cause.evidence[0].text
    assert d.summary.startswith("The server failed while serving")


def test_sigterm_shutdown_noise_after_ready_is_not_a_failure():
    d = diagnose([FIXTURES / "real_v032_cpu_healthy.log"])
    assert d.verdict == "healthy" and d.phase is None


# ----------------------------------------------------------------------------------------- advice


def _settings_of(data: dict) -> dict:
    tl = data["timeline"]
    return tl


@pytest.mark.parametrize(
    "path",
    sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "catalogue").glob("*.log")) + sorted(EXAMPLES.glob("*.log")),
    ids=lambda p: p.stem,
)
def test_no_action_repeats_the_deployment_or_walks_into_a_known_bug(path):
    from dsv4ctl.logs import deployment

    d = diagnose([path])
    tl = d.timeline
    version = tl.vllm_version or ""
    dsv4 = "deepseek-v4" in (tl.model or "").lower() or "DeepseekV4" in (tl.architecture or "")
    stale_fix = "stale-max-model-len applied" in path.read_text(errors="replace")
    # A suggested command repeats the launch's own flags; what it *recommends* is the rest.
    from dsv4ctl.diagnosis.evidence import command_parts

    carried = sorted({v for k, v in command_parts(tl, "<log>").items() if k.startswith("_")} - {""}, key=len, reverse=True)
    texts = [a for f in d.findings for a in f.actions] + ([d.next_command] if d.next_command else [])
    for text in texts:
        for c in carried:
            text = text.replace(c, " ")
        assert '"cudagraph_mode": "FULL_DECODE_ONLY"' not in text  # still captures FULL decode graphs
        if tl.enforce_eager:
            assert "--enforce-eager" not in text, text
        if (tl.kv_cache_dtype or "").startswith("fp8"):
            assert "--kv-cache-dtype fp8" not in text, text
        if dsv4 and version.startswith(("0.29", "0.30")) and not stale_fix:
            assert "--max-model-len auto" not in text and "--max-model-len -1" not in text, text
        if tl.cudagraph_mode == "PIECEWISE":
            assert '"cudagraph_mode": "PIECEWISE"' not in text, text


def test_applicable_rules():
    fp8 = {"kv_cache_dtype": "fp8_e4m3"}
    assert not applicable("Store the KV cache in fp8: --kv-cache-dtype fp8", fp8)
    assert applicable("Store the KV cache in fp8: --kv-cache-dtype fp8", {"kv_cache_dtype": "auto"})
    assert not applicable("--enforce-eager", {"enforce_eager": True})
    assert not applicable("--max-model-len auto", {"vllm_version": "0.30.0", "dsv4": True})
    assert applicable("--max-model-len auto", {"vllm_version": "0.30.0", "dsv4": True, "stale_fix_active": True})
    assert applicable("--max-model-len auto", {"vllm_version": "0.31.0", "dsv4": True})
    assert not applicable("--compilation-config '{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'", {})


def test_deepgemm_advice_avoids_full_capture():
    d = diagnose([EXAMPLES / "deepgemm-ima.log"])
    actions = " ".join(d.root_cause.actions)
    assert '"cudagraph_mode": "PIECEWISE"' in actions and "--enforce-eager" in actions
    assert "FULL_DECODE_ONLY still captures FULL decode graphs" in actions


# ----------------------------------------------------------------------------------------- not a log


def test_the_stale_checklist_appears_only_where_it_applies():
    assert diagnose([FIXTURES / "stale_max_model_len_compose_v029.log"]).checklist  # DeepSeek-V4, the assertion
    # DeepSeek-V4, but an explicit length, a KeyError in load_weights on 0.32.0: each answer rules the crash out
    assert diagnose([FIXTURES / "unrecognized_chained_worker_error.log"]).checklist == []
    d = diagnose([FIXTURES / "kv_cache_insufficient_legacy.log"])  # DeepSeek-V2, no auto-fit
    assert d.checklist == []


# ----------------------------------------------------------------------------------------- numbers


GIB = 1 << 30


def _dsv4_logs():
    for path in sorted(FIXTURES.glob("*.log")) + sorted(EXAMPLES.glob("*.log")):
        tl = diagnose([path]).timeline
        # The KV memory the log states: "Available KV cache memory", or in vLLM 0.34's measured mode the blocks it
        # committed after capture (that line is then a reservation).
        if tl.model and "DeepSeek-V4" in tl.model and tl.kv_memory_gib is not None and tl.kv_memory_gib >= 0:
            yield path, tl


@pytest.mark.parametrize("path, tl", list(_dsv4_logs()), ids=lambda x: getattr(x, "stem", ""))
def test_every_dsv4_fixture_adds_up_with_the_planner(path, tl):
    """The auto-fit length and vLLM's capacity line of each DeepSeek-V4 log are what the planner gives for
    the memory the log states (rounded to 0.01 GiB there, so the check brackets it)."""
    from dsv4ctl.planning.mirror.capacity import log_figures

    def at(gib: float, length: int | None):
        return log_figures(tl.model, max(0, int(gib * GIB)), max_model_len=length,
                           kv_cache_dtype="auto" if tl.kv_cache_dtype == "auto" else "fp8")

    lo_gib, hi_gib = tl.kv_memory_gib - 0.005, tl.kv_memory_gib + 0.005
    explicit = None if (tl.max_model_len_arg or "-1").strip("'") in ("-1", "auto") else int(tl.max_model_len_arg)
    if tl.autofit is not None:
        lo, hi = at(lo_gib, None), at(hi_gib, None)
        assert lo.max_model_len <= tl.autofit.to_len <= hi.max_model_len, (lo.max_model_len, hi.max_model_len)
    if tl.max_concurrency is not None:
        length = tl.max_concurrency_tokens
        # "Maximum concurrency for X tokens per request": X is the engine's max_model_len, after auto-fit.
        assert length == (tl.autofit.to_len if tl.autofit else explicit or tl.max_model_len)
        assert abs(tl.kv_cache_tokens - tl.max_concurrency * length) <= 0.005 * length + 1
        lo, hi = at(lo_gib, length), at(hi_gib, length)
        assert round(lo.max_concurrency, 2) - 0.01 <= tl.max_concurrency <= round(hi.max_concurrency, 2) + 0.01
    if any(f.id == "kv_cache_insufficient" for f in diagnose([path]).findings) and tl.autofit is None and explicit is None:
        assert at(hi_gib, None).max_model_len == 0 or at(hi_gib, None).error is not None


def test_an_error_record_in_its_own_words_names_the_cause_when_only_wrappers_follow(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(
        "(APIServer pid=1) INFO 10-21 09:00:02 [api_utils.py:330] vLLM server version 0.32.0, serving model m\n"
        "(EngineCore_DP0 pid=2) ERROR 10-21 09:00:05 [gpu_worker.py:100] Could not reserve the workspace on cuda:0\n"
        "(EngineCore_DP0 pid=2) ERROR 10-21 09:00:05 [core.py:1510] EngineCore failed to start.\n"
        "Traceback (most recent call last):\n"
        '  File "/v/vllm/v1/engine/utils.py", line 1432, in wait_for_engine_startup\n'
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}\n"
    )
    d = diagnose([log])
    assert d.verdict == "failed" and d.root_cause.id == "unrecognized_error"
    assert d.root_cause.evidence[0].text == "Could not reserve the workspace on cuda:0"
    # Alone, such a line is a failure dsv4ctl cannot explain, never "no failure seen": the start ends on it.
    log.write_text("\n".join(log.read_text().splitlines()[:2]) + "\n")
    d = diagnose([log])
    assert (d.verdict, d.root_cause.id) == ("failed", "unrecognized_error")
    # The same line with the process going on after it did not end the start.
    log.write_text(log.read_text() + "(EngineCore_DP0 pid=2) INFO 10-21 09:00:06 [gpu_model_runner.py:1] Model loading "
                   "took 10.00 GiB memory and 20.0 seconds\n")
    assert diagnose([log]).verdict == "inconclusive"


def test_a_benign_nccl_warn_neither_fails_a_loading_start_nor_a_serving_one(tmp_path):
    head = (
        "(APIServer pid=1) INFO 10-21 09:00:02 [api_utils.py:330] vLLM server version 0.32.0, serving model m\n"
        "node1:123:456 [0] NCCL WARN NET/IB : No device found.\n"
    )
    log = tmp_path / "a.log"
    log.write_text(head)
    assert diagnose([log]).verdict == "inconclusive"
    log.write_text(head + "INFO:     Application startup complete.\nnode1:123:456 [0] NCCL WARN NET/IB : No device found.\n")
    assert diagnose([log]).verdict == "healthy"


def test_the_signature_index_finds_the_same_candidates_with_and_without_hyperscan():
    from dsv4ctl.catalogue import signature_index
    from dsv4ctl.catalogue.signatures import CATALOGUE

    pytest.importorskip("hyperscan")
    plain_index = signature_index.SignatureIndex(CATALOGUE)
    fast = signature_index.SignatureIndex(CATALOGUE)
    fast._db = fast._compile()
    assert fast._db
    messages = [line.message for path in sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "catalogue").glob("*.log"))
                for line in __import__("dsv4ctl.logs.reader", fromlist=["iter_log_lines"]).iter_log_lines([path])]
    for msg in messages:
        expected = [s.id for s in CATALOGUE if s.match(msg)]
        assert [s.id for s in plain_index.candidates(msg) if s.match(msg)] == expected, msg
        assert [s.id for s in fast.candidates(msg) if s.match(msg)] == expected, msg


def test_every_fatal_signature_line_wakes_a_quietly_serving_start():
    """While a start serves quietly only lines that can change its verdict are analysed: every line a fatal
    signature matches in any fixture, and every start or shutdown marker, must be among them."""
    from dsv4ctl.diagnosis import analyzer as core
    from dsv4ctl.logs.reader import iter_log_lines
    from dsv4ctl.catalogue.signatures import CATALOGUE
    from dsv4ctl.logs.starts import marker_of

    fatal = [s for s in CATALOGUE if s.fatal]
    request = [s for s in CATALOGUE if s.role == "request"]
    for path in sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "catalogue").glob("*.log")) + sorted(EXAMPLES.glob("*.log")):
        for line in iter_log_lines([path]):
            kind = core.SERVING_SORTER.sort(line.raw)
            if any(s.match(line.message) for s in fatal) or marker_of(line.message):
                assert kind == core.LineSorter.ALERT, (path.name, line.lineno)
            if any(s.match(line.message) for s in request):
                assert kind != core.LineSorter.SKIP, (path.name, line.lineno)


def test_a_quietly_serving_start_analyses_only_what_can_matter(tmp_path, monkeypatch):
    from dsv4ctl.diagnosis import run as run_module

    ready = (FIXTURES / "request_error_while_serving.log").read_text()
    noise = "".join(
        f"(EngineCore pid=5090) ERROR 10-21 09:30:{i % 60:02d} [scheduler.py:2189] Unexpected: grammar rejected tokens [1] for request r{i}. Terminating request.\n"
        for i in range(500)
    )
    log = tmp_path / "serving.log"
    log.write_text(ready + noise)
    # A paste is read in full: every error while serving is read (a request's traceback is what it was pasted for).
    assert diagnose([log]).lines_examined > 500
    # A log read through the prefilter holds what cannot matter while the start serves quietly.
    monkeypatch.setattr(run_module, "FULL_READ_BYTES", 0)
    d = diagnose([log])
    assert d.verdict == "healthy" and d.lines_examined < 100
    assert any(f.id == "prompt_too_long" for f in d.findings)
    # A fault after the noise still fails the start, with the worker's own traceback as evidence.
    log.write_text(ready + noise + (FIXTURES / "cuda_fault_while_serving.log").read_text().split("Application startup complete.\n", 1)[1])
    d = diagnose([log])
    assert (d.verdict, d.phase, d.root_cause.id) == ("failed", "serving", "cuda_illegal_memory_access")


def test_a_second_file_of_the_launch_is_read_in_full_after_the_first_showed_it_ready(tmp_path):
    lines = (EXAMPLES / "healthy.log").read_text().splitlines(keepends=True)
    api = [ln for ln in lines if ln.startswith("(APIServer") or ln.startswith("INFO:")]
    rest = [ln for ln in lines if ln not in api]
    (tmp_path / "api.log").write_text("".join(api))
    (tmp_path / "engine.log").write_text("".join(rest))
    both = diagnose([tmp_path / "api.log", tmp_path / "engine.log"])
    whole = diagnose([EXAMPLES / "healthy.log"])
    assert both.verdict == "healthy" and len(both.starts) == 1
    assert both.timeline.autofit is not None and both.timeline.autofit.to_len == whole.timeline.autofit.to_len
    assert both.timeline.kv_cache_tokens == whole.timeline.kv_cache_tokens


def test_the_line_sorter_sorts_alike_with_and_without_hyperscan():
    from dsv4ctl.catalogue.signature_index import LineSorter

    pytest.importorskip("hyperscan")
    groups = [[r"maximum context length is (?P<n>[0-9]+)"], [r"chat template"]]
    plain_sorter = LineSorter(["EngineDead", "NCCL"], groups)
    fast = LineSorter(plain_sorter.alert, groups)
    fast._db = fast._compile()
    assert fast._db
    for raw, kind in (("x EngineDeadError y", 2), ("NCCL WARN z", 2), ("the maximum context length is 42", 3),
                      ("no chat template", 4), ("(EngineCore pid=1) ERROR grammar rejected", 0)):
        assert plain_sorter.sort(raw) == fast.sort(raw) == kind, raw


def test_an_exception_class_without_error_in_its_name_ends_a_traceback():
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "/v/triton/runtime/autotuner.py", line 200, in run',
        "    worker = WorkerProc(*args, **kwargs)",
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 232448, Hardware limit: 101376.",
        "INFO 10-21 09:00:00 [x.py:1] next",
    ])
    (rec,) = _assemble(text)
    assert rec.type == "triton.runtime.errors.OutOfResources" and rec.line.lineno == 4
    from dsv4ctl.logs import prefilter

    assert prefilter.line_matches("triton.runtime.errors.OutOfResources: out of resource: shared memory")


def test_a_paste_serving_quietly_is_held_until_an_error_and_its_last_line_ends_the_start(tmp_path):
    """A paste read in full is held like a long log while its start serves quietly (its access and throughput lines
    change nothing); its first error-shaped line wakes it, so a request's traceback is read; its last line is the
    start's last line either way."""
    text = (EXAMPLES / "healthy.log").read_text()
    healthy = text[: text.index("\n", text.index("Application startup complete.")) + 1]
    quiet = "".join(f'INFO:     10.0.0.1:{40000 + i} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n' for i in range(400))
    log = tmp_path / "paste.log"
    log.write_text(healthy + quiet)
    total = len((healthy + quiet).splitlines())
    d = diagnose([log])
    assert d.verdict == "healthy" and d.lines_examined < total - 300
    assert d.starts[-1].last.line == total
    tool_error = (
        "(APIServer pid=1) ERROR 10-21 09:31:00 [hermes_tool_parser.py:151] Error in extracting tool call from response.\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/tool_parsers/hermes_tool_parser.py", line 137, in '
        "extract_tool_calls\n"
        "json.decoder.JSONDecodeError: Expecting ',' delimiter: line 1 column 58 (char 57)\n"
    )
    log.write_text(healthy + quiet + tool_error + quiet)
    d = diagnose([log])
    assert d.verdict == "healthy"
    read = [f for f in d.findings if any(e.text and "JSONDecodeError" in e.text for e in f.evidence)]
    assert read and read[0].severity == "warning"
    assert d.starts[-1].last.line == len((healthy + quiet + tool_error + quiet).splitlines())


def test_an_error_a_signature_names_is_not_looked_up_for_its_scope(tmp_path, monkeypatch):
    """Whether a frames-less error was raised for one request is asked of the message index only when no signature of
    a start's failure names its line: the signature already says it is the engine's."""
    from dsv4ctl.diagnosis import serving_view

    asked: list[str] = []
    real = serving_view._raised_for_a_request
    monkeypatch.setattr(serving_view, "_raised_for_a_request", lambda rec: asked.append(rec.text) or real(rec))
    log = tmp_path / "kv.log"
    log.write_text(
        "(EngineCore_DP0 pid=7) ERROR 10-21 09:30:00 [core.py:866] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=7) ERROR 10-21 09:30:00 [core.py:866] ValueError: To serve at least one request with the "
        "model's max seq len (30000), (6.66 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(1.20 GiB). Based on the available memory, the estimated maximum model length is 5400. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
    d = diagnose([log])
    assert d.verdict == "failed" and d.root_cause.id == "kv_cache_insufficient"
    assert asked == []


def test_an_earlier_start_is_answered_without_what_only_adds_to_its_text(tmp_path, monkeypatch):
    """Of an earlier start only its verdict and root cause are kept: its answer skips the raise site's helpers; the
    reported start gets them, and every start's verdict and root cause are those of the same log read alone."""
    from dsv4ctl.diagnosis import answers

    calls: list[str] = []
    real = answers._with_check
    monkeypatch.setattr(answers, "_with_check", lambda f, tl: calls.append(f.id) or real(f, tl))
    one = Path(__file__).resolve().parent.parent / "fixtures" / "advice_holdout" / "10-lora-rank-over-max-lora-rank-docker-run.log"
    alone = diagnose([one])
    assert len(calls) == 1
    calls.clear()
    log = tmp_path / "three.log"
    log.write_text(one.read_text() * 3)
    d = diagnose([log])
    assert len(calls) == 1 and len(d.starts) == 3
    assert {(s.verdict, s.root_cause) for s in d.starts} == {(alone.verdict, alone.root_cause.id)}
    assert (d.root_cause.meaning, d.root_cause.actions) == (alone.root_cause.meaning, alone.root_cause.actions)
