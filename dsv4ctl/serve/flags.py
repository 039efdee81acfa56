"""Edits of the raw `vllm serve` flag list that keep everything else exactly as the user wrote it."""

from __future__ import annotations

import re

# vLLM's FlexibleArgumentParser accepts dashes and underscores in option names.
_MAX_MODEL_LEN = re.compile(r"^--max[-_]model[-_]len(=.*)?$")


def set_max_model_len(flags: list[str], value: int | str) -> list[str]:
    """Return `flags` with every `--max-model-len` replaced by one `--max-model-len value`.

    The option keeps the position of its first occurrence (appended when absent). A value given in a
    `--config` file is overridden too, because vLLM lets the command line win over the file.
    """
    out: list[str] = []
    placed = False
    index = 0
    while index < len(flags):
        flag = flags[index]
        match = _MAX_MODEL_LEN.match(flag)
        if match:
            index += 1 if match.group(1) else 2  # `--x=v` is one token, `--x v` two
            if not placed:
                out += ["--max-model-len", str(value)]
                placed = True
            continue
        out.append(flag)
        index += 1
    if not placed:
        out += ["--max-model-len", str(value)]
    return out


def has_flag(flags: list[str], *names: str) -> bool:
    """True when any of the option `names` (dash or underscore spelling, `=value` or not) is present."""
    wanted = {n.replace("_", "-") for n in names}
    for flag in flags:
        if flag.startswith("--"):
            name = flag.split("=", 1)[0].replace("_", "-")
            if name in wanted:
                return True
    return False
