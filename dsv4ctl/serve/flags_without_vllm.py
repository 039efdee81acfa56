"""A `vllm serve` command line read without vLLM, for `serve --dry-run` where vLLM is not installed (operators plan
on a laptop): the options checked against dsv4ctl's table of that release's flags as vLLM's parser would check
them, and the values the plan needs read as vLLM's parser reads them."""

from __future__ import annotations

import argparse
from typing import Any

def _refuse_unknown_options(flags: list[str], release: str | None) -> None:
    """The refusal vLLM's parser would give this argv ("unrecognized arguments", "ambiguous option"), read from
    dsv4ctl's table of that release's flags; a flag the table has never seen is named with the flags that share
    its words (a lookup by words, never by spelling distance)."""
    from dsv4ctl.catalogue import vllm_flags
    from dsv4ctl.errors import UsageError
    from dsv4ctl.serve.flags import unknown_options

    options = vllm_flags.option_strings(release)
    if not options:
        return  # the table is not readable: vLLM checks the rest when it starts
    resolved = vllm_flags.resolved_release(release)
    named = resolved.release if resolved is not None else "the newest"
    unknown, ambiguous = unknown_options(flags, options)
    if ambiguous:
        token, matches = ambiguous[0]
        raise UsageError(f"vLLM {named}'s parser would refuse this: ambiguous option: {token} could match "
                         f"{', '.join(matches)}", hint="write the option in full")
    if not unknown:
        return
    words = [w for token in unknown if token.startswith("-")
             for w in vllm_flags.flags_with_words(token.split("=", 1)[0].replace("_", "-"), release)]
    hint = (f"vLLM {named}'s flags with the same words: {', '.join(dict.fromkeys(words))}" if words
            else f"vllm serve --help=all lists vLLM {named}'s flags")
    raise UsageError(f"vLLM {named}'s parser would refuse this: unrecognized arguments: {' '.join(unknown)}",
                     hint=hint + " (read from dsv4ctl's table of its flags: vLLM is not installed here)")

# The `vllm serve` options that take every token up to the next option (argparse nargs='+'), a model written after
# them included: read from vllm==0.32.0's serve parser (its argparse actions with nargs '+').
_MANY_VALUES = frozenset({
    "--lora-modules", "--api-key", "--allowed-media-domains", "--served-model-name", "--sleep-preserve-parameter-names",
    "--logits-processors", "--ignore-patterns", "--numa-bind-nodes", "--numa-bind-cpus", "--kv-cache-dtype-skip-layers",
    "--cpu-offload-params", "--offload-params", "--lora-target-modules", "--collect-detailed-traces",
    "--cudagraph-capture-sizes",
})
# The table's kinds of option that take no value (vllm_flags FlagInfo.kind: argparse's action).
_NO_VALUE = frozenset({"bool", "store_true", "store_false", "store_const", "count", "help", "version"})


def _takes(token: str, following: list[str], longs: list[str], release: str | None) -> int:
    """How many of the `following` tokens the option `token` takes as its values, as vLLM's parser reads them."""
    from dsv4ctl.catalogue import vllm_flags

    name, eq, _ = token.partition("=")
    if eq or token in ("-h", "--help", "--version"):
        return 0
    if token.startswith("-O") and not token.startswith("--"):  # -O3 is one token; -O 3 two (argparse_utils.py:358-368)
        return 1 if token == "-O" and following[:1] and following[0] in ("0", "1", "2", "3") else 0
    if name.startswith("--") and "." in name:
        return 1  # --speculative-config.method mtp: a key of a JSON option and its value
    key = _full_name(name.replace("_", "-"), longs) if name.startswith("--") else name
    info = vllm_flags.flag(key, release)
    if info is None or info.kind in _NO_VALUE:
        return 0  # not an option vLLM knows (its parser refuses it) or a switch
    if info.name in _MANY_VALUES:
        return next((i for i, t in enumerate(following) if t.startswith("-")), len(following))
    return 1 if following else 0


def model_argument(flags: list[str], release: str | None = None) -> str | None:
    """The model a `vllm serve` argv names, as vLLM's parser takes it: its positional `model_tag`, before or after the
    options (`vllm serve -tp 8 MODEL`: 8 is -tp's value), else `--model`'s value (vllm==0.32.0
    entrypoints/cli/serve.py:56-57: the positional wins). None when it names none. The options are read from
    dsv4ctl's table of `release`'s flags; without the table, a token after an option is taken as its value."""
    from dsv4ctl.catalogue import vllm_flags

    longs = sorted(o for o in vllm_flags.option_strings(release) if o.startswith("--"))
    given = None
    index = 0
    while index < len(flags):
        token = flags[index]
        if token == "--":
            return flags[index + 1] if index + 1 < len(flags) else given
        if not token.startswith("-") or token == "-":
            return token
        name, eq, inline = token.partition("=")
        if _full_name(name.replace("_", "-"), longs) == "--model":
            given = inline if eq else (flags[index + 1] if index + 1 < len(flags) else None)
        if longs:
            index += 1 + _takes(token, flags[index + 1:], longs, release)
        else:
            index += 1 if eq or index + 1 >= len(flags) or flags[index + 1].startswith("-") else 2
    return given


# The vLLM serve flags the plan reads (vLLM's names and spellings, 0.27-0.33); every other flag is kept as given.
# Their types as vLLM's parser has them (vllm==0.33.0 vllm/engine/arg_utils.py:395-410): `length` is
# human_readable_int_or_auto, `readable` human_readable_int ("10G", "25.6k"), `int` argparse's int.
_PLANNING_FLAGS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("--max-model-len",), "max_model_len", "length"),
    (("--kv-cache-memory-bytes",), "kv_cache_memory_bytes", "readable"),
    (("--gpu-memory-utilization",), "gpu_memory_utilization", "float"),
    (("--kv-cache-dtype",), "kv_cache_dtype", "str"),
    (("--block-size",), "block_size", "int"),
    (("--max-num-batched-tokens",), "max_num_batched_tokens", "readable"),
    (("--max-num-seqs",), "max_num_seqs", "int"),
    (("--tensor-parallel-size", "-tp"), "tensor_parallel_size", "int"),
    (("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size", "int"),
    (("--data-parallel-size", "-dp"), "data_parallel_size", "int"),
    (("--data-parallel-size-local", "-dpl"), "data_parallel_size_local", "int"),
    (("--attention-backend",), "attention_backend", "str"),
    (("--speculative-config",), "speculative_config", "json"),
    (("--engram-config",), "engram_config", "json"),  # DeepSeek-V4.1 (0.30.0+): the Engram tables' place
    (("--ubatch-size",), "ubatch_size", "int"),
    (("--uds",), "uds", "str"),
    (("--num-gpu-blocks-override",), "num_gpu_blocks_override", "int"),
    (("--model",), "model", "str"),
)
_PLANNING_SWITCHES = {
    "--enable-expert-parallel": ("enable_expert_parallel", True), "-ep": ("enable_expert_parallel", True),
    "--enable-eplb": ("enable_eplb", True), "--no-enable-eplb": ("enable_eplb", False),
    "--async-scheduling": ("async_scheduling", True), "--no-async-scheduling": ("async_scheduling", False),
    # vLLM 0.34+ (vllm==0.34.0 engine/arg_utils.py:1412): the KV cache's sizing mode, and elastic EP that turns it off.
    "--enable-extensible-kv-cache": ("enable_extensible_kv_cache", True),
    "--no-enable-extensible-kv-cache": ("enable_extensible_kv_cache", False),
    "--enable-elastic-ep": ("enable_elastic_ep", True), "--no-enable-elastic-ep": ("enable_elastic_ep", False),
    "--enable-dbo": ("enable_dbo", True), "--no-enable-dbo": ("enable_dbo", False),
    "--headless": ("headless", True),  # no API server on this node (serve adds no probe routes)
}


def _full_name(option: str, longs: list[str]) -> str:
    """A long option as argparse takes it: an abbreviation that names one option only is that option (the ambiguous
    ones were refused by `_refuse_unknown_options`): `--tensor-parallel 3` is `--tensor-parallel-size 3`."""
    if option in longs:
        return option
    matches = [o for o in longs if o.startswith(option)]
    return matches[0] if len(matches) == 1 else option


def parse_planning_flags(flags: list[str], release: str | None = None) -> argparse.Namespace:
    """The planning inputs of a `vllm serve` command line, read without vLLM (for `serve --dry-run` on a
    machine where vLLM is not installed). Values are read as vLLM's parser reads them (`1M`, `10G`, `auto`).
    Raises UsageError for an option `release`'s parser does not know (dsv4ctl's table of its flags; None: the newest
    release of the table) and for a value vLLM's parser would reject."""
    import json

    from dsv4ctl.errors import UsageError
    from dsv4ctl.units import parse_vllm_int

    from dsv4ctl.catalogue import vllm_flags

    _refuse_unknown_options(flags, release)
    longs = sorted(o for o in vllm_flags.option_strings(release) if o.startswith("--"))

    values: dict[str, Any] = {"model": None}
    by_name = {name: (dest, kind) for names, dest, kind in _PLANNING_FLAGS for name in names}
    index = 0
    while index < len(flags):
        token = flags[index]
        name, eq, inline = token.partition("=")
        key = _full_name(name.replace("_", "-"), longs) if name.startswith("--") else name
        if key == "--config":
            raise UsageError("--config: a YAML file of flags is read by vLLM's own parser, and vLLM is not installed here",
                             hint="give the model and the flags on the command line: dsv4ctl serve MODEL [flags...]")
        if key in _PLANNING_SWITCHES and not eq:
            dest, value = _PLANNING_SWITCHES[key]
            values[dest] = value
        elif key in by_name:
            dest, kind = by_name[key]
            if eq:
                raw = inline
            elif index + 1 < len(flags):
                index += 1
                raw = flags[index]
            else:
                raise UsageError(f"{name} needs a value")
            try:
                if kind == "length":
                    values[dest] = parse_vllm_int(raw, what=name, allow_auto=True)
                elif kind == "readable":
                    values[dest] = parse_vllm_int(raw, what=name)
                elif kind == "int":
                    try:
                        values[dest] = int(raw)
                    except ValueError:  # argparse's own words (CPython 3.11 argparse.py:2541)
                        raise UsageError(f"argument {name}: invalid int value: {raw!r}", hint="a whole number") from None
                elif kind == "float":
                    values[dest] = float(raw)
                elif kind == "json":
                    values[dest] = json.loads(raw)
                else:
                    values[dest] = raw
            except (ValueError, json.JSONDecodeError):
                raise UsageError(f"{name}: invalid value {raw!r}") from None
        index += 1
    values["model"] = model_argument(flags, release)
    if not values["model"]:
        raise UsageError("no MODEL given", hint="dsv4ctl serve MODEL [flags...]")
    defaults = dict(
        max_model_len=None, kv_cache_memory_bytes=None, gpu_memory_utilization=None, kv_cache_dtype=None, block_size=None,
        max_num_batched_tokens=None, max_num_seqs=None, tensor_parallel_size=None, pipeline_parallel_size=None,
        data_parallel_size=None, data_parallel_size_local=None, enable_expert_parallel=None, enable_eplb=None,
        async_scheduling=None,
        attention_backend=None, speculative_config=None, uds=None,
        num_gpu_blocks_override=None, enable_extensible_kv_cache=None, enable_elastic_ep=None, headless=False,
    )
    return argparse.Namespace(**{**defaults, **values})
