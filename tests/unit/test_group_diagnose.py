"""`diagnose` of a deployment: several launches' logs, or a `collect` bundle, read as one group. The logs are
real vLLM 0.32.0 output of a two-node data-parallel group over loopback (tests/fixtures/logs/group/, and the
headless node's log with its killed engine)."""

from __future__ import annotations

import json
import tarfile
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


# --- one launch over two nodes with Ray: node 1's worker fails to read a shard, node 0's watchdog times out 10
# minutes later (tests/fixtures/logs/group/ray_tp8_pp2_node*.log, generated in vLLM 0.32.0's format)
RAY0 = FIXTURES / "group" / "ray_tp8_pp2_node0.log"
RAY1 = FIXTURES / "group" / "ray_tp8_pp2_node1.log"
EIO = "OSError: [Errno 5] Input/output error: '/models/DeepSeek-V4-Pro/model-00077-of-00163.safetensors'"


def _collected(cli, tmp_path: Path, *logs: Path) -> Path:
    out = tmp_path / "group.tar.gz"
    result = cli("collect", *logs, "-o", out)
    assert result.exit_code == 0, result.stderr
    return out


def test_a_ray_launch_over_two_nodes_as_files_and_as_a_bundle_names_the_same_root_cause(cli, tmp_path):
    result, direct = run_json(cli, RAY0, RAY1)
    assert result.exit_code == 4 and direct["verdict"] == "failed"
    root = direct["findings"][0]
    assert direct["root_cause"] == "unrecognized_error" == root["id"] and root["evidence"] == EIO
    assert root["source"] == str(RAY1)
    watchdog = next(f for f in direct["findings"] if f["id"] == "eco_nccl_watchdog_timeout")
    assert "the timeout is the echo" in watchdog["meaning"]

    bundle = _collected(cli, tmp_path, RAY0, RAY1)
    result, group = run_json(cli, bundle)
    assert result.exit_code == 4 and group["verdict"] == "failed" and not group["separate_launches"]
    root = group["root_cause"]  # the same cause, on the same node, as the files given directly
    assert root["member"] == RAY1.name and root["text"] == EIO and root["time"] == "11-03 10:10:02"
    assert root["reason"] == "the earliest originating error"
    echo = group["consequences"][0]
    assert echo["member"] == RAY0.name and echo["id"] == "eco_nccl_watchdog_timeout" and echo["echo"] is True
    members = {m["label"]: m for m in group["members"]}
    assert members[RAY0.name]["last_time"] == "11-03 10:30:41"  # the c10 line's own time, not 10:00:40's
    assert members[RAY1.name]["role"] == "ray_worker"
    assert group["findings"] == []  # the worker node's log shows no flags: nothing to compare it on
    text = cli("diagnose", bundle).stdout
    assert "10:20:41 (l.14)" in text and "an echo of the root cause" in text and "differ" not in text


def test_the_manifest_times_are_the_lines_own(cli, tmp_path):
    with tarfile.open(_collected(cli, tmp_path, RAY0, RAY1)) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    times = {Path(e["path"]).name: (e["first_time"], e["last_time"]) for e in manifest["logs"]}
    assert times[RAY0.name] == ("11-03 10:00:02", "11-03 10:30:41")
    assert times[RAY1.name] == ("11-03 10:00:33", "11-03 10:10:02")


def test_a_watchdog_time_out_never_outranks_another_ranks_own_error(cli, tmp_path):
    # the same two nodes with node 0's watchdog stamped before node 1's error: the echo still is not the cause
    early = tmp_path / RAY0.name
    early.write_text(RAY0.read_text().replace("E1103 10:20:41", "E1103 10:05:00").replace("F1103 10:30:41", "F1103 10:06:00"))
    _, group = run_json(cli, _collected(cli, tmp_path, early, RAY1))
    assert group["root_cause"]["member"] == RAY1.name and group["root_cause"]["text"] == EIO
    # alone, the echo is the group's only failure: it is named, and said to be an echo
    _, alone = run_json(cli, _bundle(tmp_path, [(RAY0, LogEntry("logs/file/node0.log", "file", str(RAY0)))]))
    assert alone["root_cause"]["id"] == "eco_nccl_watchdog_timeout" and "an echo" in alone["root_cause"]["reason"]


# --- logs that are not the nodes of one group


def test_unrelated_launches_are_separate_not_nodes_that_differ(cli, tmp_path):
    oom, compile_error = FIXTURES / "cuda_oom_load.log", FIXTURES / "compile_error.log"
    result, data = run_json(cli, oom, compile_error)
    assert data["separate_launches"] is True and data["launches"] == [[oom.name], [compile_error.name]]
    assert data["findings"] == [] and data["root_cause"] is None
    assert "whole deployment by its own flags" in data["apart"][0]
    assert data["verdict"] == "failed" and result.exit_code == 3
    text = cli("diagnose", oom, compile_error).stdout
    assert "2 separate launches" in text and "differ" not in text and "Pass the same" not in text
    # the same through a bundle
    _, bundled = run_json(cli, _collected(cli, tmp_path, oom, compile_error))
    assert bundled["separate_launches"] is True and bundled["findings"] == []


def test_logs_days_apart_are_separate_launches_even_of_one_deployment(cli, tmp_path):
    later = tmp_path / "node1-next-week.log"
    later.write_text(NODE.read_text().replace("12-02 ", "12-09 "))
    _, data = run_json(cli, HEAD, later)
    assert data["separate_launches"] is True and "days apart" in data["apart"][0] and data["findings"] == []


def test_the_same_file_twice_is_one_log(cli, tmp_path):
    result = cli("diagnose", HEAD, HEAD, "--json")
    data = json.loads(result.stdout)
    assert "kind" not in data and data["verdict"] == "healthy"
    assert "read once" in result.stderr
    link = tmp_path / "again.log"
    link.symlink_to(HEAD)
    assert "kind" not in json.loads(cli("diagnose", HEAD, link, "--json").stdout)
    with tarfile.open(_collected(cli, tmp_path, HEAD, link, HEAD)) as tar:
        assert len(json.load(tar.extractfile("manifest.json"))["logs"]) == 1
