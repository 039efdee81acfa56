"""`dsv4ctl collect --k8s` with the real kubectl against a stand-in API server (tests/k8skit.py): a
LeaderWorkerSet group of a leader `vllm-0` and workers `vllm-0-1`, `vllm-0-2` (the last restarted after an
OOM kill), every container, the previous instance, the pods' status and the events; and what goes wrong
(no kubectl, no access, a pod gone mid-way)."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

import k8skit

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "group"
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not installed here (scripts/test installs Debian's kubernetes-client)"
)


def _logs() -> dict[tuple[str, str, bool], str]:
    head = (LOGS / "real_v032_cpu_dp_head.log").read_text()
    node = (LOGS.parent / "real_v032_cpu_headless_engine_killed.log").read_text()
    return {
        ("vllm-0", "fetch-model", False): "model ready\n",
        ("vllm-0", "vllm-leader", False): head + "export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWx12\n",
        ("vllm-0-1", "vllm-worker", False): node,
        # the instance the kernel killed (OOMKilled, exit 137): it ends mid-load, no Python error
        ("vllm-0-2", "vllm-worker", True): "\n".join(node.splitlines()[:30]) + "\n",
        ("vllm-0-2", "vllm-worker", False): "\n".join(node.splitlines()[:12]) + "\n",
    }


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    group = k8skit.load("lws-group.json")
    with k8skit.StandIn(group["pods"], _logs(), group["events"]) as kit:
        monkeypatch.setenv("KUBECONFIG", str(kit.kubeconfig(tmp_path / "kubeconfig")))
        monkeypatch.setenv("HOME", str(tmp_path))  # kubectl's discovery cache under it
        yield kit


def _bundle(path: Path) -> tuple[dict, dict[str, bytes]]:
    with tarfile.open(path) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return json.loads(members["manifest.json"]), members


@pytest.mark.parametrize("target", ["vllm-0", "vllm", "lws/vllm", "leaderworkerset.sigs.k8s.io/name=vllm"])
def test_collect_gathers_every_container_of_the_group_with_the_previous_instance(cli, cluster, tmp_path, target):
    out = tmp_path / "bundle.tar.gz"
    result = cli("collect", "--k8s", target, "-n", "serving", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.stderr
    printed = json.loads(result.stdout)
    manifest, members = _bundle(out)
    assert printed["logs"] == manifest["logs"] and manifest["schema_version"] == 1
    logs = {(e["pod"], e["container"], e["instance"]): e for e in manifest["logs"] if e["kind"] == "k8s"}
    assert set(logs) == {
        ("vllm-0", "fetch-model", "current"), ("vllm-0", "vllm-leader", "current"),
        ("vllm-0-1", "vllm-worker", "current"),
        ("vllm-0-2", "vllm-worker", "current"), ("vllm-0-2", "vllm-worker", "previous"),
    }
    previous = logs[("vllm-0-2", "vllm-worker", "previous")]
    assert previous["termination"]["reason"] == "OOMKilled" and previous["termination"]["exit_code"] == 137
    assert previous["restart_count"] == 1 and previous["node"] == "gpu-node-c"
    assert previous["group"] == {"name": "vllm", "group-index": "0", "worker-index": "2"}
    assert "--previous" in previous["source"] and "--namespace serving" in previous["source"]
    served = _logs()
    for (pod, container, instance), entry in logs.items():
        body = members[entry["path"]].decode()
        assert entry["lines"] == len(body.splitlines()) == len(served[(pod, container, instance == "previous")].splitlines())
        assert entry["first_time"].startswith("2026-12-01T10:") and entry["last_time"] >= entry["first_time"]
    assert any("previous=true" in r for r in cluster.requests)
    # status of every pod, the events (ours and the namespace's others, marked), secrets redacted
    assert [p["pod"] for p in manifest["pods"]] == ["vllm-0", "vllm-0-1", "vllm-0-2"]
    events = members["logs/k8s/events.log"].decode()
    assert "BackOff Pod/vllm-0-2: Back-off restarting failed container vllm-worker" in events
    assert "Pod/other-7f9 (another object)" in events
    leader = members[logs[("vllm-0", "vllm-leader", "current")]["path"]].decode()
    assert "hf_AbCdEfGhIjKlMnOpQrStUvWx12" not in leader and "HF_TOKEN=***redacted***" in leader
    pod_json = json.loads(members["k8s/pods/vllm-0-2.json"])
    env = {e["name"]: e.get("value") for e in pod_json["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"] == "***redacted***" and env["LWS_GROUP_SIZE"] == "3"
    assert all(b"hf_AbCdEfGhIjKlMnOpQrStUvWx12" not in data for data in members.values())


def test_tail_reaches_kubectl(cli, cluster, tmp_path):
    result = cli("collect", "--k8s", "vllm-0-1", "--tail", "5", "-o", tmp_path / "b.tar.gz", "--json")
    assert result.exit_code == 0, result.output
    entry = next(e for e in json.loads(result.stdout)["logs"] if e["pod"] == "vllm-0-1")
    assert entry["lines"] == 5 and "--tail=5" in entry["source"]
    assert any("tailLines=5" in r for r in cluster.requests)


def test_a_pod_gone_mid_way_is_a_manifest_entry_and_the_rest_is_kept(cli, cluster, tmp_path):
    cluster.gone = {"vllm-0-1"}
    out = tmp_path / "b.tar.gz"
    result = cli("collect", "--k8s", "lws/vllm", "-o", out, "--json")
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert 'not collected: ' in result.stderr and 'pods "vllm-0-1" not found' in result.stderr
    manifest, members = _bundle(out)
    gone = [e for e in manifest["unreadable"] if "vllm-0-1" in e["source"]]
    assert gone and 'pods "vllm-0-1" not found' in gone[0]["error"]
    kept = [e for e in manifest["logs"] if e["pod"] == "vllm-0-2" and e["lines"]]
    assert len(kept) == 2 and all(e["path"] in members for e in kept)


def test_no_access_is_one_line_and_a_manifest_entry(cli, cluster, tmp_path):
    cluster.forbidden = True
    out = tmp_path / "b.tar.gz"
    result = cli("collect", "--k8s", "app=vllm", "-o", out)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "forbidden" in result.stderr and "nothing collected, no bundle written" in result.stderr
    assert not out.exists()  # a bundle of nothing is not written


def test_no_kubectl_is_one_line(cli, tmp_path):
    out = tmp_path / "b.tar.gz"
    result = cli("collect", "--k8s", "app=vllm", "--kubectl", str(tmp_path / "no-kubectl"), "-o", out)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "not found" in result.stderr and result.stderr.count("\n") <= 4
    assert "not found (install kubectl, or pass --kubectl PATH)" in result.stderr and not out.exists()
