"""dsv4ctl.gpu against a replaced NVML module.

The fake below stands in for the one module dsv4ctl.gpu imports (`pynvml`): it is put into
sys.modules["pynvml"] for the test, so dsv4ctl.gpu's lazy `import pynvml` gets it. It raises the
real nvidia-ml-py error classes, so error handling is tested against the exceptions NVML raises.
Memory figures are the ones measured on an idle H200 (driver 580.159.04).
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from dataclasses import dataclass, field

import psutil
import pynvml as real_pynvml
import pytest

from dsv4ctl import gpu
from dsv4ctl.errors import GpuUnavailableError

H200_TOTAL = 150_754_820_096
H200_FREE = 150_109_880_320
H200_RESERVED = 644_939_776
H200_CUDA_TOTAL = 150_109_880_320  # torch.cuda.mem_get_info()[1] measured on the same GPU


def nvml_error(name: str) -> real_pynvml.NVMLError:
    return real_pynvml.NVMLError(getattr(real_pynvml, name))


@dataclass
class FakeGpu:
    """One GPU (or MIG instance) as the fake NVML reports it. Also serves as its own handle."""

    uuid: str
    name: str = "NVIDIA H200"
    cc: tuple[int, int] = (9, 0)
    total: int = H200_TOTAL
    free: int = H200_FREE
    used: int = 0  # v2 meaning: excludes reserved
    reserved: int = H200_RESERVED
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, usedGpuMemory)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    migs: list[FakeGpu] | None = None  # MIG mode on, with these instances
    fail: dict[str, str] = field(default_factory=dict)  # function name -> NVML_ERROR_* to raise


class FakeNvml(types.ModuleType):
    """The subset of pynvml that dsv4ctl.gpu calls, driven by a list of FakeGpu."""

    def __init__(self, gpus: list[FakeGpu], *, driver_has_v2: bool = True, bindings_have_v2: bool = True,
                 unified: bool = False, init_error: str | None = None, process_api_v3: bool = True):
        super().__init__("pynvml")
        self.gpus = gpus
        self.driver_has_v2 = driver_has_v2
        self.unified = unified
        self.init_error = init_error
        self.process_api_v3 = process_api_v3
        self.NVMLLibraryMismatchError = real_pynvml.NVMLLibraryMismatchError
        self.init_calls = 0
        self.shutdown_calls = 0
        self.NVMLError = real_pynvml.NVMLError
        for name in dir(real_pynvml):
            if name.startswith("NVML_ERROR_") or name.startswith("NVMLError_") or name == "NVML_DEVICE_MIG_ENABLE":
                setattr(self, name, getattr(real_pynvml, name))
        if bindings_have_v2:
            self.nvmlMemory_v2 = real_pynvml.nvmlMemory_v2

    def _check(self, handle: FakeGpu, fn: str) -> None:
        if fn in handle.fail:
            raise nvml_error(handle.fail[fn])

    def nvmlInit(self):
        self.init_calls += 1
        if self.init_error:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetNVMLVersion(self):
        return b"13.580.159.04"  # nvidia-ml-py returns bytes here (no str conversion on this call)

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle):
        return handle.uuid

    def nvmlDeviceGetName(self, handle):
        self._check(handle, "nvmlDeviceGetName")
        return handle.name

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return handle.cc

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        if self.unified:
            raise nvml_error("NVML_ERROR_NOT_SUPPORTED")
        if version is None:
            return types.SimpleNamespace(total=handle.total, free=handle.free, used=handle.used + handle.reserved)
        assert version == real_pynvml.nvmlMemory_v2
        if not self.driver_has_v2:
            raise nvml_error("NVML_ERROR_FUNCTION_NOT_FOUND")
        return types.SimpleNamespace(version=version, total=handle.total, free=handle.free, used=handle.used,
                                     reserved=handle.reserved)

    def _procs(self, handle, which):
        self._check(handle, which)
        entries = handle.compute if which == "nvmlDeviceGetComputeRunningProcesses" else handle.graphics
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in entries]

    def _unversioned(self):
        # nvidia-ml-py's unversioned getters call the _v3 struct; without it they raise this (no NVMLError).
        if not self.process_api_v3:
            raise real_pynvml.NVMLLibraryMismatchError("Unversioned function called and the pyNVML version ...")

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self._unversioned()
        return self._procs(handle, "nvmlDeviceGetComputeRunningProcesses")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        self._unversioned()
        return self._procs(handle, "nvmlDeviceGetGraphicsRunningProcesses")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._procs(handle, "nvmlDeviceGetComputeRunningProcesses")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle):
        return self._procs(handle, "nvmlDeviceGetGraphicsRunningProcesses")

    def nvmlDeviceGetMigMode(self, handle):
        if handle.migs is None:
            raise nvml_error("NVML_ERROR_NOT_SUPPORTED")
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        if slot >= len(handle.migs):
            raise nvml_error("NVML_ERROR_NOT_FOUND")
        return handle.migs[slot]


def h200(n: int, **kwargs) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-{n}aaaaaaa-0000-1111-2222-33333333333{n}", **kwargs)


@pytest.fixture
def fake_nvml(monkeypatch):
    """install(gpus, **options) -> FakeNvml, placed where dsv4ctl.gpu imports pynvml from."""

    def install(gpus: list[FakeGpu], **options) -> FakeNvml:
        fake = FakeNvml(gpus, **options)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    return install


# --- memory structs ------------------------------------------------------------------------------


def test_v2_struct_on_h200_gives_cuda_total(fake_nvml):
    fake = fake_nvml([h200(0)])
    snap = gpu.read_snapshot()
    (dev,) = snap.devices
    assert dev.memory_struct == "v2"
    assert (dev.total_bytes, dev.free_bytes, dev.used_bytes, dev.reserved_bytes) == (
        H200_TOTAL, H200_FREE, 0, H200_RESERVED)
    assert dev.cuda_total_bytes == H200_CUDA_TOTAL
    assert dev.sm == "sm_90" and dev.compute_capability == (9, 0)
    assert (dev.index, dev.cuda_index, dev.is_mig) == (0, 0, False)
    assert snap.source == "nvml"
    assert snap.driver_version == "580.159.04"
    assert snap.nvml_version == "13.580.159.04"
    assert snap.cuda_driver_version == "13.0"
    assert snap.cuda_visible_devices is None
    assert (fake.init_calls, fake.shutdown_calls) == (1, 1)


def test_old_driver_without_v2_falls_back_to_v1(fake_nvml):
    fake_nvml([h200(0)], driver_has_v2=False)
    (dev,) = gpu.read_snapshot().devices
    assert dev.memory_struct == "v1"
    assert dev.reserved_bytes is None
    assert dev.used_bytes == H200_RESERVED  # v1 counts the reserved memory as used
    assert dev.cuda_total_bytes == H200_TOTAL


def test_old_bindings_without_v2_constant_use_v1(fake_nvml):
    fake_nvml([h200(0)], bindings_have_v2=False)
    (dev,) = gpu.read_snapshot().devices
    assert dev.memory_struct == "v1"


def test_unified_memory_falls_back_to_host_memory(fake_nvml):
    fake_nvml([FakeGpu(uuid="GPU-gb10", name="NVIDIA GB10", cc=(12, 1))], unified=True)
    snap = gpu.read_snapshot()
    (dev,) = snap.devices
    assert dev.memory_struct == "unified" and dev.is_unified_memory
    assert dev.total_bytes == psutil.virtual_memory().total
    assert 0 < dev.free_bytes <= dev.total_bytes
    assert dev.used_bytes == dev.total_bytes - dev.free_bytes
    assert dev.sm == "sm_121"
    assert "(unified memory)" in snap.summary_lines()[0]


def test_works_without_psutil(fake_nvml, monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)
    fake_nvml([h200(0, compute=[(os.getpid(), 2**30)])])
    (dev,) = gpu.read_snapshot().devices
    assert dev.processes == (gpu.GpuProcess(os.getpid(), None, 2**30),)
    fake_nvml([FakeGpu(uuid="GPU-gb10", name="NVIDIA GB10", cc=(12, 1))], unified=True)
    (dev,) = gpu.read_snapshot().devices
    assert dev.total_bytes == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_mig_instance_without_memory_figures_is_not_called_unified(fake_nvml):
    mig = FakeGpu(uuid="MIG-1", fail={})
    fake = fake_nvml([h200(0, migs=[mig]), h200(1)], unified=True)
    with pytest.raises(GpuUnavailableError, match="no memory figures for a MIG instance"):
        gpu.read_snapshot()
    assert fake.shutdown_calls == 1


# --- errors and cleanup --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, words",
    [("NVML_ERROR_LIBRARY_NOT_FOUND", "no NVIDIA driver"), ("NVML_ERROR_DRIVER_NOT_LOADED", "not loaded"),
     ("NVML_ERROR_NO_PERMISSION", "NVML cannot start")],
)
def test_nvml_init_failure_is_one_line_with_snapshot_hint(fake_nvml, code, words):
    fake = fake_nvml([h200(0)], init_error=code)
    with pytest.raises(GpuUnavailableError) as info:
        gpu.read_snapshot()
    assert words in info.value.message
    assert "\n" not in info.value.message
    assert "--gpus snapshot.json" in info.value.hint
    assert fake.shutdown_calls == 0  # nothing to shut down when init failed


def test_failure_midway_still_shuts_nvml_down(fake_nvml):
    fake = fake_nvml([h200(0, fail={"nvmlDeviceGetName": "NVML_ERROR_GPU_IS_LOST"})])
    with pytest.raises(GpuUnavailableError, match="NVML failed while reading the GPUs"):
        gpu.read_snapshot()
    assert fake.shutdown_calls == 1


def test_missing_bindings_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(GpuUnavailableError, match="nvidia-ml-py"):
        gpu.read_snapshot()


def test_machine_without_gpus(fake_nvml):
    fake = fake_nvml([])
    with pytest.raises(GpuUnavailableError, match="reports no GPUs"):
        gpu.read_snapshot()
    assert fake.shutdown_calls == 1


# --- processes -----------------------------------------------------------------------------------


def test_processes_merge_compute_and_graphics_and_resolve_names(fake_nvml):
    me = os.getpid()
    gone = 2**22 + 7  # above Linux's pid_max: no such process
    fake_nvml([h200(0, used=5 * 2**30, compute=[(me, 4 * 2**30), (gone, None)], graphics=[(me, 4 * 2**30)])])
    (dev,) = gpu.read_snapshot().devices
    assert dev.processes == (
        gpu.GpuProcess(pid=me, name=psutil.Process(me).name(), used_bytes=4 * 2**30),
        gpu.GpuProcess(pid=gone, name=None, used_bytes=None),
    )


def test_process_query_without_permission_keeps_the_device(fake_nvml):
    fake_nvml([h200(0, compute=[(1, 10)], graphics=[(2, 20)],
                    fail={"nvmlDeviceGetComputeRunningProcesses": "NVML_ERROR_NO_PERMISSION"})])
    (dev,) = gpu.read_snapshot().devices
    assert [p.pid for p in dev.processes] == [2]


def test_driver_without_v3_process_struct_uses_v2(fake_nvml):
    fake_nvml([h200(0, compute=[(11, 2**30)], graphics=[(12, None)])], process_api_v3=False)
    (dev,) = gpu.read_snapshot().devices
    assert [(p.pid, p.used_bytes) for p in dev.processes] == [(11, 2**30), (12, None)]


# --- CUDA_VISIBLE_DEVICES ------------------------------------------------------------------------


def four_gpus() -> list[FakeGpu]:
    return [h200(i, free=H200_FREE - i * 2**30) for i in range(4)]


@pytest.mark.parametrize(
    "value, nvml_indices",
    [
        ("2", [2]),
        ("3,1", [3, 1]),
        (" 1 , 2", [1, 2]),
        ("1gpu,2ampere", [1, 2]),  # CUDA reads each entry like strtoul
        ("0,9,1", [0]),  # out of range ends the list
        ("1,-1,2", [1]),  # a negative entry ends the list
        ("2,abc,1", [2]),
        ("GPU-3aaa", [3]),  # unique UUID prefix
        ("GPU-2aaaaaaa-0000-1111-2222-333333333332,GPU-0", [2, 0]),
        ("GPU-1,2", [1]),  # the first entry decides the kind; an index after UUIDs ends the list
    ],
)
def test_cuda_visible_devices_selects_and_orders_like_cuda(fake_nvml, value, nvml_indices):
    fake_nvml(four_gpus())
    snap = gpu.read_snapshot(value)
    assert [d.index for d in snap.devices] == nvml_indices
    assert [d.cuda_index for d in snap.devices] == list(range(len(nvml_indices)))
    assert [d.free_bytes for d in snap.devices] == [H200_FREE - i * 2**30 for i in nvml_indices]
    assert snap.cuda_visible_devices == value


def test_ignored_entries_are_noted(fake_nvml):
    fake_nvml(four_gpus())
    snap = gpu.read_snapshot("0,9,1")
    assert len(snap.notes) == 1
    assert "'9' is out of range" in snap.notes[0] and "'9,1'" in snap.notes[0]


@pytest.mark.parametrize(
    "value, words",
    [("", "no GPU is visible"), ("-1", "no GPU is visible"), ("0,1,0", "names a device twice"),
     ("GPU-", "matches more than one GPU"), ("GPU-ffff", "matches no GPU"), ("7", "out of range")],
)
def test_nothing_visible_is_one_clear_error(fake_nvml, value, words):
    fake_nvml(four_gpus())
    with pytest.raises(GpuUnavailableError) as info:
        gpu.read_snapshot(value)
    assert words in info.value.message
    assert "\n" not in info.value.message
    assert "CUDA_VISIBLE_DEVICES" in info.value.hint


def test_default_reads_the_environment_at_call_time(fake_nvml, monkeypatch):
    fake_nvml(four_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    snap = gpu.read_snapshot()
    assert [d.index for d in snap.devices] == [3]
    assert snap.cuda_visible_devices == "3"


def mig_box() -> list[FakeGpu]:
    migs = [FakeGpu(uuid=f"MIG-{k}bbbbbbb-0000", name="NVIDIA H200 MIG 3g.71gb", total=71 * 2**30,
                    free=70 * 2**30, reserved=0) for k in range(2)]
    return [h200(0, migs=migs), h200(1)]


def test_mig_only_is_refused(fake_nvml):
    fake_nvml(mig_box())
    for value in ("0", "MIG-1bbb"):
        with pytest.raises(GpuUnavailableError, match="only MIG instances are visible"):
            gpu.read_snapshot(value)


def test_mig_instances_are_listed_and_marked(fake_nvml):
    fake_nvml(mig_box())
    snap = gpu.read_snapshot()
    assert [(d.index, d.is_mig, d.uuid[:5]) for d in snap.devices] == [
        (0, True, "MIG-0"), (0, True, "MIG-1"), (1, False, "GPU-1")]
    assert snap.devices[0].sm == "sm_90"  # a MIG instance has its parent's compute capability
    assert snap.whole_gpus == (snap.devices[2],)
    assert any("MIG" in note for note in snap.notes)


def test_mig_mode_without_instances(fake_nvml):
    fake_nvml([h200(0, migs=[]), h200(1)])
    with pytest.raises(GpuUnavailableError, match="the selected GPUs are in MIG mode with no MIG instance"):
        gpu.read_snapshot("0")
    fake_nvml([h200(0, migs=[])])
    with pytest.raises(GpuUnavailableError, match="all 1 GPU.s. are in MIG mode with no MIG instance"):
        gpu.read_snapshot()


def test_mixed_models_suggest_pci_bus_order(fake_nvml, monkeypatch):
    fake_nvml([h200(0), FakeGpu(uuid="GPU-b200", name="NVIDIA B200", cc=(10, 0))])
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in n for n in gpu.read_snapshot().notes)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert not gpu.read_snapshot().notes


# --- lazy import ---------------------------------------------------------------------------------


def test_importing_dsv4ctl_gpu_does_not_import_pynvml():
    code = "import sys, dsv4ctl.gpu, dsv4ctl.render.gpus; assert 'pynvml' not in sys.modules, 'pynvml imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
