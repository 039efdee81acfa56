#!/usr/bin/env python3
"""Plan an 8 x H200 box from a hub's safetensors headers, on loopback: what `fit-length MODEL -tp 8 --gpus SNAPSHOT`
prints when the hub is reachable and the checkpoint is not downloaded.

    .venv/bin/python benchmarks/hub_plan_demo.py [--flash-gb 160] [--pro-gb 1008] [--json]

The hub is tests/hubkit.py's (huggingface_hub's URL layout on 127.0.0.1, pointed to by HF_ENDPOINT). It serves,
for each built-in id, the preset's config.json and a sharded checkpoint whose shards hold only their safetensors
header (huggingface_hub reads nothing else: hf_api.py:6944/:6955 range reads of the header). The headers carry
DeepSeek-V4's tensor names (attention, shared and routed experts, the MTP layer) with sizes that add up to the
checkpoint size given: these are NOT the published files (this machine reaches no hub). Flash's default, 160 GB,
is the figure an operator gives for it in issue 16; Pro's default scales Flash's by Pro's config dimensions
(hidden 7168/4096, 61/43 layers, 384/256 routed experts, an intermediate size proportional to hidden): an
assumption for the demonstration, said so in the output. Shares: 90 % routed experts, 1 layer's worth for MTP.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hubkit import FakeHub  # noqa: E402

SNAPSHOT = ROOT / "tests" / "fixtures" / "gpus" / "h200x8-snapshot.json"
EXPERT_SHARE = 0.90


def _header_only(tensors: dict[str, int]) -> bytes:
    """A safetensors file of int8 tensors of these byte sizes, cut after its header (no tensor data)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "I8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(raw)) + raw


def _checkpoint(config: dict, total: int, shards: int = 8) -> dict[str, bytes]:
    layers, experts = config["num_hidden_layers"], config["n_routed_experts"]
    mtp = total // (layers + 1)  # the draft layer: one layer's worth
    body = total - mtp
    per_expert = int(body * EXPERT_SHARE) // (layers * experts)
    dense = (body - per_expert * layers * experts) // (layers + 1)
    tensors: dict[str, int] = {"model.embed_tokens.weight": dense}
    for layer in range(layers):
        tensors[f"model.layers.{layer}.attn.wq_a.weight"] = dense
        for e in range(experts):
            tensors[f"model.layers.{layer}.ffn.experts.{e}.w1.weight"] = per_expert
    tensors[f"model.layers.{layers}.attn.wq_a.weight"] = mtp  # past num_hidden_layers: the MTP layer
    names = list(tensors)
    files, weight_map = {}, {}
    for i in range(shards):
        part = {n: tensors[n] for n in names[i::shards]}
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        files[fname] = _header_only(part)
        weight_map.update({n: fname for n in part})
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": sum(tensors.values())}, "weight_map": weight_map}).encode()
    files["config.json"] = json.dumps(config).encode()
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flash-gb", type=float, default=160.0)
    parser.add_argument("--pro-gb", type=float, default=None, help="default: Flash's size scaled by Pro's config")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    presets = json.loads((ROOT / "dsv4ctl" / "planning" / "checkpoint" / "builtin_models.json").read_text())
    flash, pro = presets["deepseek-ai/DeepSeek-V4-Flash"], presets["deepseek-ai/DeepSeek-V4-Pro"]
    scale = ((pro["hidden_size"] / flash["hidden_size"]) ** 2 * pro["num_hidden_layers"] / flash["num_hidden_layers"])
    pro_gb = args.pro_gb or round(args.flash_gb * (EXPERT_SHARE * scale * pro["n_routed_experts"] / flash["n_routed_experts"]
                                                 + (1 - EXPERT_SHARE) * scale))
    sizes = {"deepseek-ai/DeepSeek-V4-Flash": args.flash_gb, "deepseek-ai/DeepSeek-V4-Pro": pro_gb}
    hub = FakeHub({repo: _checkpoint(presets[repo], int(gb * 1e9)) for repo, gb in sizes.items()}).start()
    try:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "DSV4CTL_CACHE_DIR": cache,
                   "HF_HUB_CACHE": str(Path(cache) / "hf"), "COLUMNS": "80", "NO_COLOR": "1"}
            for repo, gb in sizes.items():
                cmd = [sys.executable, "-m", "dsv4ctl", "fit-length", repo, "-tp", "8", "--gpus", str(SNAPSHOT)]
                print(f"$ {' '.join(cmd[3:])}    # headers of {gb:g} GB served on {hub.endpoint}", flush=True)
                out = subprocess.run(cmd + (["--json"] if args.json else []), env=env, capture_output=True, text=True)
                print(out.stdout + out.stderr, flush=True)
    finally:
        hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
