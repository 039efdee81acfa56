"""Generated vLLM logs that look like production, for the diagnose benchmarks (deterministic, any size).

    python benchmarks/prodlogs.py serving /tmp/serving.log --size 1GiB     # write one and print its make-up

Scenarios (each written to exactly the requested size or a little over, same bytes for the same size):

- `serving`: a server that ran for days. One startup at the top (the `healthy` example: vLLM 0.32.0, TP2,
  auto-fit, ready), then serving traffic with request logging on (the request logger's "Received request"
  line, AsyncLLM's "Added request" line and uvicorn's access line per request, the engine's throughput
  line every 40 requests), with about 1 % of all lines being request-time ERROR tracebacks (the chat
  stream generator's `logger.exception` with the too-long-prompt validation error), then a stop
  (the example's shutdown lines) and a restart whose auto-fit reduces the length (the
  `autofit_reduced_v032` fixture: 1,048,576 -> 980,224, ready). diagnose's verdict: healthy.
- `crash-loop`: a container restarted hundreds of times (`starts_per_gib`, default 400 per GiB): every
  start is the `stale-max-model-len` example (auto-fit, then the workers' traceback), pids shifted
  per start, run with VLLM_LOGGING_LEVEL=DEBUG: each start carries the compilation DEBUG lines of its
  workers that make it a few MB. diagnose's verdict: failed (stale_max_model_len), last start.
- `engine-lines`: the `serving` log where a quarter of all lines are EngineCore lines that the
  prefilter selects: a client whose structured-output requests the grammar keeps rejecting (the
  scheduler's ERROR line per rejected request, and now and then a grammar that fails to compile, with
  its traceback).

Formats, from the installed sources (vLLM 0.32.0 unpacked under /work/wheels/src/vllm-0.32.0/vllm,
uvicorn 0.54.0):
- vLLM's logger format `(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s
  [%(fileinfo)s:%(lineno)d] %(message)s`, date `%m-%d %H:%M:%S` (logger.py:28-33); a multi-line record
  (a traceback) repeats that prefix after "\\r\\n" (logging_utils/formatter.py:88-91); with
  VLLM_LOGGING_LEVEL=DEBUG `fileinfo` is the shortened path (formatter.py:18, 45-75).
- "Received request %s: params: %s, lora_request: %s." (entrypoints/serve/utils/request_logger.py:66),
  `SamplingParams.__repr__` (sampling_params.py:1444-1471), "Added request %s." (v1/engine/async_llm.py:578).
- the throughput line: "Engine {:03d}: " + "Avg prompt throughput: %.1f tokens/s, Avg generation
  throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, %s KV cache usage: %.1f%%, Prefix cache
  hit rate: %.1f%%" (v1/metrics/loggers.py:178, 282-336).
- "Error in chat completion stream generator." (entrypoints/openai/chat_completion/serving.py:929), its
  frames serving.py:527, v1/engine/async_llm.py:767, v1/engine/output_processor.py:92, the message of
  renderers/params.py:389-394 with `VLLMValidationError.__str__` (exceptions.py:49-56).
- "Unexpected: grammar rejected tokens %s for request %s. Terminating request." (v1/core/sched/
  scheduler.py:2189), "Failed to compile grammar for request %s" (v1/structured_output/__init__.py:208),
  "grammar is not of valid supported types. (%s)" (v1/structured_output/backend_xgrammar.py:152).
- DEBUG: "%s completed in %.1f ms" (compilation/passes/vllm_inductor_pass.py:86, pass names are class
  names, e.g. RMSNormQuantFusionPass), "Capturing a cudagraph on (%s,%s)" (compilation/cuda_graph.py:273,
  `BatchDescriptor`'s dataclass repr, forward_context.py:30-50).
- uvicorn's access line `%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s`
  (uvicorn/config.py:94; levelprefix "INFO:" padded to 9, uvicorn/logging.py:58-64; status "200 OK",
  logging.py:82-95). vLLM passes no log config to uvicorn by default (entrypoints/launchers/utils/
  server_utils.py:32-62), so these lines carry no process prefix.
Frame line numbers and request values are illustrative where the source does not fix them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "dsv4ctl" / "examples"
FIXTURES = REPO / "tests" / "fixtures" / "logs"
SCENARIOS = ("serving", "crash-loop", "engine-lines")
GIB = 1 << 30
BLOCK_BYTES = 1 << 20  # serving traffic is written as a cycle of this many distinct ~1 MiB blocks
DISTINCT_BLOCKS = 8
PY = "/usr/local/lib/python3.12/dist-packages"

API = "(APIServer pid=7701)"
ENGINE = "(EngineCore pid=7790)"
# Timestamps only move forward, as in a real log: a block of serving traffic spans under an hour and is
# written with its own hour (`HOUR` replaced by "%m-%d %H"), the restart and each crash-loop start too.
HOUR = "~MM-DDHH~"
START = datetime.datetime(2026, 10, 21, 9)


def _hour(h: int) -> str:
    """ "%m-%d %H" of the hour `h` hours after the first startup's."""
    return (START + datetime.timedelta(hours=h)).strftime("%m-%d %H")


def _log_lines(path: Path) -> list[str]:
    """A log file's lines (newline kept), without the leading `#` comment lines of the examples."""
    text = path.read_text(encoding="utf-8")
    return [ln for ln in text.splitlines(keepends=True) if not ln.startswith("#")]


def _startup_and_shutdown() -> tuple[str, str]:
    lines = _log_lines(EXAMPLES / "healthy.log")
    cut = next(i for i, ln in enumerate(lines) if "[shutdown]" in ln)
    return "".join(lines[:cut]), "".join(lines[cut:])


def _ts(t: int) -> str:
    """vLLM's %m-%d %H:%M:%S for second `t` (< 3600) of the block's hour."""
    return f"{HOUR}:{t // 60 % 60:02d}:{t % 60:02d}"


def _record(prefix: str, lines: list[str]) -> str:
    """One multi-line vLLM record: every line after the first is prefixed again after CR LF."""
    return ("\r\n".join(prefix + ln for ln in lines)) + "\n"


def _sampling_params(rng: random.Random) -> str:
    return (
        f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
        f"temperature={rng.choice(['0.6', '1.0', '0.0'])}, watermarking=None, top_p={rng.choice(['0.95', '1.0'])}, "
        f"top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], thinking_token_budget=None, "
        f"include_stop_str_in_output=False, ignore_eos=False, max_tokens={rng.choice([512, 2048, 8192, 32768])}, "
        f"min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
        f"spaces_between_special_tokens=True, structured_outputs=None, extra_args=None)"
    )


def _request(rng: random.Random, t: int) -> list[str]:
    rid = f"chatcmpl-{rng.getrandbits(128):032x}"
    ts = _ts(t)
    return [
        f"{API} INFO {ts} [request_logger.py:66] Received request {rid}: params: {_sampling_params(rng)}, lora_request: None.\n",
        f"{API} INFO {ts} [async_llm.py:578] Added request {rid}.\n",
        f'INFO:     10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}:{rng.randrange(32768, 61000)} - '
        f'"POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    ]


def _throughput(rng: random.Random, t: int) -> str:
    return (
        f"{API} INFO {_ts(t)} [loggers.py:335] Engine 000: Avg prompt throughput: {rng.uniform(500, 90000):.1f} tokens/s, "
        f"Avg generation throughput: {rng.uniform(100, 6000):.1f} tokens/s, Running: {rng.randrange(1, 256)} reqs, "
        f"Waiting: {rng.randrange(0, 8)} reqs, GPU KV cache usage: {rng.uniform(1, 95):.1f}%, "
        f"Prefix cache hit rate: {rng.uniform(10, 80):.1f}%\n"
    )


def _request_traceback(rng: random.Random, t: int) -> str:
    chars = rng.randrange(4_000_000, 9_000_000)
    return _record(
        f"{API} ERROR {_ts(t)} [serving.py:929] ",
        [
            "Error in chat completion stream generator.",
            "Traceback (most recent call last):",
            f'  File "{PY}/vllm/entrypoints/openai/chat_completion/serving.py", line 527, in chat_completion_stream_generator',
            "    async for res in result_generator:",
            f'  File "{PY}/vllm/v1/engine/async_llm.py", line 767, in generate',
            "    out = q.get_nowait() or await q.get()",
            "                             ^^^^^^^^^^^^^",
            f'  File "{PY}/vllm/v1/engine/output_processor.py", line 92, in get',
            "    raise output",
            "vllm.exceptions.VLLMValidationError: This model's maximum context length is 980224 tokens. However, your "
            f"prompt contains {chars} characters (more than 3920892 characters, which is the upper bound for 980223 "
            f"input tokens). Please reduce the length of the input prompt. (parameter=input_text, value={chars})",
        ],
    )


def _engine_event(rng: random.Random, t: int, n: int) -> str:
    rid = f"chatcmpl-{rng.getrandbits(128):032x}"
    if n % 20:
        tokens = [rng.randrange(128000) for _ in range(rng.randrange(1, 4))]
        return (
            f"{ENGINE} ERROR {_ts(t)} [scheduler.py:2189] Unexpected: grammar rejected tokens {tokens} for request "
            f"{rid}. Terminating request.\n"
        )
    return _record(
        f"{ENGINE} ERROR {_ts(t)} [__init__.py:208] ",
        [
            f"Failed to compile grammar for request {rid}",
            "Traceback (most recent call last):",
            f'  File "{PY}/vllm/v1/structured_output/__init__.py", line 204, in _create_grammar',
            "    return self.backend.compile_grammar(",
            f'  File "{PY}/vllm/v1/structured_output/backend_xgrammar.py", line 152, in compile_grammar',
            "    raise ValueError(",
            "ValueError: grammar is not of valid supported types. (StructuredOutputOptions.STRUCTURAL_TAG)",
        ],
    )


def _serving_block(seed: int, t0: int, tb_share: float, engine_share: float) -> tuple[str, dict[str, int]]:
    """About BLOCK_BYTES of serving traffic with the given shares of traceback lines and engine lines."""
    rng = random.Random(seed)
    out: list[str] = []
    size = lines = tb_lines = engine_lines = n_requests = n_engine = 0
    t = t0
    while size < BLOCK_BYTES:
        parts = _request(rng, t)
        n_requests += 1
        if n_requests % 40 == 0:
            parts.append(_throughput(rng, t))
            t += 10
        lines += len(parts)
        if tb_share and tb_lines < tb_share * (lines + 12):
            rec = _request_traceback(rng, t)
            k = rec.count("\n")
            parts.insert(2, rec)  # before the access line
            lines += k
            tb_lines += k
        while engine_share and engine_lines < engine_share * lines:
            rec = _engine_event(rng, t, n_engine)
            n_engine += 1
            k = rec.count("\n")
            parts.append(rec)
            lines += k
            engine_lines += k
        chunk = "".join(parts)
        out.append(chunk)
        size += len(chunk.encode())
    return "".join(out), {"lines": lines, "traceback_lines": tb_lines, "engine_lines": engine_lines, "requests": n_requests}


def _count_lines(text: str) -> int:
    return text.count("\n")


def _write_serving(f, size: int, tb_share: float, engine_share: float) -> dict[str, int]:
    startup, shutdown = _startup_and_shutdown()
    restart = "".join(_log_lines(FIXTURES / "autofit_reduced_v032.log"))
    head = startup.encode()
    tail = (shutdown + restart).encode()
    blocks = [_serving_block(1000 + i, 0, tb_share, engine_share) for i in range(DISTINCT_BLOCKS)]
    encoded = [b.encode() for b, _ in blocks]
    stats = {"lines": _count_lines(startup) + _count_lines(shutdown + restart), "traceback_lines": 0, "engine_lines": 0,
             "requests": 0, "starts": 2}
    f.write(head)
    written = len(head)
    i = 0
    while written + len(tail) < size:
        data = encoded[i % DISTINCT_BLOCKS].replace(HOUR.encode(), _hour(i + 1).encode())
        f.write(data)
        written += len(data)
        for k in ("lines", "traceback_lines", "engine_lines", "requests"):
            stats[k] += blocks[i % DISTINCT_BLOCKS][1][k]
        i += 1
    # The stop and the restart come after the last block (their "10-21 09:" moved to the next hour).
    f.write(tail.replace(b"10-21 09:", _hour(i + 1).encode() + b":"))
    return stats


_DEBUG_PASSES = (
    "RMSNormQuantFusionPass", "ActivationQuantFusionPass", "AddRMSNormFusionPass", "RopeKVCacheFusionPass",
    "MLARoPEKVCacheCatFusionPass", "MLADualRMSNormFusionPass", "AllReduceFusionPass", "VllmIRLoweringPass",
    "UnsafeCloneEliminationPass", "VllmIRInplaceFunctionalizationPass",
)


def _debug_lines(rng: random.Random, pids: list[int], ts: str, target: int) -> str:
    """About `target` bytes of the workers' compilation DEBUG lines (VLLM_LOGGING_LEVEL=DEBUG)."""
    out: list[str] = []
    size = 0
    n = 0
    while size < target:
        w = n % len(pids)
        prefix = f"(Worker_TP{w} pid={pids[w]}) DEBUG {ts} "
        if n % 7 == 6:
            line = (
                f"{prefix}[compilation/cuda_graph.py:273] Capturing a cudagraph on (PIECEWISE,BatchDescriptor("
                f"num_tokens={rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, 512])}, num_reqs=None, uniform=False, "
                f"has_lora=False, num_active_loras=0))\n"
            )
        else:
            line = (
                f"{prefix}[compilation/passes/vllm_inductor_pass.py:86] {rng.choice(_DEBUG_PASSES)} completed in "
                f"{rng.uniform(0.1, 40):.1f} ms\n"
            )
        out.append(line)
        size += len(line)
        n += 1
    return "".join(out)


def _write_crash_loop(f, size: int, starts_per_gib: int) -> dict[str, int]:
    lines = _log_lines(EXAMPLES / "stale-max-model-len.log")
    cut = next(i for i, ln in enumerate(lines) if "Starting torch.compile" in ln) + 1
    before, after = "".join(lines[:cut]), "".join(lines[cut:])
    template_bytes = len((before + after).encode())
    starts = max(2, round(starts_per_gib * size / GIB))
    per_start = max(0, size // starts - template_bytes)
    pid_re = re.compile(r"pid=(\d+)")
    ts = "09-24 10:06:01"  # each start below is moved to an hour of its own
    rng = random.Random(7)
    # A few distinct DEBUG paddings, reused: the starts differ in their pids.
    paddings = [_debug_lines(rng, [2411, 2412], ts, per_start) for _ in range(4)]
    error_lines = sum(" ERROR " in ln for ln in lines)
    stats = {"lines": 0, "traceback_lines": 0, "engine_lines": 0, "requests": 0, "starts": 0}
    written = 0
    k = 0
    while written < size:
        shift = 10_000 * k

        def bump(m: re.Match) -> str:
            return f"pid={int(m.group(1)) + shift}"

        text = pid_re.sub(bump, before) + pid_re.sub(bump, paddings[k % len(paddings)]) + pid_re.sub(bump, after)
        text = text.replace("09-24 10:", _hour(k) + ":")
        data = text.encode()
        f.write(data)
        written += len(data)
        stats["lines"] += _count_lines(text)
        stats["traceback_lines"] += error_lines  # the failure's ERROR record lines
        stats["starts"] += 1
        k += 1
    return stats


def write(scenario: str, path: Path, size: int, starts_per_gib: int = 400) -> dict:
    """Write `scenario` to `path` (at least `size` bytes); returns what it is made of."""
    with open(path, "wb") as f:
        if scenario == "serving":
            stats = _write_serving(f, size, tb_share=0.01, engine_share=0.0)
        elif scenario == "engine-lines":
            stats = _write_serving(f, size, tb_share=0.01, engine_share=0.25)
        elif scenario == "crash-loop":
            stats = _write_crash_loop(f, size, starts_per_gib)
        else:
            raise ValueError(f"unknown scenario {scenario!r} (one of {', '.join(SCENARIOS)})")
        stats["bytes"] = f.tell()
    return stats


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from dsv4ctl.units import parse_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("path")
    parser.add_argument("--size", default="1GiB")
    args = parser.parse_args(argv)
    print(json.dumps(write(args.scenario, Path(args.path), parse_size(args.size)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
