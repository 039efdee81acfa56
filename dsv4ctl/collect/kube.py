"""Kubernetes: a group's pods, every container's current and previous log, pod status and the events,
through the operator's own `kubectl` (its kubeconfig, context and RBAC; nothing to install in the cluster
and no second client to configure).

`--k8s` takes a label selector (`app=vllm`), a pod name, `pod/NAME` or `lws/NAME` (a LeaderWorkerSet: its
pods carry `leaderworkerset.sigs.k8s.io/name`). A pod of a LeaderWorkerSet stands for its whole group (the
leader `vllm-0` and the workers `vllm-0-1`, …: the same `leaderworkerset.sigs.k8s.io/group-index`). The
previous instance of a container (`kubectl logs --previous`) is gathered wherever its restart count is above
zero: that is the log of the one that crashed, not of the one that replaced it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

from dsv4ctl.collect.bundle import BundleWriter, read_chunks
from dsv4ctl.collect.model import CollectRequest, CollectResult, LogEntry, Termination, Unreadable
from dsv4ctl.redaction import REDACTED, is_secret_name, looks_secret

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
TIMEOUT_S = 120


class KubectlError(Exception):
    """kubectl said no (its last stderr line), or is not there."""


def kubectl_argv(req: CollectRequest, *args: str) -> list[str]:
    argv = [req.kubectl]
    if req.context:
        argv += ["--context", req.context]
    if req.namespace:
        argv += ["--namespace", req.namespace]
    return argv + list(args)


def _say(stderr: bytes | str) -> str:
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _json(req: CollectRequest, *args: str) -> dict[str, Any]:
    argv = kubectl_argv(req, *args, "-o", "json")
    try:
        done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise KubectlError(f"{req.kubectl} not found (install kubectl, or pass --kubectl PATH)") from None
    except subprocess.TimeoutExpired:
        raise KubectlError(f"{' '.join(argv)}: no answer in {TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise KubectlError(_say(done.stderr))
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise KubectlError(f"{' '.join(argv)}: not JSON") from None


def resolve_pods(req: CollectRequest) -> list[dict[str, Any]]:
    """The pods `--k8s` names, a LeaderWorkerSet pod widened to its group, sorted by name."""
    target = (req.k8s or "").strip()
    kind, _, name = target.partition("/") if "/" in target and "=" not in target else ("", "", target)
    if kind in ("lws", "leaderworkerset", "leaderworkersets"):
        return _by_selector(req, f"{LWS_NAME}={name}")
    if any(c in target for c in "=!,"):
        return _by_selector(req, target)
    if kind and kind not in ("pod", "pods", "po"):
        raise KubectlError(f"--k8s {target}: give a label selector, a pod, pod/NAME or lws/NAME")
    try:
        pod = _json(req, "get", "pod", name)
    except KubectlError as exc:
        if "NotFound" not in str(exc) and "not found" not in str(exc):
            raise
        pods = _by_selector(req, f"{LWS_NAME}={name}")  # a LeaderWorkerSet's name
        if not pods:
            raise KubectlError(f"no pod or LeaderWorkerSet named {name}: {exc}") from None
        return pods
    labels = pod.get("metadata", {}).get("labels") or {}
    if LWS_NAME in labels and LWS_GROUP in labels:
        group = _by_selector(req, f"{LWS_NAME}={labels[LWS_NAME]},{LWS_GROUP}={labels[LWS_GROUP]}")
        if group:
            return group
    return [pod]


def _by_selector(req: CollectRequest, selector: str) -> list[dict[str, Any]]:
    items = _json(req, "get", "pods", "--selector", selector).get("items") or []
    return sorted(items, key=lambda p: p.get("metadata", {}).get("name", ""))


def _termination(state: dict[str, Any] | None) -> Termination | None:
    t = (state or {}).get("terminated")
    if not t:
        return None
    return Termination(t.get("reason"), t.get("exitCode"), t.get("signal"), t.get("startedAt"), t.get("finishedAt"),
                       t.get("message"))


def _state_text(state: dict[str, Any] | None) -> str | None:
    for name, value in (state or {}).items():
        reason = (value or {}).get("reason")
        return f"{name}: {reason}" if reason else name
    return None


def redact_pod(pod: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The pod object with the values of secret-named environment variables (and secret-looking values) hidden."""
    count = 0
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for var in container.get("env") or []:
            value = var.get("value")
            if isinstance(value, str) and value and (is_secret_name(var.get("name", "")) or looks_secret(value)):
                var["value"] = REDACTED
                count += 1
    return pod, count


def _log_stream(argv: list[str], errors: list[str]) -> Iterator[bytes]:
    """kubectl's stdout as it comes; its stderr's last line lands in `errors` when it fails."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        errors.append(f"{argv[0]} not found")
        return
    assert proc.stdout is not None and proc.stderr is not None
    try:
        yield from read_chunks(proc.stdout)
    finally:
        if proc.poll() is None and proc.stdout.closed is False:
            proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait()
        if code != 0:
            errors.append(_say(err))


def gather(req: CollectRequest, bundle: BundleWriter, result: CollectResult,
           step: Callable[[str], None]) -> None:
    """Every container log of the pods `--k8s` names, the pods' status and the namespace's events."""
    try:
        pods = resolve_pods(req)
    except KubectlError as exc:
        result.unreadable.append(Unreadable(f"kubectl pods {req.k8s}", str(exc)))
        return
    if not pods:
        result.unreadable.append(Unreadable(f"kubectl pods {req.k8s}", "no pod matches"))
        return
    for pod in pods:
        _gather_pod(req, pod, bundle, result, step)
    _gather_events(req, pods, bundle, result, step)


def _gather_pod(req: CollectRequest, pod: dict[str, Any], bundle: BundleWriter, result: CollectResult,
                step: Callable[[str], None]) -> None:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    name, node = meta.get("name", "?"), spec.get("nodeName")
    labels = meta.get("labels") or {}
    group = {k.rsplit("/", 1)[-1]: v for k, v in labels.items() if k in (LWS_NAME, LWS_GROUP, LWS_WORKER)}
    statuses = {s.get("name"): s for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])}
    containers = [c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
    redacted, _ = redact_pod(json.loads(json.dumps(pod)))
    result.extra.append(bundle.add_bytes(f"k8s/pods/{name}.json", json.dumps(redacted, indent=2).encode()))
    summary: dict[str, Any] = {"pod": name, "node": node, "phase": status.get("phase"), "group": group or None,
                               "containers": []}
    for container in containers:
        st = statuses.get(container) or {}
        restarts = int(st.get("restartCount") or 0)
        summary["containers"].append({
            "name": container, "restart_count": restarts, "state": _state_text(st.get("state")),
            "ready": st.get("ready"),
            "last_termination": (_termination(st.get("lastState")) or Termination()).to_json() or None,
            "termination": (_termination(st.get("state")) or Termination()).to_json() or None,
        })
        instances = [("current", _termination(st.get("state")))]
        if restarts > 0:
            instances.append(("previous", _termination(st.get("lastState"))))
        for instance, termination in instances:
            step(f"{name}/{container} ({instance})")
            args = ["logs", name, "--container", container, "--timestamps"]
            if instance == "previous":
                args.append("--previous")
            if req.since:
                args.append(f"--since={req.since}")
            if req.tail is not None:
                args.append(f"--tail={req.tail}")
            argv = kubectl_argv(req, *args)
            entry = LogEntry(
                path=f"logs/k8s/{name}/{container}{'.previous' if instance == 'previous' else ''}.log",
                kind="k8s", source=" ".join(argv), node=node, pod=name, container=container, instance=instance,
                restart_count=restarts, state=_state_text(st.get("state")) if instance == "current" else "terminated",
                termination=termination, group=group,
            )
            errors: list[str] = []
            bundle.add_log(entry, _log_stream(argv, errors), req.max_log_bytes)
            if errors and not entry.lines:
                result.unreadable.append(Unreadable(entry.source, errors[-1]))
                entry.error = errors[-1]
                result.logs.append(entry)  # the entry stays: its status is evidence even without a log
            else:
                if errors:
                    entry.error = errors[-1]
                result.logs.append(entry)
    result.pods.append(summary)


def _gather_events(req: CollectRequest, pods: list[dict[str, Any]], bundle: BundleWriter, result: CollectResult,
                   step: Callable[[str], None]) -> None:
    step("events")
    try:
        events = _json(req, "get", "events")
    except KubectlError as exc:
        result.unreadable.append(Unreadable("kubectl get events", str(exc)))
        return
    items = sorted(events.get("items") or [], key=_event_time)
    result.extra.append(bundle.add_bytes("k8s/events.json", json.dumps(events, indent=2).encode()))
    names = {p.get("metadata", {}).get("name") for p in pods}
    lines = []
    for ev in items:
        obj = ev.get("involvedObject") or {}
        mark = "" if obj.get("name") in names else " (another object)"
        lines.append(f"{_event_time(ev)} {ev.get('type', '')} {ev.get('reason', '')} "
                     f"{obj.get('kind', '')}/{obj.get('name', '')}{mark}: {ev.get('message', '')}\n".encode())
    entry = LogEntry(path="logs/k8s/events.log", kind="k8s-events", source=" ".join(kubectl_argv(req, "get", "events")))
    bundle.add_log(entry, iter(lines), req.max_log_bytes)
    result.logs.append(entry)


def _event_time(ev: dict[str, Any]) -> str:
    return ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or \
        (ev.get("metadata") or {}).get("creationTimestamp") or ""
