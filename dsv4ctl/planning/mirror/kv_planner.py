"""vLLM's KV-cache planner for DeepSeek-V4, mirrored line by line, per release.

vLLM 0.29.0-0.34.0 plan identically for a given KV memory (0.32.0 `v1/core/kv_cache_utils.py` is the reference;
0.33.0 moved the same code to `kv_cache_planning.py`; 0.34.0's functions on DeepSeek-V4's path are the same
code, only its refusal texts changed: `refusals.py`). How 0.34.0 finds that memory by default (measured after
warm-up) is `measured.py`. vLLM 0.27.1 and 0.28.0 plan differently ("layer tuples", below).

The functions keep vLLM's names so the mirror can be read side by side with the source:
- `get_packed_kv_cache_groups`  <- `_get_packed_kv_cache_groups` (block-outermost packing, approximate gcd)
- `approximate_gcd`             <- `_approximate_gcd`
- `bytes_per_block`             <- `_get_kv_cache_bytes_per_block` (block-outermost branch)
- `blocks_per_request`          <- `_max_memory_usage_bytes_from_groups` / bytes_per_block
- `estimate_max_model_len`      <- `_estimate_max_model_len_from_groups` (binary search)
- `project_groups_to_worker`    <- `_project_kv_cache_groups_to_worker` (pipeline parallel)
- `plan_kv_cache`               <- `get_kv_cache_configs` (null block, auto-fit, admission check)

DeepSeek-V4 never reaches vLLM's other grouping paths: its layers mix page sizes and its indexer backend
only supports block-outermost layouts, so `get_kv_cache_groups` always takes the packed path.

vLLM 0.27.1 / 0.28.0 (`v1/core/kv_cache_utils.py` of those releases), mirrored by the `layer_tuple_*` functions:
- `layer_tuple_groups`      <- `group_and_unify_kv_cache_specs` + `_get_kv_cache_groups_uniform_groups`: one group
                               of every MLA (full) layer; sliding layers bucketed by (block size, window), each
                               split into `cdiv(layers per page size, n)` groups, n = `_approximate_gcd` of the
                               buckets' layer-tuple counts with the MLA group's count as lower bound.
- `layer_tuple_needed_bytes` <- `_max_memory_usage_bytes_from_groups` (the all-UniformTypeKVCacheSpecs branch):
                               every group is priced as max-tuples x pages x the MLA group's distinct page sizes.
- blocks per pool: `_get_packed_kv_cache_layout` (the widest group's dense page bytes, no alignment).
- no null-block reservation before auto-fit and the admission check.
"""

from __future__ import annotations

import functools

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from dsv4ctl.planning.mirror.kv_specs import SLIDING, LayerKvSpec
from dsv4ctl.planning.mirror.kv_specs_v41 import CIRCULAR
from dsv4ctl.planning.mirror.refusals import RefusalTexts, refusal_texts
from dsv4ctl.units import cdiv, round_up

MIRRORED_VLLM_VERSION = "0.32.0"  # the release the default rules were first mirrored from

# Releases whose planner was read and whose answers are recorded in tests/data/planner/<version>.json.
KNOWN_VLLM_VERSIONS = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
PACKED = "packed-blocks"  # 0.29+: per-group pages x one aligned block stride, one null block held back
LAYER_TUPLES = "layer-tuples"  # 0.27/0.28: every group priced per layer tuple, no null block


def version_key(version: str) -> tuple[int, ...]:
    """`0.28.0` -> (0, 28, 0); local/pre-release suffixes (`+cpu`, `rc1`, `.dev3`) ignored."""
    parts = []
    for piece in re.split(r"[.+-]", version.strip().lstrip("v"))[:3]:
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    if not parts:
        raise ValueError(f"not a version: {version!r}")
    return tuple(parts + [0] * (3 - len(parts)))


@dataclass(frozen=True)
class PlannerRules:
    """How one vLLM release plans DeepSeek-V4's KV cache."""

    vllm_version: str  # the release whose rules these are (a known one)
    accounting: str  # PACKED | LAYER_TUPLES

    @property
    def null_block(self) -> bool:
        return self.accounting == PACKED

    @property
    def hinted_refusals(self) -> bool:
        """0.34+: the KV refusals end with a hint that depends on the sizing mode (refusals.py)."""
        return version_key(self.vllm_version) >= (0, 34, 0)


def planner_rules(vllm_version: str | None = None) -> PlannerRules:
    """The rules of `vllm_version` (a known release, or the known one it plans like); None: the newest known."""
    version = vllm_version or KNOWN_VLLM_VERSIONS[-1]
    key = version_key(version)
    if key < (0, 27, 0):
        raise ValueError(f"vLLM {version} predates DeepSeek-V4 support in a planned release (0.27.1 is the oldest)")
    if key[:2] in ((0, 27), (0, 28)):
        return PlannerRules(version, LAYER_TUPLES)
    return PlannerRules(version, PACKED)


@dataclass(frozen=True)
class KvGroup:
    """A KV-cache group: layers that share one block table (`KVCacheGroupSpec`)."""

    layer_names: tuple[str, ...]
    specs: tuple[LayerKvSpec, ...]  # the group's layer specs (may be empty on a PP worker)
    pages_spec: tuple[LayerKvSpec, ...]  # specs that decide per-request pages (the global group's when projected empty)

    @functools.cached_property
    def page_bytes(self) -> int:
        return sum(s.page_size_bytes for s in self.specs)

    def max_pages(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        return max(s.max_pages(max_model_len, max_in_flight_tokens) for s in self._page_shapes)

    @functools.cached_property
    def _page_shapes(self) -> tuple[LayerKvSpec, ...]:
        """One spec per distinct page arithmetic (a group's layers mostly repeat one): the auto-fit search
        asks for a request's pages dozens of times per plan."""
        seen: dict[tuple, LayerKvSpec] = {}
        for spec in self.pages_spec:
            seen.setdefault((spec.kind, spec.block_size, spec.sliding_window, spec.extra_retained_tokens), spec)
        return tuple(seen.values())

    @property
    def kind(self) -> str:
        return self.pages_spec[0].kind

    @property
    def block_size(self) -> int:
        return self.pages_spec[0].block_size


def approximate_gcd(values: list[int], *, lower_bound: int | None = None) -> int:
    """Chunk size minimising total upward padding; brute force over [lower_bound, max]; ties -> larger."""
    if not values:
        raise ValueError("values must be non-empty")
    if any(x <= 0 for x in values):
        raise ValueError(f"values must be positive, got: {list(values)!r}")
    min_d = max(1, lower_bound if lower_bound is not None else 1)
    max_d = max(values)
    if min_d > max_d:
        return min_d
    best_d = min_d
    best_pad: int | None = None
    for d in range(min_d, max_d + 1):
        pad = sum((d - (x % d)) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_pad = pad
            best_d = d
    return best_d


@dataclass
class _Bucket:
    specs: dict[str, LayerKvSpec] = field(default_factory=dict)

    @property
    def first(self) -> LayerKvSpec:
        return next(iter(self.specs.values()))

    def page_size_layers(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for name, spec in self.specs.items():
            out.setdefault(spec.page_size_bytes, []).append(name)
        return out

    def max_layers_per_page_size(self) -> int:
        return Counter(s.page_size_bytes for s in self.specs.values()).most_common(1)[0][1]


def get_packed_kv_cache_groups(kv_cache_spec: dict[str, LayerKvSpec]) -> list[KvGroup]:
    """Greedy uniform-type buckets; balanced buckets split into groups of `repeats_per_group` pattern repeats."""
    buckets: list[_Bucket] = []
    for name, spec in kv_cache_spec.items():
        for bucket in buckets:
            if bucket.first.uniform_key == spec.uniform_key:
                bucket.specs[name] = spec
                break
        else:
            buckets.append(_Bucket({name: spec}))

    bucketed = []
    for bucket in buckets:
        psl = bucket.page_size_layers()
        balanced = len({len(v) for v in psl.values()}) == 1
        bucketed.append((bucket, psl, balanced))

    min_repeats = max(
        (b.max_layers_per_page_size() for b, psl, balanced in bucketed if balanced and len(psl) > 1),
        default=0,
    )
    repeats_per_group = (
        approximate_gcd([b.max_layers_per_page_size() for b, _, balanced in bucketed if balanced], lower_bound=min_repeats)
        if min_repeats
        else None
    )

    def num_groups_for(bucket: _Bucket, balanced: bool) -> int:
        if balanced and repeats_per_group is not None:
            return cdiv(bucket.max_layers_per_page_size(), repeats_per_group)
        return 1

    def widest_group_bytes(psl: dict[int, list[str]], n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in psl.items())

    def is_state_bucket(bucket: _Bucket) -> bool:
        # vLLM: MambaSpec / CircularBufferSpec (DeepSeek-V4.1's compressor ring), or unsplit sliding-window buckets.
        return bucket.first.kind == CIRCULAR or (repeats_per_group is None and bucket.first.kind == SLIDING)

    anchor_bytes = max(
        (
            widest_group_bytes(psl, len(b.specs) if is_state_bucket(b) else num_groups_for(b, balanced))
            for b, psl, balanced in bucketed
        ),
        default=0,
    )

    groups: list[KvGroup] = []
    for bucket, psl, balanced in bucketed:
        num_groups = num_groups_for(bucket, balanced)
        if anchor_bytes and is_state_bucket(bucket):
            states_per_block = max(anchor_bytes // bucket.first.page_size_bytes, 1)
            num_groups = max(num_groups, cdiv(len(bucket.specs), states_per_block))
        if num_groups == 1:
            names = tuple(bucket.specs)
            specs = tuple(bucket.specs.values())
            groups.append(KvGroup(names, specs, specs))
            continue
        pattern_repeats = list(zip(*psl.values()))
        for i in range(num_groups):
            names = tuple(name for repeat in pattern_repeats[i::num_groups] for name in repeat)
            specs = tuple(bucket.specs[n] for n in names)
            groups.append(KvGroup(names, specs, specs))
    return groups


def layer_tuple_groups(kv_cache_spec: dict[str, LayerKvSpec]) -> list[KvGroup]:
    """vLLM 0.27/0.28 `group_and_unify_kv_cache_specs` + `_get_kv_cache_groups_uniform_groups`."""
    mla: dict[str, LayerKvSpec] = {}
    swa: dict[tuple[int, int], dict[str, LayerKvSpec]] = {}
    for name, spec in kv_cache_spec.items():
        if spec.kind == SLIDING:
            swa.setdefault((spec.block_size, spec.sliding_window), {})[name] = spec
        else:
            mla[name] = spec
    if not mla:
        raise ValueError("no MLA layers: vLLM 0.27/0.28 assert at least one")

    def tuples(specs: dict[str, LayerKvSpec]) -> int:  # `get_num_layer_tuples`
        return Counter(s.page_size_bytes for s in specs.values()).most_common(1)[0][1]

    counts = [tuples(mla)] + [tuples(b) for b in swa.values()]
    num_layer_tuples = approximate_gcd(counts, lower_bound=counts[0])
    groups = [KvGroup(tuple(mla), tuple(mla.values()), tuple(mla.values()))]
    for bucket in swa.values():
        per_size: dict[int, list[str]] = {}
        for name, spec in bucket.items():
            per_size.setdefault(spec.page_size_bytes, []).append(name)
        if len({len(v) for v in per_size.values()}) != 1:
            raise ValueError("vLLM 0.27/0.28 assert equal layer counts per page size in a sliding-window bucket")
        num_tuple_groups = cdiv(len(next(iter(per_size.values()))), num_layer_tuples)
        layer_tuples = list(zip(*per_size.values()))
        for i in range(num_tuple_groups):
            names = tuple(n for t in layer_tuples[i::num_tuple_groups] for n in t)
            specs = tuple(bucket[n] for n in names)
            groups.append(KvGroup(names, specs, specs))
    return groups


def layer_tuple_needed_bytes(groups: list[KvGroup], max_model_len: int, max_in_flight_tokens: int) -> int:
    """vLLM 0.27/0.28 `_max_memory_usage_bytes_from_groups`, all-UniformTypeKVCacheSpecs branch."""
    layer_tuple_bytes = sum({s.page_size_bytes for s in groups[0].pages_spec})  # `get_page_sizes()` is a set
    num_layer_tuples = max(Counter(s.page_size_bytes for s in g.pages_spec).most_common(1)[0][1] for g in groups)
    return sum(num_layer_tuples * g.max_pages(max_model_len, max_in_flight_tokens) * layer_tuple_bytes for g in groups)


def layer_tuple_bytes_per_block(groups: list[KvGroup]) -> int:
    """vLLM 0.27/0.28 `_get_packed_kv_cache_layout`: the widest group's dense page bytes (no alignment)."""
    widest = max(g.page_bytes for g in groups)
    if widest <= 0:
        raise ValueError("no KV-cache layers on this worker")
    return widest


def needed_bytes(groups: list[KvGroup], max_model_len: int, max_in_flight_tokens: int, rules: PlannerRules) -> int:
    """KV bytes one request of `max_model_len` tokens needs on this worker, as the release's admission check prices it."""
    return request_pricer(groups, rules)(max_model_len, max_in_flight_tokens)


def request_pricer(groups: list[KvGroup], rules: PlannerRules) -> Callable[[int, int], int]:
    """`needed_bytes` of these groups as a function of (max_model_len, max_in_flight_tokens), with what no length
    changes computed once (the auto-fit search prices dozens of lengths)."""
    if rules.accounting == LAYER_TUPLES:
        return lambda max_model_len, tokens: layer_tuple_needed_bytes(groups, max_model_len, tokens)
    per_block = bytes_per_block(groups)
    return lambda max_model_len, tokens: per_block * blocks_per_request(groups, max_model_len, tokens)


def pool_bytes_per_block(groups: list[KvGroup], rules: PlannerRules) -> int:
    """Bytes one block takes in the worker's pool (`available // this` = num_blocks)."""
    return layer_tuple_bytes_per_block(groups) if rules.accounting == LAYER_TUPLES else bytes_per_block(groups)


def bytes_per_block(groups: list[KvGroup]) -> int:
    """`_get_kv_cache_bytes_per_block`, block-outermost: the widest group's page bytes, aligned."""
    widest = max(g.page_bytes for g in groups)
    if widest <= 0:
        raise ValueError("no KV-cache layers on this worker")
    alignments = [s.block_stride_alignment for g in groups for s in g.specs]
    return round_up(widest, math.lcm(*alignments) if alignments else 1)


def max_concurrent_batches(async_scheduling: bool, pipeline_parallel_size: int) -> int:
    """`VllmConfig.max_concurrent_batches` with the V2 model runner (DeepSeek-V4's default since 0.28): the batches
    in flight, whose tokens (times max_num_batched_tokens) the planner keeps room for."""
    return pipeline_parallel_size + 1 if async_scheduling else pipeline_parallel_size


def blocks_per_request(groups: list[KvGroup], max_model_len: int, max_in_flight_tokens: int) -> int:
    """Blocks one request of `max_model_len` tokens claims from the shared pool (sum over groups)."""
    return sum(g.max_pages(max_model_len, max_in_flight_tokens) for g in groups)


def estimate_max_model_len(
    groups: list[KvGroup], available_memory: int, original_max: int, max_in_flight_tokens: int, rules: PlannerRules | None = None
) -> int:
    """Binary search for the longest context that fits; 0 if even one token does not."""
    price = request_pricer(groups, rules or planner_rules())

    def fits(model_len: int) -> bool:
        return price(model_len, max_in_flight_tokens) <= available_memory

    left, right = 1, original_max
    if not fits(left):
        return 0
    result = 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result = mid
            left = mid + 1
        else:
            right = mid - 1
    return result


def project_groups_to_worker(global_groups: list[KvGroup], worker_layers: set[str]) -> list[KvGroup]:
    """Keep each global group, restricted to this worker's layers. A group left empty keeps claiming
    the global group's blocks per request (vLLM keeps its original spec), but adds no page bytes."""
    projected = []
    for g in global_groups:
        names = tuple(n for n in g.layer_names if n in worker_layers)
        if len(names) == len(g.layer_names):
            projected.append(g)
            continue
        specs = tuple(s for s in g.specs if s.name in worker_layers)
        projected.append(KvGroup(names, specs, specs if specs else g.pages_spec))
    return projected


@dataclass(frozen=True)
class WorkerPlan:
    """One worker's (PP stage's) view: its groups, block size in bytes, memory and auto-fit limit."""

    pp_rank: int
    groups: list[KvGroup]
    bytes_per_block: int
    available_memory: int
    check_memory: int  # available minus the null block
    max_model_len_fit: int  # auto-fit's binary search result on this worker (0 = not one token)
    num_blocks: int  # available // bytes_per_block (what the pool allocates)


@dataclass(frozen=True)
class KvPlan:
    """The planner's decisions for one engine (all PP stages of one DP replica)."""

    global_groups: list[KvGroup]
    workers: list[WorkerPlan]
    original_max_model_len: int  # the model maximum (auto) or the explicit length
    autofit: bool
    max_model_len: int  # the length vLLM ends up with (auto-fit result or the explicit value)
    max_in_flight_tokens: int
    limiting_pp_rank: int
    error: str | None  # vLLM's ValueError text when it would refuse, else None
    rules: PlannerRules | None = None


def pp_layer_ranges(num_hidden_layers: int, pp_size: int, partition: list[int] | None = None) -> list[tuple[int, int]]:
    """`vllm.distributed.utils.get_pp_indices` for every rank (VLLM_PP_LAYER_PARTITION as `partition`)."""
    if partition is not None:
        if len(partition) != pp_size or sum(partition) != num_hidden_layers:
            raise ValueError("PP layer partition must have pp_size entries summing to num_hidden_layers")
        parts = list(partition)
    else:
        per = num_hidden_layers // pp_size
        parts = [per] * pp_size
        remaining = num_hidden_layers % pp_size
        if remaining:
            for i in range(2, remaining + 2):
                parts[-i] += 1
    ranges, start = [], 0
    for p in parts:
        ranges.append((start, start + p))
        start += p
    return ranges


def plan_kv_cache(
    kv_cache_spec: dict[str, LayerKvSpec],
    worker_layer_names: list[set[str]],
    available_memory: list[int],
    *,
    original_max_model_len: int,
    autofit: bool,
    max_in_flight_tokens: int,
    rules: PlannerRules | None = None,
    texts: RefusalTexts | None = None,
) -> KvPlan:
    """`get_kv_cache_configs`: group globally, project per worker, reserve the null block (0.29+), auto-fit, check.
    `texts`: the refusals in the launch's sizing mode (default: the release's estimate-mode texts)."""
    rules = rules or planner_rules()
    texts = texts or refusal_texts(rules.hinted_refusals)
    if rules.accounting == LAYER_TUPLES:
        global_groups = layer_tuple_groups(kv_cache_spec)
    else:
        global_groups = get_packed_kv_cache_groups(kv_cache_spec)
    projected = [project_groups_to_worker(global_groups, names) for names in worker_layer_names]
    bpbs = [pool_bytes_per_block(g, rules) for g in projected]
    check = [avail - bpb if rules.null_block else avail for avail, bpb in zip(available_memory, bpbs)]
    fits = [
        estimate_max_model_len(g, c, original_max_model_len, max_in_flight_tokens, rules) for g, c in zip(projected, check)
    ]

    max_len = original_max_model_len
    limiting = 0
    error: str | None = None
    if autofit:
        auto = original_max_model_len
        for rank, worker_max in enumerate(fits):
            if worker_max < auto:
                auto, limiting = worker_max, rank
        if auto <= 0:
            error = texts.cannot_autofit()
        else:
            max_len = min(auto, original_max_model_len)
    else:
        # The explicit length: the worker that needs the most relative to its memory limits it.
        limiting = min(range(len(fits)), key=lambda r: fits[r])
    if error is None:
        for rank, (groups, avail) in enumerate(zip(projected, check)):
            if avail <= 0:
                error = texts.no_memory()
                limiting = rank
                break
            needed = needed_bytes(groups, max_len, max_in_flight_tokens, rules)
            if needed > avail:
                error = texts.admission(max_len, needed, avail, fits[rank])
                limiting = rank
                break
    workers = [
        WorkerPlan(
            pp_rank=rank,
            groups=projected[rank],
            bytes_per_block=bpbs[rank],
            available_memory=available_memory[rank],
            check_memory=check[rank],
            max_model_len_fit=fits[rank],
            num_blocks=max(0, available_memory[rank]) // bpbs[rank],
        )
        for rank in range(len(projected))
    ]
    return KvPlan(
        global_groups=global_groups,
        workers=workers,
        original_max_model_len=original_max_model_len,
        autofit=autofit,
        max_model_len=max_len,
        max_in_flight_tokens=max_in_flight_tokens,
        limiting_pp_rank=limiting,
        error=error,
        rules=rules,
    )
