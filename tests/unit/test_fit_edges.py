"""fit-length one step beside its tested path: a launch over several nodes' snapshots, a log of another model, a
model named without its organisation, a tensor-parallel size the heads do not divide, EPLB's even spread."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from dsv4ctl.errors import GpuUnavailableError
from fitkit import FLASH, PRO, h200, snapshot

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples"


def _node(tmp_path, name: str, hostname: str, gpus: int = 8) -> str:
    snap = dataclasses.replace(snapshot(*(h200(i) for i in range(gpus))), hostname=hostname)
    path = tmp_path / name
    path.write_text(json.dumps(snap.to_json()))
    return str(path)


@pytest.mark.parametrize("layout", [("-tp", "8", "-pp", "2"), ("-tp", "8", "-dp", "2")])
def test_a_launch_over_two_nodes_is_planned_rank_by_rank(cli, tmp_path, layout):
    a, b = _node(tmp_path, "a.json", "node-a"), _node(tmp_path, "b.json", "node-b")
    res = cli("fit-length", PRO, "--gpus", a, "--gpus", b, *layout, "--checkpoint-size", "865GB", "--json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["fits"]
    nodes = [g["node"] for g in doc["gpus"]]
    assert nodes == ["node-a"] * 8 + ["node-b"] * 8
    if "-pp" in layout:
        assert [g["pp_rank"] for g in doc["gpus"]] == [0] * 8 + [1] * 8  # a stage per node
    assert any("planned over 2 nodes (node-a, node-b), 8 GPUs each" in n for n in doc["notes"])
    text = cli("fit-length", PRO, "--gpus", a, "--gpus", b, *layout, "--checkpoint-size", "865GB")
    assert "node-a:0-7" in text.stdout and "node-b:0-7" in text.stdout


def test_nodes_that_cannot_hold_the_launch_say_the_arithmetic(cli, tmp_path):
    a, b = _node(tmp_path, "a.json", "node-a"), _node(tmp_path, "b.json", "node-b", gpus=4)
    res = cli("fit-length", PRO, "--gpus", a, "--gpus", b, "-tp", "8", "-pp", "2", "--checkpoint-size", "865GB")
    assert res.exit_code == 1 and "16 GPUs over 2 nodes needs 8 per node; node-b shows 4" in res.stderr
    res = cli("fit-length", PRO, "--gpus", a, "--gpus", b, "-tp", "8", "-pp", "3", "--checkpoint-size", "865GB")
    assert res.exit_code == 1 and "24 GPUs over 2 nodes" in res.stderr


def test_nodes_that_each_hold_the_launch_are_planned_each(cli, tmp_path):
    a, b = _node(tmp_path, "a.json", "node-a"), _node(tmp_path, "b.json", "node-b")
    doc = json.loads(cli("fit-length", PRO, "--gpus", a, "--gpus", b, "-tp", "8", "--checkpoint-size", "865GB",
                         "--json").stdout)
    assert len(doc["nodes"]) == 2 and any("2 nodes planned; the tightest" in n for n in doc["notes"])


def test_a_log_of_another_model_is_refused(cli, tmp_path):
    log = EXAMPLES / "stale-max-model-len.log"
    res = cli("fit-length", PRO, "--from-log", str(log))
    assert res.exit_code == 2 and res.stdout == ""
    assert f"is a start of {FLASH} (43 layers), not of {PRO} (61 layers)" in res.stderr
    assert f"dsv4ctl fit-length {FLASH} --from-log {log}" in res.stderr
    moved = tmp_path / "local.log"
    moved.write_text(log.read_text().replace(FLASH, "/models/DeepSeek-V4-Flash"))
    same = cli("fit-length", FLASH, "--from-log", str(moved), "--json")  # the same name, another path: no complaint
    assert same.exit_code == 0 and not any("a start of" in w for w in json.loads(same.stdout)["warnings"])
    other = json.loads(cli("fit-length", PRO, "--from-log", str(moved), "--json").stdout)
    assert any("check that they are the same checkpoint" in w for w in other["warnings"])  # unreadable here: a check


@pytest.mark.parametrize("given, hint", [
    ("DeepSeek-V4-Flash", f"the built-in preset of that name is {FLASH}"),
    ("deepseek-v4-pro", f"the built-in preset of that name is {PRO}"),
    ("/nope/DeepSeek-V4-Flash-x", "check the path"),
])
def test_a_model_named_without_its_organisation(cli, given, hint):
    res = cli("fit-length", given, "--kv-cache-memory", "9.81GiB")
    assert res.exit_code == 1 and hint in res.stderr


def test_an_empty_model_is_a_usage_error(cli):
    res = cli("fit-length", "", "--kv-cache-memory", "9.81GiB")
    assert res.exit_code == 2 and "MODEL is empty" in res.stderr


@pytest.mark.parametrize("model, tp, heads", [(FLASH, "3", 64), (PRO, "6", 128), (PRO, "12", 128), (FLASH, "48", 64)])
def test_a_tensor_parallel_size_the_heads_do_not_divide_is_refused(cli, model, tp, heads):
    res = cli("fit-length", model, "-tp", tp, "--kv-cache-memory", "9.81GiB")
    assert res.exit_code == 6 and res.stdout == ""
    assert f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})." in res.stderr


def test_eplb_needs_the_experts_spread_evenly():
    from dsv4ctl.planning import load_geometry
    from dsv4ctl.serve.preflight import _eplb_refusal

    extra = load_geometry(PRO).extra  # 384 routed experts
    refused = _eplb_refusal(extra, 40)
    assert refused is not None and refused.exit_code == 6
    assert "Got 384 experts and 40 EP ranks." in refused.message
    assert _eplb_refusal(extra, 32) is None  # 384 / 32


def test_serve_refuses_eplb_that_cannot_spread(monkeypatch):
    from dsv4ctl.serve import preflight

    def no_gpu():
        raise GpuUnavailableError("no NVIDIA driver here")

    ns = argparse.Namespace(model=PRO, max_model_len=None, kv_cache_memory_bytes=None, tensor_parallel_size=8,
                            data_parallel_size=5, enable_expert_parallel=True, enable_eplb=True)
    decision = preflight.decide(ns, [PRO, "-tp", "8", "-dp", "5", "-ep", "--enable-eplb"], snapshot_reader=no_gpu)
    assert decision.action == preflight.REFUSE and "EPLB" in decision.reason
    ns.enable_eplb = False  # an uneven spread without EPLB is vLLM's to take
    decision = preflight.decide(ns, [PRO, "-tp", "8", "-dp", "5", "-ep"], snapshot_reader=no_gpu)
    assert decision.action != preflight.REFUSE
