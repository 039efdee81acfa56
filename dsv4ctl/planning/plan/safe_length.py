"""The one safe explicit `--max-model-len`: what `fit-length`, `serve` and `diagnose` recommend.

Rule: re-run auto-fit with a margin taken off every GPU's KV memory (5 % of it, at least 512 MiB;
docs/fit-length.md says why), round down to whole blocks (1,024 tokens above 8k, else 256), and stay
strictly below the auto-fit ceiling, unless even the reduced memory holds the model's full context.

The margin is memory, so what it costs in tokens depends on where the memory sits: far from a cliff a
few percent, near one (the sliding-window caches hold `max_num_batched_tokens` × batches in flight
per request, a fixed cost that dominates at ~10 GiB for Flash) much more. When the margin costs more
than 10 % of the context, the result says so and lists the settings that recover it (fewer batched
tokens, async scheduling off), each with the safe length it gives.

Pure: the caller passes `autofit_at(cut_bytes, in_flight_tokens) -> length`, the auto-fit length with
`cut_bytes` taken off every GPU's KV memory and that many tokens in flight (0: not one token fits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dsv4ctl.units import MiB, format_gib, format_tokens

MARGIN_FRACTION = 0.05
MIN_MARGIN_BYTES = 512 * MiB
CLIFF_FRACTION = 0.10  # the margin costs more than this share of the context: say so, show the knobs
BLOCK_SIZE = 256  # DeepSeek-V4's only KV block size
KNOB_BATCHED_TOKENS = (2048, 4096, 8192)  # smaller --max-num-batched-tokens tried when at the cliff
MAX_KNOBS = 3

AutofitAt = Callable[[int, int], int]


class MarginRule(Protocol):
    def resolve(self, kv_memory: int) -> int: ...

    def describe(self) -> str: ...


class _DefaultMargin:
    def resolve(self, kv_memory: int) -> int:
        return max(int(kv_memory * MARGIN_FRACTION), MIN_MARGIN_BYTES)

    def describe(self) -> str:
        return f"{MARGIN_FRACTION * 100:g}% of KV memory (at least {format_gib(MIN_MARGIN_BYTES)})"


@dataclass(frozen=True)
class Knob:
    """A setting that recovers context at the cliff, and the safe length it gives."""

    flags: str  # as typed on `vllm serve` / `dsv4ctl serve`: "--max-num-batched-tokens 4096"
    max_num_batched_tokens: int
    async_scheduling: bool
    length: int
    cost: str  # what it trades away

    def to_json(self) -> dict[str, Any]:
        return {"flags": self.flags, "max_num_batched_tokens": self.max_num_batched_tokens,
                "async_scheduling": self.async_scheduling, "safe_max_model_len": self.length, "cost": self.cost}


@dataclass(frozen=True)
class SafeLength:
    length: int  # the recommended explicit --max-model-len (0: none survives the margin)
    ceiling: int  # what --max-model-len auto picks (0: not one token fits)
    model_max: int
    margin_bytes: int
    margin_rule: str
    knobs: tuple[Knob, ...] = ()
    ceiling_basis: str = ""  # where the ceiling was planned from when not the KV memory's figure itself
    # Where the length comes from when it is not this model's own plan: the geometry it was planned for and why
    # (`basis`), or an estimate (`estimate`: no plan; `length` is then an upper bound, said so).
    basis: str = ""
    estimate: bool = False

    @property
    def cost_tokens(self) -> int:
        return max(0, min(self.ceiling, self.model_max) - self.length) if self.length else 0

    @property
    def cost_fraction(self) -> float:
        return self.cost_tokens / self.ceiling if self.ceiling else 0.0

    @property
    def cliff(self) -> bool:
        return self.cost_fraction > CLIFF_FRACTION

    def line(self) -> str:
        """One line: the length, the margin, and what the margin costs in tokens."""
        margin = (f"{format_gib(self.margin_bytes)} of KV memory held back [{self.margin_rule}]" if self.margin_bytes
                  else f"the margin [{self.margin_rule}]")
        if self.ceiling <= 0:
            return "no safe length: not one token of KV cache fits"
        if self.length <= 0:
            return (f"no safe length: of the {format_tokens(self.ceiling)} tokens --max-model-len auto would pick"
                    f"{self.ceiling_basis}, none survives {margin}")
        where = f" ({self.basis})" if self.basis else ""
        if self.length >= self.model_max:
            return f"safe length {format_tokens(self.length)}{where}, the full context, holds with {margin} to spare"
        if self.estimate:
            return (
                f"safe length at most {format_tokens(self.length)}, an estimate{where}: {margin} costs about "
                f"{format_tokens(self.cost_tokens)} tokens of the {format_tokens(self.ceiling)} --max-model-len auto picked "
                f"({self.cost_fraction:.0%})"
            )
        return (
            f"safe length {format_tokens(self.length)}{where}: {margin} costs {format_tokens(self.cost_tokens)} tokens of "
            f"the {format_tokens(self.ceiling)} --max-model-len auto would pick{self.ceiling_basis} ({self.cost_fraction:.0%})"
        )

    def cliff_line(self) -> str | None:
        """At the cliff: say so and show the knobs that recover the context (None elsewhere)."""
        if not self.cliff:
            return None
        text = (
            f"the margin costs {self.cost_fraction:.0%} of the context: at this memory the tokens in flight "
            "(batched tokens × batches) dominate the per-request KV"
        )
        if not self.knobs:
            return text + "; more KV memory is the only way back"
        options = "; ".join(
            f"{k.flags} gives {format_tokens(k.length)}{', the full context' if k.length >= self.model_max else ''} "
            f"({k.cost})"
            for k in self.knobs
        )
        return f"{text}; {options}"

    def lines(self) -> list[str]:
        cliff = self.cliff_line()
        return [self.line(), *([cliff] if cliff else [])]

    def to_json(self) -> dict[str, Any]:
        return {
            "safe_max_model_len": self.length,
            "autofit_max_model_len": self.ceiling,
            "margin_bytes": self.margin_bytes,
            "margin_rule": self.margin_rule,
            "ceiling_basis": self.ceiling_basis.strip() or None,
            "margin_cost_tokens": self.cost_tokens,
            "margin_cost_fraction": round(self.cost_fraction, 4),
            "cliff": self.cliff,
            "knobs": [k.to_json() for k in self.knobs],
            "line": self.line(),
            "cliff_line": self.cliff_line(),
            "basis": self.basis or None,
            "estimate": self.estimate,
        }


def round_block_friendly(length: int) -> int:
    """Round down to whole blocks: 1,024 tokens (4 blocks) above 8k, else 256 (one block)."""
    step = 4 * BLOCK_SIZE if length >= 8192 else BLOCK_SIZE
    if length < step:
        return length
    return length // step * step


def _safe(autofit_at: AutofitAt, cut: int, in_flight: int, model_max: int) -> tuple[int, int]:
    """(ceiling, safe length) for one scheduling setting."""
    ceiling = autofit_at(0, in_flight)
    reduced = autofit_at(cut, in_flight)
    if reduced >= model_max and ceiling >= model_max:
        return ceiling, model_max
    length = round_block_friendly(reduced)
    if ceiling and length >= ceiling:
        length = round_block_friendly(ceiling - 1)
    return ceiling, max(length, 0)


def safe_length(
    autofit_at: AutofitAt,
    *,
    kv_memory_bytes: int,
    model_max: int,
    max_num_batched_tokens: int,
    async_scheduling: bool,
    pipeline_parallel_size: int = 1,
    margin: MarginRule | None = None,
) -> SafeLength:
    """The safe explicit length for this memory and scheduling, with the knobs when the margin costs > 10 %."""
    rule = margin or _DefaultMargin()
    cut = rule.resolve(kv_memory_bytes)

    def in_flight(batched: int, async_on: bool) -> int:
        # VllmConfig.max_concurrent_batches with the V2 runner: PP + 1 batches with async scheduling, else PP.
        return (pipeline_parallel_size + (1 if async_on else 0)) * batched

    ceiling, length = _safe(autofit_at, cut, in_flight(max_num_batched_tokens, async_scheduling), model_max)
    result = SafeLength(length, ceiling, model_max, cut, rule.describe())
    if not result.cliff:
        return result
    knobs: list[Knob] = []
    candidates: list[tuple[str, int, bool, str]] = []
    for batched in sorted((b for b in KNOB_BATCHED_TOKENS if b < max_num_batched_tokens), reverse=True):
        candidates.append((f"--max-num-batched-tokens {batched}", batched, async_scheduling, "fewer prompt tokens per step"))
    if async_scheduling:
        candidates.append(("--no-async-scheduling", max_num_batched_tokens, False, "slower decode"))
    best_batched = length
    for flags, batched, async_on, cost in candidates:
        _, knob_length = _safe(autofit_at, cut, in_flight(batched, async_on), model_max)
        if knob_length <= (best_batched if async_on == async_scheduling else length):
            continue  # no gain, or a smaller batch that gains nothing over a larger one
        if async_on == async_scheduling:
            best_batched = knob_length
        knobs.append(Knob(flags, batched, async_on, knob_length, cost))
    knobs.sort(key=lambda k: -k.length)  # stable: among equal lengths the smallest change stays first
    return SafeLength(length, ceiling, model_max, cut, rule.describe(), tuple(knobs[:MAX_KNOBS]))


# What a scaled length is, said wherever it is shown.
SCALED_BASIS = ("no plan for this model: scaled in proportion to the KV memory, exact only where KV per token is "
                "constant; where part of it does not grow with the length (sliding-window, compressed or state layers) "
                "the length that keeps the margin is lower")


def safe_length_scaled(ceiling: int, kv_memory_bytes: int | None, model_max: int | None = None) -> SafeLength:
    """The same rule for a log whose model dsv4ctl cannot plan: the margin taken off the memory scales the
    length the log says fits. KV per token is constant for full attention only, so this is an estimate and an upper
    bound (memory that does not grow with the length makes each GiB cost more tokens), and says so (`estimate`).
    Without the memory, the margin is 5 % of the length."""
    rule = _DefaultMargin()
    model_max = model_max or ceiling
    if kv_memory_bytes and kv_memory_bytes > 0:
        cut = rule.resolve(kv_memory_bytes)
        share = max(0.0, 1 - cut / kv_memory_bytes)
        described, basis = rule.describe(), SCALED_BASIS
    else:
        cut, share = 0, 1 - MARGIN_FRACTION
        described = f"{MARGIN_FRACTION * 100:g}% of the length"
        basis = "no plan for this model, and the log does not state its KV memory: the margin is a share of the length"
    length = round_block_friendly(int(ceiling * share)) if ceiling > 0 else 0
    if ceiling and length >= ceiling:
        length = round_block_friendly(ceiling - 1)
    return SafeLength(max(length, 0), ceiling, model_max, cut, described, basis=basis, estimate=True)
