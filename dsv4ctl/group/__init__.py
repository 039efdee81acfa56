"""A deployment read as one: the logs of every node of a group (a `dsv4ctl collect` bundle, or several logs
of separate launches), each diagnosed on its own, then read together (`read_group`): which nodes, pods
and ranks there are, a timeline per rank, the first originating error across them (its node, pod, rank),
the ranks that went silent while others went on, what the others saw as a consequence, and advice that
fits the group (one length, one vLLM release and the same dsv4ctl fixes on every node)."""

from __future__ import annotations

from dsv4ctl.group.model import GroupFinding, GroupReading, Member, MemberReading, Milestone
from dsv4ctl.group.read import is_group, read_group

__all__ = ["GroupFinding", "GroupReading", "Member", "MemberReading", "Milestone", "is_group", "read_group"]
