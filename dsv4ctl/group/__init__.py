"""A deployment read as one: the logs of every node of a group (a `dsv4ctl collect` bundle, or several logs
of separate launches), each diagnosed on its own, then read together (`read_group`): which nodes, pods
and ranks there are, a timeline per rank, the first originating error across them (its node, pod, rank),
the ranks that went silent while others went on, what the others saw as a consequence, and advice that
fits the group (one length, one vLLM release and the same dsv4ctl fixes on every node)."""

from __future__ import annotations

from typing import Any

from dsv4ctl.group.detect import is_group

# The reading itself (group.read: the bundle reader, each member's diagnosis) loads when it is asked for.
_LAZY = {"read_group": "dsv4ctl.group.read", **{name: "dsv4ctl.group.model" for name in
                                                ("GroupFinding", "GroupReading", "Member", "MemberReading", "Milestone")}}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'dsv4ctl.group' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)

__all__ = ["GroupFinding", "GroupReading", "Member", "MemberReading", "Milestone", "is_group", "read_group"]
