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
    ('{"cpu_offload": "maybe"}', "must be a boolean as vLLM's pydantic reads it"),
    ('{"cpu_offload": 2}', "must be a boolean as vLLM's pydantic reads it"),
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
    host_is(SMALL)  # this machine: not read, the plan reads no GPUs here
    result = cli("fit-length", V41, "--kv-cache-memory", "40GiB", "--host-memory", "1900GiB", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "fits" and doc["block_size"] == 64 and doc["bytes_per_block"] == 116_928
    assert doc["num_kv_cache_groups"] == 9 and doc["num_kv_layers"] == 51
    memory = doc["host_memory"]
    assert memory["per_node_exact_bytes"] == TABLES and memory["host_available_bytes"] == 1900 * GiB
    assert memory["verdict"] == "fits"
    text = " ".join(cli("fit-length", V41, "--kv-cache-memory", "40GiB", "--host-memory", "1900GiB").stdout.split())
    assert "Host memory (Engram tables):" in text and "264.00 GiB needed for the tables" in text


def test_a_host_too_small_is_a_shortfall_with_its_arithmetic(cli, host_is):
    host_is(SMALL)
    result = cli("fit-length", V41, "--kv-cache-memory", "40GiB", "-tp", "4", "--host-memory", "150GiB")
    assert result.exit_code == 6
    text = " ".join(result.stdout.split())
    assert "the host cannot pin the tables: need 188.83 GiB at least" in text
    assert "4 ranks pin 264.00 GiB per node" in text
    assert "a host with at least 264.00 GiB available" in text
    doc = json.loads(cli("fit-length", V41, "--kv-cache-memory", "40GiB", "-tp", "4", "--host-memory", "150GiB",
                         "--json").stdout)
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
    assert any("host memory unknown (the GPU snapshot carries none; --host-memory SIZE gives it)" in w
               for w in doc["warnings"])


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
    assert result.exit_code == 2 and "verdict" not in doc
    assert doc["error"]["message"].startswith("vLLM 0.29.0 cannot run deepseek-ai/DeepSeek-V4.1-Flash")


@pytest.mark.parametrize("value, expected", [
    ('"yes"', True), ('"No"', False), ('"ON"', True), ('"off"', False), ('"t"', True), ('"F"', False),
    ('"y"', True), ('"n"', False), ('"1"', True), ('"0"', False), ("1", True), ("0", False), ("true", True),
])
def test_engram_booleans_are_read_as_pydantic_reads_them(value, expected):
    # vLLM's EngramConfig is a pydantic dataclass in lax mode (config/utils.py): "yes" is a bool there.
    assert parse_engram_config(f'{{"cpu_offload": {value}}}').cpu_offload is expected


def test_dp_shared_memory_at_dp_1_is_vllms_refusal(cli, host_is):
    host_is(BIG)
    result = cli("fit-length", V41, "--vllm-version", "0.34.0", "--kv-cache-memory", "20GiB",
                 "--engram-config", '{"dp_shared_memory": true}')
    assert result.exit_code == 6
    text = " ".join(result.stderr.split())
    assert '"dp_shared_memory requires data_parallel_size > 1."' in text and "config/engram.py:106-110" in text
    ok = cli("fit-length", V41, "--vllm-version", "0.34.0", "--kv-cache-memory", "20GiB", "-tp", "4", "-dp", "2",
             "--engram-config", '{"dp_shared_memory": true}', "--host-memory", "1900GiB", "--json")
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["host_memory"]["mode"] == "dp-shared"


def _write_snapshot(tmp_path, n: int, memory: HostMemory | None) -> Path:
    snap = snapshot(*(h200(i) for i in range(n)))
    if memory is not None:
        snap = replace(snap, host_memory=memory)
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(snap.to_json()))
    return path


def test_gpu_resident_tables_are_a_gpu_memory_term(cli, host_is, tmp_path):
    host_is(BIG)
    path = _write_snapshot(tmp_path, 8, BIG)
    base = ("fit-length", V41, "--vllm-version", "0.34.0", "--gpus", path, "--weights-memory", "30GiB", "--json")
    pinned = json.loads(cli(*base, "-tp", "8").stdout)
    gpu = json.loads(cli(*base, "-tp", "8", "--engram-config", '{"cpu_offload": false}').stdout)
    share = gpu["gpus"][0]["engram_tables_bytes"]
    # TP 8: 3 of the 24 heads per layer on rank 0, rows x (256 + 8) bytes, in GPU memory beside the weights.
    assert share == gpu["host_memory"]["rank_rows"][0] * 264 and 23 * GiB < share < 24 * GiB
    assert "engram_tables_bytes" not in pinned["gpus"][0]
    assert pinned["gpus"][0]["available_kv_bytes"] - gpu["gpus"][0]["available_kv_bytes"] == share
    assert any(t["name"] == "engram_tables" for t in gpu["available_kv_bytes"]["terms"])
    text = " ".join(cli(*base[:-1], "-tp", "8", "--engram-config", '{"cpu_offload": false}').stdout.split())
    assert "engram" in text and "engram_tables 23.60 GiB" in text
    # TP 1: the whole 188.83 GiB on one 141 GB H200 does not fit, and says why.
    one = cli(*base[:-1], "-tp", "1", "--engram-config", '{"cpu_offload": false}')
    assert one.exit_code == 6
    text = " ".join(one.stdout.split())
    assert "the Engram tables (188.83 GiB, cpu_offload false)" in text


def test_an_engram_config_on_a_model_without_engram_is_vllms_refusal(cli):
    for version in ("0.33.0", "0.34.0"):
        result = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--vllm-version", version, "--kv-cache-memory",
                     "9.81GiB", "--engram-config", '{"cpu_offload": true}')
        assert result.exit_code == 6, version
        text = " ".join(result.stderr.split())
        assert ('"EngramConfig requires a model with supported Engram embeddings and non-empty n-gram layer ids."'
                in text)
        assert "vllm serve" not in result.stdout
    before = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--vllm-version", "0.29.0", "--kv-cache-memory",
                 "9.81GiB", "--engram-config", '{"cpu_offload": true}')
    assert before.exit_code == 2 and "vLLM 0.29.0 has no --engram-config" in " ".join(before.stderr.split())


def test_a_release_without_v41_is_a_usage_error_not_a_plan(cli):
    result = cli("fit-length", V41, "--vllm-version", "0.27.1", "--kv-cache-memory", "20GiB")
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "vLLM 0.27.1 cannot run deepseek-ai/DeepSeek-V4.1-Flash" in text and "from vLLM 0.30.0" in text
    assert result.stdout == "" and "--kv-cache-memory" not in text


def test_failed_dp_sharing_is_private_pinned_tables(geometry):
    small_shm = HostMemory(256 * GiB, 200 * GiB, "gpubox", "snapshot", 128 * GiB, 128 * GiB)
    plan = plan_engram_host(geometry.v41, EngramSettings(), tensor_parallel_size=4, data_parallel_size=2, host=small_shm)
    # can_share_engram_tables is False: 8 private shards of 3 heads, each pow2-rounded when pinned.
    assert plan.mode == "pinned-per-rank" and plan.num_shards == 8 and plan.per_node_exact == TABLES
    assert plan.per_node_pinned == 264 * GiB and plan.verdict == "tight"
    assert "8 ranks pin 264.00 GiB per node" in " ".join(" ".join(plan.lines).split())


def test_host_memory_is_not_this_machines_without_its_gpus(cli, host_is, tmp_path):
    host_is(SMALL)  # this machine, which a plan from --kv-cache-memory alone may not be for
    doc = json.loads(cli("fit-length", V41, "--kv-cache-memory", "20GiB", "-tp", "8", "--json").stdout)
    assert doc["host_memory"]["verdict"] == "unknown" and doc["verdict"] == "fits"
    assert any("--host-memory SIZE" in w for w in doc["warnings"])
    given = cli("fit-length", V41, "--kv-cache-memory", "20GiB", "-tp", "8", "--host-memory", "22GiB", "--json")
    assert given.exit_code == 6
    doc = json.loads(given.stdout)
    assert doc["host_memory"]["host_source"] == "--host-memory" and doc["host_memory"]["verdict"] == "short"
    bad = cli("fit-length", V41, "--kv-cache-memory", "20GiB", "--host-memory", "lots")
    assert bad.exit_code == 2


def test_tp_16_is_refused_for_the_output_groups_not_an_fp8_block(cli):
    # V4.1's experts are MXFP4 (quantization_config.expert_dtype "fp4"): its 32 x 32 weight_block_size is not an FP8
    # expert block; -tp 16 is refused by its 8 attention output groups.
    result = cli("fit-length", V41, "--vllm-version", "0.34.0", "--kv-cache-memory", "20GiB", "-tp", "16")
    assert result.exit_code == 6
    text = " ".join(result.stderr.split())
    assert "FP8 block" not in text and "8 output groups" in text
