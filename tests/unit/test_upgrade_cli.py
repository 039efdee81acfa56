"""`fit-length --compare` and `serve --dry-run --compare` through the CLI: the JSON document, the 80-column view, the
one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fitkit import FLASH, h200, no_hf_cache, snapshot  # noqa: F401 - autouse fixture

from dsv4ctl.errors import ExitCode
from dsv4ctl.gpu import save_snapshot

LINES = Path(__file__).resolve().parents[1] / "data" / "upgrade" / "vllm_log_lines.json"


@pytest.fixture
def gpus(tmp_path):
    path = tmp_path / "h200x8.json"
    save_snapshot(snapshot(*(h200(i) for i in range(8))), path)
    return str(path)


@pytest.fixture
def lines_table(monkeypatch):
    monkeypatch.setattr("dsv4ctl.upgrade.log_lines.DATA", LINES)


def _fit(cli, gpus, *more):
    return cli("fit-length", FLASH, "--gpus", gpus, "-tp", "8", "--checkpoint-size", "160GB", "--no-calibration",
               "--vllm-version", "0.32.0", *more)


def test_fit_length_compare_json(cli, gpus, lines_table):
    res = _fit(cli, gpus, "--compare", "0.33.0", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["schema_version"] == 1
    assert (data["from"]["planned"], data["to"]["planned"]) == ("0.32.0", "0.33.0")
    plain = json.loads(_fit(cli, gpus, "--json").stdout)  # fit-length's own plan under 0.32.0
    assert data["from"]["autofit_max_model_len"] == plain["autofit_max_model_len"]
    assert data["from"]["vllm_flags"] == plain["vllm_flags"]
    assert data["flags"]["recorded"] and data["flags"]["added"]
    assert data["log_lines"]["recorded"]
    given = {f["option"] for f in data["launch_flags"] if f["given"]}
    assert "--tensor-parallel-size" in given and "--max-model-len" not in given


def test_fit_length_compare_fits_in_80_columns(cli, gpus, lines_table):
    res = cli("fit-length", FLASH, "--gpus", gpus, "-tp", "8", "--checkpoint-size", "160GB", "--no-calibration",
              "--vllm-version", "0.27.1", "--compare", "0.30.0", env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "vLLM 0.27.1 -> 0.30.0" in out
    assert "deepgemm-metadata-clamp" in out and "not needed" in out
    assert "Added in 0.30.0" in out
    assert "not recorded: the table of log lines has no vLLM 0.27.1" in " ".join(out.split())
    # Only a citation (a path that cannot break) may run past the width.
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert all(" " not in line.strip() for line in wide), wide


@pytest.mark.parametrize("to, words", [
    ("0.32.0", "the same release"),
    ("nightly", "not a vLLM version"),
    ("9.1.0", "has not read vLLM 9.1.0"),
])
def test_fit_length_compare_refusals_are_one_line(cli, gpus, to, words):
    res = _fit(cli, gpus, "--compare", to)
    assert res.exit_code == int(ExitCode.USAGE)
    assert words in res.stderr and "Traceback" not in res.output
    assert res.stdout == ""


def test_serve_dry_run_compare_json(cli, monkeypatch, lines_table):
    from dsv4ctl.errors import EngineUnavailableError
    from dsv4ctl.serve import vllm_entry

    def missing(flags):
        raise EngineUnavailableError("vLLM is not installed in this Python environment")

    monkeypatch.setattr(vllm_entry, "parse_serve_flags", missing)  # read with dsv4ctl's table: no vLLM import
    res = cli("serve", FLASH, "-tp", "8", "--kv-cache-memory-bytes", "60G", "--kv-cache-dtype", "fp8",
              "--dry-run", "--vllm-version", "0.32.0", "--compare", "0.33.0", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["schema_version"] == 1 and data["to"]["planned"] == "0.33.0"
    assert data["from"]["kv_cache_memory_bytes"] == 60 << 30 and data["from"]["gpu_memory_utilization"] is None
    given = {f["option"]: f["value"] for f in data["launch_flags"] if f["given"]}
    assert given["--kv-cache-dtype"] == "fp8" and given["--tensor-parallel-size"] == "8"


def test_serve_compare_needs_dry_run(cli):
    res = cli("serve", FLASH, "--compare", "0.33.0")
    assert res.exit_code == int(ExitCode.USAGE)
    assert "--compare goes with --dry-run" in res.stderr and "Traceback" not in res.output


def test_a_launch_that_does_not_fit_under_the_other_release_exits_6(cli):
    res = cli("fit-length", FLASH, "--kv-cache-memory", "2GiB", "--max-model-len", "1M", "--vllm-version", "0.32.0",
              "--compare", "0.33.0", "--json")
    assert res.exit_code == int(ExitCode.DOES_NOT_FIT)
    data = json.loads(res.stdout)  # the view is still the answer
    assert data["to"]["verdict"] == "does_not_fit" and data["to"]["vllm_flags"] == []
    assert data["from"]["gpu_memory_utilization"] is None  # --kv-cache-memory: the utilization is not used


def test_the_view_names_a_launch_flag_whose_default_changes(monkeypatch):
    """A flag the launch passes, whose default the other release changes: shown, marked as not reaching it."""
    from rich.console import Console

    from dsv4ctl.catalogue import vllm_flags
    from dsv4ctl.planning import FitRequest
    from dsv4ctl.render.upgrade import render_upgrade
    from dsv4ctl.upgrade import compare_releases

    releases = vllm_flags.releases()
    pair = next((a, b, o) for a, b in zip(releases, releases[1:])
                for o in ("--dcp-comm-backend", "--disable-cascade-attn", "--mamba-cache-mode")
                if vllm_flags.flag(o, a) and vllm_flags.flag(o, b) and vllm_flags.flag(o, a).has_default
                and vllm_flags.flag(o, b).has_default and vllm_flags.flag(o, a).default != vllm_flags.flag(o, b).default)
    a, b, option = pair
    request = FitRequest(model=FLASH, kv_cache_memory_bytes=10 << 30, vllm_version=a)
    view = compare_releases(request, b, argv=[FLASH, option, "x"])
    console = Console(width=80, record=True, color_system=None)
    render_upgrade(view, console)
    text = " ".join(console.export_text().split())
    before, after = vllm_flags.flag(option, a).default, vllm_flags.flag(option, b).default
    assert f"{option}: new default {before} -> {'none' if after is None else after}" in text
    assert "the launch passes it: not reached" in text


@pytest.mark.parametrize("inputs", [
    ("--from-log", str(Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "v034_measured_autofit_reduced.log")),
    ("--kv-cache-memory", "20GiB", "--no-enable-extensible-kv-cache"),
])
def test_an_input_the_compared_release_cannot_plan_names_compare(cli, inputs):
    """The release compared from was given (--vllm-version 0.34.0): the error is the --compare side's, and its hint does
    not ask for the --vllm-version already there."""
    res = cli("fit-length", "deepseek-ai/DeepSeek-V4-Pro", "--vllm-version", "0.34.0", "--compare", "0.33.0", *inputs)
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "Error: --compare 0.33.0: " in res.stderr
    assert "add --vllm-version" not in res.stderr and "plan --vllm-version" not in res.stderr
