"""A running server's check: alive, wedged, dead or degraded (or unknown: not a vLLM API server), with the
evidence and the numbers.

`urls.parse_urls` refuses a URL that names no server before any look; `http.take_readings` reads a server
(/health, /v1/models, two /metrics an interval apart, an optional one-token probe request); `judge.judge`
turns readings into a `ServerCheck` (`with_busy` tells a compiling engine from a wedged one, with
`compiles.CompileTracker`'s reading of the engine's log) (pure: it is tested on recorded /metrics text); `http.check_group` does
both for several servers at once. `watch.WatchState` follows a group over time (verdict changes as events,
the time since each engine last moved).
The core never prints: `render.check` shows the results, `cli.py` exits with their code.
"""

from __future__ import annotations

from dsv4ctl.check.judge import judge, with_busy
from dsv4ctl.check.model import (
    BUSY,
    DEAD,
    DEGRADED,
    EXIT_CODES,
    HEALTHY,
    SEVERITY,
    UNKNOWN,
    WEDGED,
    EngineNumbers,
    GroupCheck,
    HttpAnswer,
    Limits,
    Readings,
    ServerCheck,
    worst,
)

__all__ = [
    "BUSY", "DEAD", "DEGRADED", "EXIT_CODES", "HEALTHY", "SEVERITY", "UNKNOWN", "WEDGED", "EngineNumbers", "GroupCheck", "HttpAnswer",
    "Limits", "Readings", "ServerCheck", "judge", "with_busy", "worst",
]
