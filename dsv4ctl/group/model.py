"""What `diagnose` says about a deployment read as one group: its members (one log each: a node, a pod's
container, a file), their ranks, each one's diagnosis, the root cause across them and the group's advice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.errors import ExitCode


@dataclass
class Member:
    """One log of the group and what is known of where it ran (from a bundle's manifest, else its name)."""

    name: str  # the log's name in the bundle, or its path
    path: str  # where it is read from
    node: str | None = None
    pod: str | None = None
    container: str | None = None
    instance: str | None = None  # "current" | "previous"
    termination: dict[str, Any] | None = None  # reason, exit_code, started_at, finished_at
    restart_count: int | None = None
    last_time_hint: str | None = None  # the manifest's last line time

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "node": self.node, "pod": self.pod, "container": self.container,
                "instance": self.instance, "termination": self.termination, "restart_count": self.restart_count}


@dataclass
class Milestone:
    """A step a member reached, with its time when the log says it."""

    phase: str
    time: str | None
    line: int | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "time": self.time, "line": self.line, "text": self.text}


@dataclass
class MemberReading:
    member: Member
    ranks: list[int]  # data-parallel ranks this log's engines hold
    rank_basis: str  # where the ranks come from: "args" (non-default args), "process tags", "none"
    role: str  # "head" | "headless" | "single" | "ray_worker" (a Ray worker node: workers only) | "other" (not vLLM's)
    verdict: str
    exit_code: int
    root_cause: str | None
    root_title: str | None
    root_line: int | None
    root_text: str | None
    root_time: str | None
    first_time: str | None
    last_time: str | None
    vllm_version: str | None
    max_model_len: Any
    fixes: list[str]  # each process's `dsv4ctl fixes:` line, as logged (the first of each distinct text)
    args: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    milestones: list[Milestone] = field(default_factory=list)
    dp_leader_lines: list[str] = field(default_factory=list)
    summary: str = ""
    # What ties the log to one run of a deployment (group.runs): whether vLLM logged its `non-default args`
    # (a headless node and a Ray worker node never do: a flag they do not show is unknown there, not its default),
    # the data-parallel head it joins or is ((address, RPC port)), the multi-node master it joins or is
    # ((address, port)), its part in a Ray launch ("launch": the driver with the Ray executor, "worker": only Ray
    # workers' lines), and whether its root cause only echoes another rank's failure (catalogue `echo`).
    args_logged: bool = False
    dp_head: tuple[str, str | None] | None = None
    master: tuple[str, str | None] | None = None
    ray: str | None = None
    echo: bool = False

    @property
    def label(self) -> str:
        m = self.member
        where = m.pod or m.node or m.name.rsplit("/", 1)[-1]
        if m.container and m.pod:
            where += f"/{m.container}"
        if m.instance == "previous":
            where += " (previous)"
        return where

    @property
    def rank_text(self) -> str:
        if not self.ranks:
            return "-"
        return ",".join(str(r) for r in self.ranks)

    def to_json(self) -> dict[str, Any]:
        return {
            "member": self.member.to_json(), "label": self.label, "ranks": self.ranks, "rank_basis": self.rank_basis,
            "role": self.role, "verdict": self.verdict, "exit_code": self.exit_code,
            "root_cause": {"id": self.root_cause, "title": self.root_title, "line": self.root_line, "text": self.root_text,
                           "time": self.root_time} if self.root_cause else None,
            "first_time": self.first_time, "last_time": self.last_time, "vllm_version": self.vllm_version,
            "max_model_len": self.max_model_len, "fixes": self.fixes, "summary": self.summary, "echo": self.echo,
            "milestones": [m.to_json() for m in self.milestones],
        }


@dataclass
class GroupFinding:
    """A conclusion about the group: a mismatch between nodes, a silent rank, a termination."""

    id: str
    title: str
    detail: str
    members: list[str]
    action: str | None = None
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "detail": self.detail, "members": self.members,
                "action": self.action, "source": self.source}


@dataclass
class GroupReading:
    verdict: str  # "failed" | "stuck" | "healthy" | "inconclusive"
    readings: list[MemberReading]
    root: MemberReading | None  # the member where the first originating error is
    root_reason: str | None  # why that one: "earliest failure", "terminated: OOMKilled", ...
    silent: list[MemberReading]
    consequences: list[MemberReading]
    findings: list[GroupFinding]
    sources: list[str]
    bundle: str | None = None
    # the vLLM logs by run (group.runs): one run is a group; more are separate launches, each read on its own
    # (no root cause across them, no comparison), `apart` saying why
    launches: list[list[MemberReading]] = field(default_factory=list)
    apart: list[str] = field(default_factory=list)

    @property
    def separate(self) -> bool:
        return len(self.launches) > 1

    @property
    def exit_code(self) -> ExitCode:
        if self.separate and self.verdict == "failed":
            # separate launches: the worst of theirs (an unknown cause before a known one)
            codes = {r.exit_code for r in self.readings if r.verdict == "failed"}
            unknown = int(ExitCode.FAILED_UNKNOWN_CAUSE) in codes
            return ExitCode.FAILED_UNKNOWN_CAUSE if unknown else ExitCode.FAILED_KNOWN_CAUSE
        if self.verdict == "failed":
            code = self.root.exit_code if self.root is not None else int(ExitCode.FAILED_UNKNOWN_CAUSE)
            return ExitCode(code) if code in (3, 4) else ExitCode.FAILED_KNOWN_CAUSE
        return {"stuck": ExitCode.STUCK, "healthy": ExitCode.OK}.get(self.verdict, ExitCode.INCONCLUSIVE)

    @property
    def summary(self) -> str:
        ranks = sorted({r for m in self.readings for r in m.ranks})
        nodes = len(self.readings)
        head = f"{nodes} logs" + (f", data-parallel ranks {', '.join(map(str, ranks))}" if ranks else "")
        if self.separate:
            counts = ", ".join(f"{n} {v}" for v in ("failed", "stuck", "inconclusive", "healthy")
                               if (n := sum(r.verdict == v for r in self.readings if r.role != "other")))
            return (f"{len(self.launches)} separate launches, not the nodes of one group: each log is read on its own "
                    f"({counts}).")
        if self.verdict == "failed" and self.root is not None:
            where = f"rank {self.root.rank_text} ({self.root.label})" if self.root.ranks else self.root.label
            return f"The group failed: {where}: {self.root.root_title or self.root_reason} ({head})."
        if self.verdict == "stuck":
            silent = ", ".join(f"rank {m.rank_text} ({m.label})" for m in self.silent) or "a rank"
            return f"The group is stuck: {silent} went silent while the others waited ({head})."
        if self.verdict == "healthy":
            return f"No failure on any member ({head})."
        return f"No failure seen, but not every member reached ready ({head})."

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "group",
            "verdict": self.verdict,
            "exit_code": int(self.exit_code),
            "summary": self.summary,
            "bundle": self.bundle,
            "root_cause": {
                "member": self.root.label, "ranks": self.root.ranks, "node": self.root.member.node,
                "pod": self.root.member.pod, "id": self.root.root_cause, "title": self.root.root_title,
                "reason": self.root_reason, "line": self.root.root_line, "text": self.root.root_text,
                "time": self.root.root_time, "source": self.root.member.name,
            } if self.root is not None else None,
            "silent": [m.label for m in self.silent],
            "consequences": [{"member": m.label, "ranks": m.ranks, "id": m.root_cause, "title": m.root_title,
                              "echo": m.echo} for m in self.consequences],
            "separate_launches": self.separate,
            "launches": [[m.label for m in run] for run in self.launches],
            "apart": self.apart,
            "findings": [f.to_json() for f in self.findings],
            "members": [m.to_json() for m in self.readings],
            "sources": self.sources,
        }
