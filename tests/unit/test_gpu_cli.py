"""`dsv4ctl gpus` through the CLI, with NVML replaced by the fake from test_gpu_nvml."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest
from test_gpu_nvml import H200_CUDA_TOTAL, H200_RESERVED, H200_TOTAL, FakeGpu, fake_nvml, h200  # noqa: F401

from dsv4ctl import gpu
from dsv4ctl.errors import ExitCode
from dsv4ctl.units import gib


def two_decimals(n_bytes: int) -> str:
    return f"{gib(n_bytes):.2f}"


def test_json_is_the_snapshot_format(cli, fake_nvml, tmp_path):
    fake_nvml([h200(0, used=3 * 2**30, compute=[(os.getpid(), 3 * 2**30)]), h200(1)])
    result = cli("gpus", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and data["kind"] == "dsv4ctl.gpus" and data["source"] == "nvml"
    dev0 = data["devices"][0]
    assert dev0["total_bytes"] == H200_TOTAL
    assert dev0["reserved_bytes"] == H200_RESERVED
    assert dev0["cuda_total_bytes"] == H200_CUDA_TOTAL
    assert dev0["compute_capability"] == [9, 0] and dev0["sm"] == "sm_90"
    assert dev0["processes"] == [{"pid": os.getpid(), "name": psutil.Process().name(), "used_bytes": 3 * 2**30}]
    # `dsv4ctl gpus --json > snapshot.json` is exactly what load_snapshot reads.
    path = tmp_path / "snapshot.json"
    path.write_text(result.stdout)
    loaded = gpu.load_snapshot(path)
    assert loaded.source == "file"
    assert [d.to_json() for d in loaded.devices] == data["devices"]
    assert loaded.devices[0].cuda_total_bytes == H200_CUDA_TOTAL


def test_table_shows_derived_figures(cli, fake_nvml):
    fake_nvml([h200(0, compute=[(os.getpid(), 2**30)])], )
    result = cli("gpus")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "NVIDIA H200" in out and "sm_90" in out
    for figure in (H200_TOTAL, H200_RESERVED, H200_CUDA_TOTAL):
        assert two_decimals(figure) in out
    assert "GPU-0aaaaaaa-0000-1111-2222-333333333330" in out
    assert f"pid {os.getpid()}" in out and psutil.Process().name() in out
    assert "CUDA_VISIBLE_DEVICES unset" in out
    assert result.stderr == ""


def test_cuda_visible_devices_from_environment(cli, fake_nvml):
    fake_nvml([h200(0), h200(1), h200(2)])
    result = cli("gpus", "--json", env={"CUDA_VISIBLE_DEVICES": "2,0"})
    data = json.loads(result.stdout)
    assert [(d["cuda_index"], d["index"]) for d in data["devices"]] == [(0, 2), (1, 0)]
    assert data["cuda_visible_devices"] == "2,0"


def test_notes_go_to_stderr_in_table_mode_and_into_json(cli, fake_nvml):
    fake_nvml([h200(0), h200(1)])
    result = cli("gpus", env={"CUDA_VISIBLE_DEVICES": "1,5"})
    assert result.exit_code == 0
    assert "Warning: CUDA_VISIBLE_DEVICES entry '5' is out of range" in result.stderr
    result = cli("gpus", "--json", env={"CUDA_VISIBLE_DEVICES": "1,5"})
    assert "'5' is out of range" in json.loads(result.stdout)["notes"][0]


def test_no_driver_is_one_line_and_a_hint(cli, fake_nvml):
    fake_nvml([], init_error="NVML_ERROR_LIBRARY_NOT_FOUND")
    for args in (("gpus",), ("gpus", "--json")):
        result = cli(*args)
        assert result.exit_code == ExitCode.ERROR
        if "--json" in args:  # the error as a document on stdout too
            assert json.loads(result.stdout)["error"]["exit_code"] == ExitCode.ERROR
        else:
            assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert lines[0].startswith("Error: no NVIDIA driver here")
        assert lines[1].startswith("Hint:") and "dsv4ctl gpus --snapshot snapshot.json" in lines[1]
        assert len(lines) == 2
        assert "Traceback" not in result.output


def test_mig_only_and_nothing_visible_are_one_line(cli, fake_nvml):
    migs = [FakeGpu(uuid="MIG-1234", name="NVIDIA H200 MIG 1g.18gb", total=18 * 2**30, free=17 * 2**30, reserved=0)]
    fake_nvml([h200(0, migs=migs)])
    result = cli("gpus")
    assert result.exit_code == ExitCode.ERROR
    assert result.stderr.startswith("Error: only MIG instances are visible")
    fake_nvml([h200(0)])
    result = cli("gpus", env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.exit_code == ExitCode.ERROR
    assert result.stderr.startswith("Error: no GPU is visible with CUDA_VISIBLE_DEVICES=''")


def test_save_writes_a_loadable_snapshot_and_still_prints_the_table(cli, fake_nvml, tmp_path):
    fake_nvml([h200(0)])
    path = tmp_path / "box.json"
    result = cli("gpus", "--save", path)
    assert result.exit_code == 0
    assert "NVIDIA H200" in result.stdout
    assert f"Saved GPU snapshot to {path}" in result.stderr
    assert gpu.load_snapshot(path).devices[0].cuda_total_bytes == H200_CUDA_TOTAL


def test_snapshot_option_reads_a_file_without_nvml(cli, fake_nvml, tmp_path, monkeypatch):
    fake_nvml([h200(0)])
    path = tmp_path / "box.json"
    assert cli("gpus", "--save", path, "--json").exit_code == 0
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML at all from here on
    result = cli("gpus", "--snapshot", path)
    assert result.exit_code == 0, result.stderr
    assert "snapshot taken" in result.stdout and two_decimals(H200_CUDA_TOTAL) in result.stdout
    data = json.loads(cli("gpus", "--snapshot", path, "--json").stdout)
    assert data["source"] == "file"


def test_invalid_snapshot_is_one_line(cli, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"kind": "something-else"}')
    result = cli("gpus", "--snapshot", path)
    assert result.exit_code == ExitCode.ERROR
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"Error: GPU snapshot '{path}': invalid GPU snapshot: \"kind\" is 'something-else'")
    assert "Traceback" not in result.output


@pytest.mark.parametrize("argv", [["--help"], ["gpus", "--help"]])
def test_help_does_not_import_pynvml(argv):
    code = (
        "import sys\nfrom dsv4ctl.cli import main\n"
        f"rc = main({argv!r})\n"
        "assert rc == 0, rc\n"
        "assert 'pynvml' not in sys.modules, 'pynvml imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_gpus_snapshot_does_not_import_pynvml(tmp_path):
    snap = gpu.GpuSnapshot(
        devices=(gpu.GpuDevice(0, 0, "NVIDIA H200", "GPU-x", (9, 0), H200_TOTAL, H200_TOTAL - H200_RESERVED, 0,
                               H200_RESERVED, "v2", False),),
        driver_version="580.159.04", nvml_version=None, cuda_driver_version="13.0", hostname="h200-1",
        taken_at="2026-11-29T10:00:00+00:00", cuda_visible_devices=None, source="nvml",
    )
    path = tmp_path / "s.json"
    gpu.save_snapshot(snap, path)
    code = (
        "import sys\nfrom dsv4ctl.cli import main\n"
        f"rc = main(['gpus', '--snapshot', {str(path)!r}, '--json'])\n"
        "assert rc == 0, rc\nassert 'pynvml' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out)["devices"][0]["cuda_total_bytes"] == H200_TOTAL - H200_RESERVED


def test_narrow_terminal_never_crops_figures(cli, fake_nvml):
    fake_nvml([h200(0, name="NVIDIA H200 NVL with a long product name")])
    result = cli("gpus", env={"COLUMNS": "40"})
    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if "sm_90" in line)
    assert row.split()[-6:] == [two_decimals(H200_TOTAL), two_decimals(H200_RESERVED),
                                two_decimals(H200_CUDA_TOTAL), "0.00", two_decimals(H200_CUDA_TOTAL), "v2"]
    assert "…" not in result.stdout
