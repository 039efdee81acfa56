"""Calibration that remembers: the KV memory a real start measured, for the same host and configuration.

Each `dsv4ctl serve` start whose log reaches vLLM's "Available KV cache memory" line appends one record to
`calibration.jsonl` in the state directory (`$DSV4CTL_STATE_DIR`, else `$XDG_STATE_HOME/dsv4ctl`, else
`~/.local/state/dsv4ctl`): the configuration that decides the non-KV memory -> the measured figure.
`fit-length` and `serve` use the newest record whose configuration equals theirs (basis `calibrated`,
naming its log) instead of an estimate; `--no-calibration` ignores the records.

The configuration (`CalibrationKey`): the model, the vLLM release, the GPU's name and CUDA total, and every
flag that changes the memory vLLM measures: TP/PP/DP, expert parallelism, --gpu-memory-utilization,
--max-num-batched-tokens, --max-num-seqs, the KV cache dtype and attention class, MTP draft tokens,
--enforce-eager. A record never applies to another release, GPU or flag set.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from dsv4ctl.files import append_line

if TYPE_CHECKING:
    from dsv4ctl.logs.facts import LogCalibration

STATE_DIR_ENV = "DSV4CTL_STATE_DIR"
FILE_NAME = "calibration.jsonl"
MAX_RECORDS_READ = 10_000  # newest first; an old file never slows a plan down


def state_dir() -> Path:
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV]).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "dsv4ctl"


def calibration_file() -> Path:
    return state_dir() / FILE_NAME


@dataclass(frozen=True)
class CalibrationKey:
    model: str
    vllm_version: str
    gpu_name: str
    cuda_total_bytes: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_cache_dtype: str
    attention_class: str
    num_speculative_tokens: int
    enforce_eager: bool

    @classmethod
    def from_plan(cls, plan: dict[str, Any], gpu: dict[str, Any], enforce_eager: bool = False) -> CalibrationKey:
        """The key of a plan (`FitResult.to_json()`) on one of its GPUs (`gpus[i]` of that JSON)."""
        return cls(
            model=str(plan["geometry"].get("config_path") or plan["model"]),
            vllm_version=str(plan["vllm_version_planned"]),
            gpu_name=str(gpu["name"]),
            cuda_total_bytes=int(gpu["cuda_total_bytes"]),
            tensor_parallel_size=int(plan["tensor_parallel_size"]),
            pipeline_parallel_size=int(plan["pipeline_parallel_size"]),
            data_parallel_size=int(plan["data_parallel_size"]),
            enable_expert_parallel=bool(plan["enable_expert_parallel"]),
            gpu_memory_utilization=float(plan["gpu_memory_utilization"]),
            max_num_batched_tokens=int(plan["max_num_batched_tokens"]),
            max_num_seqs=int(plan["max_num_seqs"]),
            kv_cache_dtype=str(plan["kv_cache_dtype"]),
            attention_class=str(plan["attention_class"]),
            num_speculative_tokens=int(plan["num_speculative_tokens"]),
            enforce_eager=bool(enforce_eager),
        )


@dataclass(frozen=True)
class CalibrationRecord:
    key: CalibrationKey
    available_kv_bytes: int  # the log's "Available KV cache memory" (rounded to 0.01 GiB by vLLM)
    log: str
    recorded_at: str  # ISO-8601 UTC
    # The vLLM startup plans that start saved or applied (fingerprints): vLLM's own figure, read back from its files
    startup_plans: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"key": asdict(self.key), "available_kv_bytes": self.available_kv_bytes, "log": self.log,
                "recorded_at": self.recorded_at, "startup_plans": list(self.startup_plans)}


def record(
    key: CalibrationKey, available_kv_bytes: int, log: str, path: Path | None = None, startup_plans: tuple[str, ...] = ()
) -> CalibrationRecord:
    """Append one record (one JSON line; a torn last line is skipped by the reader)."""
    rec = CalibrationRecord(key, int(available_kv_bytes), str(log), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            tuple(startup_plans))
    target = path or calibration_file()
    append_line(target, (json.dumps(rec.to_json(), sort_keys=True) + "\n").encode("utf-8"),
                hint=f"the calibration records are kept in {STATE_DIR_ENV} (a directory you can write)", make_parents=True)
    return rec


def find(key: CalibrationKey, path: Path | None = None) -> CalibrationRecord | None:
    """The newest record for exactly this configuration, or None (no file, unreadable lines are skipped)."""
    target = path or calibration_file()
    try:
        lines = target.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    wanted = asdict(key)
    for line in reversed(lines[-MAX_RECORDS_READ:]):
        try:
            data = json.loads(line)
            if data.get("key") != wanted:
                continue
            plans = tuple(str(fp) for fp in data.get("startup_plans") or ())
            return CalibrationRecord(key, int(data["available_kv_bytes"]), str(data["log"]), str(data["recorded_at"]), plans)
        except (ValueError, KeyError, TypeError):
            continue
    return None


def record_from_serve(
    plan: dict[str, Any] | None, read_log: Callable[[], "LogCalibration"], log_file: str | os.PathLike[str],
    enforce_eager: bool = False,
) -> CalibrationRecord | None:
    """After a serve start: when the plan predicted (or calibrated) the KV memory and the log measured it, remember
    the measured figure for this configuration. `read_log` gives the start's log figures (read only when they can
    be recorded). Never raises (a start must not fail over its calibration)."""
    try:
        if not plan or plan.get("kv_cache_memory_source") not in ("predicted", "calibrated") or not plan.get("gpus"):
            return None
        log = read_log()
        # vLLM 0.34's measured mode: "Available KV cache memory" is the reservation; the size is the committed blocks.
        kv = log.measured_kv_bytes if log.sizing_mode == "measured" else log.available_kv_bytes
        if kv is None:
            return None
        gpu = plan["gpus"][0]  # the GPU the lookup keys on too (fit-length: the first planned device)
        key = CalibrationKey.from_plan(plan, gpu, enforce_eager)
        if log.vllm_version:
            from dsv4ctl.planning.mirror.versions import known_release_for

            key = CalibrationKey(**{**asdict(key), "vllm_version": known_release_for(log.vllm_version)[0]})
        return record(key, kv, str(log_file), startup_plans=log.startup_plans)
    except Exception:  # noqa: BLE001 - calibration is a convenience
        return None
