"""Snapshot files: the round trip `gpus --json` -> `--gpus snapshot.json`, and one-line errors."""

from __future__ import annotations

import copy
import json

import pytest

from dsv4ctl import gpu
from dsv4ctl.errors import InputError, OutputError

H200_TOTAL = 150_754_820_096
H200_RESERVED = 644_939_776


def device(cuda_index: int = 0, **changes) -> gpu.GpuDevice:
    base = dict(index=cuda_index, cuda_index=cuda_index, name="NVIDIA H200", uuid=f"GPU-{cuda_index}",
                compute_capability=(9, 0), total_bytes=H200_TOTAL, free_bytes=H200_TOTAL - H200_RESERVED,
                used_bytes=0, reserved_bytes=H200_RESERVED, memory_struct="v2", is_mig=False,
                processes=(gpu.GpuProcess(4242, "python3", 2**30), gpu.GpuProcess(7, None, None)))
    base.update(changes)
    return gpu.GpuDevice(**base)


def snapshot(*devices: gpu.GpuDevice) -> gpu.GpuSnapshot:
    return gpu.GpuSnapshot(
        devices=devices or (device(0), device(1)), driver_version="580.159.04", nvml_version="13.580.159.04",
        cuda_driver_version="13.0", hostname="h200-7", taken_at="2026-11-29T21:04:05+00:00",
        cuda_visible_devices="0,1", source="nvml", notes=("a note",),
    )


def write(tmp_path, payload) -> str:
    path = tmp_path / "snapshot.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return str(path)


def test_round_trip_keeps_every_field(tmp_path):
    original = snapshot()
    path = tmp_path / "s.json"
    gpu.save_snapshot(original, path)
    loaded = gpu.load_snapshot(path)
    assert loaded.devices == original.devices
    assert loaded.source == "file"
    for name in ("driver_version", "nvml_version", "cuda_driver_version", "hostname", "taken_at",
                 "cuda_visible_devices", "notes"):
        assert getattr(loaded, name) == getattr(original, name)
    assert loaded.devices[0].cuda_total_bytes == H200_TOTAL - H200_RESERVED


def test_json_carries_kind_version_and_derived_fields():
    data = snapshot().to_json()
    assert data["schema_version"] == 1 and data["kind"] == "dsv4ctl.gpus"
    assert data["devices"][0]["sm"] == "sm_90"
    assert data["devices"][0]["cuda_total_bytes"] == H200_TOTAL - H200_RESERVED
    json.dumps(data)  # plain JSON types only


def test_v1_and_unified_devices_load():
    data = snapshot(device(0, reserved_bytes=None, memory_struct="v1"), device(1, memory_struct="unified",
                                                                              reserved_bytes=None)).to_json()
    loaded = gpu.GpuSnapshot.from_json(data)
    assert [d.cuda_total_bytes for d in loaded.devices] == [H200_TOTAL, H200_TOTAL]
    assert loaded.devices[1].is_unified_memory


def test_devices_come_back_in_cuda_order():
    data = snapshot().to_json()
    data["devices"].reverse()
    assert [d.cuda_index for d in gpu.GpuSnapshot.from_json(data).devices] == [0, 1]


def test_summary_lines_are_compact():
    lines = snapshot().summary_lines()
    assert lines[0] == "cuda:0 NVIDIA H200 sm_90, 139.80 GiB free of 139.80 GiB"
    assert len(lines) == 2


def mutate(path: str, value):
    """A copy of a valid snapshot document with the field at `path` (dotted, list indices) replaced."""
    data = copy.deepcopy(snapshot().to_json())
    keys = path.split(".")
    target = data
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = keys[-1]
    if value is KeyError:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return data


@pytest.mark.parametrize(
    "data, words",
    [
        ([], "expected a JSON object, got a list"),
        (mutate("kind", "nvidia-smi"), "\"kind\" is 'nvidia-smi'"),
        (mutate("schema_version", 2), "schema_version 2 is newer"),
        (mutate("schema_version", "1"), "\"schema_version\" is missing or not an integer"),
        (mutate("devices", []), "lists no GPUs"),
        (mutate("devices", {}), "\"devices\" is missing or not a list"),
        (mutate("devices.0.total_bytes", -1), "devices[0].total_bytes must be a non-negative integer, got -1"),
        (mutate("devices.1.free_bytes", True), "devices[1].free_bytes must be a non-negative integer, got true"),
        (mutate("devices.0.free_bytes", H200_TOTAL + 1), "devices[0].free_bytes (150754820097) exceeds total_bytes"),
        (mutate("devices.0.total_bytes", 0), "devices[0].total_bytes is 0"),
        (mutate("devices.0.compute_capability", "9.0"), "devices[0].compute_capability must be [major, minor]"),
        (mutate("devices.0.memory_struct", "v3"), "devices[0].memory_struct must be one of v2, v1, unified"),
        (mutate("devices.0.name", KeyError), "devices[0].name must be a non-empty string"),
        (mutate("devices.1.cuda_index", 0), "two devices share a cuda_index"),
        (mutate("devices.0.processes.0.pid", "x"), "devices[0].processes[0] must be an object with an integer pid"),
        (mutate("devices.0.processes.0.used_bytes", -5), "processes[0].used_bytes must be a non-negative integer"),
        (mutate("taken_at", None), "\"taken_at\" is missing"),
        (mutate("driver_version", 580), "\"driver_version\" must be a string or null"),
    ],
)
def test_invalid_documents_are_one_line(tmp_path, data, words):
    path = write(tmp_path, data)
    with pytest.raises(InputError) as info:
        gpu.load_snapshot(path)
    message = info.value.message
    assert message.startswith(f"GPU snapshot {path!r}: invalid GPU snapshot: ")
    assert words in message
    assert "\n" not in message
    assert "dsv4ctl gpus --save" in info.value.hint


def test_mig_only_snapshot_is_refused(tmp_path):
    data = snapshot(device(0, is_mig=True), device(1, is_mig=True)).to_json()
    with pytest.raises(InputError, match="only MIG instances"):
        gpu.load_snapshot(write(tmp_path, data))


@pytest.mark.parametrize(
    "content, words",
    [("", "is empty"), ("{not json", "is not JSON (line 1, column 2"), ("\xff\xfe", None)],
)
def test_unreadable_files(tmp_path, content, words):
    path = tmp_path / "s.json"
    if words is None:
        path.write_bytes(b"\xff\xfe\x00")
        words = "is not a UTF-8 text file"
    else:
        path.write_text(content)
    with pytest.raises(InputError) as info:
        gpu.load_snapshot(path)
    assert words in info.value.message


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        gpu.load_snapshot(tmp_path / "nope.json")
    with pytest.raises(InputError, match="is a directory"):
        gpu.load_snapshot(tmp_path)


def test_save_to_unwritable_place_is_an_output_error(tmp_path):
    with pytest.raises(OutputError, match="cannot write .*s.json: no such directory: .*no-such-dir"):
        gpu.save_snapshot(snapshot(), tmp_path / "no-such-dir" / "s.json")
    assert not (tmp_path / "no-such-dir").exists()  # a directory is not made for a path given


def test_the_command_line_shows_the_expected_type_and_the_upgrade_hint(cli, tmp_path):
    # The message reaches the terminal as written: "[major, minor]" is the expected type, not markup to drop.
    minimal = {"kind": "dsv4ctl.gpus", "schema_version": 1, "taken_at": "2026-12-01T00:00:00Z", "hostname": "h",
               "devices": [{"cuda_index": 0, "name": "NVIDIA H200", "total_bytes": 100, "free_bytes": 10,
                            "used_bytes": 90}]}
    result = cli("gpus", "--snapshot", write(tmp_path, minimal))
    assert result.exit_code == 1
    assert "devices[0].compute_capability must be [major, minor] (e.g. [9, 0] for an H200), got null" in result.stderr
    newer = cli("gpus", "--snapshot", write(tmp_path, mutate("schema_version", 2)))
    assert "schema_version 2 is newer than this dsv4ctl reads (1)" in newer.stderr
    hint = newer.stderr.strip().splitlines()[-1]
    assert hint.startswith("Hint: upgrade dsv4ctl here") and "take a snapshot on the GPU box" not in hint
