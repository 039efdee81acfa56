"""Values a check refuses: a number over its limit, a number that does not divide, a choice the release does not know.

The message carries both sides of the comparison; `dsv4ctl.diagnosis.answers` finds the vLLM flag that sets each
name (catalogue/vllm_flags, per release) and builds this launch's command with the one value changed.
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

_NAME = r"[A-Za-z_][\w' .-]*?"

FAMILIES: tuple[Signature, ...] = (
    Signature(
        id="value_over_limit",
        severity="critical",
        tier=1,
        title="{what} {value} is over the limit {limit_name} = {limit}",
        meaning=(
            "The check compares {what} ({value}) with {limit_name} ({limit}) and refuses anything above the limit. "
            "{limit_sentence}"
        ),
        patterns=(
            # vllm==0.32.0 vllm/lora/peft_helper.py:196 'LoRA rank {max_rank} is greater than max_lora_rank {max_lora_rank}.'
            r"(?P<what>[A-Za-z][\w]*(?: [\w]+)?) (?P<value>[0-9]+) is (?:greater|larger|bigger) than (?P<limit_name>[a-z][a-z0-9_]+) (?P<limit>[0-9]+)",
            r"(?P<what>[a-z][a-z0-9_]+) \((?P<value>[0-9]+)\) (?:is|must be) (?:greater|larger|bigger) than (?:the )?"
            r"(?P<limit_name>[a-z][a-z0-9_]+) \((?P<limit>[0-9]+)\)",
            r"(?P<what>[a-z][a-z0-9_]+) ?= ?(?P<value>[0-9]+) (?:exceeds|is greater than|is larger than|must be <=|must be at most)"
            r" (?P<limit_name>[a-z][a-z0-9_]+) ?= ?(?P<limit>[0-9]+)",
            r"(?P<what>[a-z][a-z0-9_]+) \((?P<value>[0-9]+)\) exceeds (?:the )?(?P<limit_name>[a-z][a-z0-9_]+) \((?P<limit>[0-9]+)\)",
        ),
        actions=(
            "Raise {limit_flag} to at least {value}: {serve_raise}",
            "Raise {limit_flag} to at least {value} (this launch: {limit_now})",
            "Or stay within the limit: {what} at most {limit}{what_hint}",
        ),
        source="vllm==0.32.0 vllm/lora/peft_helper.py:196 (LoRA rank); the comparison as the message states it",
    ),
    Signature(
        id="value_under_minimum",
        severity="critical",
        tier=1,
        title="{what} {value} is below {limit_name} = {limit}",
        meaning="The check needs {what} ({value}) to be at least {limit_name} ({limit}). {limit_sentence}",
        patterns=(
            r"(?P<what>[a-z][a-z0-9_]+) \((?P<value>[0-9]+)\) (?:is|must not be) (?:smaller|less) than (?:the )?"
            r"(?P<limit_name>[a-z][a-z0-9_]+) \((?P<limit>[0-9]+)\)",
        ),
        actions=(
            "Raise {what_flag} to at least {limit}: {serve_raise_what}",
            "Raise {what_flag} to at least {limit}, or lower {limit_flag} to at most {value}",
        ),
        source="the comparison as the message states it",
    ),
    Signature(
        id="value_not_divisible",
        severity="critical",
        tier=1,
        title="{a_name} = {a} is not a multiple of {b_name} = {b}",
        meaning="{divide_sentence}",
        patterns=(
            # vllm==0.32.0 vllm/model_executor/layers/quantization/utils/fp8_utils.py:1325 (block_k), :1316 (block_n);
            # vllm/models/deepseek_v4/nvidia/model.py (n_physical_experts / ep_size); vllm/config/model.py (heads / TP)
            rf"(?P<a_name>{_NAME}) ?(?:= ?|\()(?P<a>[0-9]+)\)? (?:is not|must be|should be|needs to be) (?:evenly )?divisible by"
            rf" (?P<b_name>{_NAME}) ?(?:= ?|\()(?P<b>[0-9]+)\)?",
            # vllm==0.32.0 vllm/model_executor/layers/fused_moe/layer.py:264 (EPLB's even distribution)
            r"even distribution of experts across ranks\. Got (?P<a>[0-9]+) (?P<a_name>experts) and (?P<b>[0-9]+) (?P<b_name>EP ranks)",
        ),
        actions=("{divide_action}", "{divide_action_2}", "{divide_action_3}"),
        source=(
            "vllm==0.32.0 vllm/model_executor/layers/quantization/utils/fp8_utils.py:1316,1325; "
            "vllm/models/deepseek_v4/nvidia/model.py (expert placement); advice: vllm-project/vllm#40955, #52435, "
            "vllm-project/vime#186 (expert parallelism keeps each expert whole)"
        ),
    ),
    Signature(
        id="value_unknown_choice",
        severity="critical",
        tier=1,
        title="This vLLM build has no {what} {value_q}",
        meaning="{choice_sentence}",
        patterns=(
            # Python's argparse: "argument %(flag)s: invalid choice: %(value)r (choose from %(choices)s)"
            r"argument (?P<flag>--[\w-]+)(?:/-[\w-]+)?: invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>[^)]*)\)",
            # vllm==0.32.0 vllm/entrypoints/openai/cli_args.py: "invalid tool call parser: {name} (chose from { … })"
            r"invalid (?P<what>tool call parser|reasoning parser): (?P<value>[\w.-]+)(?: \(cho(?:o)?se from \{ ?(?P<choices>[^}]*)\}\))?",
            # vllm==0.32.0 vllm/tokenizers/registry.py:81
            r"No tokenizer registered for (?P<what>tokenizer_mode)='(?P<value>[^']+)'",
            r"Unknown (?P<what>quantization method): (?P<value>[\w.-]+)\. Must be one of (?P<choices>\[[^\]]*\])",
            r"(?P<what>Invalid attention backend)[: ]+'?(?P<value>[A-Z0-9_]+)'?",
            # vllm==0.32.0 vllm/v1/attention/backends/registry.py:29 "Unknown attention backend: '{name}'. Valid options are: …"
            r"Unknown (?P<what>[a-z][\w ]{2,40}?): '(?P<value>[^']+)'\.? (?:Valid options are|Valid values are|Must be one of|"
            r"Supported (?:values|options) are|Available (?:options|backends) are)[: ]+(?P<choices>[^\n]+)",
            r"Unsupported (?P<what>connector type): (?P<value>[\w.-]+)",
        ),
        actions=("Use {nearest_q}, {pick_reason}: {serve_choice}", "Use {nearest_q}, {pick_reason}",
                 "{first_release_sentence}", "The names this release accepts: {choices_short}"),
        source="Python argparse (invalid choice); vllm==0.32.0 vllm/tokenizers/registry.py:81, vllm/entrypoints/openai/cli_args.py",
    ),
    Signature(
        id="flag_unknown",
        severity="critical",
        tier=1,
        title="vLLM does not know {unknown_flags}",
        meaning="The parser refused {unknown_flags} before starting anything. {flag_sentence}",
        patterns=(r"error: unrecognized arguments: (?P<args>[^\n]+)",),  # CPython 3.11.7 argparse.py:2384
        actions=("{flag_action}", "{flag_action_2}", "Check this release's own list: vllm serve --help=all"),
        source="CPython 3.11.7 argparse.py:2384; the flags of vLLM 0.27.1-0.33.0 (catalogue/vllm_flags)",
        phase="startup",
    ),
)
