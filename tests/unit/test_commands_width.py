"""80 and 120 columns: commands on their own lines whole, prose wrapped with its indent, evidence cut
around (never through) its numbers."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from dsv4ctl.render import NUMBER_RE, cut_around, print_command, print_prose, wrap_prose

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures" / "gpus" / "h200-snapshot.json"
WIDTHS = (80, 120)


def _run(cli, width: int, *args: str):
    return cli(*args, env={"COLUMNS": str(width), "NO_COLOR": "1"})


def _column0_starts(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines() if line and not line[0].isspace()]


def _assert_fits(text: str, width: int, commands: list[str]) -> None:
    for line in text.splitlines():
        if len(line) <= width or any(c in line for c in commands):
            continue
        # Only an unbreakable word (a path, a flag list) may run past the width.
        assert any(len(word) > width // 2 for word in line.split()), f"too wide at {width}: {line!r}"


@pytest.mark.parametrize("width", WIDTHS)
def test_fit_length(cli, width):
    command = json.loads(cli("fit-length", FLASH, "--kv-cache-memory", "9.81GiB", "--json").stdout)["vllm_command"]
    text = _run(cli, width, "fit-length", FLASH, "--kv-cache-memory", "9.81GiB").stdout
    assert f"  {command}" in text.splitlines()  # whole, on its own line
    _assert_fits(text, width, [command])


def test_fit_length_prose_keeps_its_indent(cli):
    narrow = _run(cli, 80, "fit-length", FLASH, "--kv-cache-memory", "9.81GiB").stdout
    wide = _run(cli, 200, "fit-length", FLASH, "--kv-cache-memory", "9.81GiB").stdout
    # Wrapping adds only indented continuation lines: the lines that start at column 0 are the same.
    assert _column0_starts(narrow) == _column0_starts(wide)


@pytest.mark.parametrize("width", WIDTHS)
def test_gpus_snapshot_figures_never_cut(cli, width):
    text = _run(cli, width, "gpus", "--snapshot", str(SNAPSHOT)).stdout
    doc = json.loads(cli("gpus", "--snapshot", str(SNAPSHOT), "--json").stdout)
    assert doc["devices"][0]["uuid"] in text
    assert "…" not in text


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_wraps_under_its_value_column(cli, width, tmp_path):
    text = _run(cli, width, "doctor", "--python", str(tmp_path / "no-python")).stdout
    _assert_fits(text, width, [])
    wide = _run(cli, 400, "doctor", "--python", str(tmp_path / "no-python")).stdout
    assert _column0_starts(text) == _column0_starts(wide)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "example",
    ["stale-max-model-len", "deepgemm-ima", "kv-cache-insufficient", "healthy"],
)
def test_diagnose_next_command_whole(cli, width, example):
    doc = json.loads(cli("diagnose", "--example", example, "--json").stdout)
    text = _run(cli, width, "diagnose", "--example", example).stdout
    if doc.get("next_command"):
        assert any(line.rstrip().endswith(doc["next_command"]) for line in text.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_serve_dry_run_command_whole(cli, width):
    args = ("serve", FLASH, "--kv-cache-memory-bytes", "10533407294", "--speculative-config",
            '{"method": "mtp", "num_speculative_tokens": 1}', "--dry-run")

    def command_line(text: str) -> str:
        return next(line for line in text.splitlines() if "vllm serve " in line)

    assert command_line(_run(cli, width, *args).output) == command_line(_run(cli, 400, *args).output)


# ---- the helpers themselves --------------------------------------------------------------------


def _console(width: int) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=width, no_color=True, highlight=False), buffer


@pytest.mark.parametrize("width", WIDTHS)
def test_print_command_is_never_wrapped(width):
    console, buffer = _console(width)
    command = "vllm serve deepseek-ai/DeepSeek-V4-Flash " + " ".join(f"--flag-{i} {i * 1000}" for i in range(20))
    print_command(console, command)
    assert buffer.getvalue() == f"  {command}\n"


@pytest.mark.parametrize("width", WIDTHS)
def test_prose_wraps_with_hanging_indent_and_never_splits_words(width):
    console, buffer = _console(width)
    words = [f"word{i}" for i in range(60)] + ["/a/very/long/path/" + "x" * 100]
    print_prose(console, " ".join(words), indent="  ", subsequent_indent="    ")
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("  word0") and all(line.startswith("    ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines).split() == words
    assert wrap_prose("", 80, "  ") == [""]


EVIDENCE = (
    "(EngineCore) Auto-fit max_model_len: reduced from 1048576 to 980224 to fit in available GPU memory "
    "(9.81 GiB available for KV cache)"
)


@pytest.mark.parametrize("width", [40, 60, 80])
def test_evidence_is_cut_around_the_numbers(width):
    cut = cut_around(EVIDENCE, width)
    assert len(cut) <= width + 2
    numbers = {m.group(0) for m in NUMBER_RE.finditer(EVIDENCE)}
    for m in NUMBER_RE.finditer(cut.strip("…")):
        assert m.group(0) in numbers  # every number shown is whole
    assert "1048576" in cut  # the first number that matters is kept


def test_evidence_keeps_the_matched_pattern_whole():
    pattern = r"max_model_len: reduced from [0-9,]+ to [0-9,]+"
    cut = cut_around(EVIDENCE, 60, keep=[pattern])
    assert re.search(pattern, cut) and cut.startswith("…") and cut.endswith("…")
    assert "1048576 to 980224" in cut
    assert cut_around("short line 42", 80) == "short line 42"
