"""A launch's `vllm serve` flags across two releases, from the catalogue's table of each release's flags
(`dsv4ctl.catalogue.vllm_flags`): the flags it passes that the other release removes, renames or no longer takes the
value of; the flags it leaves at their default whose default changes; every flag the other release adds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dsv4ctl.catalogue import vllm_flags

# The vLLM flags a plan reads, by the planning request's field (FitRequest's names are vLLM's, but for the MTP draft
# length, which is --speculative-config's).
PLANNED_FLAGS: dict[str, str] = {
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "kv_cache_dtype": "--kv-cache-dtype",
    "block_size": "--block-size",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs",
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel_size": "--data-parallel-size",
    "enable_expert_parallel": "--enable-expert-parallel",
    "async_scheduling": "--async-scheduling",
    "num_speculative_tokens": "--speculative-config",
    "attention_backend": "--attention-backend",
}

REMOVED = "removed"
RENAMED = "renamed"
VALUE_GONE = "value-gone"
NEW_DEFAULT = "new-default"


@dataclass(frozen=True)
class LaunchFlag:
    """One flag of the launch: the option as vLLM names it, the value passed (None for a bare switch or a flag
    left at its default) and whether the launch passes it."""

    option: str
    value: str | None
    given: bool


@dataclass(frozen=True)
class FlagChange:
    option: str
    change: str  # REMOVED | RENAMED | VALUE_GONE | NEW_DEFAULT
    given: bool  # the launch passes it (a new default then does not reach it)
    before: str | None  # the default / name / value under the release compared from
    after: str | None  # ... under the release compared to
    where: str | None  # the declaration in the release that has it ('vllm==0.33.0 vllm/engine/arg_utils.py:1388')

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FlagsDiff:
    recorded: bool  # both releases are in the table
    note: str | None  # why not, when not
    launch: tuple[FlagChange, ...]  # this launch's flags that change
    added: tuple[str, ...]  # every long option the newer side adds (no --no- forms)
    removed: tuple[str, ...]  # every long option the other release lacks

    def to_json(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "note": self.note, "launch": [c.to_json() for c in self.launch],
                "added": list(self.added),
                "removed": list(self.removed)}


def launch_flags_of_request(request: Any) -> tuple[LaunchFlag, ...]:
    """The planned flags of a planning request: given where the operator typed them or the value is not the
    request's default (a library caller's), else at vLLM's default."""
    defaults = {f.name: f.default for f in dataclasses.fields(type(request))}
    explicit = getattr(request, "explicit", frozenset())
    out = []
    for field, option in PLANNED_FLAGS.items():
        value = getattr(request, field, None)
        if field == "max_model_len" and value == -1:
            value = None  # auto: -1 and None are one request
        given = field in explicit or (value is not None and value != defaults.get(field))
        if field == "max_model_len" and value is None:
            value = "auto"
        out.append(LaunchFlag(option, None if not given or isinstance(value, bool) else str(value), bool(given)))
    return tuple(out)


def launch_flags_of_argv(argv: list[str], release: str | None) -> tuple[LaunchFlag, ...]:
    """The flags of a `vllm serve` argv (`--x v`, `--x=v`, switches) as that release names them, then the planned
    flags it does not pass, at their defaults."""
    out: list[LaunchFlag] = []
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-") or token in ("-", "--"):
            continue
        option, _, value = token.partition("=")
        name = vllm_flags.flag_for_field(option, release) or option
        info = vllm_flags.flag(option, release)
        takes_value = info is None or info.kind not in ("bool", "store_true", "store_false", "store_const", "count")
        if not value and takes_value and i < len(argv) and not argv[i].startswith("--"):
            value = argv[i]
            i += 1
        seen.add(name)
        out.append(LaunchFlag(name, value or None, True))
    out += [LaunchFlag(o, None, False) for o in PLANNED_FLAGS.values() if o not in seen]
    return tuple(out)


def _text(value: Any) -> str:
    return "none" if value is None else str(value)


def _change(flag: LaunchFlag, a: str, b: str) -> FlagChange | None:
    before = vllm_flags.flag(flag.option, a)
    if before is None:
        return None  # not a flag of the release compared from: vLLM's own parser refuses it there
    after = vllm_flags.flag(flag.option, b)
    if after is None:
        moved = vllm_flags.flag_for_field(before.field, b) if before.field else None
        if moved:
            return FlagChange(flag.option, RENAMED, flag.given, before.name, moved, vllm_flags.flag(moved, b).cite)
        return FlagChange(flag.option, REMOVED, flag.given, before.name, None, before.cite)
    if after.name != before.name:
        return FlagChange(flag.option, RENAMED, flag.given, before.name, after.name, after.cite)
    if flag.given and flag.value is not None and before.choices and flag.value in before.choices \
            and flag.value not in after.choices:
        return FlagChange(flag.option, VALUE_GONE, True, flag.value, None, after.cite)
    if before.has_default and after.has_default and before.default != after.default:
        return FlagChange(flag.option, NEW_DEFAULT, flag.given, _text(before.default), _text(after.default), after.cite)
    return None


def _long(release: str) -> set[str]:
    return {o for o in vllm_flags.option_strings(release) if o.startswith("--") and not o.startswith("--no-")}


def flags_diff(launch: tuple[LaunchFlag, ...], a: str, b: str) -> FlagsDiff:
    """The launch's flags from release `a` to `b`, and every flag one has and the other lacks."""
    missing = [r for r in (a, b) if not _exact(r)]
    if missing:
        have = vllm_flags.releases()
        span = f"{have[0]}-{have[-1]}" if have else "none: the table did not load"
        return FlagsDiff(False, f"not recorded: the table of vLLM's flags has no {' or '.join(missing)} "
                         f"(it has {span})", (), (), ())
    changes = tuple(c for c in (_change(f, a, b) for f in launch) if c is not None)
    old, new = _long(a), _long(b)
    keys = lambda options: sorted({vllm_flags.flag_for_field(o, b) or o for o in options})  # noqa: E731
    added = tuple(o for o in keys(new - old) if vllm_flags.flag(o, a) is None)
    removed = tuple(sorted(o for o in old - new if vllm_flags.flag(o, b) is None))
    return FlagsDiff(True, None, changes, added, removed)


def _exact(release: str) -> bool:
    match = vllm_flags.resolved_release(release)
    return match is not None and match.exact


def default_of(option: str, release: str) -> tuple[bool, Any]:
    """(recorded, default) of a flag in a release of the table: recorded False when the table lacks the release
    or records no literal default for it."""
    if not _exact(release):
        return False, None
    info = vllm_flags.flag(option, release)
    if info is None or not info.has_default:
        return False, None
    return True, info.default
