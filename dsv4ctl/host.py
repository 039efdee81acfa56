"""The host's memory: the one module that reads it (psutil; sysconf where psutil is missing). Tests replace it.

What vLLM pins on the host (DeepSeek-V4.1's offloaded Engram tables) comes out of the host's physical memory, so a
plan compares it with what the host has: `total` (MemTotal) and `available` (MemAvailable, what can be allocated now
without swapping), and the size and free space of /dev/shm, where vLLM shares the tables between co-located
data-parallel replicas when cuMem's host-NUMA path is not used.
"""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from typing import Any

from dsv4ctl.errors import InputError

SHM_PATH = "/dev/shm"


@dataclass(frozen=True)
class HostMemory:
    """One host's memory as read (or as a snapshot carried it)."""

    total_bytes: int
    available_bytes: int
    hostname: str
    source: str  # "psutil" | "sysconf" | "snapshot"
    shm_total_bytes: int | None = None  # /dev/shm (None: not mounted or not read)
    shm_free_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "total_bytes": self.total_bytes,
            "available_bytes": self.available_bytes,
            "hostname": self.hostname,
            "source": self.source,
            "shm_total_bytes": self.shm_total_bytes,
            "shm_free_bytes": self.shm_free_bytes,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "host_memory") -> HostMemory:
        """A snapshot's `host_memory` object; `InputError` naming the first bad field."""
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a JSON object")

        def size(key: str, optional: bool = False) -> int | None:
            value = data.get(key)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"{where}: \"{key}\" must be a non-negative integer (bytes)")
            return value

        total, available = size("total_bytes"), size("available_bytes")
        if available > total:
            raise InputError(f"{where}: \"available_bytes\" exceeds \"total_bytes\"")
        hostname = data.get("hostname")
        return cls(total_bytes=total, available_bytes=available,
                   hostname=hostname if isinstance(hostname, str) else "",
                   source="snapshot", shm_total_bytes=size("shm_total_bytes", True),
                   shm_free_bytes=size("shm_free_bytes", True))


def read_host_memory() -> HostMemory:
    """This host's memory now: psutil's `virtual_memory()` (total, available), sysconf where psutil is missing."""
    try:
        import psutil
    except ImportError:
        page = os.sysconf("SC_PAGE_SIZE")
        total, available, source = os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page, "sysconf"
    else:
        memory = psutil.virtual_memory()
        total, available, source = int(memory.total), int(memory.available), "psutil"
    shm_total = shm_free = None
    try:
        usage = shutil.disk_usage(SHM_PATH)
        shm_total, shm_free = int(usage.total), int(usage.free)
    except OSError:
        pass
    return HostMemory(total, available, socket.gethostname(), source, shm_total, shm_free)
