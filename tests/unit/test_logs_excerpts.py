"""diagnose on what operators paste: excerpts with any prefix, tracebacks without their header, one line.

Each case is a rule of the reader (a wrapper layer), of the record assembler (what is left of an error) or
of the conclusion (ranking, verdict and phase from the words), shown on an excerpt shaped like the real
pastes in ../shared/real-logs (which measure the whole; these pin each rule on its own). The messages are
vLLM's and its neighbours' own wordings (see the signature that matches each for its source).
"""

from __future__ import annotations

import re

import io
import json

import pytest

from dsv4ctl.logs import prefilter
from dsv4ctl.advice import diagnose
from dsv4ctl.logs.reader import parse_line
from dsv4ctl.logs.grammars import demangle, raised
from dsv4ctl.logs.records import ErrorAssembler


def run(text: str):
    return diagnose(io.BytesIO(text.encode("utf-8")))


def root_texts(d) -> list[str]:
    return [e.text for e in d.root_cause.evidence] if d.root_cause else []


def assemble(text: str) -> list:
    asm = ErrorAssembler()
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        out += asm.feed(parse_line(raw, "x.log", n), n)
    return out + asm.close()


# ----------------------------------------------------------------------------------------- wrapper layers

MSG = "ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3)."
RECORD = "(Worker_TP0 pid=812) ERROR 11-30 09:00:01 [multiproc_executor.py:900] " + MSG


@pytest.mark.parametrize(
    "raw, process, level",
    [
        (RECORD, "Worker_TP0", "ERROR"),
        ("vllm-1  | " + RECORD, "Worker_TP0", "ERROR"),  # docker compose
        ("2026-11-30T09:00:01.123456789Z [pod/vllm-0/vllm] " + RECORD, "Worker_TP0", "ERROR"),  # kubectl --timestamps --prefix
        ("2026-11-30T09:00:01.123456789Z stdout F " + RECORD, "Worker_TP0", "ERROR"),  # CRI (/var/log/containers)
        ("Nov 30 09:00:01 gpu-node-3 vllm[2314]: " + RECORD, "Worker_TP0", "ERROR"),  # journald short
        ("2026-11-30T09:00:01+0000 gpu-node-3 vllm[2314]: " + RECORD, "Worker_TP0", "ERROR"),  # journald short-iso
        ("\x1b_bk;t=1764493201000\x07" + RECORD, "Worker_TP0", "ERROR"),  # Buildkite
        ("2026-11-30T09:00:01.1234567Z " + RECORD, "Worker_TP0", "ERROR"),  # GitHub Actions
        ("[36m(Worker_TP0 pid=812)[0m [31mERROR[0m 11-30 09:00:01 [multiproc_executor.py:900] " + MSG, "Worker_TP0", "ERROR"),
        ("\x1b[36m(Worker_TP0 pid=812)\x1b[0m ERROR 11-30 09:00:01 [multiproc_executor.py:900] " + MSG, "Worker_TP0", "ERROR"),
        ("(RayWorkerWrapper pid=7305, ip=10.0.0.2) ERROR 11-30 09:00:01 worker_base.py:620] " + MSG, "RayWorkerWrapper", "ERROR"),
        ("(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 multiproc_worker_utils.py:242] " + MSG, "VllmWorkerProcess", "ERROR"),
        ("(Worker_TP0 pid=...) ERROR ... [multiproc_executor.py:900] " + MSG, "Worker_TP0", "ERROR"),  # elided by the user
        ("ERROR [multiproc_executor.py:900] " + MSG, None, "ERROR"),  # the time cut away
        ("[2025-08-05 09:34:54 TP0] " + MSG, None, None),  # SGLang
        (MSG, None, None),  # no prefix at all
    ],
)
def test_every_wrapper_is_peeled_to_the_message(raw, process, level):
    line = parse_line(raw)
    assert line.message == MSG
    assert (line.process, line.level) == (process, level)
    assert prefilter.line_matches(raw)


def test_c10_glog_ray_and_core_dump_records():
    c10 = parse_line("[rank0]:[E822 16:31:16.131931664 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout")
    assert (c10.level, c10.fileinfo, c10.timestamp) == ("ERROR", "ProcessGroupNCCL.cpp:632", "08-22 16:31:16")
    assert c10.message.startswith("[Rank 0] Watchdog caught")
    glog = parse_line("F1130 10:00:00.123456  123 op.cc:42] Check failed: x.is_cuda()")
    assert (glog.level, glog.fileinfo, glog.message) == ("CRITICAL", "op.cc:42", "Check failed: x.is_cuda()")
    ray_cpp = parse_line("[2025-04-16 11:52:45,123 E 858 901] (raylet) node_manager.cc:123: 1 Workers (tasks / actors) killed")
    assert (ray_cpp.level, ray_cpp.process, ray_cpp.fileinfo) == ("ERROR", "raylet", "node_manager.cc:123")
    raylet = parse_line("[33m(raylet)[0m A worker died or was killed while executing a task by an unexpected system error.")
    assert raylet.process == "raylet" and raylet.message.startswith("A worker died")
    dump = parse_line("[19:25:48.404432] coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_OUT_OF_RANGE_ADDRESS (5)")
    assert dump.process == "coredump" and dump.message.startswith("Detected an exception")
    pylog = parse_line("2026-07-25 13:42:38,525 - INFO - autotuner.py:2216 - flashinfer.jit: [Autotuner]: Loaded 46 configs")
    assert (pylog.level, pylog.fileinfo) == ("INFO", "autotuner.py:2216")
    basic = parse_line("ERROR:root:Something failed")
    assert (basic.level, basic.message) == ("ERROR", "Something failed")


def test_text_after_a_tag_is_never_read_as_docker_compose():
    line = parse_line("(APIServer pid=1) INFO 11-30 09:00:01 [api.py:1] route a | b")
    assert line.message == "route a | b"


def test_indentation_survives_the_prefix():
    frame = parse_line('(Worker_TP0 pid=5) ERROR 11-30 09:00:01 [m.py:9]   File "/v/x.py", line 3, in f')
    code = parse_line("(Worker_TP0 pid=5) ERROR 11-30 09:00:01 [m.py:9]     assert a >= b")
    assert (frame.indent, code.indent) == (2, 4)


# ----------------------------------------------------------------------------------------- what is left of an error


def test_frames_without_their_header_are_a_record():
    (rec,) = assemble(
        '  File "/v/vllm/config/model.py", line 1562, in verify_with_parallel_config\n'
        "    raise ValueError(\n" + MSG + "\n"
    )
    assert rec.kind == "python" and rec.type == "ValueError" and rec.complete
    assert rec.line.message == MSG and rec.origin.last_frame.function == "verify_with_parallel_config"


@pytest.mark.parametrize(
    "line, exc_type",
    [
        ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered", "torch.AcceleratorError"),
        ("safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge", "safetensors_rust.SafetensorError"),
        ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144", "triton.runtime.errors.OutOfResources"),
        ("torch._dynamo.exc.Unsupported: call_function BuiltinVariable(print)", "torch._dynamo.exc.Unsupported"),
        ("tvm.error.InternalError: Check failed: num_tokens > 64 (5 vs. 64)", "tvm.error.InternalError"),
        ("Exception: Capture cuda graph failed: ", "Exception"),
        ("AssertionError", "AssertionError"),
    ],
)
def test_an_exception_line_alone_is_a_record(line, exc_type):
    (rec,) = assemble(line)
    assert rec.type == exc_type and rec.line.message == line.strip()


def test_warnings_and_prose_are_not_exception_lines():
    assert assemble("FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated.") == []
    assert assemble("Exception in thread Thread-3:") == []
    assert assemble("ValueError occurred twice, retrying") == []


def test_a_bare_assertion_error_takes_its_assert_statement():
    (rec,) = assemble(
        '  File "/v/vllm/models/deepseek_v4/sparse_mla.py", line 262, in _build_c128a_metadata\n'
        "    assert active_topk_width >= cm.max_seq_len // self.compress_ratio\n"
        "AssertionError\n"
    )
    assert rec.type == "AssertionError" and rec.origin.support.message.startswith("assert active_topk_width")
    assert [ln.lineno for ln in rec.evidence_lines()][:2] == [3, 2]


def test_a_traceback_cut_before_its_exception_is_named_by_its_raise_statement():
    text = "\n".join([
        '(EngineCore_DP0 pid=2) ERROR 10-25 13:08:43 [core.py:708]   File "/v/vllm/v1/core/kv_cache_utils.py", line 699, in check_enough_kv_cache_memory',
        '(EngineCore_DP0 pid=2) ERROR 10-25 13:08:43 [core.py:708]     raise ValueError("No available memory for the cache blocks. "',
        '(EngineCore_DP0 pid=2) ERROR 10-25 13:08:43 [core.py:708]                      "Try increasing `gpu_memory_utilization` when "',
        '(EngineCore_DP0 pid=2) ERROR 10-25 13:08:43 [core.py:708]                      "initializing the engine.")',
    ])
    (rec,) = assemble(text)
    assert (rec.type, rec.origin.shown_by, rec.line.lineno) == ("ValueError", "raise", 2)
    assert rec.origin.message.startswith("No available memory for the cache blocks. Try increasing")
    assert raised('raise RuntimeError(f"NCCL error: {error_str}")') == ("RuntimeError", "NCCL error: {error_str}")


def test_the_line_logged_before_a_traceback_heads_it():
    text = "\n".join([
        "ERROR 02-09 02:31:11 engine.py:389] Ray does not allocate any GPUs on the driver node.",
        "ERROR 02-09 02:31:11 engine.py:389] Traceback (most recent call last):",
        'ERROR 02-09 02:31:11 engine.py:389]   File "/v/vllm/engine/multiprocessing/engine.py", line 380, in run_mp_engine',
        "ERROR 02-09 02:31:11 engine.py:389]     engine = MQLLMEngine.from_engine_args(engine_args=engine_args,",
    ])
    (rec,) = assemble(text)
    assert rec.origin.shown_by == "headline" and rec.line.lineno == 1
    inline = assemble(
        "ERROR 04-16 11:53:49 [core.py:387] EngineCore hit an exception: Traceback (most recent call last):\n"
        'ERROR 04-16 11:53:49 [core.py:387]   File "/v/vllm/v1/engine/core.py", line 380, in run_engine_core\n'
        "ERROR 04-16 11:53:49 [core.py:387]     engine_core.run_busy_loop()\n"
    )
    assert inline[0].headline.lineno == 1 and "run_busy_loop" in inline[0].functions


def test_an_exception_logged_before_its_own_traceback_is_one_record():
    text = "\n".join([
        "vllm  | (Worker_TP0_EP0 pid=407) ERROR 04-24 18:37:45 [multiproc_executor.py:971] RuntimeError: Assertion error (/workspace/.deps/deepgemm-src/csrc/apis/hyperconnection.hpp:56): Unsupported architecture",
        "vllm  | (Worker_TP0_EP0 pid=407) ERROR 04-24 18:37:45 [multiproc_executor.py:971] Traceback (most recent call last):",
        'vllm  | (Worker_TP0_EP0 pid=407) ERROR 04-24 18:37:45 [multiproc_executor.py:971]   File "/v/vllm/v1/executor/multiproc_executor.py", line 966, in worker_busy_loop',
    ])
    (rec,) = assemble(text)
    assert rec.line.lineno == 1 and rec.type == "RuntimeError"


@pytest.mark.parametrize(
    "line, kind",
    [
        ("Assertion `res == CUresult::CUDA_SUCCESS` failed (/workspace/flashmla/csrc/sm90/phase1.cuh:614):", "cpp"),
        ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:111: operator(): block: [0,0,0], thread: [0,0,0] Assertion `index < size` failed.", "cpp"),
        ("-> CUDA error 700: an illegal memory access was encountered", "cuda"),
        ("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'", "cuda"),
        ("Error: Failed to initialize the TMA descriptor", "text"),
    ],
)
def test_errors_in_other_grammars(line, kind):
    (rec,) = assemble(line)
    assert rec.kind == kind
    assert prefilter.line_matches(line)


def test_a_pydantic_detail_line_alone_stands_for_its_validation_error():
    (rec,) = assemble("  Value error, Invalid repository ID or local directory specified: '/models/x' [type=value_error]")
    assert rec.type == "ValueError" and rec.line.message.startswith("Value error, Invalid repository ID")


def test_gaps_and_python_313_elisions_do_not_break_a_traceback():
    text = "\n".join([
        '  File "/v/vllm/utils/deep_gemm.py", line 85, in _missing',
        "    raise RuntimeError(",
        "    ...<2 lines>...",
        "    )",
        "[... trimmed ...]",
        "RuntimeError: DeepGEMM backend is not available or outdated.",
    ])
    (rec,) = assemble(text)
    assert rec.complete and rec.line.lineno == 6


def test_a_kernel_name_cut_short_keeps_what_it_has():
    assert demangle("_ZN9deep_gemm5sched30sm90_paged_mqa_lo") == "deep_gemm::sched::sm90_paged_mqa_lo…"


# ----------------------------------------------------------------------------------------- the conclusion


def test_one_line_excerpts_of_the_deepseek_v4_classes_are_found():
    cases = {
        "    assert active_topk_width >= cm.max_seq_len // self.compress_ratio": "stale_max_model_len",
        "ValueError: To serve at least one request with the model's max seq len (262144), (1.93 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (1.88 GiB).": "kv_cache_insufficient",
        "The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache "
        "(23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.":
            "kv_cache_insufficient",
        "[19:25:48.404692] coredump:   # 0   0x7ef928bc46b0  _ZN9deep_gemm5sched30sm90_paged_mqa_logits_metadataILj256E":
            "deepgemm_metadata_oob",
        "-> get_paged_mqa_logits_metadata -> CUDA error 700: an illegal memory access was encountered": "deepgemm_metadata_oob",
    }
    for text, sid in cases.items():
        d = run(text + "\n")
        assert (d.verdict, d.root_cause.id) == ("failed", sid), text
        assert any(t in text for t in root_texts(d)), text


def test_a_lone_autofit_line_is_inconclusive_with_its_warning():
    # The start has not finished: the stale-length crash, a capture's hang or kill all come after this line.
    d = run("INFO [kv_cache_utils.py:1462] Auto-fit max_model_len: reduced from 40960 to 27120 to fit in available GPU memory\n")
    assert d.verdict == "inconclusive" and int(d.exit_code) == 5
    assert "autofit_reduced" in [f.id for f in d.findings]
    assert "answering requests" not in d.summary


def test_one_requests_error_keeps_the_server_healthy():
    d = run("ValueError: As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
            "chat template if the tokenizer does not define one.\n")
    assert d.verdict == "healthy" and [f.id for f in d.findings] == ["chat_template_missing"]
    assert d.findings[0].severity == "warning"


def test_no_error_and_no_ready_line_stays_inconclusive():
    d = run("Loading model weights took 14.9888 GB\nMaximum concurrency for 20000 tokens per request: 1.56x\n")
    assert d.verdict == "inconclusive"


def test_plain_text_is_still_not_a_vllm_log():
    d = run("hello\nthis is a shopping list\n")
    assert [f.id for f in d.findings] == ["not_a_vllm_log"] and int(d.exit_code) == 5


def test_the_phase_comes_from_the_frames_without_a_ready_line():
    serving = run(
        "(EngineCore pid=222) ERROR 08-15 11:20:19 [core.py:1361] Traceback (most recent call last):\n"
        '(EngineCore pid=222) ERROR 08-15 11:20:19 [core.py:1361]   File "/v/vllm/v1/engine/core.py", line 1352, in run_engine_core\n'
        "(EngineCore pid=222) ERROR 08-15 11:20:19 [core.py:1361]     engine_core.run_busy_loop()\n"
        '(EngineCore pid=222) ERROR 08-15 11:20:19 [core.py:1361]   File "/v/vllm/distributed/device_communicators/shm_broadcast.py", line 647, in timeout_ms\n'
        "(EngineCore pid=222) ERROR 08-15 11:20:19 [core.py:1361]     raise TimeoutError\n"
        "(EngineCore pid=222) ERROR 08-15 11:20:19 [core.py:1361] TimeoutError\n"
    )
    assert (serving.verdict, serving.phase) == ("failed", "serving")
    assert serving.phase_basis.basis == "words" and serving.phase_basis.word == "in run_busy_loop"
    startup = run(
        '  File "/v/vllm/v1/worker/gpu_worker.py", line 587, in load_model\n'
        "    self.model_runner.load_model()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
    )
    assert (startup.phase, startup.phase_basis.basis) == ("startup", "words")
    bare = run("RuntimeError: Assertion error (/workspace/deepgemm/csrc/apis/attention.hpp:219): Unsupported architecture\n")
    assert (bare.phase, bare.phase_basis.basis) == ("startup", "default")
    assert json.loads(json.dumps(bare.to_json()))["phase_basis"]["basis"] == "default"


def test_the_earliest_originating_error_wins_and_the_api_server_reacts_last():
    d = run(
        "(APIServer pid=1) Traceback (most recent call last):\n"
        '(APIServer pid=1)   File "/v/vllm/entrypoints/openai/api_server.py", line 718, in run_server\n'
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
        '(Worker_TP1 pid=9) ERROR 11-30 09:00:01 [multiproc_executor.py:900]   File "/v/vllm/model_executor/layers/linear.py", line 9, in w\n'
        "(Worker_TP1 pid=9) ERROR 11-30 09:00:01 [multiproc_executor.py:900] " + MSG + "\n"
        '(Worker_TP0 pid=8) ERROR 11-30 09:00:02 [multiproc_executor.py:900]   File "/v/vllm/model_executor/layers/linear.py", line 9, in w\n'
        "(Worker_TP0 pid=8) ERROR 11-30 09:00:02 [multiproc_executor.py:900] KeyError: 'w13'\n"
    )
    assert d.root_cause.id == "tp_heads_not_divisible" and d.root_cause.evidence[0].process == "Worker_TP1"


def test_a_wrapper_quotes_the_exception_a_cut_worker_traceback_lacks():
    d = run(
        '(Worker_TP0 pid=643) ERROR 04-29 11:11:18 [multiproc_executor.py:962]   File "/usr/lib/python3.12/dist-packages/torch/_inductor/fx_passes/post_grad.py", line 1255, in decompose_triton_kernel_wrapper_functional\n'
        "(Worker_TP0 pid=643) ERROR 04-29 11:11:18 [multiproc_executor.py:962]     graph_pass.apply(graph)\n"
        "[... trimmed ...]\n"
        "(EngineCore pid=445) RuntimeError: Worker failed with error 'AssertionError: ', please check the stack trace above for the root cause\n"
    )
    root = d.root_cause
    assert (d.verdict, root.id) == ("failed", "compile_error")
    assert root.evidence[0].text.startswith("RuntimeError: Worker failed with error 'AssertionError: '")
    assert any("post_grad.py" in e.text for e in root.evidence) and root.details["exception"] == "AssertionError"


def test_a_port_that_cannot_be_bound_after_startup_complete_fails_the_startup():
    d = run(
        "INFO:     Application startup complete.\n"
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use\n"
        "INFO:     Waiting for application shutdown.\n"
    )
    assert (d.verdict, d.phase, d.root_cause.id) == ("failed", "startup", "address_in_use")


def test_legacy_worker_processes_of_one_launch_are_one_start():
    d = run(
        "(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] torch.OutOfMemoryError: "
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has a total capacity of 14.62 GiB of which 3.31 MiB is free.\n"
        "(VllmWorkerProcess pid=195297) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] Exception in worker "
        "VllmWorkerProcess while processing method load_model.\n"
    )
    assert len(d.starts) == 1 and (d.verdict, d.root_cause.id) == ("failed", "cuda_oom")


# ----------------------------------------------------------------------------------------- the message index


def test_an_error_the_index_knows_is_a_known_root_cause_naming_its_source():
    d = run(
        '(Worker_DP2_EP2 pid=1216) ERROR 08-15 08:18:38 multiproc_executor.py:912]   File "/usr/local/lib/python3.12/'
        'dist-packages/vllm/models/deepseek_v4/nvidia/model.py", line 631, in _init_mega_moe_experts\n'
        "(Worker_DP2_EP2 pid=1216) ERROR 08-15 08:18:38 multiproc_executor.py:912]     assert self.n_physical_experts % self.ep_size == 0, (\n"
        "(Worker_DP2_EP2 pid=1216) ERROR 08-15 08:18:38 multiproc_executor.py:912] AssertionError: n_physical_experts=256 "
        "must be divisible by ep_size=3. Adjust num_redundant_experts.\n"
    )
    root = d.root_cause
    # The index names the source; the divisibility family answers it (the EP sizes that divide 256).
    assert (d.verdict, root.id, int(d.exit_code)) == ("failed", "value_not_divisible", 3)
    assert root.details["answered_from"] == "indexed_error"
    assert root.details["function"].endswith("_init_mega_moe_experts") and root.details["package"] == "vllm"
    assert re.match(r"vllm==[0-9.]+ vllm/models/deepseek_v4/", root.details["cite"])  # the newest release that raises it
    assert root.evidence[0].text.startswith("AssertionError: n_physical_experts=256")
    assert json.loads(json.dumps(d.to_json()))["findings"][0]["details"]["releases"][0] == "0.27.1"


def test_the_flags_that_feed_an_indexed_check_carry_this_launchs_values():
    d = run(
        "(APIServer pid=1) INFO 11-30 09:00:01 [utils.py:233] non-default args: {'model': 'm', "
        "'data_parallel_size': 4, 'elastic_ep_max_dp_size': 2}\n"
        "ValueError: --elastic-ep-max-dp-size must be greater than or equal to the initial data_parallel_size (4).\n"
    )
    root = d.root_cause
    assert root.id == "indexed_error"
    assert set(root.details["flags"]) == {"--data-parallel-size", "--elastic-ep-max-dp-size"}
    assert "--data-parallel-size (4 in this launch)" in root.details["flags_text"]
    # Answered from the raise site: the check, this start's values (the launch's flag, the message's number), the
    # flag to change and the value that passes, each with the launch's own command.
    assert root.details["check"] == "if self.elastic_ep_max_dp_size < self.data_parallel_size"
    assert root.details["check_values"] == {"elastic_ep_max_dp_size": "2", "data_parallel_size": "4"}
    assert root.actions[0] == ("Set --elastic-ep-max-dp-size at least 4: vllm serve m --data-parallel-size 4 "
                               "--elastic-ep-max-dp-size 4")


def test_the_same_words_raised_elsewhere_are_not_the_indexed_message():
    # SGLang's fused-MoE assert has the words of one of vLLM's: the frame that raised it says it is not vLLM's.
    d = run(
        '  File "/sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe.py", line 905, in fused_experts_impl\n'
        "    hidden_states.shape[1] == w1.shape[2] - padded_size\n"
        "AssertionError: Hidden size mismatch\n"
    )
    assert (d.root_cause.id, int(d.exit_code)) == ("unrecognized_error", 4)
    # Without frames the words alone are all there is: the index names them.
    assert run("AssertionError: Hidden size mismatch\n").root_cause.id == "indexed_error"


def test_text_no_index_knows_stays_unrecognized():
    d = run("RuntimeError: the frobnicator overflowed in stage 7\n")
    assert (d.verdict, d.root_cause.id, int(d.exit_code)) == ("failed", "unrecognized_error", 4)
    assert d.root_cause.title == "RuntimeError: the frobnicator overflowed in stage 7"  # the message heads it


def test_text_no_index_knows_but_a_family_covers_is_answered():
    d = run("RuntimeError: kv must have shape (num_blocks, page_block_size, h_kv, bytes_per_token)\n")
    assert (d.verdict, d.root_cause.id, int(d.exit_code)) == ("failed", "dsv4_kv_shape_mismatch", 3)
    assert d.root_cause.details["answered_from"] == "unrecognized_error"


def test_the_h200_core_dump_capture_alone_names_deepgemms_metadata_kernel():
    """The project's own capture (benchmarks/results/h200-2026-11-30/), given as it is: no vLLM line in it."""
    from pathlib import Path

    capture = Path(__file__).resolve().parents[2] / "benchmarks/results/h200-2026-11-30/coredump-deepgemm-0.27.1-stderr.txt"
    d = diagnose([capture])
    root = d.root_cause
    assert (d.verdict, root.id, int(d.exit_code)) == ("failed", "deepgemm_metadata_oob", 3)
    assert root.details["kernel"] == "deep_gemm::sched::sm90_paged_mqa_logits_metadata"
    assert "_ZN9deep_gemm5sched30sm90_paged_mqa_logits_metadata" in root.evidence[0].text
    assert root.evidence[0].raw.startswith("[11:12:22.536845] coredump:")
    assert any("CUDBG_EXCEPTION_WARP_OUT_OF_RANGE_ADDRESS" in e.text for e in root.evidence)


# ------------------------------------------------------------------- what the server did after the error

ACCESS_OK = 'INFO:     10.1.2.9:41270 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
ACCESS_400 = 'INFO:     127.0.0.1:58814 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
THROUGHPUT = ("(APIServer pid=1) INFO 11-02 10:15:31 [loggers.py:335] Engine 000: Avg prompt throughput: 88.4 tokens/s, "
              "Avg generation throughput: 41.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs\n")


@pytest.mark.parametrize("after", [ACCESS_OK, ACCESS_400, THROUGHPUT])
def test_an_error_the_server_answered_requests_after_did_not_take_it_down(after):
    # No ready line in the paste: the access line (uvicorn) or vLLM's throughput line says the server was up,
    # so the error before it is one it survived (a warning quoting it), never a failure.
    error = "RuntimeError: Worker failed with error 'LoRA rank 64 is greater than max_lora_rank 16.'\n"
    d = run(error + after)
    assert (d.verdict, int(d.exit_code)) == ("healthy", 0)
    assert d.timeline.ready and d.timeline.serving
    survived = next(f for f in d.findings if f.id == "error_survived")
    assert survived.evidence[0].text.startswith("RuntimeError: Worker failed with error")


def test_the_same_error_with_nothing_after_it_is_a_failure():
    d = run("RuntimeError: Worker failed with error 'LoRA rank 64 is greater than max_lora_rank 16.'\n")
    assert d.verdict == "failed"


def test_a_clients_exception_group_quoting_the_servers_error_body_names_vllms_check():
    # Python 3.11's exception-group rendering ('| ' inside the group) from the user's own client, then the
    # server's 400s: the message in the JSON body is vLLM's (SamplingParams), not the client's frame.
    d = run(
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "/home/dev/evals/sweep.py", line 32, in <module>\n'
        "  |     asyncio.run(main())\n"
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | Traceback (most recent call last):\n"
        '    |   File "/home/dev/evals/sweep.py", line 16, in post\n'
        '    |     raise ServerError(f"HTTP {status}: {json.dumps(body)}")\n'
        '    | ServerError: HTTP 400: {"error": {"message": "Requested sample logprobs of 50, which is greater than '
        'max allowed: 20", "type": "BadRequestError", "param": "logprobs", "code": 400}}\n'
        "    +------------------------------------\n" + ACCESS_400
    )
    assert d.verdict == "healthy"
    survived = next(f for f in d.findings if f.id == "error_survived")
    assert survived.details["exception"] == "ServerError"  # the sub-exception, not the group that wraps it
    assert survived.details["function"] == "SamplingParams._validate_logprobs"
    assert survived.details["cite"].startswith("vllm==")


def test_a_clients_error_json_is_a_record_that_names_vllms_message():
    # curl | jq of an error response: the "message" line is the error; the 400 access line says the server lived.
    d = run('{\n  "error": {\n    "message": "The provided JSON schema contains features not supported by xgrammar.",\n'
            '    "type": "BadRequestError",\n    "code": 400\n  }\n}\n' + ACCESS_400)
    survived = next(f for f in d.findings if f.id == "error_survived")
    assert survived.evidence[0].line == 3
    assert survived.details["function"] == "validate_xgrammar_grammar"


# ----------------------------------------------------------------- engine ready, API server not yet serving

ENGINE_READY = ("(EngineCore_DP0 pid=188) INFO 12-04 09:15:20 [core.py:413] init engine (profile, create kv cache, "
                "warmup model) took 61.52 s (compilation: 30.15 s)\n")


def test_an_error_while_the_api_server_waits_for_its_engines_fails_the_start():
    # The engine's "init engine … took" line is not the server serving: the API server still waits for the
    # other data-parallel engines (wait_for_engine_startup), and its error ends the start.
    d = run(
        ENGINE_READY + "Traceback (most recent call last):\n  [...]\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", line 1393, in launch_core_engines\n'
        "    wait_for_engine_startup(\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", line 1570, in wait_for_engine_startup\n'
        "    raise RuntimeError(\n"
        "RuntimeError: Configuration mismatch detected for engine 1. All DP workers must have identical configurations "
        "for parameters that affect collective communication (e.g., enable_eplb, eplb_config.log_balancedness).\n"
    )
    assert (d.verdict, d.phase) == ("failed", "startup")
    assert d.timeline.ready and not d.timeline.serving
    assert root_texts(d)[0].startswith("RuntimeError: Configuration mismatch detected for engine 1.")


def test_an_uncaught_error_building_the_app_fails_the_start():
    # Static --lora-modules are loaded in init_app_state after the engine is ready; the traceback the
    # interpreter prints from the `vllm` script's <module> frame is the process exiting.
    d = run(
        ENGINE_READY + "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 10, in <module>\n    sys.exit(main())\n'
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/launchers/api_server/app_state.py", line 86, '
        "in init_app_state\n    await state.openai_serving_models.init_static_loras()\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/models/serving.py", line 139, in '
        "init_static_loras\n    raise ValueError(load_result.error.message)\n"
        "ValueError: Call to add_lora method failed: LoRA rank 64 is greater than max_lora_rank 16.\n"
    )
    assert (d.verdict, d.phase) == ("failed", "startup")
    assert (d.phase_basis.basis, d.phase_basis.word) == ("words", "in init_app_state")


def test_an_offline_scripts_uncaught_request_error_is_still_a_request_error():
    # The uncaught rule does not turn a rejected request into a failure: the engine answered it.
    d = run(
        ENGINE_READY + "Traceback (most recent call last):\n"
        '  File "/srv/batch/run.py", line 31, in <module>\n    outputs = llm.generate(prompts, params)\n'
        "vllm.exceptions.VLLMValidationError: The decoder prompt (length 40211) is longer than the maximum model "
        "length of 32768. Make sure that `max_model_len` is no smaller than the number of text tokens.\n"
    )
    assert d.verdict != "failed"
    assert any(f.id == "prompt_too_long" for f in d.findings)


# -------------------------------------------------------------------------------- more shapes of a paste

def test_json_formatted_records_are_read_as_records():
    # A JSON logging config (python-json-logger's fields): process, level and message come from the object.
    line = parse_line('{"asctime": "2026-12-04 09:10:09,871", "levelname": "ERROR", "name": "vllm.config.model", '
                      '"processName": "EngineCore_DP0", "process": 188, "message": "Using max model len 32768"}', "x", 1)
    assert (line.process, line.level, line.message) == ("EngineCore_DP0", "ERROR", "Using max model len 32768")


def test_a_lowercase_dotted_exception_type_is_an_exception():
    # socket.gaierror: CPython's own name for a resolver failure (no capital, no "Error" suffix in the class).
    recs = assemble("socket.gaierror: [Errno -2] Name or service not known\n")
    assert [r.type for r in recs] == ["socket.gaierror"]
    assert run("socket.gaierror: [Errno -2] Name or service not known\n").verdict == "failed"


def test_argparse_rejecting_a_flag_is_the_cause():
    d = run("usage: vllm serve [model_tag] [options]\n"
            "vllm serve: error: unrecognized arguments: --gpu-memory-utilisation 0.92\n")
    # The argparse signature, refined by the family that reads the flag: this release's flags with its words.
    assert (d.verdict, d.root_cause.id, d.phase) == ("failed", "cli_arguments_rejected", "startup")
    assert d.root_cause.details["refined_by"] == "flag_unknown"
    assert "--gpu-memory-utilisation" in root_texts(d)[0]
    assert any(a.startswith("Check the spelling") and "--gpu-memory-utilization" in a for a in d.root_cause.actions)


def test_kubectl_describe_oomkilled_names_the_container_limit():
    d = run("Containers:\n  vllm:\n    Last State:     Terminated\n      Reason:       OOMKilled\n"
            "      Exit Code:    137\n")
    assert (d.verdict, d.root_cause.id) == ("failed", "eco_container_oom_killed")


def test_a_paste_is_read_in_full_and_a_long_log_through_the_prefilter(monkeypatch):
    # The access line is not a prefilter keyword: read in full it counts, through the prefilter it does not.
    from dsv4ctl.diagnosis import run as diagnose_module

    text = "RuntimeError: Worker failed with error 'LoRA rank 64 is greater than max_lora_rank 16.'\n" + ACCESS_OK
    assert not prefilter.line_matches(ACCESS_OK.strip())
    assert run(text).verdict == "healthy"
    monkeypatch.setattr(diagnose_module, "FULL_READ_BYTES", 0)
    assert run(text).verdict == "failed"


def test_an_error_loading_uvicorns_config_after_the_server_line_fails_the_start():
    # vLLM logs "Starting vLLM server on" before uvicorn loads its config (TLS files) and binds: an error in
    # serve_http before "Application startup complete" ended the start.
    d = run(
        "(APIServer pid=1) INFO 08-14 06:31:42 [entry.py:139] Starting vLLM server on https://0.0.0.0:8443\n"
        "Traceback (most recent call last):\n  [...]\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/launchers/launcher.py", line 226, in serve_http\n'
        "    config.load()\n"
        '  File "/usr/local/lib/python3.12/dist-packages/uvicorn/config.py", line 131, in create_ssl_context\n'
        "    ctx.load_cert_chain(certfile, keyfile, get_password)\n"
        "FileNotFoundError: [Errno 2] No such file or directory\n"
    )
    assert (d.verdict, d.phase) == ("failed", "startup")
    assert root_texts(d)[0] == "FileNotFoundError: [Errno 2] No such file or directory"


def test_the_same_error_once_uvicorn_serves_is_not_the_start():
    d = run(
        "(APIServer pid=1) INFO 08-14 06:31:42 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/launchers/launcher.py", line 226, in serve_http\n'
        "FileNotFoundError: [Errno 2] No such file or directory\n"
    )
    assert d.phase != "startup"


@pytest.mark.parametrize("body", [
    '{"error":{"message":"\\"auto\\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",'
    '"type":"BadRequestError","param":null,"code":400}}\n',
    '{\n  "error": {\n    "message": "\\"auto\\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",\n'
    '    "type": "BadRequestError",\n    "code": 400\n  }\n}\n',
])
def test_an_error_body_alone_is_the_servers_answer(body):
    d = run("$ curl -s localhost:8000/v1/chat/completions -d @tools.json\n" + body)
    assert (d.verdict, int(d.exit_code)) == ("healthy", 0)
    survived = next(f for f in d.findings if f.id == "error_survived")
    assert "tool choice requires --enable-auto-tool-choice" in survived.evidence[0].text
    assert "answer to a request" in survived.meaning


@pytest.mark.parametrize("status, alive", [("501 Not Implemented", True), ("404 Not Found", True),
                                           ("500 Internal Server Error", False), ("503 Service Unavailable", False)])
def test_an_access_line_shows_the_server_up_unless_it_answers_500_or_503(status, alive):
    error = "openai.InternalServerError: Error code: 501 - The model does not support Chat Completions API\n"
    d = run(error + f'INFO:     10.8.0.21:47710 - "POST /v1/chat/completions HTTP/1.1" {status}\n')
    assert any(f.id == "error_survived" for f in d.findings) == alive
