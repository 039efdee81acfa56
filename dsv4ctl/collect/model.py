"""What `dsv4ctl collect` is asked for and what it gathered: the request and the manifest's entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.collect.names import SCHEMA_VERSION
DEFAULT_MAX_LOG_BYTES = 256 << 20  # one log at most (its end kept): a 2 GiB log gets its last 256 MiB


@dataclass
class CollectRequest:
    """Where to gather from. `since` is kubectl's/docker's duration (`1h`, `30m`), `tail` a line count."""

    paths: list[str] = field(default_factory=list)
    k8s: str | None = None  # a label selector, a pod name, `pod/NAME` or `lws/NAME`
    namespace: str | None = None
    context: str | None = None
    ray: str | None = None  # a Ray session directory
    docker: list[str] = field(default_factory=list)
    since: str | None = None
    tail: int | None = None
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    kubectl: str = "kubectl"
    docker_cli: str = "docker"


@dataclass
class Termination:
    """How a container instance ended, as its runtime reports it."""

    reason: str | None = None  # OOMKilled, Error, Completed, ...
    exit_code: int | None = None
    signal: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class LogEntry:
    """One gathered log in the bundle (under `path`), where it came from and what it covers."""

    path: str
    kind: str  # "k8s" | "ray" | "docker" | "file"
    source: str  # the command or file it was read from
    node: str | None = None
    pod: str | None = None
    container: str | None = None
    instance: str | None = None  # "current" | "previous"
    restart_count: int | None = None
    state: str | None = None  # running, waiting (CrashLoopBackOff), terminated
    termination: Termination | None = None
    group: dict[str, str] = field(default_factory=dict)  # LeaderWorkerSet name, group and worker index
    first_time: str | None = None
    last_time: str | None = None
    bytes: int = 0
    lines: int = 0
    truncated: bool = False  # cut to --max-log-bytes (its end kept)
    redactions: int = 0
    error: str | None = None  # read in part: why it stopped

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("termination", "group")}
        out["termination"] = self.termination.to_json() if self.termination else None
        out["group"] = dict(self.group) or None
        return out


@dataclass
class Unreadable:
    """A source that gave nothing, and why."""

    source: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "error": self.error}


@dataclass
class CollectResult:
    bundle: str | None  # None: nothing was gathered, no bundle was written
    logs: list[LogEntry] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # other members: pod JSON, events, inspect output
    bounds: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    interrupted: bool = False

    def manifest(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "bounds": self.bounds,
            "logs": [e.to_json() for e in self.logs],
            "pods": self.pods,
            "other_files": self.extra,
            "unreadable": [u.to_json() for u in self.unreadable],
            "interrupted": self.interrupted,
        }

    def to_json(self) -> dict[str, Any]:
        return {"bundle": self.bundle, **self.manifest()}
