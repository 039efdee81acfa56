"""The kernel probe: the launcher compiles with nvcc against the real vendored headers (both launch
forms), the device step reports a missing GPU as "cannot tell", and cases are classified like the
upstream report's table.

The compile checks run wherever nvcc is installed (this project's CI machine has nvcc 13.0 but no
GPU); running the cases needs an SM90 GPU: benchmarks/device/probe_deepgemm.sh.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dsv4ctl.probe.deepgemm import (
    ERROR,
    FAULT,
    OK,
    UPSTREAM_CASES,
    ProbeCase,
    ProbeUnavailable,
    _classify_case,
    _verdict_from_cases,
    build_launcher,
    find_nvcc,
    launch_form,
    probe_kernel,
    run_probe,
)
from dsv4ctl.probe.headers import given_include, inspect_include_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deepgemm"
CUTLASS = FIXTURES / "cutlass"
NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed: the launcher compile check needs it")


@needs_nvcc
@pytest.mark.parametrize("version", ["0.27.1", "0.33.0"])
def test_launcher_compiles_against_real_headers(tmp_path, version):
    include = FIXTURES / f"vllm-{version}"
    form = launch_form(inspect_include_dir(include))
    out = tmp_path / "launcher"
    cmd = build_launcher(NVCC, [include, CUTLASS], 132, form, out)
    assert out.is_file() and "-gencode=arch=compute_90a,code=sm_90a" in cmd
    cuobjdump = shutil.which("cuobjdump") or shutil.which("cuobjdump", path=str(Path(NVCC).resolve().parent))
    if cuobjdump:  # where the CUDA binary tools are installed, the embedded cubin must be sm_90a
        listed = subprocess.run([cuobjdump, "--list-elf", str(out)], capture_output=True, text=True)
        assert "sm_90a" in listed.stdout, listed.stdout + listed.stderr


@needs_nvcc
def test_wrong_launch_form_does_not_compile(tmp_path):
    """The two header generations need different launches: the detection is not cosmetic."""
    include = FIXTURES / "vllm-0.27.1"
    with pytest.raises(ProbeUnavailable, match="nvcc failed"):
        build_launcher(NVCC, [include, CUTLASS], 132, 1, tmp_path / "launcher")


@needs_nvcc
def test_kernel_mode_without_a_gpu_cannot_tell(tmp_path):
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("a GPU is present here; this test covers the GPU-less path")
    result = run_probe("kernel", FIXTURES / "vllm-0.27.1", [CUTLASS])
    assert result.mode == "kernel" and result.affected is None
    assert "no usable CUDA device" in result.reason


def test_kernel_mode_needs_cute_headers():
    with pytest.raises(ProbeUnavailable, match="cute/cutlass"):
        probe_kernel(given_include(FIXTURES / "vllm-0.33.0"), [], nvcc=Path("/bin/true"))


def _proc(rc: int, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], rc, stdout, stderr)


def test_case_classification():
    ok = _classify_case(33, 0, _proc(0, '{"status": "ok", "sentinel_ok": true}'))
    assert ok.outcome == OK and ok.detail == ""
    ima = _classify_case(32, 0, _proc(3, '{"status": "cuda-error", "error": "an illegal memory access was encountered"}'))
    assert ima.outcome == FAULT and "illegal memory access" in ima.detail
    killed = _classify_case(32, 0, _proc(-11))
    assert killed.outcome == FAULT
    broken = _classify_case(32, 0, _proc(2, "", "usage"))
    assert broken.outcome == ERROR


def _cases(faulting: set[tuple[int, int]]) -> tuple[ProbeCase, ...]:
    return tuple(ProbeCase(b, f, FAULT if (b, f) in faulting else OK) for b, f in UPSTREAM_CASES)


def test_upstream_table_is_affected():
    # GH200/H200 on unguarded headers: zero lengths fault at B = 256, 64, 32 only.
    cases = _cases({(256, 0), (64, 0), (32, 0)})
    affected, reason = _verdict_from_cases(cases)
    assert affected is True and "256, 64, 32" in reason
    assert [c.expected_if_affected for c in cases] == [FAULT, FAULT, FAULT, OK, OK, OK, OK, OK]


def test_clean_run_is_not_affected_and_odd_failures_cannot_tell():
    assert _verdict_from_cases(_cases(set()))[0] is False
    assert _verdict_from_cases(_cases({(256, 8192)}))[0] is None
    errored = _cases(set())[:-1] + (ProbeCase(256, 8192, ERROR, "exit 4: setup"),)
    assert _verdict_from_cases(errored)[0] is None


def test_plain_and_rich_case_tables_have_the_same_rows():
    """`python -m dsv4ctl.probe` and `dsv4ctl probe` lay out one table: same columns, same cells."""
    import io

    from rich.console import Console

    from dsv4ctl.probe.deepgemm import ProbeResult
    from dsv4ctl.probe.text import plain_lines
    from dsv4ctl.render.probe import cases_table

    cases = tuple(ProbeCase(b, f, FAULT if (b, f) in {(256, 0), (64, 0), (32, 0)} else OK,
                            "an illegal memory access was encountered" if (b, f) in {(256, 0), (64, 0), (32, 0)} else "")
                  for b, f in UPSTREAM_CASES)
    result = ProbeResult("kernel", True, "all-zero context lengths fault at B = 256, 64, 32", cases)
    buffer = io.StringIO()
    Console(file=buffer, width=200, no_color=True).print(cases_table(result))
    rich_rows = [line.split() for line in buffer.getvalue().splitlines() if line.strip() and "─" not in line]
    plain = plain_lines(result)
    table = plain[plain.index("") + 1:plain.index("", plain.index("") + 1)]
    plain_rows = [line.split() for line in table if not set(line) <= {"-", " "}]
    assert plain_rows == rich_rows
    assert plain_rows[0] == ["B", "fill", "result", "unguarded", "kernel", "detail"]
    assert plain_rows[1][:4] == ["256", "0", "fault", "fault"] and len(plain_rows) == 1 + len(UPSTREAM_CASES)


def test_each_case_runs_in_its_own_process_with_b_and_fill_as_arguments():
    """Both the kernel launcher and the python repro are run as `<command> <B> <fill>`."""
    import sys

    from dsv4ctl.probe.deepgemm import _run_cases

    fake = ("import json, sys\nb, fill = int(sys.argv[1]), int(sys.argv[2])\n"
            "if fill == 0 and b % 32 == 0:\n"
            "    print(json.dumps({'status': 'cuda-error', 'error': 'an illegal memory access was encountered'}))\n"
            "    sys.exit(3)\n"
            "print(json.dumps({'status': 'ok'}))\n")
    cases = _run_cases([sys.executable, "-c", fake], UPSTREAM_CASES, 60)
    assert [(c.batch_size, c.fill, c.outcome) for c in cases] == [
        (b, f, FAULT if f == 0 and b % 32 == 0 else OK) for b, f in UPSTREAM_CASES]
    assert _verdict_from_cases(cases)[0] is True
    setup = _run_cases([sys.executable, "-c", "import json; print(json.dumps({'error': 'no GPU'})); exit(4)"],
                       ((8, 0),), 60)
    assert setup[0].outcome == ERROR and setup[0].detail == "exit 4: no GPU"
