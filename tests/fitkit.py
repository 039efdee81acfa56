"""Builders for fit-length tests: DeepSeek-V4 config dirs, safetensors checkpoints, GPU snapshots."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from dsv4ctl.gpu import GpuDevice, GpuSnapshot
from dsv4ctl.planning.checkpoint.geometry import _builtin_configs

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
PRO = "deepseek-ai/DeepSeek-V4-Pro"
GiB = 1 << 30

# An idle H200 as NVML reports it (driver 580.159.04): total, free, reserved.
H200_TOTAL = 150_754_820_096
H200_FREE = 150_109_880_320
H200_RESERVED = 644_939_776


def builtin_config(model_id: str = FLASH) -> dict[str, Any]:
    return json.loads(json.dumps(_builtin_configs()[model_id]))


def layer_types_form(config: dict[str, Any]) -> dict[str, Any]:
    """The upstream-transformers form: `layer_types` + `compress_rates`, MTP layers dropped."""
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    out = {k: v for k, v in config.items() if k != "compress_ratios"}
    out["layer_types"] = [names[r] for r in config["compress_ratios"][: config["num_hidden_layers"]]]
    out["compress_rates"] = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    return out


def write_safetensors(path: Path, tensors: dict[str, int]) -> None:
    """A safetensors file whose header lists `tensors` (name -> bytes); the data region is sparse."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, size in tensors.items():
        header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        if offset:
            fh.seek(offset - 1, 1)
            fh.write(b"\0")


def make_checkpoint(directory: Path, config: dict[str, Any], shards: list[dict[str, int]] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    for i, tensors in enumerate(shards or []):
        write_safetensors(directory / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors", tensors)
    return directory


def h200(cuda_index: int = 0, *, free: int = H200_FREE, is_mig: bool = False, name: str = "NVIDIA H200") -> GpuDevice:
    return GpuDevice(
        index=cuda_index,
        cuda_index=cuda_index,
        name=name,
        uuid=f"GPU-00000000-0000-0000-0000-00000000000{cuda_index}",
        compute_capability=(9, 0),
        total_bytes=H200_TOTAL,
        free_bytes=free,
        used_bytes=H200_TOTAL - H200_RESERVED - free,
        reserved_bytes=H200_RESERVED,
        memory_struct="v2",
        is_mig=is_mig,
        processes=(),
    )


def snapshot(*devices: GpuDevice) -> GpuSnapshot:
    return GpuSnapshot(
        devices=tuple(devices),
        driver_version="580.159.04",
        nvml_version="13.580.159.04",
        cuda_driver_version="13.0",
        hostname="h200-test",
        taken_at="2026-11-29T00:00:00+00:00",
        cuda_visible_devices=None,
        source="file",
    )


@pytest.fixture(autouse=True)
def no_hf_cache(tmp_path_factory, monkeypatch):
    """Model ids resolve to the built-in values unless a test builds a Hugging Face cache itself."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("empty-hf-hub")))
