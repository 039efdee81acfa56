"""DeepSeek-V4.1's Engram n-gram tables in host memory: `--engram-config` read as vLLM reads it, each rank's share of
the tables computed with vLLM's own arithmetic, and the bytes every node must pin, against what the host has.

Sources (vLLM 0.34.0; 0.33.0 the same where not said):
- `config/engram.py` `EngramConfig`: cpu_offload True (pinned host memory, read over UVA), disk_offload False
  (0.34 only; "disk_offload requires a Qwen4Exp model on CUDA", `:90-94`), embedding_across_dp False,
  dp_shared_memory None -> True when `cpu_offload and not use_thp and data_parallel_size > 1 and not elastic EP`
  (`resolve_dp_shared_memory`), use_thp False; the validator's refusals ("dp_shared_memory requires cpu_offload=True",
  "use_thp requires cpu_offload=True and dp_shared_memory=False"). `engine/arg_utils.py` turns the flag's JSON into
  `EngramConfig(**dict)` (0.34 `:899-900`, 0.33 `:892-893`).
- `models/deepseek_v41/common/engram.py`: `EngramLayout` draws, per layer, per n-gram order 2..max, per head, the next
  unused prime above `engram_vocab_size - 1` (`find_next_prime`); a layer's table has the sum of its
  (max_ngram - 1) x n_heads primes as rows. `ParallelEngramEmbedding` shards the hash heads over `num_shards`
  (TP, or TP x DP with DP > 1), `cdiv(heads, shards)` per rank, a rank's rows the sum of its heads' primes, and
  asserts `(num_shards - 1) x cdiv(heads, shards) < heads`. A row is `head_dim` fp8 bytes plus `head_dim // 32`
  UE8M0 scale bytes (`_allocate_weights`). Private tables are two `torch.empty(..., pin_memory=True)` per layer;
  the source says "pin_memory rounds up to a power of two" (torch's CachingHostAllocator rounds each
  allocation to the next power of two): shown as the likely figure, the exact bytes as the floor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.errors import UsageError
from dsv4ctl.planning.checkpoint.v41 import V41Facts
from dsv4ctl.units import cdiv

SCALE_BLOCK = 32  # one UE8M0 scale byte per 32 fp8 values (`block_size` of ParallelEngramEmbedding)
CUMEM_GRANULARITY = 2 << 20  # DP-shared tables through cuMem: 2 MiB granularity
FIELDS = ("cpu_offload", "disk_offload", "embedding_across_dp", "dp_shared_memory", "use_thp")


@dataclass(frozen=True)
class EngramSettings:
    """vLLM's `EngramConfig` as given (`--engram-config`) or defaulted."""

    cpu_offload: bool = True
    disk_offload: bool = False
    embedding_across_dp: bool = False
    dp_shared_memory: bool | None = None
    use_thp: bool = False
    given: str | None = None  # the flag's text, None: vLLM's defaults

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in FIELDS} | {"given": self.given}


def parse_engram_config(text: str | dict[str, Any] | None) -> EngramSettings:
    """`--engram-config JSON` as vLLM takes it (or the dict vLLM's parser made of it): a JSON object of EngramConfig's
    fields, its validator's refusals."""
    if text is None:
        return EngramSettings()
    if isinstance(text, dict):
        data, text = text, json.dumps(text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError("--engram-config must be JSON", hint='e.g. \'{"cpu_offload": true}\' (vLLM parses it as JSON)') from None
    if not isinstance(data, dict):
        raise UsageError("--engram-config must be a JSON object", hint='e.g. \'{"cpu_offload": true}\'')
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise UsageError(f"--engram-config: unknown field {unknown[0]!r}", hint="vLLM's EngramConfig fields: " + ", ".join(FIELDS))
    values = {}
    for key, value in data.items():
        if key == "dp_shared_memory" and value is None:
            values[key] = None
            continue
        as_bool = lax_bool(value)
        if as_bool is None:
            raise UsageError(f"--engram-config: {key} must be a boolean as vLLM's pydantic reads it, got {value!r}",
                             hint="true/false, 1/0, or one of the strings " + ", ".join(sorted(TRUE_WORDS | FALSE_WORDS)))
        values[key] = as_bool
    settings = EngramSettings(**values, given=text)
    # EngramConfig._validate_shared_memory (config/engram.py), verbatim.
    if settings.dp_shared_memory and not settings.cpu_offload:
        raise UsageError("--engram-config: vLLM refuses it: dp_shared_memory requires cpu_offload=True")
    if settings.use_thp and (not settings.cpu_offload or settings.dp_shared_memory):
        raise UsageError("--engram-config: vLLM refuses it: use_thp requires cpu_offload=True and dp_shared_memory=False")
    return settings


# pydantic's lax bool (vLLM's `@config` dataclasses: ConfigDict(extra="forbid"), not strict, 0.34.0 config/utils.py:71-77;
# pydantic 2 docs, "Conversion Table", bool in lax mode): the strings it takes, case
# insensitive; ints and floats 0 and 1.
TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})


def lax_bool(value: Any) -> bool | None:
    """`value` as pydantic's bool in lax mode reads it; None where pydantic refuses it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    return None


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def layer_head_rows(facts: V41Facts) -> list[list[int]]:
    """Each Engram layer's hash heads' row counts, as `EngramLayout` draws its primes."""
    seen: set[int] = set()
    layers = []
    for _ in facts.engram_layer_ids:
        heads = []
        for _ in range(facts.engram_max_ngram_size - 1):
            current = facts.engram_vocab_size - 1
            for _ in range(facts.engram_n_heads):
                current += 1
                while not _is_prime(current) or current in seen:
                    current += 1
                seen.add(current)
                heads.append(current)
        layers.append(heads)
    return layers


def pow2ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class EngramHostPlan:
    """The host bytes the Engram tables take per node, the arithmetic, and the host's memory against them."""

    settings: EngramSettings
    table_bytes: int  # both layers' whole tables (values + scales)
    num_shards: int
    rank_rows: tuple[int, ...]  # rows per rank (layer by layer summed), rank 0's first
    per_node_exact: int  # bytes the node holds (0: the tables sit in GPU memory)
    per_node_pinned: int  # with the pinned allocator's power-of-two rounding (== exact where it does not apply)
    copies_per_node: int  # whole-table copies on the node
    mode: str  # "pinned-per-rank" | "dp-shared" | "gpu" | "thp"
    host_total: int | None = None
    host_available: int | None = None
    host_source: str | None = None
    verdict: str = "unknown"  # "fits" | "tight" (exact fits, rounded does not) | "short" | "unknown" | "gpu"
    lines: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "engram_config": self.settings.to_json(),
            "mode": self.mode,
            "table_bytes": self.table_bytes,
            "num_shards": self.num_shards,
            "rank_rows": list(self.rank_rows),
            "per_node_exact_bytes": self.per_node_exact,
            "per_node_pinned_bytes": self.per_node_pinned,
            "copies_per_node": self.copies_per_node,
            "host_total_bytes": self.host_total,
            "host_available_bytes": self.host_available,
            "host_source": self.host_source,
            "verdict": self.verdict,
            "arithmetic": list(self.lines),
        }


def shard_rows(heads: list[int], num_shards: int) -> list[int]:
    """Each shard's rows of one layer (`ParallelEngramEmbedding`: `cdiv(heads, shards)` heads per rank)."""
    part = cdiv(len(heads), num_shards)
    if (num_shards - 1) * part >= len(heads):
        raise UsageError(
            f"vLLM refuses it: \"Engram sharding leaves ranks without hash heads: {len(heads)} heads over {num_shards} "
            "shards\" (models/deepseek_v41/common/engram.py)",
            hint="DeepSeek-V4.1-Flash's 24 heads split over 1, 2, 3, 4, 6, 8 or 12 ranks",
        )
    return [sum(heads[r * part:(r + 1) * part]) for r in range(num_shards)]


def gpu_table_bytes(
    facts: V41Facts, settings: EngramSettings, *, tensor_parallel_size: int, data_parallel_size: int,
) -> tuple[int, ...]:
    """With cpu_offload false, the bytes each shard's Engram tables take in its GPU's memory (shard 0's first); empty
    with the tables in host memory. `ParallelEngramEmbedding._allocate_weights` (0.34.0 common/engram.py:1022-1032)
    allocates a rank's values (rows x head_dim fp8) and scales (rows x head_dim // 32) on the default device - the
    GPU - when cpu_offload is off: model parameters, loaded with the weights."""
    if settings.cpu_offload:
        return ()
    heads = layer_head_rows(facts)
    shards = tensor_parallel_size * data_parallel_size if (data_parallel_size > 1 and settings.embedding_across_dp) \
        else tensor_parallel_size
    per_layer = [shard_rows(h, shards) for h in heads]
    row_bytes = facts.engram_head_dim + facts.engram_head_dim // SCALE_BLOCK
    return tuple(sum(layer[r] for layer in per_layer) * row_bytes for r in range(shards))


def _fmt(n: int) -> str:
    from dsv4ctl.units import format_gib

    return format_gib(n)


def plan_engram_host(
    facts: V41Facts, settings: EngramSettings, *, tensor_parallel_size: int, data_parallel_size: int, host: Any,
    unknown_why: str = "the GPU snapshot carries none",
) -> EngramHostPlan:
    """Kept whole: one arithmetic, each mode's branch beside the others, so the lines printed are the ones computed.

    The bytes one node pins for the Engram tables (every rank of the launch on that node), and the verdict against
    the host's memory (`host`: a `dsv4ctl.host.HostMemory`, None when unknown)."""
    if settings.disk_offload:
        raise UsageError(
            "--engram-config disk_offload: vLLM refuses it for DeepSeek-V4.1: \"disk_offload requires a Qwen4Exp model "
            "on CUDA\" (0.34.0 config/engram.py:90-94; 0.33.0's EngramConfig has no disk_offload field)",
            hint="drop disk_offload: the tables go to pinned host memory (cpu_offload, the default)",
        )
    tp, dp = tensor_parallel_size, data_parallel_size
    if settings.dp_shared_memory and dp <= 1:
        raise UsageError(
            "--engram-config dp_shared_memory: vLLM refuses it: \"dp_shared_memory requires data_parallel_size > 1.\" "
            "(0.34.0 config/engram.py:106-110, EngramConfig.verify_parallel_config, called from config/vllm.py:1428; "
            "0.33.0 config/engram.py:95-99, config/vllm.py:1489)",
            hint="drop dp_shared_memory at -dp 1, or plan -dp 2 or more (it is on by default there)")
    heads = layer_head_rows(facts)
    row_bytes = facts.engram_head_dim + facts.engram_head_dim // SCALE_BLOCK
    table_rows = [sum(h) for h in heads]
    table_bytes = sum(table_rows) * row_bytes
    layers = " + ".join(f"layer {lid} {rows:,}" for lid, rows in zip(facts.engram_layer_ids, table_rows))
    lines = [f"Engram tables: {layers} rows x ({facts.engram_head_dim} + {facts.engram_head_dim // SCALE_BLOCK}) B = "
             f"{table_bytes:,} B ({_fmt(table_bytes)}) (config.json engram_*; rows per layer = the sum of its "
             f"{facts.engram_hash_heads} hash heads' primes, models/deepseek_v41/common/engram.py EngramLayout)"]
    if list(table_rows) != list(facts.engram_num_embeddings):
        lines.append(f"config.json's engram_num_embeddings {list(facts.engram_num_embeddings)} differ from the primes' sums "
                     f"{table_rows}: vLLM sizes the tables by the primes")
    dp_shared = settings.dp_shared_memory
    if dp_shared is None:  # EngramConfig.resolve_dp_shared_memory
        dp_shared = settings.cpu_offload and not settings.use_thp and dp > 1
    if dp > 1 and settings.embedding_across_dp:
        shards, copies = tp * dp, 1  # the heads sharded over TP x DP: one table across the replicas
    elif dp > 1 and not dp_shared:
        shards, copies = tp, dp  # every replica its own TP-sharded copy
    else:
        shards, copies = tp, 1  # DP 1, or one copy per node shared by the co-located replicas
    per_layer = [shard_rows(h, shards) for h in heads]
    rank_rows = tuple(sum(layer[r] for layer in per_layer) for r in range(shards))
    lines.append(f"sharded over {shards} rank{'s' if shards != 1 else ''} (TP {tp}" + (f" x DP {dp}" if shards != tp else "")
                 + f"): {cdiv(facts.engram_hash_heads, shards)} hash heads per rank per layer; the largest share is "
                 f"{max(rank_rows):,} rows = {_fmt(max(rank_rows) * row_bytes)}")
    if not settings.cpu_offload:
        lines.append(f"cpu_offload false: each rank holds its share in GPU memory ({_fmt(max(rank_rows) * row_bytes)} on "
                     "the largest), beside the weights (the engram column of the GPU memory table, subtracted from the "
                     "KV memory; common/engram.py _allocate_weights); no host memory is pinned for the tables")
        return EngramHostPlan(settings, table_bytes, shards, rank_rows, 0, 0, 0, "gpu", verdict="gpu", lines=tuple(lines))
    exact = table_bytes * copies
    if dp_shared:
        mode = "dp-shared"
        pinned = copies * sum(-(-rows * row_bytes // CUMEM_GRANULARITY) * CUMEM_GRANULARITY for layer in per_layer for rows in layer)
        lines.append(f"dp_shared_memory: one copy of every TP shard per node, shared by the {dp} co-located DP replicas "
                     f"(cuMem, 2 MiB granularity, else /dev/shm): {_fmt(pinned)} per node")
        shm = getattr(host, "shm_free_bytes", None)
        if shm is not None and shm < table_bytes:
            # can_share_engram_tables (0.34.0 common/engram.py:831-853) checks /dev/shm even where cuMem would serve;
            # False: private tables per rank, sharded over TP x DP, torch.empty(pin_memory=True) (:1064-1090).
            mode, shards = "pinned-per-rank", tp * dp
            per_layer = [shard_rows(h, shards) for h in heads]
            rank_rows = tuple(sum(layer[r] for layer in per_layer) for r in range(shards))
            exact, copies = table_bytes, 1
            pinned = sum(pow2ceil(rows * facts.engram_head_dim) + pow2ceil(rows * (facts.engram_head_dim // SCALE_BLOCK))
                         for layer in per_layer for rows in layer)
            lines.append(f"/dev/shm has {_fmt(shm)} free, less than the {_fmt(table_bytes)} vLLM requires to share the "
                         "tables (can_share_engram_tables, checked even where cuMem would serve, common/engram.py:831-853): "
                         "it shards them over TP x DP instead (\"Sharding the offloaded Engram tables across DP "
                         f"replicas\"), private per rank with torch.empty(pin_memory=True) (:1064-1090), each rounded up "
                         f"to a power of two by the pinned allocator: {shards} ranks pin {_fmt(pinned)} per node "
                         f"({_fmt(exact)} of data)")
    elif settings.use_thp:
        mode = "thp"
        pinned = exact
        lines.append(f"use_thp: private tables on huge pages, registered at their exact size: {_fmt(pinned)} per node")
    else:
        mode = "pinned-per-rank"
        pinned = copies * sum(pow2ceil(rows * facts.engram_head_dim) + pow2ceil(rows * (facts.engram_head_dim // SCALE_BLOCK))
                              for layer in per_layer for rows in layer)
        who = f"{shards} rank{'s' if shards != 1 else ''}" + (f", {copies} DP replicas each with its own copy" if copies > 1 else "")
        lines.append(f"pinned per rank with torch.empty(pin_memory=True), values and scales per layer, each rounded up to a "
                     f"power of two by the pinned allocator (\"pin_memory rounds up to a power of two\", "
                     f"common/engram.py): {who} pin {_fmt(pinned)} per node ({_fmt(exact)} of data)")
    plan = EngramHostPlan(settings, table_bytes, shards, rank_rows, exact, pinned, copies, mode, lines=tuple(lines))
    return _against_host(plan, host, unknown_why)


def _against_host(plan: EngramHostPlan, host: Any, unknown_why: str) -> EngramHostPlan:
    from dataclasses import replace

    if host is None:
        return replace(plan, verdict="unknown", lines=plan.lines + (
            f"host memory unknown ({unknown_why}): the node needs {_fmt(plan.per_node_pinned)} "
            f"of host RAM for the tables (at least {_fmt(plan.per_node_exact)})",))
    have = host.available_bytes
    where = f"{host.hostname or 'the host'} ({host.source})"
    if have < plan.per_node_exact:
        verdict = "short"
        line = (f"the host cannot pin the tables: need {_fmt(plan.per_node_exact)} at least "
                f"({_fmt(plan.per_node_pinned)} with the allocator's rounding), have {_fmt(have)} available of "
                f"{_fmt(host.total_bytes)} on {where}: short by {_fmt(plan.per_node_exact - have)}")
    elif have < plan.per_node_pinned:
        verdict = "tight"
        line = (f"the host holds the tables' {_fmt(plan.per_node_exact)} but not the {_fmt(plan.per_node_pinned)} the pinned "
                f"allocator likely takes with its power-of-two rounding: {_fmt(have)} available of {_fmt(host.total_bytes)} "
                f"on {where}; --engram-config '{{\"use_thp\": true}}' pins the exact size")
    else:
        verdict = "fits"
        line = (f"host memory: {_fmt(have)} available of {_fmt(host.total_bytes)} on {where}, "
                f"{_fmt(plan.per_node_pinned)} needed for the tables: {_fmt(have - plan.per_node_pinned)} left")
    return replace(plan, host_total=host.total_bytes, host_available=have, host_source=host.source, verdict=verdict,
                   lines=plan.lines + (line,))
