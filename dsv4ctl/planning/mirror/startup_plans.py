"""vLLM's own record of what it measured: startup plans (`VLLM_ENABLE_STARTUP_PLAN=1`).

With the variable set, each GPU worker saves, after a profiled boot, the KV memory it sized for its
--gpu-memory-utilization (the `--kv-cache-memory` value vLLM suggests) and the free memory it started with,
under a fingerprint of its configuration, device and rank; a later boot of the same fingerprint re-applies
the figure when free memory is at least that baseline, and skips profiling. Every release dsv4ctl plans has
it: vllm/v1/worker/startup_plan.py is the same file in 0.26.0 through 0.33.0 (read from each release's wheel; 0.34.0
writes schema 2, below):

- the file: `{VLLM_CACHE_ROOT}/startup_plan/startup_plan_{fingerprint}.json` (startup_plan.py:77-84), JSON
  `{"schema": 1, "fingerprint", "kv_cache_memory_bytes", "free_memory_baseline"}` (:167-191);
- VLLM_CACHE_ROOT: `$VLLM_CACHE_ROOT`, else `$XDG_CACHE_HOME/vllm`, else `~/.cache/vllm` (vllm==0.33.0
  envs.py:340-344, :714-719; 0.27.1 the same function and default);
- the lines it logs: "Saved startup plan to %s" (:189) and "Applying persisted startup plan (fingerprint %s):
  kv_cache_memory_bytes=%d …" (:153), which name the plan of each worker of a start.

The fingerprint hashes the `VllmConfig` with the GPU's name, memory and capability, torch's and CUDA's
versions, the rank and the world size (startup_plan.py:41-74): it can be computed only in the worker, on
its GPU. So dsv4ctl learns which plans belong to a configuration from the start that wrote or applied them
(`serve` reads those lines from its log and keeps them with its calibration record), and reads the figure
back from vLLM's own file: the KV memory vLLM measured, basis `measured`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

ENV = "VLLM_ENABLE_STARTUP_PLAN"
SCHEMA = 1  # startup_plan.py:38 PLAN_SCHEMA_VERSION (0.26.0-0.33.0)
# vllm==0.34.0 startup_plan.py:39: schema 2, the same payload (`:180-185`), the fingerprint now `hash_config` (`:65`).
# In 0.34's measured KV cache the saved figure is only the reservation (`requested` = total x 1.0 there, the cache is
# measured again after warm-up at every start, v1/worker/gpu_worker.py:1226-1238): planning does not read it as the
# KV size in that mode (plan/inputs.py).
SCHEMA_034 = 2
# The releases whose vllm/v1/worker/startup_plan.py dsv4ctl read (identical through 0.33.0; 0.34.0 as above).
RELEASES = ("0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
FINGERPRINT_RE = re.compile(r"startup_plan_([0-9a-f]{16})\.json")


@dataclass(frozen=True)
class StartupPlan:
    """One worker's plan file as vLLM wrote it."""

    path: str
    fingerprint: str
    kv_cache_memory_bytes: int
    free_memory_baseline: int
    modified: float

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "fingerprint": self.fingerprint, "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
                "free_memory_baseline_bytes": self.free_memory_baseline, "modified": self.modified}


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """VLLM_CACHE_ROOT as vLLM computes it (envs.py get_default_cache_root and the VLLM_CACHE_ROOT entry)."""
    env = os.environ if environ is None else environ
    if env.get("VLLM_CACHE_ROOT"):
        return Path(os.path.expanduser(env["VLLM_CACHE_ROOT"]))
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.path.expanduser(os.path.join(base, "vllm")))


def plan_path(fingerprint: str, environ: Mapping[str, str] | None = None) -> Path:
    return cache_root(environ) / "startup_plan" / f"startup_plan_{fingerprint}.json"


def schemas_of(version: str | None) -> tuple[int, ...]:
    """The plan schema a release writes and reads (both when the release is not known)."""
    m = re.match(r"([0-9]+)\.([0-9]+)", version or "")
    if not m:
        return (SCHEMA, SCHEMA_034)
    return (SCHEMA_034,) if (int(m.group(1)), int(m.group(2))) >= (0, 34) else (SCHEMA,)


def read_plan(path: str | Path, version: str | None = None) -> StartupPlan | None:
    """A plan file, or None when it is missing, unreadable or not the schema of `version` (vLLM ignores those too;
    None: either schema)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        modified = p.stat().st_mtime
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") not in schemas_of(version):
        return None
    kv, base, fp = data.get("kv_cache_memory_bytes"), data.get("free_memory_baseline"), data.get("fingerprint")
    if not (isinstance(kv, int) and kv > 0 and isinstance(base, int) and isinstance(fp, str)):
        return None
    return StartupPlan(str(p), fp, kv, base, modified)


def read_plans(environ: Mapping[str, str] | None = None) -> list[StartupPlan]:
    """Every plan under VLLM_CACHE_ROOT, newest first."""
    folder = cache_root(environ) / "startup_plan"
    try:
        names = sorted(folder.glob("startup_plan_*.json"))
    except OSError:
        return []
    plans = [p for p in (read_plan(name) for name in names) if p is not None]
    return sorted(plans, key=lambda p: p.modified, reverse=True)


def measured(
    fingerprints: list[str] | tuple[str, ...], environ: Mapping[str, str] | None = None, version: str | None = None
) -> tuple[int, list[StartupPlan]] | None:
    """The KV memory vLLM's plans of one start hold: the smallest over its workers (vLLM gives every worker the
    smallest block count), with the plans read; None unless every plan named is there (in `version`'s schema)."""
    plans = [read_plan(plan_path(fp, environ), version) for fp in fingerprints]
    if not plans or any(p is None for p in plans):
        return None
    return min(p.kv_cache_memory_bytes for p in plans), plans  # type: ignore[union-attr]


def available_in(version: str | None) -> bool:
    """Whether a vLLM release's startup plans hold a measured KV size worth turning them on for, on evidence: one of
    the releases read (0.26.0-0.33.0). Not 0.34: there a plan of a measured ("extensible") start is only the
    reservation, and its fingerprint ignores the sizing mode (`config/cache.py:430-431`, `:458`), so a
    --no-enable-extensible-kv-cache start of the same configuration would re-apply it and over-commit."""
    if not version:
        return False
    m = re.match(r"([0-9]+)\.([0-9]+)", version)
    return bool(m) and (int(m.group(1)), int(m.group(2))) < (0, 34) and any(
        r.startswith(f"{m.group(1)}.{m.group(2)}.") for r in RELEASES)
