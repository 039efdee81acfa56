"""Every flag dsv4ctl names exists on the command it names.

Collected from: every command's help (the command's own and each option's), every string in the
package's source outside docstrings (hints, warnings, notes, rendered lines), and the diagnose
catalogue's actions and next commands. A flag that follows `dsv4ctl CMD` must be CMD's (serve: also
vLLM's); one that follows `vllm serve` must be vLLM's; a bare flag must exist on every command the
module speaks for (vLLM's flags where the module speaks about `vllm serve`). vLLM's flags come from
vLLM 0.32's own parser (the `engine` test); the unit test checks everything that needs no vLLM.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from dsv4ctl.cli import app

PACKAGE = Path(__file__).resolve().parents[2] / "dsv4ctl"
VLLM = "vllm serve"
FLAG_RE = re.compile(r"(?<![\w\-`'/])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
COMMAND_RE = re.compile(
    r"\b(dsv4ctl (?:probe deepgemm|diagnose|fit-length|serve|gpus|doctor)|fit-length|probe deepgemm|vllm serve|vLLM"
    r"|nvcc|nvidia-smi|pip|python3?|docker|hf|py-spy|ray)\b"
)
OTHER_PROGRAMS = {"nvcc", "nvidia-smi", "pip", "python", "python3", "docker", "hf", "py-spy", "ray"}
# A clause ends where a new sentence or alternative starts; a command's flags stay inside its clause.
CLAUSE_SPLIT = re.compile(r";|`|\n| or (?=[a-z`-])|, (?=[a-z`])|\(|\)| and (?=use|pass|give)")

# Which commands a module's strings speak for (bare flags must exist on all of them). VLLM: `vllm serve`.
MODULE_OWNERS: dict[str, tuple[str, ...]] = {
    "gpu.py": ("dsv4ctl gpus", "dsv4ctl fit-length"),  # NVML/snapshot errors surface in both
    "planning/": ("dsv4ctl fit-length",),
    "serve/": ("dsv4ctl serve",),
    "render/serve.py": ("dsv4ctl serve",),
    "logs/": (VLLM,),  # the catalogue advises on vLLM's own flags
    "render/diagnose.py": (VLLM,),  # quotes and advises vLLM's flags from the log
    "render/fit.py": ("dsv4ctl fit-length",),
    "render/gpus.py": ("dsv4ctl gpus",),
    "render/doctor.py": ("dsv4ctl doctor",),
    "doctor/": ("dsv4ctl doctor",),
    "probe/": ("dsv4ctl probe deepgemm",),
    "fixes/": (VLLM,),
    "units.py": ("dsv4ctl fit-length",),
    "commands/diagnose.py": ("dsv4ctl diagnose",),
    "commands/fit_length.py": ("dsv4ctl fit-length",),
    "commands/gpus.py": ("dsv4ctl gpus",),
    "commands/doctor.py": ("dsv4ctl doctor",),
    "commands/probe.py": ("dsv4ctl probe deepgemm",),
    "commands/serve.py": ("dsv4ctl serve",),
}
# Strings that are not advice: vLLM/argparse plumbing and log patterns (the flags vLLM prints, matched).
SKIP_FILES = ("serve/vllm_entry.py", "serve/flags.py", "logs/prefilter.py")


@dataclass(frozen=True)
class Mention:
    flag: str
    command: str  # "dsv4ctl CMD", VLLM, or "" for a bare flag
    owners: tuple[str, ...]
    where: str


def dsv4ctl_flags() -> dict[str, set[str]]:
    """Every option string of every dsv4ctl command, read from the Typer app itself."""
    root = typer.main.get_command(app)
    flags: dict[str, set[str]] = {}

    def walk(cmd: Any, path: str) -> None:
        if getattr(cmd, "commands", None):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")
            return
        flags[path] = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} | {"--help"}

    walk(root, "dsv4ctl")
    return flags


def _mentions(text: str, owners: tuple[str, ...], where: str) -> Iterator[Mention]:
    seen = ""  # the last command named so far in the text
    for clause in CLAUSE_SPLIT.split(text):
        for match in FLAG_RE.finditer(clause):
            commands = COMMAND_RE.findall(clause[: match.start()])
            command = commands[-1] if commands else ""
            if command in OTHER_PROGRAMS or (not command and seen in OTHER_PROGRAMS):
                continue  # `nvcc --version`, `docker run … (or --shm-size 16g)`: not ours, not vLLM's
            if command == "vLLM":
                command = VLLM  # "vLLM's budget is … x --gpu-memory-utilization"
            elif not command.startswith(("dsv4ctl", VLLM)) and command:
                command = f"dsv4ctl {command}"  # `fit-length --gpus`
            yield Mention(match.group(1), command, owners, where)
        named = COMMAND_RE.findall(clause)
        seen = named[-1] if named else seen


def help_mentions() -> Iterator[Mention]:
    root = typer.main.get_command(app)

    def walk(cmd: Any, path: str) -> Iterator[Mention]:
        if getattr(cmd, "commands", None):
            for name, sub in cmd.commands.items():
                yield from walk(sub, f"{path} {name}")
            return
        owners = (path,)
        yield from _mentions(cmd.help or "", owners, f"{path} --help")
        for param in cmd.params:
            yield from _mentions(getattr(param, "help", None) or "", owners, f"{path} {param.opts[0]} help")

    yield from walk(root, "dsv4ctl")


def _string_parts(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _owners_of(rel: str) -> tuple[str, ...]:
    best = ""
    for prefix in MODULE_OWNERS:
        if rel.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return MODULE_OWNERS.get(best, ())


def source_mentions() -> Iterator[Mention]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(SKIP_FILES):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstring_ids(tree)
        owners = _owners_of(rel)
        if rel == "cli.py" or (rel.startswith("commands/") and not owners):
            continue  # the app's face, and the commands whose strings name no flag of another command
        seen: set[int] = set()
        for node in ast.walk(tree):
            if id(node) in skip or id(node) in seen:
                continue
            text = _string_parts(node)
            if text is None or "--" not in text or re.fullmatch(r"--[\w-]+(=.*)?", text):
                continue  # no flag, or a lone flag: argv plumbing, not advice
            seen.add(id(node))
            if isinstance(node, ast.JoinedStr):
                seen.update(id(v) for v in node.values)
            yield from _mentions(text, owners, f"dsv4ctl/{rel}:{node.lineno}")


def catalogue_mentions() -> Iterator[Mention]:
    from dsv4ctl.catalogue import signatures

    catalogues = [v for k, v in vars(signatures).items() if k.isupper() and isinstance(v, tuple)]
    for catalogue in catalogues:
        for sig in catalogue:
            if not isinstance(sig, signatures.Signature):
                continue
            for text in (*sig.actions, sig.next_command or ""):
                yield from _mentions(text, (VLLM,), f"signature {sig.id}")


def all_mentions() -> list[Mention]:
    return [*help_mentions(), *source_mentions(), *catalogue_mentions()]


def check(mentions: list[Mention], flags: dict[str, set[str]], vllm: set[str] | None) -> list[str]:
    """The mentions naming a flag their command lacks. vllm=None: mentions that need vLLM's list are skipped."""
    wrong = []
    for m in mentions:
        targets = (m.command,) if m.command else m.owners
        for target in targets:
            known = set(flags.get(target, set()))
            needs_vllm = target in (VLLM, "dsv4ctl serve")
            if needs_vllm:
                if vllm is None:
                    if m.flag in known:
                        continue
                    if target == VLLM or m.flag not in known:
                        continue  # checked by the engine test
                known |= vllm
            if target not in flags and target != VLLM:
                wrong.append(f"{m.where}: unknown command {target!r}")
            elif m.flag not in known:
                wrong.append(f"{m.where}: {m.flag} is not an option of `{target}`")
    return sorted(set(wrong))


def test_collector_finds_the_flags():
    mentions = all_mentions()
    flags = {m.flag for m in mentions}
    # Sanity: the collector sees help, hints and the catalogue.
    assert {"--kv-cache-memory", "--snapshot", "--max-model-len", "--enforce-eager", "--from-log"} <= flags
    commands = {m.command for m in mentions}
    assert {"dsv4ctl gpus", "dsv4ctl fit-length", "dsv4ctl serve"} <= commands


def test_every_flag_named_exists_on_its_dsv4ctl_command():
    assert check(all_mentions(), dsv4ctl_flags(), vllm=None) == []


def test_the_check_catches_a_wrong_flag():
    flags = dsv4ctl_flags()
    bad = list(_mentions("take a snapshot and use --gpus snapshot.json here", ("dsv4ctl gpus",), "x"))
    assert check(bad, flags, vllm=None) == ["x: --gpus is not an option of `dsv4ctl gpus`"]
    good = list(_mentions("`dsv4ctl fit-length MODEL --gpus snapshot.json`", ("dsv4ctl gpus",), "x"))
    assert check(good, flags, vllm=None) == []


@pytest.mark.engine
def test_every_flag_named_exists_in_vllms_own_parser(vllm_available):
    from dsv4ctl.serve.vllm_entry import vllm_flag_names

    vllm = vllm_flag_names()
    assert "--kv-cache-memory-bytes" in vllm and "--max-model-len" in vllm
    assert check(all_mentions(), dsv4ctl_flags(), vllm=vllm) == []


def test_fit_length_without_a_gpu_names_the_flags_that_replace_it(cli, monkeypatch):
    import dsv4ctl.gpu as gpu
    from dsv4ctl.errors import GpuUnavailableError

    def no_gpu():
        raise GpuUnavailableError("no NVIDIA driver here", hint=gpu.SNAPSHOT_HINT)

    monkeypatch.setattr(gpu, "read_snapshot", no_gpu)
    result = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--weights-memory", "40GiB")
    assert result.exit_code == 1
    hint = result.stderr.splitlines()[1]
    assert hint.startswith("Hint:") and "--kv-cache-memory 9.81GiB" in hint and "--from-log" in hint


@pytest.mark.engine
def test_fit_lengths_vllm_serve_line_parses_with_vllms_parser(cli, vllm_available):
    """The `vllm serve` line fit-length prints, with every flag it can emit, goes through vLLM 0.32's parser."""
    import json
    import shlex

    from dsv4ctl.serve.vllm_entry import build_serve_parser

    args = ["fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--kv-cache-memory", "9.81GiB", "-tp", "2", "-dp", "2", "-ep",
            "--kv-cache-dtype", "fp8", "--max-num-seqs", "64", "--no-async-scheduling",
            "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}', "--json"]
    doc = json.loads(cli(*args).stdout)
    argv = shlex.split(doc["vllm_command"])
    assert argv[:2] == ["vllm", "serve"]
    namespace = build_serve_parser().parse_args(argv[1:])
    assert namespace.max_model_len == doc["recommended_max_model_len"]
    assert namespace.tensor_parallel_size == 2 and namespace.data_parallel_size == 2
    assert namespace.enable_expert_parallel is True and namespace.async_scheduling is False
    assert namespace.kv_cache_memory_bytes == doc["kv_cache_memory_bytes"]
