"""`probe deepgemm --mode static` on the real SM90 metadata headers vendored in vLLM 0.27.1 and 0.33.0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4ctl.probe.deepgemm import launch_form, run_probe
from dsv4ctl.probe.headers import SM90_METADATA_HEADER, given_include, inspect_header_text, inspect_include_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deepgemm"
UNGUARDED = FIXTURES / "vllm-0.27.1"
GUARDED = FIXTURES / "vllm-0.33.0"


def test_vllm_0271_header_lacks_the_guard():
    verdict = inspect_include_dir(UNGUARDED)
    assert verdict.exists and verdict.guarded is False
    assert not verdict.has_total_zero_guard and not verdict.has_lo_clamp
    assert "num_next_n_atoms" not in verdict.kernel_params
    assert launch_form(verdict) == 0


def test_vllm_0330_header_has_both_guards():
    verdict = inspect_include_dir(GUARDED)
    assert verdict.guarded is True and verdict.has_total_zero_guard and verdict.has_lo_clamp
    assert verdict.kernel_params[3] == "num_next_n_atoms"
    assert launch_form(verdict) == 1


def test_removing_the_guard_from_the_fixed_header_is_detected():
    text = (GUARDED / SM90_METADATA_HEADER).read_text()
    stripped = text.replace("min(lo, batch_size - 1)", "lo")
    stripped = stripped.replace("if (total == 0) {", "if (false) {")
    assert inspect_header_text(stripped, Path("x")).guarded is False


def test_a_header_of_unknown_shape_cannot_tell():
    text = (UNGUARDED / SM90_METADATA_HEADER).read_text().replace("const uint32_t q_idx = lo;", "auto q_idx = f(lo);")
    verdict = inspect_header_text(text, Path("x"))
    assert verdict.guarded is None and "cannot tell" in verdict.reason


def test_package_dir_is_accepted_for_include(tmp_path):
    (tmp_path / "include" / "deep_gemm").mkdir(parents=True)
    assert given_include(tmp_path).include_dir == tmp_path / "include"


@pytest.mark.parametrize(("fixture", "affected", "code"), [(UNGUARDED, True, 7), (GUARDED, False, 0)])
def test_cli_static_json(cli, fixture, affected, code):
    result = cli("probe", "deepgemm", "--mode", "static", "--include", fixture, "--json")
    assert result.exit_code == code, result.output
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and doc["mode"] == "static"
    assert doc["affected"] is affected
    assert doc["cases"] == []
    assert doc["header"]["guarded"] is (not affected)
    assert doc["deepgemm"]["source"] == "given"


def test_cli_static_text(cli):
    result = cli("probe", "deepgemm", "--mode", "static", "--include", UNGUARDED)
    assert result.exit_code == 7
    assert "Verdict (static): AFFECTED" in result.stdout
    assert "min(lo, batch_size - 1)" in result.stdout


def test_cli_cannot_tell_exits_1_and_says_why(cli, tmp_path):
    (tmp_path / "deep_gemm").mkdir()
    result = cli("probe", "deepgemm", "--mode", "static", "--include", tmp_path)
    assert result.exit_code == 1
    assert "cannot tell" in result.stderr and "not found" in result.stderr  # stdout is not on the screen


def test_cli_cannot_tell_is_said_once_on_a_terminal(cli, tmp_path):
    (tmp_path / "deep_gemm").mkdir()
    result = cli("probe", "deepgemm", "--mode", "static", "--include", tmp_path, env={"TTY_COMPATIBLE": "1"})
    assert result.exit_code == 1
    assert "Verdict (static): cannot tell" in result.stdout and "not found" in result.stdout
    assert result.stderr == ""


def test_cli_rejects_bad_mode_and_missing_dir(cli, tmp_path):
    assert cli("probe", "deepgemm", "--mode", "bogus").exit_code == 2
    result = cli("probe", "deepgemm", "--include", tmp_path / "nope")
    assert result.exit_code == 2 and "not a directory" in result.stderr


def test_auto_mode_with_include_falls_back_to_static_and_says_why():
    result = run_probe(None, UNGUARDED)
    assert result.mode == "static" and result.affected is True
    reasons = dict(result.tried)
    assert "cute/cutlass" in reasons["kernel"]
    assert "--include" in reasons["python"]


def test_module_entry_runs_with_the_standard_library_only(tmp_path):
    """`python -m dsv4ctl.probe` is what GPU nodes without typer/rich run (benchmarks/device)."""
    import subprocess
    import venv

    bare = tmp_path / "venv"
    venv.create(bare, with_pip=False, symlinks=True)
    repo = Path(__file__).resolve().parents[2]
    cmd = [str(bare / "bin" / "python"), "-m", "dsv4ctl.probe", "deepgemm", "--mode", "static", "--include"]
    affected = subprocess.run([*cmd, str(UNGUARDED), "--json"], capture_output=True, text=True, cwd=tmp_path,
                              env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert affected.returncode == 7, affected.stderr
    doc = json.loads(affected.stdout)
    assert doc["schema_version"] == 1 and doc["affected"] is True and doc["mode"] == "static"
    fixed = subprocess.run([*cmd, str(GUARDED)], capture_output=True, text=True, cwd=tmp_path,
                           env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert fixed.returncode == 0 and "Verdict (static): not affected" in fixed.stdout


def test_plain_entry_prints_the_same_report_as_the_cli(cli, capsys):
    from dsv4ctl.probe.__main__ import main

    rich = cli("probe", "deepgemm", "--mode", "static", "--include", UNGUARDED)
    assert main(["deepgemm", "--mode", "static", "--include", str(UNGUARDED)]) == rich.exit_code == 7
    plain = capsys.readouterr().out
    assert [line.rstrip() for line in plain.splitlines()] == [line.rstrip() for line in rich.stdout.splitlines()]


def test_plain_entry_rejects_a_missing_include_like_the_cli(cli, tmp_path, capsys):
    from dsv4ctl.probe.__main__ import main

    assert main(["deepgemm", "--include", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert cli("probe", "deepgemm", "--include", tmp_path / "nope").exit_code == 2
