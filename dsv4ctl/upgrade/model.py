"""The upgrade view's answer: one launch under two vLLM releases, each part with the table it was read from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.upgrade.fix_releases import FixNeed, LaunchPath
from dsv4ctl.upgrade.flags import FlagsDiff, LaunchFlag
from dsv4ctl.upgrade.log_lines import LogLinesDiff
from dsv4ctl.upgrade.messages import MessagesDiff

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ReleaseFit:
    """The plan under one release (planning's `plan_fit`)."""

    requested: str  # the release as asked ('0.33', '0.33.0')
    planned: str  # the release whose rules planned it
    sizing_mode: str  # how vLLM sizes the KV cache: "estimate" (profiled at startup) | "measured" (after warm-up)
    sizing_why: str | None  # why that mode for this launch, where the plan says
    verdict: str  # fits | shrinks | does_not_fit
    refusal: str | None
    autofit_max_model_len: int
    recommended_max_model_len: int
    kv_cache_memory_bytes: int
    kv_basis: str | None  # exact | measured | calibrated | estimated ...
    gpu_memory_utilization: float | None  # the fraction the plan used (resolved); None under --kv-cache-memory-bytes
    utilization_default: Any  # --gpu-memory-utilization's default in the flags table (None: vLLM resolves it)
    utilization_default_recorded: bool
    max_num_batched_tokens: int
    vllm_flags: tuple[str, ...]
    warnings: tuple[str, ...]
    plan_schema: int | None  # the startup-plan file schema this release writes; None: not recorded

    def to_json(self) -> dict[str, Any]:
        return {
            "requested": self.requested, "planned": self.planned, "sizing_mode": self.sizing_mode,
            "sizing_why": self.sizing_why,
            "verdict": self.verdict, "refusal": self.refusal, "autofit_max_model_len": self.autofit_max_model_len,
            "recommended_max_model_len": self.recommended_max_model_len,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes, "kv_basis": self.kv_basis,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "gpu_memory_utilization_default": self.utilization_default,
            "gpu_memory_utilization_default_recorded": self.utilization_default_recorded,
            "max_num_batched_tokens": self.max_num_batched_tokens, "vllm_flags": list(self.vllm_flags),
            "warnings": list(self.warnings), "startup_plan_schema": self.plan_schema,
        }


@dataclass(frozen=True)
class FixRow:
    name: str
    before: FixNeed
    after: FixNeed
    path: LaunchPath  # whether this launch takes the code path the fix guards

    @property
    def changed(self) -> bool:
        return self.before.status != self.after.status

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "before": self.before.to_json(), "after": self.after.to_json(),
                "changed": self.changed, "launch_takes_the_path": self.path.applies, "path": self.path.why}


@dataclass(frozen=True)
class UpgradeView:
    model: str
    before: ReleaseFit
    after: ReleaseFit
    fixes: tuple[FixRow, ...]
    flags: FlagsDiff
    messages: MessagesDiff
    log_lines: LogLinesDiff
    launch: tuple[LaunchFlag, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def fits_after(self) -> bool:
        return self.after.verdict != "does_not_fit"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "from": self.before.to_json(),
            "to": self.after.to_json(),
            "fixes": [f.to_json() for f in self.fixes],
            "flags": self.flags.to_json(),
            "messages": self.messages.to_json(),
            "log_lines": self.log_lines.to_json(),
            "startup_plan_schema": {"from": self.before.plan_schema, "to": self.after.plan_schema},
            "launch_flags": [{"option": f.option, "value": f.value, "given": f.given} for f in self.launch],
            "notes": list(self.notes),
        }
