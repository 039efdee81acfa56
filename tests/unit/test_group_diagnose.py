"""`diagnose` of a deployment: several launches' logs, or a `collect` bundle, read as one group. The logs are
real vLLM 0.32.0 output of a two-node data-parallel group over loopback (tests/fixtures/logs/group/, and the
headless node's log with its killed engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4ctl.collect.bundle import BundleWriter
from dsv4ctl.collect.model import CollectResult, LogEntry, Termination
from dsv4ctl.files import open_whole

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
HEAD = FIXTURES / "group" / "real_v032_cpu_dp_head.log"
NODE = FIXTURES / "real_v032_cpu_headless_engine_killed.log"


def run_json(cli, *args):
    result = cli("diagnose", *args, "--json")
    assert "Traceback" not in result.stderr, result.stderr
    return result, json.loads(result.stdout)


def test_two_nodes_one_dead_rank_is_a_failed_group(cli, tmp_path):
    svg = tmp_path / "group.svg"
    result, data = run_json(cli, HEAD, NODE, "--svg", svg)
    assert result.exit_code == 3
    assert data["kind"] == "group" and data["verdict"] == "failed" and data["schema_version"] == 1
    root = data["root_cause"]
    assert root["ranks"] == [1] and root["id"] == "serve_engine_died"
    assert "killed by signal 9 (SIGKILL)" in root["text"] and root["line"] == 52
    assert root["time"] == "12-02 02:29:40"
    members = {m["label"]: m for m in data["members"]}
    assert members[HEAD.name]["ranks"] == [0] and members[HEAD.name]["role"] == "head"
    assert members[NODE.name]["ranks"] == [1] and members[NODE.name]["role"] == "headless"
    assert members[HEAD.name]["verdict"] == "healthy"
    # the head kept serving: the group is not healthy for it
    assert data["findings"][0]["id"] == "group_serves_with_a_dead_rank"
    assert svg.read_text().startswith("<svg") and "Timeline" in svg.read_text()


def test_the_terminal_report_has_a_column_per_rank(cli):
    result = cli("diagnose", HEAD, NODE)
    assert result.exit_code == 3
    out = result.stdout
    assert "The group failed: rank 1" in out
    assert "Timeline per rank" in out and "rank 0" in out and "rank 1" in out
    assert "02:29:40 (l.52)" in out  # rank 1's failure, beside rank 0's serving
    assert "What the other members saw" in out


def test_one_log_stays_a_single_diagnosis(cli):
    _, data = run_json(cli, NODE)
    assert "kind" not in data and data["root_cause"] == "serve_engine_died"
    assert cli("diagnose", NODE, "--svg", "x.svg").exit_code == 2


def test_nodes_with_different_lengths(cli, tmp_path):
    # the headless node's real log with its length changed (a node launched with another --max-model-len)
    other = tmp_path / "node1-2048.log"
    other.write_text(NODE.read_text().replace("1024", "2048").replace("1,024", "2,048"))
    _, data = run_json(cli, HEAD, other)
    lengths = next(f for f in data["findings"] if f["id"] == "group_lengths_differ")
    assert "1024" in lengths["detail"] and "2048" in lengths["detail"]
    assert lengths["action"] == "Pass the same --max-model-len on every node: 1024 (the smallest)"


def _bundle(tmp_path: Path, entries: list[tuple[Path, LogEntry]]) -> Path:
    out = tmp_path / "bundle.tar.gz"
    with open_whole(out, hint=None) as f:
        writer = BundleWriter(f)
        result = CollectResult(bundle=str(out))
        for path, entry in entries:
            writer.add_log(entry, [path.read_bytes()], 1 << 30)
            result.logs.append(entry)
        writer.close(result.manifest())
    return out


def test_a_bundle_names_pods_and_nodes_and_an_oom_kill_without_a_python_error(cli, tmp_path):
    cut = tmp_path / "cut.log"  # the instance the kernel killed: it ends mid-start, no Python error
    cut.write_text("\n".join(NODE.read_text().splitlines()[:30]) + "\n")
    oom = Termination("OOMKilled", 137, None, "2026-12-02T02:20:00Z", "2026-12-02T02:28:20Z")
    bundle = _bundle(tmp_path, [
        (HEAD, LogEntry("logs/k8s/vllm-0/vllm-leader.log", "k8s", "kubectl logs vllm-0", node="gpu-node-a", pod="vllm-0",
                        container="vllm-leader", instance="current", restart_count=0)),
        (cut, LogEntry("logs/k8s/vllm-0-1/vllm-worker.previous.log", "k8s", "kubectl logs vllm-0-1 --previous", node="gpu-node-b",
                       pod="vllm-0-1", container="vllm-worker", instance="previous", restart_count=1, termination=oom)),
    ])
    result, data = run_json(cli, bundle)
    assert result.exit_code == 3 and data["bundle"] == str(bundle)
    root = data["root_cause"]
    assert root["pod"] == "vllm-0-1" and root["node"] == "gpu-node-b" and root["ranks"] == [1]
    assert root["id"] == "eco_container_oom_killed" and root["reason"] == "terminated"
    assert "OOMKilled, exit code 137" in root["text"] and root["time"] == "12-02 02:28:20"


def test_a_bundle_without_a_rank_says_which_is_missing(cli, tmp_path):
    bundle = _bundle(tmp_path, [(HEAD, LogEntry("logs/file/head.log", "file", str(HEAD)))])
    result, data = run_json(cli, bundle)
    missing = next(f for f in data["findings"] if f["id"] == "group_rank_missing")
    assert missing["title"] == "No log of data-parallel rank 1"
    assert data["verdict"] == "inconclusive" and result.exit_code == 5  # the head served; rank 1 is not here


def test_a_head_whose_headless_node_never_came_is_stuck_with_the_missing_rank(cli, tmp_path):
    alone = FIXTURES / "group" / "real_v032_cpu_dp_head_alone.log"
    bundle = _bundle(tmp_path, [(alone, LogEntry("logs/file/head.log", "file", str(alone)))])
    result, data = run_json(cli, bundle)
    assert data["verdict"] == "stuck" and result.exit_code == 8
    missing = next(f for f in data["findings"] if f["id"] == "group_rank_missing")
    assert missing["title"] == "No log of data-parallel rank 1"
    assert data["members"][0]["ranks"] == [0] and data["members"][0]["role"] == "head"
