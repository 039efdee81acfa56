"""One signature of the catalogue: a failure `diagnose` knows, as data (see dsv4ctl/catalogue/signatures.py).

A module of its own so the catalogue's family modules (signatures_vllm, signatures_ecosystem) and the
catalogue itself import it without importing each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from dsv4ctl import re_cache


@dataclass(frozen=True)
class Signature:
    id: str
    severity: str  # "critical" | "warning" | "info"
    title: str
    meaning: str
    patterns: tuple[str, ...]
    actions: tuple[str, ...]
    role: str = "cause"
    tier: int = 0
    source: str = ""  # where the message text comes from: "pkg==version path/file.py:LINE; ..."
    fatal: bool = False
    next_command: str | None = None  # a template like `actions`
    phase: str | None = None  # the phase this error always belongs to ("startup": a port that could not be bound)
    # Its lines (the call that faults) only place a fault seen elsewhere; alone they fail nothing.
    context: bool = False
    # It tells of another rank's failure, not of its own: a collective that timed out waiting for a rank, a peer
    # that went away, an engine or front-end that never answered. Across a deployment's logs (dsv4ctl.group) it
    # never outranks another rank's own error.
    echo: bool = False

    @cached_property
    def compiled(self) -> tuple[re.Pattern[str], ...]:
        """Its patterns, compiled at the first match (a short log tries only the few its words admit)."""
        return tuple(re_cache.compile(p) for p in self.patterns)

    def match(self, message: str) -> re.Match[str] | None:
        for rx in self.compiled:
            m = rx.search(message)
            if m:
                return m
        return None
