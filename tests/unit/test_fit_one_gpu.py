"""fit-length tells the truth when the checkpoint does not fit: no negative size, no range that runs
backwards, no auto-fit that contradicts the refusal, in any output (stdout, stderr, JSON); every note
wrapped at the terminal's width, a printed command kept on one line.

One case as a new user meets it (the whole 160 GB DeepSeek-V4-Flash checkpoint on one H200), then the same
properties over random checkpoint sizes, GPU counts and budgets (hypothesis).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl.gpu import save_snapshot
from fitkit import h200, snapshot

REPO = Path(__file__).resolve().parents[2]
ONE_H200 = REPO / "tests" / "fixtures" / "gpus" / "h200-snapshot.json"
FLASH = "deepseek-ai/DeepSeek-V4-Flash"
WIDTH = 80

NEGATIVE = re.compile(r"(?<![\w.\-])-\d")  # "-26.39", "–-22.39"; never a flag ("--max-model-len") or a name ("-V4")
NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
RANGE = re.compile(NUMBER + r"\s*(?:GiB|GB|tokens)?\s*–\s*" + NUMBER)
COMMAND = re.compile(r"^\s*(?:[A-Z][A-Z0-9_]*=\S+ )*(?:vllm serve|dsv4ctl [a-z-]+) ")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def text_problems(text: str) -> list[str]:
    problems = []
    for line in text.splitlines():
        if NEGATIVE.search(line):
            problems.append(f"negative number: {line}")
        for low, high in RANGE.findall(line):
            if _num(low) > _num(high):
                problems.append(f"range runs backwards ({low}–{high}): {line}")
        if len(line) > WIDTH and not COMMAND.match(line):
            problems.append(f"{len(line)} columns: {line}")
    return problems


def json_problems(doc: dict) -> list[str]:
    problems = []

    def walk(value, path):
        if isinstance(value, dict):
            low, high = value.get("low"), value.get("high")
            if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
                problems.append(f"{path}: low {low} > high {high}")
            for key, item in value.items():
                walk(item, f"{path}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            problems.append(f"{path}: negative {value}")
        elif isinstance(value, str):
            problems.extend(f"{path}: {p}" for p in text_problems(value) if not p[0].isdigit())

    walk(doc, "$")
    autofit_range = doc.get("autofit_range")
    if autofit_range:
        if autofit_range[0] > autofit_range[1]:
            problems.append(f"autofit_range runs backwards: {autofit_range}")
        kv = doc.get("available_kv_bytes") or {}
        if autofit_range[1] > 0 and not doc.get("fits") and kv.get("high", 1) <= 0:
            problems.append(f"auto-fit {autofit_range} where even the high end of the KV memory is none")
    return problems


def run(cli, *args):
    text = cli("fit-length", *args, env={"COLUMNS": str(WIDTH)})
    doc = cli("fit-length", *args, "--json", env={"COLUMNS": str(WIDTH)})
    return text, doc


def test_the_whole_flash_checkpoint_on_one_h200(cli):
    text, doc = run(cli, FLASH, "--checkpoint-size", "160GB", "--gpus", str(ONE_H200))
    assert text.exit_code == doc.exit_code == 6
    assert text_problems(text.stdout) == [] and text_problems(text.stderr) == []
    assert text_problems(doc.stderr) == []
    parsed = json.loads(doc.stdout)
    assert json_problems(parsed) == []
    assert parsed["autofit_max_model_len"] == 0 and parsed["autofit_range"] in (None, [0, 0])
    assert "KV memory per GPU: none" in text.stderr and "exceed the budget by" in text.stderr


def test_a_printed_command_stays_one_line(cli):
    """A note that ends with a command: the prose wraps, the command has a line of its own."""
    from io import StringIO

    from rich.console import Console

    from dsv4ctl.render import print_note

    out = StringIO()
    command = "vllm serve deepseek-ai/DeepSeek-V4-Flash --max-model-len 65536 --tensor-parallel-size 8 --kv-cache-dtype fp8"
    print_note(Console(file=out, width=WIDTH), "Note:", "a long explanation of why the length changes " * 3 + command)
    lines = out.getvalue().splitlines()
    assert lines[-1].strip() == command
    assert all(len(line) <= WIDTH for line in lines[:-1])


def _snapshot_file(tmp_path: Path, count: int, free_gib: int) -> Path:
    path = tmp_path / f"h200x{count}-{free_gib}.json"
    if not path.exists():
        save_snapshot(snapshot(*(h200(i, free=free_gib << 30) for i in range(count))), path)
    return path


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    checkpoint_gb=st.integers(min_value=1, max_value=2400),
    gpus=st.sampled_from([1, 2, 4, 8]),
    tp_share=st.sampled_from([1, 2, 4, 8]),
    utilization=st.sampled_from([None, "0.5", "0.8", "0.92", "0.95"]),
    kv_memory=st.sampled_from([None, "1GiB", "20GiB"]),
    free_gib=st.sampled_from([139, 100, 40]),
)
def test_no_output_contradicts_itself(cli, tmp_path, checkpoint_gb, gpus, tp_share, utilization, kv_memory, free_gib):
    tp = min(tp_share, gpus)
    args = [FLASH, "--checkpoint-size", f"{checkpoint_gb}GB", "--gpus", str(_snapshot_file(tmp_path, gpus, free_gib)),
            "--tensor-parallel-size", str(tp)]
    if utilization:
        args += ["--gpu-memory-utilization", utilization]
    if kv_memory:
        args += ["--kv-cache-memory", kv_memory]
    text, doc = run(cli, *args)
    assert text.exit_code == doc.exit_code and text.exit_code in (0, 6), text.stderr
    assert text_problems(text.stdout) == [], args
    assert text_problems(text.stderr) == [], args
    assert text_problems(doc.stderr) == [], args
    assert json_problems(json.loads(doc.stdout)) == [], args
