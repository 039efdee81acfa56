"""DeepSeek-V4.1-Flash planned: its preset read from the nested config.json, its KV layers mirrored and equal to what
vLLM 0.33.0's and 0.34.0's own planners answered (tests/data/planner/deepseek-v41/, scripts/planner_oracle_v41.py),
the Engram tables' host memory from the checkpoint's values with vLLM's arithmetic, against the host's memory
(`dsv4ctl.host`, replaced here) or a GPU snapshot's record of it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dsv4ctl import host
from dsv4ctl.errors import UsageError
from dsv4ctl.host import HostMemory
from dsv4ctl.planning.checkpoint.load import load_geometry
from dsv4ctl.planning.mirror.kv_planner import max_concurrent_batches, plan_kv_cache, planner_rules
from dsv4ctl.planning.mirror.kv_specs_v41 import build_v41_layer_specs
from dsv4ctl.planning.plan.engram import EngramSettings, layer_head_rows, parse_engram_config, plan_engram_host
from dsv4ctl.units import GiB
from fitkit import h200, snapshot

V41 = "deepseek-ai/DeepSeek-V4.1-Flash"
ORACLE = Path(__file__).resolve().parents[1] / "data" / "planner" / "deepseek-v41"
TABLES = 202_758_032_400  # 768,022,850 rows x (256 + 8) B
BIG = HostMemory(2048 * GiB, 1900 * GiB, "big-node", "psutil", 1024 * GiB, 1024 * GiB)
SMALL = HostMemory(256 * GiB, 150 * GiB, "small-node", "psutil", 128 * GiB, 128 * GiB)
BETWEEN = HostMemory(512 * GiB, 200 * GiB, "mid-node", "psutil", 256 * GiB, 256 * GiB)


@pytest.fixture
def geometry():
    return load_geometry(V41)


def test_the_preset_is_read_from_its_text_config(geometry):
    assert geometry.architecture == "DeepseekV41ForCausalLM" and geometry.num_hidden_layers == 40
    assert geometry.compress_ratios == tuple([0, 0] + [2] * 18 + [1] * 20)
    assert geometry.v41.kv_source_layer_ids == (2, 8, 14, 20)
    assert geometry.v41.engram_num_embeddings == (384_006_168, 384_016_682)
    assert geometry.model_max_model_len == 1_048_576 and geometry.sliding_window == 128
    assert geometry.to_json()["deepseek_v41"]["candidate_source_layer_id"] == 20
    assert geometry.to_json()["sliding_window_only_layers"] == 2  # ratio 1 is a compressed cache in V4.1


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_the_mirror_equals_vllms_own_planner(geometry, version):
    data = json.loads((ORACLE / f"{version}.json").read_text())
    assert len(data["points"]) == 48
    for point in data["points"]:
        major, block = point["compute_capability_major"], point["block_size"]
        specs = build_v41_layer_specs(geometry.compress_ratios, geometry.v41, sliding_window=geometry.sliding_window,
                                      compute_capability_major=major, block_size=block)
        recorded = data["layouts"][f"sm{major}0-b{block}"]
        assert [(s.name, s.block_size, s.page_size_bytes, s.block_stride_alignment) for s in specs.values()] == [
            (r["name"], r["block_size"], r["page_size_bytes"], r["block_stride_alignment"]) for r in recorded]
        plan = plan_kv_cache(specs, [set(specs)], [point["kv_cache_memory_bytes"]],
                             original_max_model_len=geometry.model_max_model_len, autofit=True,
                             max_in_flight_tokens=max_concurrent_batches(True, 1) * point["max_num_batched_tokens"],
                             rules=planner_rules("0.33.0"))
        if point["error"]:
            assert plan.error is not None and point["autofit_max_model_len"] == 0
            continue
        assert plan.error is None
        assert (plan.max_model_len, plan.workers[0].num_blocks, plan.workers[0].bytes_per_block,
                len(plan.global_groups)) == (point["autofit_max_model_len"], point["num_blocks"],
                                             point["bytes_per_block"], point["num_groups"])


def test_the_block_size_trap_on_h200(geometry):
    specs = build_v41_layer_specs(geometry.compress_ratios, geometry.v41, sliding_window=128,
                                  compute_capability_major=9, block_size=128)
    plan = plan_kv_cache(specs, [set(specs)], [16 * GiB], original_max_model_len=1_048_576, autofit=True,
                         max_in_flight_tokens=16_384)
    assert plan.workers[0].bytes_per_block == 9_884_160  # lcm of the 64-token pages, not 230,400


def test_engram_rows_come_from_the_primes(geometry):
    assert [sum(h) for h in layer_head_rows(geometry.v41)] == [384_006_168, 384_016_682]


@pytest.mark.parametrize("tp, largest", [(1, 768_022_850), (4, 192_007_632), (8, 96_003_964)])
def test_engram_host_term_per_tp(geometry, tp, largest):
    plan = plan_engram_host(geometry.v41, EngramSettings(), tensor_parallel_size=tp, data_parallel_size=1, host=BIG)
    assert plan.table_bytes == TABLES and plan.per_node_exact == TABLES
    assert max(plan.rank_rows) == largest and sum(plan.rank_rows) == 768_022_850
    assert plan.per_node_pinned == 264 * GiB  # every allocation rounded up to a power of two
    assert plan.verdict == "fits"


def test_dp_shared_and_per_replica_copies(geometry):
    shared = plan_engram_host(geometry.v41, EngramSettings(), tensor_parallel_size=4, data_parallel_size=2, host=BIG)
    assert shared.mode == "dp-shared" and shared.copies_per_node == 1
    assert TABLES <= shared.per_node_pinned < TABLES + 16 * (2 << 20)  # 2 MiB granularity per allocation
    private = plan_engram_host(geometry.v41, parse_engram_config('{"dp_shared_memory": false}'),
                               tensor_parallel_size=4, data_parallel_size=2, host=BIG)
    assert private.copies_per_node == 2 and private.per_node_exact == 2 * TABLES
    across = plan_engram_host(geometry.v41, parse_engram_config('{"embedding_across_dp": true, "dp_shared_memory": false}'),
                              tensor_parallel_size=4, data_parallel_size=2, host=BIG)
    assert across.num_shards == 8 and across.per_node_exact == TABLES
    thp = plan_engram_host(geometry.v41, parse_engram_config('{"use_thp": true}'), tensor_parallel_size=4,
                           data_parallel_size=1, host=BIG)
    assert thp.per_node_pinned == TABLES
    gpu = plan_engram_host(geometry.v41, parse_engram_config('{"cpu_offload": false}'), tensor_parallel_size=4,
                           data_parallel_size=1, host=SMALL)
    assert gpu.verdict == "gpu" and gpu.per_node_exact == 0


def test_host_verdicts(geometry):
    short = plan_engram_host(geometry.v41, EngramSettings(), tensor_parallel_size=4, data_parallel_size=1, host=SMALL)
    assert short.verdict == "short"
    assert "need 188.83 GiB at least (264.00 GiB with the allocator's rounding), have 150.00 GiB available" in short.lines[-1]
    assert "short by 38.83 GiB" in short.lines[-1]
    tight = plan_engram_host(geometry.v41, EngramSettings(), tensor_parallel_size=4, data_parallel_size=1, host=BETWEEN)
    assert tight.verdict == "tight" and "use_thp" in tight.lines[-1]
    unknown = plan_engram_host(geometry.v41, EngramSettings(), tensor_parallel_size=4, data_parallel_size=1, host=None)
    assert unknown.verdict == "unknown"


@pytest.mark.parametrize("text, words", [
    ("{not json", "must be JSON"),
    ("[1]", "JSON object"),
    ('{"cpu_ofload": true}', "unknown field 'cpu_ofload'"),
    ('{"cpu_offload": "yes"}', "must be true or false"),
    ('{"cpu_offload": false, "dp_shared_memory": true}', "dp_shared_memory requires cpu_offload=True"),
    ('{"use_thp": true, "dp_shared_memory": true}', "use_thp requires cpu_offload=True and dp_shared_memory=False"),
])
def test_engram_config_is_read_as_vllm_reads_it(text, words):
    with pytest.raises(UsageError, match=words):
        parse_engram_config(text)


def test_disk_offload_and_too_many_shards_are_vllms_refusals(geometry):
    with pytest.raises(UsageError, match="disk_offload requires a Qwen4Exp model on CUDA"):
        plan_engram_host(geometry.v41, parse_engram_config('{"disk_offload": true}'), tensor_parallel_size=1,
                         data_parallel_size=1, host=None)
    with pytest.raises(UsageError, match="leaves ranks without hash heads: 24 heads over 16 shards"):
        plan_engram_host(geometry.v41, parse_engram_config('{"embedding_across_dp": true}'), tensor_parallel_size=8,
                         data_parallel_size=2, host=None)


@pytest.fixture
def host_is(monkeypatch):
    def set_host(memory: HostMemory) -> None:
        monkeypatch.setattr(host, "read_host_memory", lambda: memory)
    return set_host


def test_fit_length_plans_kv_and_host_memory(cli, host_is):
    host_is(BIG)
    result = cli("fit-length", V41, "--kv-cache-memory", "40GiB", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "fits" and doc["block_size"] == 64 and doc["bytes_per_block"] == 116_928
    assert doc["num_kv_cache_groups"] == 9 and doc["num_kv_layers"] == 51
    memory = doc["host_memory"]
    assert memory["per_node_exact_bytes"] == TABLES and memory["host_available_bytes"] == 1900 * GiB
    assert memory["verdict"] == "fits"
    text = " ".join(cli("fit-length", V41, "--kv-cache-memory", "40GiB").stdout.split())
    assert "Host memory (Engram tables):" in text and "264.00 GiB needed for the tables" in text


def test_a_host_too_small_is_a_shortfall_with_its_arithmetic(cli, host_is):
    host_is(SMALL)
    result = cli("fit-length", V41, "--kv-cache-memory", "40GiB", "-tp", "4")
    assert result.exit_code == 6
    text = " ".join(result.stdout.split())
    assert "the host cannot pin the tables: need 188.83 GiB at least" in text
    assert "4 ranks pin 264.00 GiB per node" in text
    assert "a host with at least 264.00 GiB available" in text
    doc = json.loads(cli("fit-length", V41, "--kv-cache-memory", "40GiB", "-tp", "4", "--json").stdout)
    assert doc["verdict"] == "does_not_fit" and doc["host_memory"]["verdict"] == "short"
    assert doc["vllm_command"] is None


def test_a_gpus_snapshot_carries_its_hosts_memory(cli, host_is, tmp_path):
    host_is(SMALL)  # this machine: not the one planned
    snap = replace(snapshot(*(h200(i) for i in range(4))), host_memory=BIG)
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(snap.to_json()))
    doc = json.loads(cli("fit-length", V41, "--gpus", path, "-tp", "4", "--weights-memory", "80GiB", "--json").stdout)
    assert doc["host_memory"]["host_available_bytes"] == 1900 * GiB and doc["host_memory"]["host_source"] == "snapshot"
    assert doc["kv_cache_memory_source"] == "predicted" and doc["block_size"] == 64
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(snapshot(*(h200(i) for i in range(4))).to_json()))
    doc = json.loads(cli("fit-length", V41, "--gpus", bare, "-tp", "4", "--weights-memory", "80GiB", "--json").stdout)
    assert doc["host_memory"]["verdict"] == "unknown"
    assert any("host memory unknown (the GPU snapshot carries none)" in w for w in doc["warnings"])


def test_classic_mtp_is_vllms_refusal(cli, host_is):
    host_is(BIG)
    result = cli("fit-length", V41, "--kv-cache-memory", "40GiB",
                 "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')
    assert result.exit_code == 6
    text = " ".join(result.stderr.split())
    assert "Use speculative method 'dspark' instead of 'mtp'." in text
    assert "spec_decode/mtp/config.py:83-88" in text


def test_engram_config_is_carried_into_the_command(cli, host_is):
    host_is(SMALL)
    doc = json.loads(cli("fit-length", V41, "--kv-cache-memory", "40GiB", "-tp", "4",
                         "--engram-config", '{"cpu_offload": false}', "--json").stdout)
    assert doc["host_memory"]["mode"] == "gpu" and doc["verdict"] == "fits"
    assert doc["vllm_flags"][-2:] == ["--engram-config", '{"cpu_offload": false}']


def test_host_memory_in_a_snapshot_round_trips(tmp_path):
    from dsv4ctl import gpu

    snap = replace(snapshot(h200(0)), host_memory=BIG)
    path = tmp_path / "gpus.json"
    gpu.save_snapshot(snap, path)
    loaded = gpu.load_snapshot(path)
    assert loaded.host_memory == replace(BIG, source="snapshot")
    data = snap.to_json()
    data["host_memory"]["available_bytes"] = data["host_memory"]["total_bytes"] + 1
    path.write_text(json.dumps(data))
    with pytest.raises(Exception, match="available_bytes\" exceeds"):
        gpu.load_snapshot(path)


def test_gpus_shows_the_snapshots_host_memory(cli, tmp_path):
    snap = replace(snapshot(h200(0)), host_memory=BIG)
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(snap.to_json()))
    result = cli("gpus", "--snapshot", path)
    assert result.exit_code == 0
    assert "host memory: 1900.00 GiB available of 2048.00 GiB (big-node, snapshot)" in " ".join(result.stdout.split())


def test_a_release_before_v41_does_not_plan_it(cli, host_is):
    host_is(BIG)
    result = cli("fit-length", V41, "--kv-cache-memory", "40GiB", "--vllm-version", "0.29.0", "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 6 and doc["verdict"] == "does_not_fit"
    assert doc["why"].startswith("vLLM 0.29.0 has no DeepSeek-V4.1")
