"""Every command `diagnose` prints can be pasted and run, and keeps the deployment's own flags.

Commands are collected from every fixture's and example's actions and next command. `dsv4ctl fit-length`
commands are run (they need no GPU with `--from-log`); `dsv4ctl serve` and `vllm serve` commands go
through vLLM's own parser in the engine tier.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose
from dsv4ctl.catalogue.signatures import CATALOGUE

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
EXAMPLES = Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples"
LOGS = sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "catalogue").glob("*.log")) + sorted(EXAMPLES.glob("*.log"))
COMMAND_RE = re.compile(r"((?:[A-Z][A-Z0-9_]*=\S+ )*)(dsv4ctl (?:serve|fit-length|diagnose|gpus|doctor|probe deepgemm)\b|vllm serve\b)(.*)$")


def commands(path: Path, changed: bool = True) -> list[list[str]]:
    """Every command the diagnosis of `path` prints; `changed=False` leaves out those whose finding changes one of the
    launch's own settings on purpose (`CHANGES`)."""
    d = diagnose([path])
    texts = [a for f in d.findings if changed or f.id not in CHANGES for a in f.actions]
    texts += [d.next_command] if d.next_command else []
    out = []
    for text in texts:
        m = COMMAND_RE.search(text)
        if m:
            out.append(shlex.split(m.group(2) + m.group(3)))
    return out


# Findings whose commands change a setting of the launch on purpose: a tensor-parallel size that divides o_groups,
# the utilization that withholds vLLM 0.34's measured KV cache left unset (tests/unit/test_diagnose_v034.py checks them).
CHANGES = {"dsv4_o_groups_tp", "gpu_util_caps_measured_kv"}


def _flag_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_the_stale_and_deepgemm_examples_keep_their_deployment():
    stale = diagnose([EXAMPLES / "stale-max-model-len.log"])
    argv = shlex.split(stale.next_command)
    assert argv[:3] == ["dsv4ctl", "serve", "deepseek-ai/DeepSeek-V4-Flash"]
    assert _flag_value(argv, "--tensor-parallel-size") == "2"
    assert _flag_value(argv, "--gpu-memory-utilization") == "0.85"
    assert _flag_value(argv, "--max-model-len") == str(stale.root_cause.details["safe_len"])
    assert argv.count("--max-model-len") == 1  # the recommendation replaces the launch's `auto`
    dg = diagnose([EXAMPLES / "deepgemm-ima.log"])
    serve = [shlex.split(a[a.index("dsv4ctl serve"):]) for a in dg.root_cause.actions if "dsv4ctl serve" in a]
    assert serve and _flag_value(serve[0], "--data-parallel-size") == "4" and "--enable-expert-parallel" in serve[0]
    assert _flag_value(serve[0], "--max-model-len") == "128000"


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_every_fit_length_command_runs(path, cli):
    for argv in commands(path):
        assert "<" not in " ".join(argv), argv  # no placeholders
        if argv[:2] != ["dsv4ctl", "fit-length"]:
            continue
        if argv[2].startswith("/") and not Path(argv[2]).exists():
            continue  # a checkpoint directory of the machine that wrote the log
        result = cli(*argv[1:], "--json")
        if result.exit_code == 1 and "--from-log" not in argv:
            assert "NVIDIA" in result.stderr  # plans from the GPUs of the node it is run on
            continue
        assert result.exit_code in (0, 6), (argv, result.stderr)
        doc = json.loads(result.stdout)
        if "error" in doc:  # a refusal is the answer (a TP the checkpoint cannot split): exit 6, the sizes that work
            assert result.exit_code == 6 and doc["error"]["hint"], (argv, doc)
            continue
        tl = diagnose([path]).timeline
        # The deployment's own flags in every command it prints (none when vLLM would refuse: what would fit
        # instead carries them).
        commands_printed = [doc["vllm_command"]] if doc["vllm_command"] else [a["vllm_command"] for a in doc["alternatives"]]
        if tl.tensor_parallel_size and tl.tensor_parallel_size > 1:
            assert all(f"--tensor-parallel-size {tl.tensor_parallel_size}" in c for c in commands_printed)


@pytest.mark.engine
@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_every_serve_command_parses_with_vllms_parser(path, vllm_available):
    from dsv4ctl.serve.vllm_entry import build_serve_parser

    parser = build_serve_parser()
    tl = diagnose([path]).timeline
    for argv in commands(path, changed=False):
        if argv[:2] == ["vllm", "serve"]:
            flags = argv[2:]
        elif argv[:2] == ["dsv4ctl", "serve"]:
            flags = argv[2:]
        else:
            continue
        if any(f.startswith("--help") for f in flags):
            # vLLM's help (`vllm serve --help=all`): the parser prints it and exits 0.
            with pytest.raises(SystemExit) as done:
                parser.parse_args(["serve", *flags])
            assert done.value.code in (0, None), argv
            continue
        namespace = parser.parse_args(["serve", *flags])
        if tl.tensor_parallel_size:
            assert namespace.tensor_parallel_size == tl.tensor_parallel_size, argv
        if tl.serve_args.get("gpu_memory_utilization"):
            assert namespace.gpu_memory_utilization == tl.serve_args["gpu_memory_utilization"], argv


SPACED_MODEL = "/srv/my models/DeepSeek V4 (Flash)"


def _printed_commands(d) -> list[str]:
    """Every command the report prints: the command each action ends with (on a line of its own), the next command."""
    from dsv4ctl.render.diagnose import split_action

    out = [command for f in d.findings for a in f.actions if (command := split_action(a)[1]) is not None]
    return out + ([d.next_command] if d.next_command else [])


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_a_model_path_with_spaces_stays_one_argument(path, tmp_path):
    """The model as the launch named it, spaces and all: in the timeline and, as one shell word, in every command."""
    before = diagnose([path])
    model = before.timeline.model
    if not model:
        pytest.skip("the log names no model")
    log = tmp_path / "the log.log"
    log.write_text(path.read_text(encoding="utf-8").replace(model, SPACED_MODEL), encoding="utf-8")
    after = diagnose([log])
    assert after.timeline.model == SPACED_MODEL
    with_model = 0
    for command in _printed_commands(after):
        argv = shlex.split(command)  # every printed command parses
        operators = list(shlex.shlex(command, posix=True, punctuation_chars=True))
        assert "(" not in operators and ")" not in operators, command  # the path's parentheses are quoted
        assert "/srv/my" not in argv, command  # the path never cut at its first space
        with_model += SPACED_MODEL in argv
    assert with_model == sum(model in shlex.split(c) for c in _printed_commands(before))


def test_the_json_details_hold_the_model_as_it_is():
    """The JSON holds values, not shell words: the model and the log unquoted; only the printed commands quote them."""
    d = diagnose([EXAMPLES / "stale-max-model-len.log"])
    assert d.root_cause.details["model"] == "deepseek-ai/DeepSeek-V4-Flash"


def test_commands_in_the_catalogues_actions_are_commands():
    """What follows an action's ": " is pasted as one command line: no prose in it (a parenthesis outside quotes is
    a shell syntax error), and every value that stands in it is quoted (`{model!q}`)."""
    import string

    from dsv4ctl.catalogue.families import FAMILIES
    from dsv4ctl.render.diagnose import split_action

    sigs = [*CATALOGUE, *FAMILIES]
    for sig in sigs:
        for action in sig.actions:
            command = split_action(action)[1]
            if command is None:
                continue
            lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
            tokens = list(lexer)
            assert "(" not in tokens and ")" not in tokens, (sig.id, action)
            for _, name, _, conversion in string.Formatter().parse(command):
                if name in ("model", "log", "repo", "model_path", "adapter", "parent"):
                    assert conversion == "q", (sig.id, action)
