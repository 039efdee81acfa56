"""GPU inventory through NVML: the one module that imports `pynvml` (from the `nvidia-ml-py` dist).

`read_snapshot()` asks NVML for every GPU the current process would see under `CUDA_VISIBLE_DEVICES`
(the way CUDA, torch and vLLM see them) and returns a `GpuSnapshot`; `load_snapshot(path)` reads the
same thing back from the JSON file that `dsv4ctl gpus --json` (or `--save`) writes, so a plan can be
made on a box without GPUs. Nothing here prints or exits; failures raise `GpuUnavailableError`
(NVML unusable, nothing visible) or `InputError` (bad snapshot file), each with a one-line message.

Memory figures (see docs/gpus.md): NVML's v2 memory struct splits the driver-reserved memory out of
"used"; CUDA (`cudaMemGetInfo`, `torch.cuda.mem_get_info`) reports a total *without* it, and vLLM sizes
its budget from CUDA's total. `GpuDevice.cuda_total_bytes` is that figure.

Kept whole: the one place that talks to NVML, by design (tests replace this module, never the world): the
snapshot dataclasses, the JSON form they round-trip through, and the NVML calls that fill them.

`pynvml` is imported lazily inside `read_snapshot`, so `dsv4ctl --help`, `diagnose` and `fit-length`
never load it. Tests replace it by putting a fake module in `sys.modules["pynvml"]`.
"""

from __future__ import annotations

import json
import os
import socket
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from dsv4ctl.errors import GpuUnavailableError, InputError
from dsv4ctl.files import write_whole
from dsv4ctl import host
from dsv4ctl.host import HostMemory

SNAPSHOT_KIND = "dsv4ctl.gpus"
SNAPSHOT_SCHEMA_VERSION = 1
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

# Raised from `gpus`, `fit-length` and `doctor`: name each command, since their flags differ.
SNAPSHOT_HINT = (
    "take a snapshot on the GPU box with `dsv4ctl gpus --save snapshot.json`, then read it here with "
    "`dsv4ctl gpus --snapshot snapshot.json` or `dsv4ctl fit-length MODEL --gpus snapshot.json`"
)

MEMORY_STRUCTS = ("v2", "v1", "unified")

# NVML return codes (nvml.h); stable across driver releases. Looked up on the module when present.
_NVML_CODES = {
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
}


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU. `name` is None when psutil cannot see it (other PID
    namespace, gone, no permission); `used_bytes` is None when the driver does not say."""

    pid: int
    name: str | None
    used_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "used_bytes": self.used_bytes}


@dataclass(frozen=True)
class GpuDevice:
    """One device as CUDA (and so vLLM) sees it: a whole GPU or a MIG instance."""

    index: int  # NVML index (of the parent GPU for a MIG instance)
    cuda_index: int  # index as CUDA/vLLM sees it after CUDA_VISIBLE_DEVICES
    name: str
    uuid: str
    compute_capability: tuple[int, int]
    total_bytes: int  # NVML total: includes the driver-reserved memory
    free_bytes: int
    used_bytes: int  # v2: excludes reserved; v1: includes it
    reserved_bytes: int | None  # v2 only
    memory_struct: str  # "v2" | "v1" | "unified"
    is_mig: bool
    processes: tuple[GpuProcess, ...] = ()

    @property
    def cuda_total_bytes(self) -> int:
        """The total CUDA reports (`torch.cuda.mem_get_info()[1]`): NVML total minus reserved.

        vLLM sizes its memory budget as `total × --gpu-memory-utilization` from this figure."""
        return self.total_bytes - (self.reserved_bytes or 0)

    @property
    def sm(self) -> str:
        """`sm_90` for compute capability 9.0, `sm_100` for 10.0."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def compute_capability_str(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def is_unified_memory(self) -> bool:
        return self.memory_struct == "unified"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "cuda_index": self.cuda_index,
            "name": self.name,
            "uuid": self.uuid,
            "compute_capability": list(self.compute_capability),
            "sm": self.sm,
            "total_bytes": self.total_bytes,
            "free_bytes": self.free_bytes,
            "used_bytes": self.used_bytes,
            "reserved_bytes": self.reserved_bytes,
            "cuda_total_bytes": self.cuda_total_bytes,
            "memory_struct": self.memory_struct,
            "is_mig": self.is_mig,
            "processes": [p.to_json() for p in self.processes],
        }


@dataclass(frozen=True)
class GpuSnapshot:
    """Every device visible to this process, plus where and when the inventory was taken."""

    devices: tuple[GpuDevice, ...]
    driver_version: str | None
    nvml_version: str | None
    cuda_driver_version: str | None  # "12.8": the newest CUDA the driver supports
    hostname: str
    taken_at: str  # ISO-8601, UTC
    cuda_visible_devices: str | None  # the value in force when the snapshot was taken
    source: str  # "nvml" | "file"
    notes: tuple[str, ...] = field(default=())  # things the reader should know (ignored entries, ...)
    hosts: tuple[str, ...] = field(default=())  # several nodes' GPUs pooled: each device's node, in node order
    host_memory: HostMemory | None = None  # the host's RAM when the snapshot was taken (None: not recorded)

    @property
    def whole_gpus(self) -> tuple[GpuDevice, ...]:
        return tuple(d for d in self.devices if not d.is_mig)

    def summary_lines(self) -> list[str]:
        """One short line per device for compact reports (doctor): `cuda:0 NVIDIA H200 sm_90 …`."""
        from dsv4ctl.units import format_gib

        lines = []
        for d in self.devices:
            mig = " (MIG)" if d.is_mig else ""
            unified = " (unified memory)" if d.is_unified_memory else ""
            lines.append(
                f"cuda:{d.cuda_index} {d.name}{mig} {d.sm}, "
                f"{format_gib(d.free_bytes)} free of {format_gib(d.cuda_total_bytes)}{unified}"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SNAPSHOT_SCHEMA_VERSION,
            "kind": SNAPSHOT_KIND,
            "source": self.source,
            "hostname": self.hostname,
            "taken_at": self.taken_at,
            "driver_version": self.driver_version,
            "nvml_version": self.nvml_version,
            "cuda_driver_version": self.cuda_driver_version,
            "cuda_visible_devices": self.cuda_visible_devices,
            "notes": list(self.notes),
            "devices": [d.to_json() for d in self.devices],
        } | ({"host_memory": self.host_memory.to_json()} if self.host_memory is not None else {})

    @classmethod
    def from_json(cls, data: Any) -> GpuSnapshot:
        """Validate and read a snapshot document. Raises `InputError` naming the first bad field."""
        return _snapshot_from_json(data)


# ---------------------------------------------------------------------------------------------
# Snapshot files
# ---------------------------------------------------------------------------------------------


def load_snapshot(path: str | os.PathLike[str]) -> GpuSnapshot:
    """Read a snapshot written by `dsv4ctl gpus --json` / `--save`. One-line `InputError` on failure."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"GPU snapshot {str(p)!r} does not exist", hint=SNAPSHOT_HINT) from None
    except IsADirectoryError:
        raise InputError(f"GPU snapshot {str(p)!r} is a directory, not a file", hint=SNAPSHOT_HINT) from None
    except UnicodeDecodeError:
        raise InputError(f"GPU snapshot {str(p)!r} is not a UTF-8 text file", hint=SNAPSHOT_HINT) from None
    except OSError as exc:
        raise InputError(f"cannot read GPU snapshot {str(p)!r}: {exc.strerror or exc}", hint=SNAPSHOT_HINT) from None
    if not text.strip():
        raise InputError(f"GPU snapshot {str(p)!r} is empty", hint=SNAPSHOT_HINT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"GPU snapshot {str(p)!r} is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            hint=SNAPSHOT_HINT,
        ) from None
    try:
        snapshot = _snapshot_from_json(data)
    except InputError as exc:
        raise InputError(f"GPU snapshot {str(p)!r}: {exc.message}", hint=exc.hint) from None
    return snapshot


def save_snapshot(snapshot: GpuSnapshot, path: str | os.PathLike[str], hint: str | None = None) -> None:
    """Write the snapshot as the JSON document `load_snapshot` reads (same as `gpus --json`), whole or not at all;
    `OutputError` (with `hint`) where it cannot be written."""
    write_whole(path, (json.dumps(snapshot.to_json(), indent=2) + "\n").encode("utf-8"), hint=hint)


class _Invalid(Exception):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def _snapshot_from_json(data: Any) -> GpuSnapshot:
    try:
        return _parse_snapshot(data)
    except _Invalid as exc:
        raise InputError(f"invalid GPU snapshot: {exc}", hint=exc.hint or SNAPSHOT_HINT) from None


def _parse_snapshot(data: Any) -> GpuSnapshot:
    if not isinstance(data, dict):
        raise _Invalid(f"expected a JSON object, got {_json_type(data)}")
    kind = data.get("kind")
    if kind != SNAPSHOT_KIND:
        raise _Invalid(f"\"kind\" is {kind!r}, expected {SNAPSHOT_KIND!r} (is this a `dsv4ctl gpus --json` file?)")
    version = data.get("schema_version")
    if not _is_int(version):
        raise _Invalid("\"schema_version\" is missing or not an integer")
    if version > SNAPSHOT_SCHEMA_VERSION:
        raise _Invalid(f"schema_version {version} is newer than this dsv4ctl reads ({SNAPSHOT_SCHEMA_VERSION})",
                       hint="upgrade dsv4ctl here to the release that wrote it (or a newer one), or save the "
                            "snapshot with this release's `dsv4ctl gpus --save`")
    if version < 1:
        raise _Invalid(f"schema_version {version} is not valid")
    raw_devices = data.get("devices")
    if not isinstance(raw_devices, list):
        raise _Invalid("\"devices\" is missing or not a list")
    if not raw_devices:
        raise _Invalid("it lists no GPUs")
    devices = tuple(_parse_device(raw, f"devices[{i}]") for i, raw in enumerate(raw_devices))
    if all(d.is_mig for d in devices):
        raise _Invalid("it lists only MIG instances; vLLM serves DeepSeek-V4 on whole GPUs")
    cuda_indices = [d.cuda_index for d in devices]
    if len(set(cuda_indices)) != len(cuda_indices):
        raise _Invalid("two devices share a cuda_index")
    notes = data.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise _Invalid("\"notes\" must be a list of strings")
    taken_at = data.get("taken_at")
    if not isinstance(taken_at, str):
        raise _Invalid("\"taken_at\" is missing or not a string")
    hostname = data.get("hostname")
    if not isinstance(hostname, str):
        raise _Invalid("\"hostname\" is missing or not a string")
    return GpuSnapshot(
        devices=tuple(sorted(devices, key=lambda d: d.cuda_index)),
        driver_version=_opt_str(data, "driver_version"),
        nvml_version=_opt_str(data, "nvml_version"),
        cuda_driver_version=_opt_str(data, "cuda_driver_version"),
        hostname=hostname,
        taken_at=taken_at,
        cuda_visible_devices=_opt_str(data, "cuda_visible_devices"),
        source="file",
        notes=tuple(notes),
        host_memory=_parse_host_memory(data.get("host_memory")),
    )


def _parse_host_memory(raw: Any) -> HostMemory | None:
    """A snapshot's optional `host_memory` (snapshots written before it was recorded have none)."""
    if raw is None:
        return None
    try:
        return HostMemory.from_json(raw)
    except InputError as exc:
        raise _Invalid(exc.message) from None


def _parse_device(raw: Any, where: str) -> GpuDevice:
    if not isinstance(raw, dict):
        raise _Invalid(f"{where} is {_json_type(raw)}, expected an object")

    def nonneg_int(key: str, optional: bool = False) -> int | None:
        value = raw.get(key)
        if value is None and optional:
            return None
        if not _is_int(value) or value < 0:
            raise _Invalid(f"{where}.{key} must be a non-negative integer, got {json.dumps(value)}")
        return value

    def text(key: str) -> str:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise _Invalid(f"{where}.{key} must be a non-empty string")
        return value

    cc = raw.get("compute_capability")
    if not (isinstance(cc, list) and len(cc) == 2 and all(_is_int(x) and x >= 0 for x in cc)):
        raise _Invalid(f"{where}.compute_capability must be [major, minor] (e.g. [9, 0] for an H200), got {json.dumps(cc)}")
    memory_struct = raw.get("memory_struct")
    if memory_struct not in MEMORY_STRUCTS:
        raise _Invalid(f"{where}.memory_struct must be one of {', '.join(MEMORY_STRUCTS)}, got {json.dumps(memory_struct)}")
    is_mig = raw.get("is_mig", False)
    if not isinstance(is_mig, bool):
        raise _Invalid(f"{where}.is_mig must be true or false")
    total = nonneg_int("total_bytes")
    free = nonneg_int("free_bytes")
    used = nonneg_int("used_bytes")
    reserved = nonneg_int("reserved_bytes", optional=True)
    assert total is not None and free is not None and used is not None
    if total == 0:
        raise _Invalid(f"{where}.total_bytes is 0")
    if free > total:
        raise _Invalid(f"{where}.free_bytes ({free}) exceeds total_bytes ({total})")
    if reserved is not None and reserved > total:
        raise _Invalid(f"{where}.reserved_bytes ({reserved}) exceeds total_bytes ({total})")
    raw_procs = raw.get("processes", [])
    if not isinstance(raw_procs, list):
        raise _Invalid(f"{where}.processes must be a list")
    processes = []
    for j, proc in enumerate(raw_procs):
        pwhere = f"{where}.processes[{j}]"
        if not isinstance(proc, dict) or not _is_int(proc.get("pid")):
            raise _Invalid(f"{pwhere} must be an object with an integer pid")
        name = proc.get("name")
        pused = proc.get("used_bytes")
        if name is not None and not isinstance(name, str):
            raise _Invalid(f"{pwhere}.name must be a string or null")
        if pused is not None and (not _is_int(pused) or pused < 0):
            raise _Invalid(f"{pwhere}.used_bytes must be a non-negative integer or null")
        processes.append(GpuProcess(pid=proc["pid"], name=name, used_bytes=pused))
    index = nonneg_int("index")
    cuda_index = nonneg_int("cuda_index")
    assert index is not None and cuda_index is not None
    return GpuDevice(
        index=index,
        cuda_index=cuda_index,
        name=text("name"),
        uuid=text("uuid"),
        compute_capability=(cc[0], cc[1]),
        total_bytes=total,
        free_bytes=free,
        used_bytes=used,
        reserved_bytes=reserved,
        memory_struct=memory_struct,
        is_mig=is_mig,
        processes=tuple(processes),
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise _Invalid(f"\"{key}\" must be a string or null")
    return value


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# ---------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES: which devices CUDA shows, in which order
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    """A device CUDA could enumerate: a whole GPU, or a MIG instance of a GPU in MIG mode."""

    nvml_index: int
    uuid: str
    handle: Any
    parent_handle: Any
    is_mig: bool


def _select_visible(
    candidates_by_gpu: list[list[_Candidate]], physical_uuids: list[str], value: str | None
) -> tuple[list[_Candidate], str | None, str]:
    """Apply CUDA_VISIBLE_DEVICES the way CUDA (and torch's parser of it) does.

    `candidates_by_gpu[i]` holds what NVML GPU `i` contributes: itself, or its MIG instances when it
    is in MIG mode. Returns the visible candidates in CUDA order, why the list stopped early (None
    when every entry was used) and the entries that were ignored.
    Rules (CUDA; torch.cuda._parse_visible_devices mirrors them): unset -> every GPU; entries are all
    integers or all UUIDs (`GPU-…` or `MIG-…` prefixes, unique prefixes accepted), decided by the
    first one; the first entry that is invalid, negative, out of range or of the other kind ends the
    list; a repeated entry makes the whole list empty.
    """
    if value is None:
        return [c for group in candidates_by_gpu for c in group], None, ""
    if not value.strip():
        return [], "it is empty", ""
    entries = [e.strip() for e in value.split(",")]
    chosen: list[_Candidate] = []
    seen: set[str] = set()
    all_migs = [c for group in candidates_by_gpu for c in group if c.is_mig]
    kind = "mig" if value.strip().startswith("MIG-") else "gpu" if value.strip().startswith("GPU-") else "int"
    for pos, entry in enumerate(entries):
        group: list[_Candidate] | None = None
        key = ""
        problem = None
        if kind == "int":
            number = _strtoul(entry)
            if number < 0:
                problem = "is not a device index" if entry else "is empty"
            elif number >= len(candidates_by_gpu):
                problem = f"is out of range (NVML sees {len(candidates_by_gpu)} GPU(s))"
            else:
                key = f"#{number}"
                group = candidates_by_gpu[number]
        elif kind == "gpu":
            matches = [i for i, u in enumerate(physical_uuids) if u.startswith(entry)]
            if not entry.startswith("GPU-"):
                problem = "is not a GPU UUID like the first entry"
            elif len(matches) != 1:
                problem = "matches no GPU" if not matches else "matches more than one GPU"
            else:
                key = f"#{matches[0]}"
                group = candidates_by_gpu[matches[0]]
        else:
            mig_matches = [c for c in all_migs if c.uuid.startswith(entry)]
            if not entry.startswith("MIG-"):
                problem = "is not a MIG UUID like the first entry"
            elif len(mig_matches) != 1:
                problem = "matches no MIG instance" if not mig_matches else "matches more than one MIG instance"
            else:
                key = mig_matches[0].uuid
                group = mig_matches
        if problem is not None:
            return chosen, f"entry {entry!r} {problem}", ",".join(entries[pos:])
        assert group is not None
        if key in seen:
            return [], f"it names a device twice ({entry!r}), which CUDA treats as no device", ""
        seen.add(key)
        chosen.extend(group)
    return chosen, None, ""


def _strtoul(text: str) -> int:
    """The leading integer of `text` (`1gpu` -> 1) as CUDA's strtoul-style parsing reads it, or -1."""
    digits = ""
    for i, ch in enumerate(text):
        if ch.isdecimal() or (i == 0 and ch in "+-"):
            digits += ch
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return -1


# ---------------------------------------------------------------------------------------------
# NVML
# ---------------------------------------------------------------------------------------------

_FROM_ENV: Any = object()


def read_snapshot(cuda_visible_devices: str | None = _FROM_ENV) -> GpuSnapshot:
    """Inventory of the GPUs this process would see, from NVML.

    `cuda_visible_devices` defaults to the environment's CUDA_VISIBLE_DEVICES (None = unset).
    Raises `GpuUnavailableError` (one line + hint) when NVML cannot be used, when no GPU is visible,
    or when only MIG instances are visible.
    """
    if cuda_visible_devices is _FROM_ENV:
        cuda_visible_devices = os.environ.get(CUDA_VISIBLE_DEVICES)
    nvml = _import_pynvml()
    _init(nvml)
    try:
        return _collect(nvml, cuda_visible_devices)
    except nvml.NVMLError as exc:
        raise GpuUnavailableError(f"NVML failed while reading the GPUs: {_nvml_text(exc)}", hint=SNAPSHOT_HINT) from None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down must never mask the result or the real error
            pass


def _import_pynvml() -> ModuleType:
    try:
        with warnings.catch_warnings():
            # The deprecated `pynvml` dist wraps nvidia-ml-py and warns on import; the API is the same.
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml  # noqa: PLC0415 - lazy on purpose: only `gpus`/`doctor`/`serve` need NVML
    except ImportError:
        raise GpuUnavailableError(
            "cannot read GPUs: the NVML bindings (nvidia-ml-py) are not installed",
            hint="pip install nvidia-ml-py, or " + SNAPSHOT_HINT,
        ) from None
    return pynvml


def _init(nvml: ModuleType) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        code = _code(exc)
        if code == _const(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND"):
            message = "no NVIDIA driver here: the NVML library (libnvidia-ml.so.1) was not found"
        elif code == _const(nvml, "NVML_ERROR_DRIVER_NOT_LOADED"):
            message = "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)"
        else:
            message = f"NVML cannot start: {_nvml_text(exc)}"
        raise GpuUnavailableError(message, hint="on a CPU-only box, " + SNAPSHOT_HINT) from None
    except OSError as exc:  # a broken libnvidia-ml (wrong architecture, truncated file)
        raise GpuUnavailableError(f"NVML cannot start: {exc}", hint="on a CPU-only box, " + SNAPSHOT_HINT) from None


def _collect(nvml: ModuleType, cuda_visible_devices: str | None) -> GpuSnapshot:
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        raise GpuUnavailableError("NVML is working but reports no GPUs on this machine", hint=SNAPSHOT_HINT)
    candidates_by_gpu: list[list[_Candidate]] = []
    physical_uuids: list[str] = []
    for index in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        physical_uuids.append(uuid)
        if _mig_enabled(nvml, handle):
            candidates_by_gpu.append(
                [_Candidate(index, _text(nvml.nvmlDeviceGetUUID(mh)), mh, handle, True) for mh in _mig_handles(nvml, handle)]
            )
        else:
            candidates_by_gpu.append([_Candidate(index, uuid, handle, handle, False)])

    visible, stopped_because, ignored = _select_visible(candidates_by_gpu, physical_uuids, cuda_visible_devices)
    notes: list[str] = []
    if not visible:
        if stopped_because is not None:
            message = f"no GPU is visible with {CUDA_VISIBLE_DEVICES}={cuda_visible_devices!r}: {stopped_because}"
            hint = f"unset {CUDA_VISIBLE_DEVICES} or list GPUs by index (0,1) or UUID; `nvidia-smi -L` lists them"
        else:
            selected = "the selected GPUs are" if cuda_visible_devices is not None else f"all {count} GPU(s) are"
            message = f"no usable GPU: {selected} in MIG mode with no MIG instance created"
            hint = "create MIG instances or disable MIG mode (nvidia-smi -mig 0), or " + SNAPSHOT_HINT
        raise GpuUnavailableError(message, hint=hint)
    if stopped_because is not None:
        notes.append(
            f"{CUDA_VISIBLE_DEVICES} {stopped_because}; CUDA ignores it and the entries after it ({ignored!r})"
        )
    if all(c.is_mig for c in visible):
        raise GpuUnavailableError(
            f"only MIG instances are visible ({len(visible)}); vLLM serves DeepSeek-V4 on whole GPUs "
            "and CUDA lets one process use a single MIG instance",
            hint=f"disable MIG mode (nvidia-smi -mig 0) or point {CUDA_VISIBLE_DEVICES} at GPUs not in MIG mode",
        )
    if any(c.is_mig for c in visible):
        notes.append("some visible devices are MIG instances; a CUDA process can use only one MIG instance")

    devices = tuple(_device(nvml, cuda_index, c) for cuda_index, c in enumerate(visible))
    names = {d.name for d in devices if not d.is_mig}
    if len(names) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        notes.append(
            "different GPU models are visible; set CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers them as NVML does"
        )
    return GpuSnapshot(
        devices=devices,
        driver_version=_optional(nvml, lambda: _text(nvml.nvmlSystemGetDriverVersion())),
        nvml_version=_optional(nvml, lambda: _text(nvml.nvmlSystemGetNVMLVersion())),
        cuda_driver_version=_optional(nvml, lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion())),
        hostname=socket.gethostname(),
        taken_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cuda_visible_devices=cuda_visible_devices,
        source="nvml",
        notes=tuple(notes),
        host_memory=host.read_host_memory(),
    )


def _device(nvml: ModuleType, cuda_index: int, c: _Candidate) -> GpuDevice:
    total, free, used, reserved, struct = _memory(nvml, c.handle, c.is_mig)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(c.parent_handle)
    return GpuDevice(
        index=c.nvml_index,
        cuda_index=cuda_index,
        name=_text(nvml.nvmlDeviceGetName(c.handle)),
        uuid=c.uuid,
        compute_capability=(int(major), int(minor)),
        total_bytes=total,
        free_bytes=free,
        used_bytes=used,
        reserved_bytes=reserved,
        memory_struct=struct,
        is_mig=c.is_mig,
        processes=_processes(nvml, c.handle),
    )


def _memory(nvml: ModuleType, handle: Any, is_mig: bool = False) -> tuple[int, int, int, int | None, str]:
    """(total, free, used, reserved, struct): v2 where the driver has it, then v1, then host memory."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return int(mem.total), int(mem.free), int(mem.used), int(mem.reserved), "v2"
        except TypeError:
            pass  # bindings without the `version` argument
        except nvml.NVMLError as exc:
            # Old drivers lack nvmlDeviceGetMemoryInfo_v2 (Function Not Found) or reject the struct.
            if _code(exc) not in _codes(
                nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_NOT_SUPPORTED"
            ):
                raise
    try:
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(mem.total), int(mem.free), int(mem.used), None, "v1"
    except nvml.NVMLError as exc:
        if _code(exc) != _const(nvml, "NVML_ERROR_NOT_SUPPORTED"):
            raise
    if is_mig:
        raise GpuUnavailableError("NVML reports no memory figures for a MIG instance", hint=SNAPSHOT_HINT)
    # Unified memory (GB10/GH200-style parts): NVML has no device memory figures. Like nvitop, use the
    # host's memory, which the GPU shares.
    total, available = _host_memory()
    return total, available, total - available, None, "unified"


def _host_memory() -> tuple[int, int]:
    """(total, available) bytes of host RAM, as `dsv4ctl.host` reads them."""
    memory = host.read_host_memory()
    return memory.total_bytes, memory.available_bytes


def _processes(nvml: ModuleType, handle: Any) -> tuple[GpuProcess, ...]:
    by_pid: dict[int, int | None] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for info in _process_infos(nvml, handle, getter):
            pid = int(info.pid)
            used = getattr(info, "usedGpuMemory", None)
            used = None if used is None else int(used)
            if pid not in by_pid or (used is not None and (by_pid[pid] or 0) < used):
                by_pid[pid] = used
    return tuple(GpuProcess(pid=pid, name=_process_name(pid), used_bytes=used) for pid, used in sorted(by_pid.items()))


def _process_infos(nvml: ModuleType, handle: Any, getter: str) -> list[Any]:
    """The driver's process list, or [] where it will not give one (not supported, no permission).

    nvidia-ml-py's unversioned getters call the newest struct (_v3) and raise
    NVMLLibraryMismatchError (not an NVMLError) on drivers without it; those drivers have _v2.
    """
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    errors: tuple[type[BaseException], ...] = (nvml.NVMLError,) + ((mismatch,) if mismatch else ())
    for name in (getter, getter + "_v2"):
        fn = getattr(nvml, name, None)
        if fn is None:
            continue
        try:
            return list(fn(handle))
        except errors as exc:
            if isinstance(exc, nvml.NVMLError) and _code(exc) != _const(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                return []
    return []


def _process_name(pid: int) -> str | None:
    try:
        import psutil
    except ImportError:
        return None
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return None


def _mig_enabled(nvml: ModuleType, handle: Any) -> bool:
    fn = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if fn is None:
        return False
    try:
        current, _pending = fn(handle)
    except nvml.NVMLError:
        return False  # not supported (pre-Ampere, consumer parts) or no permission
    return int(current) == int(getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))


def _mig_handles(nvml: ModuleType, handle: Any) -> list[Any]:
    handles = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            handles.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except nvml.NVMLError as exc:
            if _code(exc) != _const(nvml, "NVML_ERROR_NOT_FOUND"):
                raise
    return handles


def _optional(nvml: ModuleType, fn: Callable[[], str | None]) -> str | None:
    try:
        return fn()
    except nvml.NVMLError:
        return None


def _cuda_version(value: int) -> str:
    """12080 -> '12.8' (NVML encodes 1000 × major + 10 × minor)."""
    value = int(value)
    return f"{value // 1000}.{(value % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


def _const(nvml: ModuleType, name: str) -> int:
    return int(getattr(nvml, name, _NVML_CODES[name]))


def _codes(nvml: ModuleType, *names: str) -> set[int]:
    return {_const(nvml, n) for n in names}


def _nvml_text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - NVMLError.__str__ calls into the library
        text = ""
    return text or f"NVML error {_code(exc)}"
