"""A group followed over time: each look's verdicts, their changes as events, when each server's engine last moved.

Pure: the caller takes the looks (`http.check_group`) and passes the wall-clock time of each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.check.model import GroupCheck, ServerCheck


@dataclass(frozen=True)
class VerdictChange:
    """A server's verdict changed (or was first seen) at `at` (seconds since the epoch)."""

    at: float
    url: str
    before: str | None
    after: str
    evidence: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "url": self.url, "before": self.before, "after": self.after,
                "evidence": list(self.evidence)}


@dataclass
class WatchState:
    started_at: float
    verdicts: dict[str, str] = field(default_factory=dict)
    last_progress_at: dict[str, float] = field(default_factory=dict)
    events: list[VerdictChange] = field(default_factory=list)
    latest: GroupCheck | None = None

    def update(self, group: GroupCheck, now: float) -> list[VerdictChange]:
        """Take one look; returns the verdict changes it brought."""
        changes = []
        for server in group.servers:
            if any(e.progressed for e in server.engines) or (server.probe is not None and server.probe.ok):
                self.last_progress_at[server.url] = now
            before = self.verdicts.get(server.url)
            if before != server.verdict:
                changes.append(VerdictChange(now, server.url, before, server.verdict, server.evidence))
                self.verdicts[server.url] = server.verdict
        self.events += changes
        self.latest = group
        return changes

    @property
    def changes(self) -> list[VerdictChange]:
        """The events that changed a verdict (a server's first verdict is not a change)."""
        return [e for e in self.events if e.before is not None]

    def since_last_step(self, server: ServerCheck, now: float) -> tuple[float, bool]:
        """Seconds since the server's engine last moved; the flag is False when it has not moved since the
        watch began (the number is then a lower bound)."""
        at = self.last_progress_at.get(server.url)
        if at is None:
            return now - self.started_at, False
        return now - at, True
