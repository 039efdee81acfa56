"""`dsv4ctl fit-length` through the CLI: JSON contract, human output, exit codes, fast start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fitkit import FLASH, PRO, no_hf_cache  # noqa: F401 - autouse fixture

from dsv4ctl.errors import ExitCode

REQUIRED_KEYS = {
    "schema_version": int,
    "model_max_model_len": int,
    "autofit_max_model_len": int,
    "will_shrink": bool,
    "recommended_max_model_len": int,
    "kv_cache_memory_bytes": int,
    "bytes_per_block": int,
    "what_if": list,
    "vllm_flags": list,
    "warnings": list,
}


def run_json(cli, *args):
    result = cli("fit-length", *args, "--json")
    return result, json.loads(result.stdout)


def test_json_contract_flash_at_9_81_gib(cli):
    result, data = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB")
    assert result.exit_code == 0
    for key, kind in REQUIRED_KEYS.items():
        assert isinstance(data[key], kind), key
    assert data["schema_version"] == 1
    assert data["model_max_model_len"] == 1_048_576
    assert data["kv_cache_memory_bytes"] == 10_533_407_294  # ceil(9.81 * 2**30)
    assert data["max_num_batched_tokens"] == 8192  # vLLM's default on H100/H200-class GPUs
    assert data["autofit_max_model_len"] == 979_456
    assert data["will_shrink"] is True and data["shrink_tokens"] == 1_048_576 - 979_456
    assert data["verdict"] == "shrinks" and data["fits"] is True
    rec = data["recommended_max_model_len"]
    assert 393_216 <= rec < data["autofit_max_model_len"]
    assert rec % 1024 == 0
    assert data["bytes_per_block"] == 1_002_240
    assert data["vllm_flags"][:2] == ["--max-model-len", str(rec)]
    assert data["vllm_command"].startswith(f"vllm serve {FLASH} --max-model-len {rec}")
    rows = {row["max_num_batched_tokens"]: row for row in data["what_if"]}
    assert rows[2048]["autofit_max_model_len"] == 1_048_576
    assert rows[8192]["current"] is True and rows[8192]["autofit_max_model_len"] == 979_456
    assert rows[2048]["full_context_kv_memory_bytes"] < rows[8192]["full_context_kv_memory_bytes"]
    assert result.stderr == ""  # JSON mode: notes and warnings live in the document


@pytest.mark.parametrize(
    "text, expected",
    [("10G", 10 << 30), ("10g", 10 * 10**9), ("9.81GiB", 10_533_407_294), ("64GB", 64 * 10**9), ("123456789", 123456789)],
)
def test_kv_cache_memory_reads_like_vllms_flag(cli, text, expected):
    _, data = run_json(cli, FLASH, "--kv-cache-memory-bytes", text)
    assert data["kv_cache_memory_bytes"] == expected


def test_recommendation_survives_its_margin(cli):
    """Start vLLM with the recommended length and the margin gone: it must still be admitted."""
    _, data = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB")
    tighter = data["kv_cache_memory_bytes"] - data["margin_bytes"]
    result, again = run_json(
        cli, FLASH, "--kv-cache-memory", str(tighter), "--max-model-len", str(data["recommended_max_model_len"])
    )
    assert result.exit_code == 0 and again["fits"] is True


def test_full_context_fits_with_room(cli):
    result, data = run_json(cli, FLASH, "--kv-cache-memory", "40GiB")
    assert result.exit_code == 0
    assert data["verdict"] == "fits" and data["will_shrink"] is False
    assert data["autofit_max_model_len"] == data["recommended_max_model_len"] == 1_048_576


def test_margin_and_batched_tokens_move_the_answer(cli):
    _, small = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB", "--margin", "2GiB")
    _, default = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB")
    _, chunked = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB", "--max-num-batched-tokens", "2048")
    _, sync = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB", "--no-async-scheduling")
    assert small["recommended_max_model_len"] < default["recommended_max_model_len"]
    assert small["margin_bytes"] == 2 << 30
    assert chunked["autofit_max_model_len"] == 1_048_576
    assert sync["max_in_flight_tokens"] == 8192 and "--no-async-scheduling" in sync["vllm_flags"]
    assert sync["autofit_max_model_len"] > default["autofit_max_model_len"]


def test_think_max_warning_below_393k(cli):
    result, data = run_json(cli, PRO, "--kv-cache-memory", "6GiB")
    assert data["recommended_max_model_len"] < 393_216
    assert data["think_max_ok"] is False
    assert any("Think Max" in w for w in data["warnings"])


def test_does_not_fit_exits_6(cli):
    result, data = run_json(cli, FLASH, "--kv-cache-memory", "4MiB")
    assert result.exit_code == ExitCode.DOES_NOT_FIT
    assert data["fits"] is False and data["verdict"] == "does_not_fit"
    assert data["refusal"].startswith("Cannot auto-fit max_model_len")


def test_explicit_length_that_cannot_fit_exits_6(cli):
    result, data = run_json(cli, FLASH, "--kv-cache-memory", "9GiB", "--max-model-len", "1M")
    assert result.exit_code == ExitCode.DOES_NOT_FIT
    assert data["requested_max_model_len"] == 1_048_576
    assert "To serve at least one request with the model's max seq len (1048576)" in data["refusal"]
    assert "the estimated maximum model length is" in data["refusal"]
    too_long = cli("fit-length", FLASH, "--kv-cache-memory", "90GiB", "--max-model-len", "2M")
    assert too_long.exit_code == ExitCode.DOES_NOT_FIT
    assert "greater than the derived max_model_len" in too_long.stdout


def test_human_output(cli):
    # 0.30: a release whose shrunk auto-fit crashes without the fix, so the shrink is a warning there.
    result = cli("fit-length", FLASH, "--kv-cache-memory", "9.81GiB", "--vllm-version", "0.30.0")
    assert result.exit_code == 0
    assert "979,456" in result.stdout and "recommended --max-model-len" in result.stdout
    assert "What if" in result.stdout and "vllm serve deepseek-ai/DeepSeek-V4-Flash --max-model-len" in result.stdout
    assert "Warning:" in result.stderr and "Note:" in result.stderr  # talk goes to stderr


def test_refusal_in_human_output(cli):
    result = cli("fit-length", FLASH, "--kv-cache-memory", "4MiB")
    assert result.exit_code == ExitCode.DOES_NOT_FIT
    assert "vLLM would refuse: Cannot auto-fit" in result.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be in (0, 1]"),
        (["--block-size", "128"], "support only block size 256"),
        (["--kv-cache-dtype", "bfloat16"], "only supports an fp8 KV cache"),
        (["--kv-cache-memory", "-3GiB"], "invalid --kv-cache-memory"),
        (["--kv-cache-memory", "0"], "--kv-cache-memory must be positive"),
        (["--kv-cache-memory", "900TiB"], "is not a per-GPU figure"),
        (["--max-model-len", "12x"], "invalid length"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be between 1"),
        (["--tensor-parallel-size", "0"], "--tensor-parallel-size must be between 1"),
        (["--margin", "150%"], "invalid margin"),
        (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'], "is not modelled"),
        (["--speculative-config", "nope"], "--speculative-config must be JSON"),
        (["--attention-backend", "TRITON_MLA"], "is not a DeepSeek-V4 attention backend"),
        (["--kv-cache-memory", "9.81G"], "no decimals with binary suffixes"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(cli, args, fragment):
    base = [] if "--kv-cache-memory" in args else ["--kv-cache-memory", "9.81GiB"]
    result = cli("fit-length", FLASH, *base, *args)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert fragment in result.stderr.splitlines()[0]
    assert "Traceback" not in result.output and result.stdout == ""


def test_unreadable_model_is_exit_1(cli, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen2", "num_hidden_layers": 4}')
    result = cli("fit-length", str(tmp_path), "--kv-cache-memory", "9GiB")
    assert result.exit_code == ExitCode.ERROR
    assert result.stderr.startswith("Error: ") and "not a DeepSeek-V4 model" in result.stderr
    missing = cli("fit-length", str(tmp_path / "nope.json"), "--kv-cache-memory", "9GiB")
    assert missing.exit_code == ExitCode.ERROR and "no such file" in missing.stderr


def test_mtp_adds_a_draft_layer(cli):
    _, plain = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB")
    _, mtp = run_json(cli, FLASH, "--kv-cache-memory", "9.81GiB", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')
    assert mtp["num_kv_layers"] == plain["num_kv_layers"] + 1
    assert mtp["autofit_max_model_len"] <= plain["autofit_max_model_len"]
    assert '{"method": "mtp", "num_speculative_tokens": 1}' in mtp["vllm_flags"]


def test_fast_path_imports_no_engine_and_no_nvml():
    code = (
        "import sys\n"
        "from dsv4ctl.cli import main\n"
        "rc = main(['fit-length', 'deepseek-ai/DeepSeek-V4-Pro', '--kv-cache-memory', '20GiB', '--json'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch', 'pynvml'))\n"
        "print('HEAVY', heavy, 'RC', rc, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY [] RC 0" in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["model_max_model_len"] == 1_048_576


@pytest.mark.parametrize("margin, expected", [("1GiB", 1 << 30), (0.2, None), (3 << 30, 3 << 30), ("10%", None)])
def test_library_margin_forms(margin, expected):
    from dsv4ctl.planning import FitRequest, plan_fit

    memory = 17 << 30  # the full context needs 16.27 GiB at 16,384 batched tokens
    result = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=memory, margin=margin, max_num_batched_tokens=16384))
    if expected is None:
        fraction = margin if isinstance(margin, float) else 0.10
        expected = int(memory * fraction)
    assert result.margin_bytes == expected
    assert result.autofit_max_model_len == 1_048_576
    assert result.recommended_max_model_len < result.autofit_max_model_len  # the margin does not hold the full context
