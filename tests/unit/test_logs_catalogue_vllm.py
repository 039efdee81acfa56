"""The `vllm` part of diagnose's catalogue (dsv4ctl/catalogue/signatures_vllm.py): what vLLM itself raises at startup.

One fixture per wording (tests/fixtures/logs/catalogue/vllm_<id>[__<wording>].log, written by vllm_generate.py
there). The tests that need no splice check each signature on its fixtures line by line; the diagnose tests run
the real `diagnose` and are expected to fail only until the module is part of CATALOGUE. Where the vLLM
sources are unpacked (/work/wheels/src/vllm-<version>/), every cited `file:line` is checked to hold the message.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from dsv4ctl.diagnosis.evidence import fill
from dsv4ctl.logs import prefilter
from dsv4ctl.advice import diagnose
from dsv4ctl.logs.reader import iter_log_lines
from dsv4ctl.catalogue.signatures import BY_ID, CATALOGUE, DERIVED
from dsv4ctl.catalogue.signatures_vllm import SIGNATURES

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE_DIR = ROOT / "tests" / "fixtures" / "logs" / "catalogue"
WHEELS = Path("/work/wheels/src")
OURS = {s.id: s for s in SIGNATURES}
SPLICED = all(s.id in BY_ID for s in SIGNATURES)
until_splice = pytest.mark.xfail(not SPLICED, strict=False, reason="until the catalogue splice")

# fixture stem -> line number of the line that holds the cause (the first evidence line)
EVIDENCE_LINE = {
    "vllm_batched_tokens_below_max_model_len": 40,
    "vllm_batched_tokens_below_max_num_seqs": 39,
    "vllm_bf16_unsupported_gpu": 17,
    "vllm_chat_template_missing": 23,
    "vllm_cudagraph_mode_unsupported__full": 25,
    "vllm_cudagraph_mode_unsupported__full_decode": 21,
    "vllm_cudagraph_sizes_spec_decode": 27,
    "vllm_engine_startup_timeout": 48,
    "vllm_expert_parallel_not_moe": 39,
    "vllm_frontend_handshake_timeout": 15,
    "vllm_max_model_len_exceeds_model": 39,
    "vllm_model_architecture_unsupported": 39,
    "vllm_model_inspection_failed": 52,
    "vllm_model_path_invalid": 39,
    "vllm_pipeline_parallel_unsupported": 42,
    "vllm_prompt_too_long__context_v027": 9,
    "vllm_prompt_too_long__context_v033": 23,
    "vllm_prompt_too_long__decoder_prompt": 11,
    "vllm_prompt_too_long__plus_output": 9,
    "vllm_quantization_gpu_unsupported": 39,
    "vllm_quantization_mismatch": 39,
    "vllm_quantization_unknown": 39,
    "vllm_reasoning_parser_unknown": 19,
    "vllm_request_rejected__bad_request": 9,
    "vllm_request_rejected__model": 23,
    "vllm_rpc_timeout": 36,
    "vllm_tool_call_parser_unknown": 21,
    "vllm_tp_heads_not_divisible": 40,
    "vllm_trust_remote_code_required__config": 44,
    "vllm_trust_remote_code_required__tokenizer": 40,
    "vllm_world_size_exceeds_gpus": 39,
    "vllm_quantization_dtype_unsupported": 39,
    "vllm_model_architecture_removed__until": 39,
    "vllm_model_architecture_removed__plugin": 39,
    "vllm_model_weights_missing": 29,
    "vllm_weights_not_initialized": 24,
}

# id -> the cited source lines: (version, path under vllm-<version>/, line, a fragment of the message on that line)
SOURCE_LINES: dict[str, list[tuple[str, str, int, str]]] = {
    "max_model_len_exceeds_model": [
        ("0.33.0", "vllm/config/model.py", 2664, 'f"User-specified max_model_len ({max_model_len}) is greater "'),
        ("0.27.1", "vllm/config/model.py", 2363, 'f"User-specified max_model_len ({max_model_len}) is greater "'),
    ],
    "tp_heads_not_divisible": [
        ("0.33.0", "vllm/config/model.py", 1562, '" must be divisible by tensor parallel size "'),
        ("0.27.1", "vllm/config/model.py", 1318, '" must be divisible by tensor parallel size "'),
    ],
    "pipeline_parallel_unsupported": [
        ("0.33.0", "vllm/config/model.py", 1574, "Pipeline parallelism is not supported for this model."),
        ("0.27.1", "vllm/config/model.py", 1330, "Pipeline parallelism is not supported for this model."),
    ],
    "expert_parallel_not_moe": [
        ("0.33.0", "vllm/config/model.py", 1502, '"when expert parallelism is enabled."'),
        ("0.27.1", "vllm/config/model.py", 1266, '"when expert parallelism is enabled."'),
    ],
    "batched_tokens_below_max_model_len": [
        ("0.33.0", "vllm/config/scheduler.py", 324, 'f"smaller than max_model_len ({max_model_len}). "'),
        ("0.27.1", "vllm/config/scheduler.py", 256, 'f"smaller than max_model_len ({max_model_len}). "'),
    ],
    "batched_tokens_below_max_num_seqs": [
        ("0.33.0", "vllm/config/scheduler.py", 334, '"be greater than or equal to max_num_seqs "'),
        ("0.27.1", "vllm/config/scheduler.py", 266, '"be greater than or equal to max_num_seqs "'),
    ],
    "quantization_unknown": [
        ("0.33.0", "vllm/config/model.py", 1467, 'f"Unknown quantization method: {self.quantization}. Must "'),
        ("0.27.1", "vllm/config/model.py", 1203, 'f"Unknown quantization method: {self.quantization}. Must "'),
    ],
    "quantization_mismatch": [
        ("0.33.0", "vllm/config/model.py", 1459, 'f"({quant_method}) does not match the quantization "'),
        ("0.27.1", "vllm/config/model.py", 1195, 'f"({quant_method}) does not match the quantization "'),
    ],
    "quantization_gpu_unsupported": [
        ("0.33.0", "vllm/config/vllm.py", 933, '"is not supported for the current GPU. Minimum "'),
        ("0.27.1", "vllm/config/vllm.py", 723, '"is not supported for the current GPU. Minimum "'),
    ],
    "bf16_unsupported_gpu": [
        ("0.33.0", "vllm/platforms/cuda.py", 651, '"Bfloat16 is only supported on GPUs "'),
        ("0.27.1", "vllm/platforms/cuda.py", 625, '"Bfloat16 is only supported on GPUs "'),
    ],
    "model_architecture_unsupported": [
        ("0.33.0", "vllm/model_executor/models/registry.py", 1250, 'f"Model architectures {architectures} are not supported for now. "'),
        ("0.27.1", "vllm/model_executor/models/registry.py", 1132, 'f"Model architectures {architectures} are not supported for now. "'),
    ],
    "model_inspection_failed": [
        ("0.33.0", "vllm/model_executor/models/registry.py", 1227, '"to be inspected. Please check the logs for more details."'),
        ("0.27.1", "vllm/model_executor/models/registry.py", 1109, '"to be inspected. Please check the logs for more details."'),
    ],
    "trust_remote_code_required": [
        ("0.33.0", "vllm/transformers_utils/config.py", 458, '"Failed to load the model config. If the model "'),
        ("0.27.1", "vllm/transformers_utils/config.py", 329, '"Failed to load the model config. If the model "'),
        ("0.33.0", "vllm/tokenizers/hf.py", 200, '"Failed to load the tokenizer. If the tokenizer "'),
        ("0.27.1", "vllm/tokenizers/hf.py", 227, '"Failed to load the tokenizer. If the tokenizer "'),
    ],
    "model_path_invalid": [
        ("0.33.0", "vllm/transformers_utils/config.py", 912, '"Invalid repository ID or local directory specified:"'),
        ("0.27.1", "vllm/transformers_utils/config.py", 715, '"Invalid repository ID or local directory specified:"'),
    ],
    "cudagraph_mode_unsupported": [
        ("0.33.0", "vllm/config/compilation.py", 1407, '"; please try cudagraph_mode=PIECEWISE, and "'),
        ("0.33.0", "vllm/config/compilation.py", 1489, 'f"CUDAGraphMode.{cudagraph_mode.name} is not "'),
        ("0.27.1", "vllm/config/compilation.py", 1399, '"; please try cudagraph_mode=PIECEWISE, and "'),
        ("0.27.1", "vllm/config/compilation.py", 1467, 'f"CUDAGraphMode.{cudagraph_mode.name} is not "'),
    ],
    "cudagraph_sizes_spec_decode": [
        ("0.33.0", "vllm/config/compilation.py", 1557, 'f"No valid cudagraph sizes after rounding to multiple of {multiple_of} "'),
        ("0.27.1", "vllm/config/compilation.py", 1555, 'f"No valid cudagraph sizes after rounding to multiple of {multiple_of} "'),
    ],
    "engine_startup_timeout": [
        ("0.33.0", "vllm/v1/engine/core_client.py", 765, 'f"Timed out waiting for engine core processes to "'),
        ("0.27.1", "vllm/v1/engine/core_client.py", 659, 'f"Timed out waiting for engine core processes to "'),
    ],
    "frontend_handshake_timeout": [
        ("0.33.0", "vllm/v1/engine/core.py", 1422, '"Did not receive response from front-end "'),
        ("0.27.1", "vllm/v1/engine/core.py", 1255, '"Did not receive response from front-end "'),
    ],
    "rpc_timeout": [
        ("0.33.0", "vllm/v1/executor/multiproc_executor.py", 509, 'raise TimeoutError(f"RPC call to {method} timed out.")'),
        ("0.27.1", "vllm/v1/executor/multiproc_executor.py", 403, 'raise TimeoutError(f"RPC call to {method} timed out.")'),
    ],
    "tool_call_parser_unknown": [
        ("0.33.0", "vllm/entrypoints/common/cli_args.py", 621, 'f"invalid tool call parser: {args.tool_call_parser} "'),
        ("0.27.1", "vllm/entrypoints/openai/api_server.py", 606, 'f"invalid tool call parser: {args.tool_call_parser} "'),
    ],
    "reasoning_parser_unknown": [
        ("0.33.0", "vllm/entrypoints/common/cli_args.py", 630, 'f"invalid reasoning parser: {reasoning_parser} "'),
        ("0.27.1", "vllm/entrypoints/openai/api_server.py", 615, 'f"invalid reasoning parser: {reasoning_parser} "'),
    ],
    "prompt_too_long": [
        ("0.33.0", "vllm/renderers/params.py", 544, 'f"This model\'s maximum context length is "'),
        ("0.27.1", "vllm/renderers/params.py", 450, 'f"This model\'s maximum context length is "'),
        ("0.33.0", "vllm/v1/engine/input_processor.py", 590, 'f"longer than the maximum model length of {max_prompt_len}. "'),
        ("0.27.1", "vllm/v1/engine/input_processor.py", 429, 'f"longer than the maximum model length of {max_prompt_len}. "'),
        ("0.33.0", "vllm/v1/engine/input_processor.py", 600, 'f"requested output tokens (at least 1) is longer than the maximum "'),
        ("0.27.1", "vllm/v1/engine/input_processor.py", 439, 'f"requested output tokens (at least 1) is longer than the maximum "'),
    ],
    "world_size_exceeds_gpus": [
        ("0.33.0", "vllm/config/parallel.py", 1072, 'f"World size ({self.world_size}) is larger than the number of "'),
        ("0.27.1", "vllm/config/parallel.py", 929, 'f"World size ({self.world_size}) is larger than the number of "'),
    ],
    "quantization_dtype_unsupported": [
        ("0.33.0", "vllm/config/vllm.py", 940, 'f"{model_config.dtype} is not supported for quantization "'),
        ("0.27.1", "vllm/config/vllm.py", 730, 'f"{model_config.dtype} is not supported for quantization "'),
    ],
    "model_architecture_removed": [
        ("0.33.0", "vllm/model_executor/models/registry.py", 1236, 'f"v{previous_version}, and is not supported anymore. "'),
        ("0.27.1", "vllm/model_executor/models/registry.py", 1118, 'f"v{previous_version}, and is not supported anymore. "'),
        ("0.33.0", "vllm/model_executor/models/registry.py", 1244, 'f"Model architecture {arch} is not supported in-tree anymore. "'),
        ("0.27.1", "vllm/model_executor/models/registry.py", 1126, 'f"Model architecture {arch} is not supported in-tree anymore. "'),
    ],
    "model_weights_missing": [
        ("0.33.0", "vllm/model_executor/model_loader/default_loader.py", 260, 'f"Cannot find any model weights with `{model_name_or_path}`"'),
        ("0.27.1", "vllm/model_executor/model_loader/default_loader.py", 239, 'f"Cannot find any model weights with `{model_name_or_path}`"'),
    ],
    "weights_not_initialized": [
        ("0.33.0", "vllm/model_executor/model_loader/default_loader.py", 570, '"Following weights were not initialized from "'),
        ("0.27.1", "vllm/model_executor/model_loader/default_loader.py", 468, '"Following weights were not initialized from "'),
    ],
    "chat_template_missing": [
        ("0.33.0", "vllm/renderers/hf.py", 886, '"As of transformers v4.44, default chat template is no longer "'),
        ("0.27.1", "vllm/renderers/hf.py", 718, '"As of transformers v4.44, default chat template is no longer "'),
    ],
    "request_rejected": [
        ("0.33.0", "vllm/entrypoints/openai/chat_completion/serving.py", 280, '"Error with model %s"'),
        ("0.27.1", "vllm/entrypoints/openai/chat_completion/serving.py", 208, '"Error with model %s"'),
        ("0.33.0", "vllm/v1/engine/async_llm.py", 826, '"Request %s failed (bad request): %s."'),
        ("0.27.1", "vllm/v1/engine/async_llm.py", 627, '"Request %s failed (bad request): %s."'),
    ],
}

HEALTHY = [
    ROOT / "tests" / "fixtures" / "logs" / "healthy_explicit_len.log",
    ROOT / "tests" / "fixtures" / "logs" / "real_v032_cpu_healthy.log",
    ROOT / "dsv4ctl" / "examples" / "healthy.log",
]
SOURCE_ENTRY = re.compile(r"^vllm==(?P<version>[0-9]+\.[0-9]+\.[0-9]+) (?P<path>vllm/\S+\.py):(?P<line>[0-9]+)$")


def _fixtures() -> list[Path]:
    return sorted(CATALOGUE_DIR.glob("vllm_*.log"))


def _expected_id(path: Path) -> str:
    return path.stem[len("vllm_"):].split("__")[0]


def _matches(path: Path):
    """(line, [ids of our signatures matching it]) for every line one of them matches."""
    out = []
    for line in iter_log_lines([path]):
        ids = [s.id for s in SIGNATURES if s.match(line.message)]
        if ids:
            out.append((line, ids))
    return out


def _placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_fixture_is_listed_and_names_a_signature():
    stems = [p.stem for p in _fixtures()]
    assert sorted(stems) == sorted(EVIDENCE_LINE)
    for p in _fixtures():
        assert _expected_id(p) in OURS, p.name


def test_every_signature_has_a_fixture_and_a_unique_id():
    covered = {_expected_id(p) for p in _fixtures()}
    assert covered == set(OURS)
    assert len(OURS) == len(SIGNATURES) >= 16
    existing = {s.id for s in CATALOGUE + DERIVED} - set(OURS)
    assert not set(OURS) & existing
    for s in SIGNATURES:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", s.id), s.id


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_only_the_intended_signature_matches_and_it_matches_the_cause_line(path):
    want = _expected_id(path)
    hits = _matches(path)
    assert hits, "no signature of the vllm part matches this fixture"
    for line, ids in hits:
        assert ids == [want], (line.lineno, ids, line.message[:120])
        # Every line a signature matches is one the prefilter hands to diagnose.
        assert prefilter.line_matches(line.raw), (line.lineno, line.raw[:120])
    first = hits[0][0]
    assert first.lineno == EVIDENCE_LINE[path.stem]
    # The catalogue's existing signatures do not claim the cause line: no duplicate wording.
    assert [s.id for s in CATALOGUE if s.id not in OURS and s.match(first.message)] == []
    # The meaning fills from the first match; so does at least one action (diagnose drops an action whose
    # placeholders the log does not fill, e.g. the plugin URL of the other wording).
    sig = OURS[want]
    details = sig.match(first.message).groupdict()
    sig.meaning.format(**details)
    filled = [fill(a, details) for a in sig.actions if _placeholders(a) <= set(details)]
    assert filled and all("{" not in a or '"' in a for a in filled)


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_fixture_headers_are_not_log_lines(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ") and "vLLM 0." in lines[0]
    for line in lines:
        if line.startswith("#"):
            assert not prefilter.line_matches(line), line


def test_placeholders_are_named_groups_and_the_meaning_always_fills():
    for s in SIGNATURES:
        groups = [set(rx.groupindex) for rx in s.compiled]
        always = set.intersection(*groups)
        assert _placeholders(s.meaning) <= always, s.id
        for action in s.actions:
            # diagnose always provides the model and the launch's own flags (`_serve_flags`, …).
            assert _placeholders(action) <= set.union(*groups) | {"model", "_serve_flags", "_serve_all", "_fit_flags"}, (
                s.id, action)


def test_no_signature_matches_a_healthy_start():
    for path in HEALTHY:
        for line in iter_log_lines([path]):
            assert [s.id for s in SIGNATURES if s.match(line.message)] == [], (path.name, line.lineno)


def test_roles_tiers_and_severities():
    for s in SIGNATURES:
        assert s.role in ("cause", "symptom", "request"), s.id
        assert s.severity == ("warning" if s.role == "request" else "critical"), s.id
        assert s.tier in (0, 1)
        assert s.actions, s.id
        for action in s.actions:
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", action):
                assert flag in VLLM_FLAGS, (s.id, flag)


# Every flag an action names, as vLLM 0.27.1-0.33.0 spell them (engine/arg_utils.py and the API server's cli_args.py).
VLLM_FLAGS = {
    "--max-model-len", "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
    "--enable-expert-parallel", "--max-num-batched-tokens", "--max-num-seqs", "--no-enable-chunked-prefill",
    "--enable-chunked-prefill", "--quantization", "--dtype", "--trust-remote-code", "--compilation-config",
    "--attention-backend", "--enforce-eager", "--data-parallel-address", "--data-parallel-rpc-port",
    "--tool-call-parser", "--reasoning-parser", "--chat-template", "--speculative-config",
    "--distributed-executor-backend", "--nnodes",
}


def test_sources_cite_version_file_and_line():
    for s in SIGNATURES:
        entries = [e.strip() for e in s.source.split(";")]
        parsed = []
        for e in entries:
            m = SOURCE_ENTRY.match(e)
            assert m, (s.id, e)
            parsed.append((m["version"], m["path"], int(m["line"])))
        assert sorted(parsed) == sorted((v, p, n) for v, p, n, _ in SOURCE_LINES[s.id]), s.id


@pytest.mark.skipif(not WHEELS.is_dir(), reason="the vLLM sources are not unpacked here")
def test_cited_lines_hold_the_message():
    checked = 0
    for sid, entries in SOURCE_LINES.items():
        for version, path, line, fragment in entries:
            root = WHEELS / f"vllm-{version}"
            if not root.is_dir():
                continue
            text = (root / path).read_text(encoding="utf-8").splitlines()
            assert fragment in text[line - 1], (sid, version, path, line, text[line - 1])
            checked += 1
    assert checked


@until_splice
@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_diagnose_names_the_cause(path):
    want = _expected_id(path)
    sig = OURS[want]
    d = diagnose([path])
    if sig.role == "request":
        # A rejected request leaves the server up: the start stays healthy, the finding is reported.
        assert d.verdict == "healthy"
        found = [f for f in d.findings if f.id == want or f.details.get("classified_as") == want]
        assert found and found[0].evidence[0].line == EVIDENCE_LINE[path.stem]
        return
    assert d.verdict == "failed"
    if sig.role == "symptom":
        # A wrapper: the error it wraps (quoted above it) is the better root cause.
        found = [f for f in d.findings if f.id == want]
        assert found and found[0].evidence[0].line == EVIDENCE_LINE[path.stem]
        return
    assert d.root_cause is not None and d.root_cause.id == want
    assert d.findings[0].id == want
    assert d.findings[0].evidence[0].line == EVIDENCE_LINE[path.stem]
