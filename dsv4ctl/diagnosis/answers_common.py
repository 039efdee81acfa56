"""What the family answers share: this launch's command with one change, the vLLM flag that sets a named value."""

from __future__ import annotations

import shlex
from typing import Any

from dsv4ctl.logs import deployment
from dsv4ctl.logs.timeline import StartupTimeline


def flag_for(name: str | None, release: str | None = None) -> str | None:
    """The `vllm serve` flag that sets the engine argument `name` ("max_lora_rank" -> "--max-lora-rank") in
    `release` (catalogue/vllm_flags, each release's own flags), or None: a name no flag sets."""
    if not name:
        return None
    from dsv4ctl.catalogue import vllm_flags  # a table of every release's flags: loaded by the answers that ask

    return vllm_flags.flag_for_field(name.strip().strip("`'\"").lstrip("-").replace("-", "_"), release)


def serve_with(tl: StartupTimeline, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> str | None:
    """This launch's own `vllm serve` command with `changes` (vLLM destination names) applied and `drop` removed;
    None when the log does not name the model (a command with a placeholder would not run)."""
    if not tl.model:
        return None
    tokens: list[str] = []
    for name, value in deployment.launch_args(tl).items():
        if name in ("model_tag", "model", "dispatch_function", "subparser") or name in changes or name in drop:
            continue
        tokens += deployment.flag_tokens(name, value)
    for name, value in changes.items():
        tokens += deployment.flag_tokens(name, value)
    return f"vllm serve {shlex.quote(tl.model)}" + "".join(" " + shlex.quote(t) for t in tokens)


def with_command(key: str, command: str | None) -> dict[str, str]:
    """`{key}` and `{key}_sep` for a template "…{key_sep}{key}": ": <command>" when there is a command, else nothing."""
    return {key: command or "", f"{key}_sep": ": " if command else ""}


def arg(tl: StartupTimeline, name: str) -> Any:
    return deployment.launch_args(tl).get(name)
