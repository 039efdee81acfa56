"""The generated CUDA/HIP error table (dsv4ctl/catalogue/gpu_error_codes.json) and its lookups.

The expected names, texts and lines were read in the wheels themselves (pip download --no-deps, unzipped):
nvidia-cuda-runtime==13.0.96 nvidia/cu13/include/driver_types.h and cuda.h, its lib/libcudart.so.13's
cudaGetErrorString, and triton==3.9.0 triton/backends/amd/include/hip/hip_runtime_api.h. When the build's
wheel folder is present, the last test re-reads the header and compares every runtime row with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsv4ctl.catalogue import gpu_errors as ge

RUNTIME_H = "nvidia-cuda-runtime==13.0.96 nvidia/cu13/include/driver_types.h"
DRIVER_H = "nvidia-cuda-runtime==13.0.96 nvidia/cu13/include/cuda.h"
HIP_H = "triton==3.9.0 triton/backends/amd/include/hip/hip_runtime_api.h"
WHEELS_SRC = Path("/work/wheels/gpu-errors/src/nvidia-cuda-runtime-13.0.96/nvidia/cu13/include/driver_types.h")


@pytest.fixture(autouse=True)
def _packaged_table():
    ge.reset()
    yield
    ge.reset()


def test_the_table_loads_and_is_small():
    assert ge.available(), ge.load_error()
    assert ge.DATA.stat().st_size < 200_000
    data = json.loads(ge.DATA.read_text())
    assert data["schema"] == 1 and set(data) == {"schema", "cuda_runtime", "cuda_driver", "hip", "acl"}
    assert len(data["cuda_runtime"]["codes"]) == 134 and len(data["hip"]["codes"]) == 76


def test_803_and_804_are_different_errors():
    e803, e804 = ge.cuda(803), ge.cuda(804)
    assert e803.name == "cudaErrorSystemDriverMismatch"
    assert e803.text == "system has unsupported display driver / cuda driver combination"
    assert e803.cite == f"{RUNTIME_H}:961"
    assert e803.doc.startswith("This error indicates that there is a mismatch between the versions of the display "
                               "driver and the CUDA driver.")
    assert e804.name == "cudaErrorCompatNotSupportedOnDevice"
    assert e804.text == "forward compatibility was attempted on non supported HW"
    assert e804.cite == f"{RUNTIME_H}:970"
    assert (e803.api, e803.code, e804.code) == ("cuda_runtime", 803, 804)


@pytest.mark.parametrize("code,name,text,line", [
    (700, "cudaErrorIllegalAddress", "an illegal memory access was encountered", 775),
    (209, "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device", 600),
    (999, "cudaErrorUnknown", "unknown error", 1115),
])
def test_runtime_codes(code, name, text, line):
    e = ge.cuda(code)
    assert (e.name, e.text, e.cite) == (name, text, f"{RUNTIME_H}:{line}")
    assert ge.cuda(str(code)) == e and ge.cuda(f" {code} ") == e


def test_name_and_text_lookups():
    assert ge.cuda("cudaErrorSystemDriverMismatch").code == 803
    assert ge.cuda("cudaerrorsystemdrivermismatch").code == 803  # case folded
    assert ge.cuda("system has unsupported display driver / cuda driver combination").code == 803
    assert ge.cuda("An illegal memory access was encountered.").code == 700
    assert ge.cuda("no kernel image is available for execution on the device").name == "cudaErrorNoKernelImageForDevice"


def test_a_text_two_codes_share_names_neither():
    assert ge.cuda("device kernel image is invalid") is None
    assert [e.name for e in ge.cuda_by_text("device kernel image is invalid")] == [
        "cudaErrorInvalidKernelImage", "cudaErrorInvalidSource"]


def test_driver_names_map_to_the_runtime_row_of_the_same_value():
    e = ge.cuda("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH")
    assert (e.api, e.code, e.name, e.driver_name) == ("cuda_runtime", 803, "cudaErrorSystemDriverMismatch",
                                                      "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH")
    assert ge.cuda("CUDA_ERROR_NO_BINARY_FOR_GPU").name == "cudaErrorNoKernelImageForDevice"
    assert ge.cuda(804).driver_name == "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"


def test_a_driver_code_the_runtime_lacks_gives_the_driver_row():
    e = ge.cuda("CUDA_ERROR_CONTEXT_ALREADY_CURRENT")
    assert (e.api, e.code, e.text) == ("cuda_driver", 202, None)
    assert e.cite.startswith(f"{DRIVER_H}:")
    assert ge.cuda(202) == e  # a number only the driver has


def test_hip_lookups():
    e = ge.hip("hipErrorNoBinaryForGpu")
    assert (e.api, e.code, e.text, e.cite) == ("hip", 209, None, f"{HIP_H}:340")
    assert ge.hip(209) == e and ge.hip("209") == e
    assert ge.hip(700).name == "hipErrorIllegalAddress"
    assert ge.hip("hipErrorTbd").code == 1054  # implicit value: hipErrorRuntimeOther (1053) + 1
    alias = ge.hip("hipErrorMemoryAllocation")  # deprecated second name of 2
    assert (alias.code, alias.name, alias.aliases) == (2, "hipErrorOutOfMemory", ("hipErrorMemoryAllocation",))


@pytest.mark.parametrize("arg", [None, "", "   ", 12345, "cudaErrorNoSuchThing", "CUDA_ERROR_NO_SUCH_THING",
                                 "some text no runtime prints", True, 8.03, b"803", ["803"]])
def test_unknown_or_odd_arguments_give_none(arg):
    assert ge.cuda(arg) is None
    assert ge.hip(arg) is None


@pytest.mark.parametrize("content", [None, "{not json", '{"schema": 99}', '{"schema": 1}'])
def test_missing_or_corrupt_file_gives_none(tmp_path, content):
    path = tmp_path / "gpu_error_codes.json"
    if content is not None:
        path.write_text(content)
    ge.reset(path)
    assert ge.cuda(803) is None and ge.hip(209) is None and ge.cuda_by_text("unknown error") == ()
    assert not ge.available() and ge.load_error()


def test_nothing_is_read_at_import():
    ge.reset(Path("/nonexistent/gpu_error_codes.json"))
    assert not ge._DATA.loaded
    ge.cuda(803)
    assert ge._DATA.loaded


@pytest.mark.skipif(not WHEELS_SRC.is_file(), reason="the build's unpacked wheel is not on this machine")
def test_every_runtime_row_matches_the_header():
    lines = WHEELS_SRC.read_text().splitlines()
    data = json.loads(ge.DATA.read_text())["cuda_runtime"]["codes"]
    for code, row in data.items():
        m = re.match(r"\s*,?\s*(\w+)\s*=\s*(\d+)", lines[row["line"] - 1])
        assert m and (m.group(1), int(m.group(2))) == (row["name"], int(code)), (code, row)


def test_ascend_acl_codes_are_torch_npus_own_texts():
    # torch-npu==2.14.0 torch_npu/include/torch_npu/csrc/core/npu/NPUErrorCodes.h: {507011, "Model execution failed.\n…"}
    e = ge.acl(507011)
    assert (e.text, e.cite.rsplit(":", 1)[1]) == ("Model execution failed.", "424")
    assert ge.acl("207008").text == "Stream resources are insufficient."
    assert ge.acl(424242) is None and ge.acl(None) is None
