"""serve's preflight of a DeepSeek-V4.1 launch: what vLLM refuses at startup (classic MTP, DBO with Engram, an Engram
config it rejects) is refused before the launch, with vLLM's words and where they are; a host that cannot pin the
Engram tables is refused with the arithmetic; one that can lets the plan go on."""

from __future__ import annotations

import argparse

import pytest

from dsv4ctl import host
from dsv4ctl.errors import GpuUnavailableError
from dsv4ctl.host import HostMemory
from dsv4ctl.serve import preflight
from dsv4ctl.units import GiB

V41 = "deepseek-ai/DeepSeek-V4.1-Flash"
BIG = HostMemory(2048 * GiB, 1900 * GiB, "big-node", "psutil")
SMALL = HostMemory(256 * GiB, 150 * GiB, "small-node", "psutil")


def _ns(**kw) -> argparse.Namespace:
    base = dict(
        model=V41, max_model_len=None, kv_cache_memory_bytes=40 * GiB, gpu_memory_utilization=0.92,
        kv_cache_dtype="auto", block_size=None, max_num_batched_tokens=None, max_num_seqs=None,
        tensor_parallel_size=4, pipeline_parallel_size=1, data_parallel_size=1, data_parallel_size_local=None,
        enable_expert_parallel=False, async_scheduling=None, attention_backend=None, speculative_config=None,
        engram_config=None, enable_dbo=False, ubatch_size=0,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def _no_gpu():
    raise GpuUnavailableError("no NVIDIA driver here")


@pytest.fixture(autouse=True)
def host_is(monkeypatch):
    memory = {"now": BIG}
    monkeypatch.setattr(host, "read_host_memory", lambda: memory["now"])
    return lambda m: memory.update(now=m)


def decide(ns: argparse.Namespace) -> preflight.PreflightDecision:
    return preflight.decide(ns, [ns.model, "-tp", str(ns.tensor_parallel_size)], snapshot_reader=_no_gpu)


@pytest.mark.parametrize("spec", [{"method": "mtp", "num_speculative_tokens": 1}, '{"method": "mtp"}'])
def test_classic_mtp_is_refused_before_the_launch(spec):
    decision = decide(_ns(speculative_config=spec, kv_cache_memory_bytes=None))
    assert decision.action == preflight.REFUSE
    assert "Use speculative method 'dspark' instead of 'mtp'." in decision.reason
    assert "vllm==0.34.0 v1/worker/gpu/spec_decode/mtp/config.py:83-88" in decision.reason
    assert "vllm==0.33.0 config/speculative.py:1479-1485" in decision.reason


@pytest.mark.parametrize("kw", [{"enable_dbo": True}, {"ubatch_size": 2}])
def test_dbo_with_engram_is_refused(kw):
    decision = decide(_ns(**kw))
    assert decision.action == preflight.REFUSE
    assert "DeepSeek V4.1 Engram does not support DBO or microbatching." in decision.reason


def test_an_engram_config_vllm_rejects_is_refused():
    decision = decide(_ns(engram_config={"disk_offload": True}))
    assert decision.action == preflight.REFUSE and "disk_offload requires a Qwen4Exp model on CUDA" in decision.reason


def test_a_host_that_cannot_pin_the_tables_is_refused(host_is):
    host_is(SMALL)
    decision = decide(_ns())
    assert decision.action == preflight.REFUSE
    assert "need 188.83 GiB at least (264.00 GiB with the allocator's rounding), have 150.00 GiB" in decision.reason
    assert decision.plan is None  # refused before any GPU is read: the host's memory decides it alone


def test_a_host_that_holds_them_goes_on():
    decision = decide(_ns())
    assert decision.action != preflight.REFUSE
    assert decision.plan["host_memory"]["verdict"] == "fits" and decision.plan["block_size"] == 64


def test_a_dspark_launch_without_gpu_figures_still_gets_the_host_check(host_is):
    host_is(SMALL)
    decision = decide(_ns(speculative_config={"method": "dspark"}, kv_cache_memory_bytes=None))
    assert decision.action == preflight.REFUSE
    assert "vLLM would fail to pin DeepSeek-V4.1's Engram tables: the host cannot pin the tables" in decision.reason
    host_is(BIG)
    assert decide(_ns(speculative_config={"method": "dspark"}, kv_cache_memory_bytes=None)).action == preflight.PASS_THROUGH


def test_the_v41_flags_are_read_without_vllm_as_each_release_has_them():
    from dsv4ctl.errors import UsageError
    from dsv4ctl.serve.flags_without_vllm import parse_planning_flags

    flags = [V41, "-tp", "4", "--kv-cache-memory-bytes", "40G", "--engram-config", '{"disk_offload": true}']
    ns = parse_planning_flags(flags, "0.33.0")
    assert ns.engram_config == {"disk_offload": True}
    assert preflight.decide(ns, flags, snapshot_reader=_no_gpu).action == preflight.REFUSE
    ns = parse_planning_flags([V41, "--enable-dbo"], "0.33.0")
    assert decide(_ns(enable_dbo=ns.enable_dbo)).action == preflight.REFUSE
    with pytest.raises(UsageError, match="vLLM 0.29.0's parser would refuse this: unrecognized arguments: --engram-config"):
        parse_planning_flags([V41, "--engram-config", "{}"], "0.29.0")  # the flag arrived with V4.1, in 0.30.0


def test_an_engram_config_on_a_model_without_engram_is_refused_before_the_launch():
    decision = decide(_ns(model="deepseek-ai/DeepSeek-V4-Flash", engram_config={"cpu_offload": True}))
    assert decision.action == preflight.REFUSE
    text = " ".join(decision.refusal.message.split())
    assert '"EngramConfig requires a model with supported Engram embeddings and non-empty n-gram layer ids."' in text
    assert "config/engram.py" in text


def test_gpu_resident_tables_with_host_memory_read_here_plan_on():
    # serve plans the node it runs on: its host memory is read (psutil) even with no GPU read.
    decision = decide(_ns())
    assert decision.plan["host_memory"]["host_source"] == "psutil"
