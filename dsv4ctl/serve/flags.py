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


def unknown_options(flags: list[str], options: tuple[str, ...]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The option strings of a `vllm serve` argv that vLLM's parser would not take, read as it reads them without
    running it: (unrecognized tokens with the values that follow them, ambiguous abbreviations with what each could
    match). `options`: that release's option strings (catalogue/vllm_flags.option_strings).

    As vLLM 0.27-0.33 reads an argv (vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args): '_' is '-' in a
    long option's name up to its first '.', `--json-arg.key value` sets a key of a JSON option, `-O3`/`-O 3` is
    `--optimization-level`; then CPython's argparse (3.11 argparse.py): `--opt=value`, and a long option may be
    abbreviated to any prefix that names one option only ("ambiguous option: %(option)s could match %(matches)s",
    argparse.py:2263); what no option takes is "unrecognized arguments: %s" (argparse.py:1871), with the values after
    it that nothing takes either."""
    known = set(options)
    longs = sorted(o for o in known if o.startswith("--"))
    unknown: list[str] = []
    ambiguous: list[tuple[str, list[str]]] = []
    index = 0
    while index < len(flags):
        token = flags[index]
        index += 1
        if token == "--":
            break
        if not token.startswith("-") or token == "-" or re.fullmatch(r"-[0-9.]+", token) or token.startswith("-O"):
            continue
        name, eq, _ = token.partition("=")
        if name.startswith("--"):
            base = name.split(".", 1)[0].replace("_", "-")
            if base in known or base in ("--help", "--version"):
                continue
            matches = [o for o in longs if o.startswith(base)]
            if len(matches) == 1:
                continue
            if len(matches) > 1:
                ambiguous.append((token, matches))
                continue
        elif name in known or name == "-h":
            continue
        unknown.append(token)
        while not eq and index < len(flags) and not flags[index].startswith("-"):
            unknown.append(flags[index])  # its value: taken by nothing once the option is not known
            index += 1
    return unknown, ambiguous
