"""Answers that reason from the error's own words and from where it is raised (diagnosis/reading, answers_reading,
raise_site), on text as the packages print it (each line's source cited beside it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose
from dsv4ctl.diagnosis import raise_site, reading
from dsv4ctl.logs.timeline import StartupTimeline

BLIND = Path(__file__).resolve().parents[1] / "fixtures" / "blind"


def run(tmp_path: Path, text: str):
    log = tmp_path / "paste.log"
    log.write_text(text)
    return diagnose([str(log)])


# ---------------------------------------------------------------------------------------------- what ran out
@pytest.mark.parametrize("text,resource,needed,available", [
    # triton==3.5.0 triton/runtime/errors.py:22
    ("out of resource: shared memory, Required: 98304, Hardware limit: 65536. Reducing block sizes or `num_stages` may "
     "help.", "gpu_shared_memory", "98304", "65536"),
    # ray's memory monitor (raylet): the node's RAM, whatever the type name says
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_memory", None, None),
    ("Memory on the node (IP: 10.0.0.2, ID: abc) where the task was running was 237.56GB / 250.00GB (0.950225)",
     "host_memory", "237.56", "250.00"),
    # torch c10/cuda/CUDACachingAllocator.cpp
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of "
     "which 3.06 MiB is free.", "gpu_memory", "20.00 MiB", "3.06 MiB"),
    ("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/x'", "disk", None, None),
    ("OSError: [Errno 24] Too many open files", "file_descriptors", None, None),
    ("RuntimeError: can't start new thread", "threads", None, None),
])
def test_what_ran_out_is_read_from_the_words(text, resource, needed, available):
    s = reading.shortage([text])
    assert s is not None and (s.resource, s.needed, s.available) == (resource, needed, available)


def test_a_message_that_says_nothing_ran_out_is_no_shortage():
    assert reading.shortage(["ValueError: tp_size=4 must be divisible by dcp_size=8."]) is None


def test_the_os_error_is_named_by_this_machines_c_library():
    err = reading.os_error("PermissionError", "[Errno 13] Permission denied: '/root/.triton/cache'")
    assert (err.number, err.name, err.path) == (13, "EACCES", "/root/.triton/cache")
    # A traceback that cut the "[Errno N]": the OSError subclass says it.
    assert reading.os_error("FileNotFoundError", "No such file").name == "ENOENT"


def test_an_inner_error_is_read_out_of_its_wrapper():
    assert reading.inner_error("PermissionError: [Errno 13] Permission denied: '/x'") == (
        "PermissionError", "[Errno 13] Permission denied: '/x'")
    assert reading.inner_error("backend='inductor' raised:\nAssertionError: Inductor cache lookup failed.") == (
        "AssertionError", "Inductor cache lookup failed.")


@pytest.mark.parametrize("path,package", [
    ("/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", "vllm"),
    ("/sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe.py", "sglang"),
    ("/root/sglang/.venv/lib/python3.12/site-packages/flashinfer/data/csrc/sparse_mla_sm120.cu", "flashinfer"),
    ("/home/u/script.py", None),
])
def test_the_package_that_raised_is_read_from_the_path(path, package):
    assert reading.package_of(path) == package


def test_the_messages_own_advice_is_quoted():
    assert reading.advice_of("out of resource: shared memory, Required: 98304, Hardware limit: 65536. Reducing block sizes "
                             "or `num_stages` may help.") == "Reducing block sizes or `num_stages` may help."
    assert reading.advice_of("ValueError: tp_size=4 must be divisible by dcp_size=8.") is None


# ---------------------------------------------------------------------------------------------- the raise site
def test_the_raise_site_gives_the_values_the_flags_and_what_passes():
    # vllm==0.33.0 vllm/config/parallel.py:547
    ex = raise_site.explain("if self.data_parallel_size_local > self.data_parallel_size",
                            "data_parallel_size_local ({self.data_parallel_size_local}) must be <= data_parallel_size "
                            "({self.data_parallel_size})", "data_parallel_size_local (4) must be <= data_parallel_size (2)",
                            StartupTimeline())
    assert ex.requires == "self.data_parallel_size_local <= self.data_parallel_size"
    assert ex.values == {"data_parallel_size_local": "4", "data_parallel_size": "2"}
    assert ex.flags == {"data_parallel_size_local": "--data-parallel-size-local", "data_parallel_size": "--data-parallel-size"}
    assert ex.passes == ["Set --data-parallel-size-local at most 2", "Set --data-parallel-size at least 4"]


def test_a_divisibility_check_offers_the_divisors():
    ex = raise_site.explain("if total_num_attention_heads % tensor_parallel_size != 0",
                            "Total number of attention heads ({total_num_attention_heads}) must be divisible by tensor "
                            "parallel size ({tensor_parallel_size}).", "Total number of attention heads (64) must be "
                            "divisible by tensor parallel size (3).", StartupTimeline())
    assert ex.passes == ["Set --tensor-parallel-size to a divisor of total_num_attention_heads = 64: 1, 2, 4, 8, 16, 32, 64"]


def test_an_if_not_condition_is_read_whole():
    # "if not (a or b) and c": the whole condition runs the statement; its negation is what must hold.
    assert raise_site._requirement("if not (a or b) and c") == "not (not (a or b) and c)"
    assert raise_site._requirement("if not (x)") == "x"
    assert raise_site._requirement("assert x > 0") == "x > 0"


def test_a_pydantic_wrapped_config_error_is_answered_from_its_check(tmp_path):
    d = run(tmp_path, "(EngineCore_DP0 pid=1) ERROR 11-03 10:00:00 [core.py:1000] pydantic_core._pydantic_core.ValidationError: "
                      "1 validation error for ParallelConfig\n(EngineCore_DP0 pid=1) ERROR 11-03 10:00:00 [core.py:1000]   "
                      "Value error, data_parallel_size_local (4) must be <= data_parallel_size (2) [type=value_error, "
                      "input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n")
    root = d.root_cause
    assert (d.verdict, root.id) == ("failed", "indexed_error")
    assert root.details["check"] == "if self.data_parallel_size_local > self.data_parallel_size"
    assert root.actions[:2] == ["Set --data-parallel-size-local at most 2", "Set --data-parallel-size at least 4"]


# ---------------------------------------------------------------------------------------------- answers from the words
@pytest.mark.parametrize("name,words", [
    ("01-triton-outofresources-moe-tuned-config-l40s.log", "shared memory"),
    ("02-safetensors-incomplete-metadata-truncated-shard.log", "truncated or interrupted download"),
    ("03-safetensors-header-too-large-lfs-pointer-compose.log", "Git LFS pointer"),
    ("04-semlock-rebuild-filenotfound-removeipc.log", "RemoveIPC"),
    ("06-ray-oom-killer-host-memory-during-load.log", "host memory"),
    ("11-request-hermes-tool-call-json-decode-error.log", "invalid JSON"),
    ("12-request-nixl-handshake-failed-one-request.log", "VLLM_NIXL_SIDE_CHANNEL_HOST"),
    ("13-request-logprobs-over-max-400.log", "--max-logprobs"),
    ("22-keyerror-load-weights-fp8-scales-without-quant-config-crlf.log", "checkpoint"),
    ("23-inductor-error-permission-denied-cache-dir.log", "VLLM_CACHE_ROOT"),
    ("24-calledprocesserror-p2p-check-child-shm-full.log", "/dev/shm"),
])
def test_blind_classes_are_answered_from_their_words(name, words):
    d = diagnose([str(BLIND / name)])
    findings = [d.root_cause] if d.root_cause is not None else d.findings
    text = " ".join(t for f in findings for t in [f.title, f.meaning, *f.actions])
    assert words.lower() in text.lower(), text[:600]


def test_a_host_memory_kill_is_never_called_a_gpu_oom():
    d = diagnose([str(BLIND / "06-ray-oom-killer-host-memory-during-load.log")])
    text = " ".join([d.root_cause.title, d.root_cause.meaning, *d.root_cause.actions])
    assert d.root_cause.id == "eco_ray_oom_killed" and "CUDA out of memory" not in text


def test_a_request_scoped_error_keeps_the_server_healthy():
    for name in ("11-request-hermes-tool-call-json-decode-error.log", "12-request-nixl-handshake-failed-one-request.log",
                 "13-request-logprobs-over-max-400.log"):
        d = diagnose([str(BLIND / name)])
        assert d.verdict == "healthy" and d.root_cause is None, name


def test_an_access_line_with_a_500_is_no_proof_the_engine_lives():
    # vllm==0.6.3 vllm/entrypoints/launcher.py:99 "MQLLMEngine is already dead, terminating server process"
    d = diagnose([str(BLIND / "07-v0-mqllmengine-dead-sampler-oom-500s.log")])
    assert (d.verdict, d.phase, d.root_cause.id) == ("failed", "serving", "cuda_oom")
