"""The generated table of `vllm serve` flags (dsv4ctl/catalogue/vllm_flags.json.gz) against facts read in the
released wheels' sources (`pip download vllm==X --no-deps`, unzipped; each fact cites its file:line there)."""

from __future__ import annotations

import fnmatch
import gzip
import json
import tomllib
from pathlib import Path

import pytest

from dsv4ctl.catalogue import vllm_flags as vf

ALL = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")


@pytest.fixture(autouse=True)
def _packaged_table():
    vf.reset()
    yield
    vf.reset()


def test_the_table_loads_with_every_known_release():
    assert vf.available(), vf.load_error()
    assert vf.releases() == ALL
    assert set(vf.registries()) == {"attention_backend", "kv_cache_dtype", "quantization", "reasoning_parser",
                                    "tokenizer_mode", "tool_call_parser"}
    assert vf.DATA.stat().st_size < 300_000  # compact: one table for all releases


def test_the_table_is_package_data():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["dsv4ctl"]
    assert any(fnmatch.fnmatch("catalogue/vllm_flags.json.gz", p) for p in patterns), patterns


@pytest.mark.parametrize("release", ALL)
def test_max_lora_rank_in_every_release(release):
    # vllm==0.27.1 vllm/config/lora.py:35 `max_lora_rank: MaxLoRARanks = 16`, lora.py:27
    #   `MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]` (0.32.0: lora.py:33 and :26;
    #   0.33.0: lora.py:34 and :27); vllm==0.32.0 vllm/engine/arg_utils.py:1578
    #   `lora_group.add_argument("--max-lora-rank", **lora_kwargs["max_lora_rank"])`
    info = vf.flag("max_lora_rank", release)
    assert info is not None and info.name == "--max-lora-rank"
    assert info.release == release and info.exact_release and info.note is None
    assert info.default == 16 and info.has_default
    assert info.choices == ("1", "8", "16", "32", "64", "128", "256", "320", "512") and info.enforced
    assert info.field == "LoRAConfig.max_lora_rank"
    assert info.releases == ALL
    if release == "0.32.0":
        assert info.source == "vllm/engine/arg_utils.py:1578"
        assert info.cite == "vllm==0.32.0 vllm/engine/arg_utils.py:1578"


def test_flag_for_field_accepts_every_spelling():
    for name in ("max_lora_rank", "max-lora-rank", "--max-lora-rank", "--max-lora-rank=32",
                 "LoRAConfig.max_lora_rank"):
        assert vf.flag_for_field(name) == "--max-lora-rank", name
    # vllm==0.32.0 vllm/engine/arg_utils.py:1177 `"--tensor-parallel-size", "-tp", **parallel_kwargs[...]`
    assert vf.flag_for_field("-tp", "0.32.0") == "--tensor-parallel-size"
    assert vf.flag("-tp", "0.32.0").options == ("--tensor-parallel-size", "-tp")
    # the config field's own name: vllm==0.32.0 vllm/config/cache.py:122 `cache_dtype: CacheDType = "auto"`,
    # set by `--kv-cache-dtype` (arg_utils.py `**cache_kwargs["cache_dtype"]`)
    assert vf.flag_for_field("cache_dtype") == "--kv-cache-dtype"
    assert vf.flag("--kv-cache-dtype").field == "CacheConfig.cache_dtype"
    # `backend` is AttentionConfig's and MambaConfig's: ambiguous alone, found when qualified
    assert vf.flag_for_field("backend") is None
    assert vf.flag_for_field("AttentionConfig.backend") == "--attention-backend"
    assert vf.flag_for_field("no_such_flag") is None
    assert vf.flag("--no-such-flag") is None


def test_boolean_flags_have_their_no_form():
    # vllm==0.32.0: CacheConfig.enable_prefix_caching is a bool, so _compute_kwargs gives it
    # argparse.BooleanOptionalAction; arg_utils.py registers it with `"default": None`
    info = vf.flag("--no-enable-prefix-caching", "0.32.0")
    assert info.name == "--enable-prefix-caching" and info.kind == "bool"
    assert "--no-enable-prefix-caching" in info.options
    assert info.has_default and info.default is None


def test_tool_call_parsers():
    # vllm==0.27.1 vllm/tool_parsers/__init__.py:37 `"deepseek_v4": (` in _TOOL_PARSERS_TO_REGISTER;
    # vllm==0.30.0 vllm/tool_parsers/__init__.py:45 `"deepseek_v41": (` (absent from 0.29.0's, whose :41 is
    # deepseek_v4)
    assert "deepseek_v4" in vf.choices("tool_call_parser", "0.27.1")
    assert "deepseek_v41" not in vf.choices("tool_call_parser", "0.29.0")
    assert "deepseek_v41" in vf.choices("tool_call_parser", "0.30.0")
    assert vf.first_release("tool_call_parser", "deepseek_v4") == "0.27.1"
    assert vf.first_release("tool_call_parser", "deepseek_v41") == "0.30.0"
    # the flag takes any string (a plugin may register more): the registry's names, not argparse choices
    info = vf.flag("--tool-call-parser", "0.32.0")
    assert not info.enforced and info.choices == vf.choices("tool_call_parser", "0.32.0")
    assert vf.choices("--tool-call-parser", "0.32.0") == vf.choices("tool_call_parser", "0.32.0")
    assert vf.first_release("tool_call_parser", "no_such_parser") is None


def test_kv_cache_dtypes():
    # vllm==0.27.1 vllm/config/cache.py:24 `"fp8_e4m3",` in CacheDType; vllm==0.32.0 cache.py:53
    # `"ultraquant_4bit",` (first there: 0.31.0's CacheDType lacks it); 0.32.0 cache.py:122
    # `cache_dtype: CacheDType = "auto"` (argparse choices); vllm==0.33.0 cache.py:235
    # `cache_dtype: CacheDType | str = "auto"` (str in the union: a metavar, no argparse choices)
    for release in ALL:
        assert "fp8_e4m3" in vf.choices("--kv-cache-dtype", release)
        assert vf.flag("--kv-cache-dtype", release).default == "auto"
    assert vf.first_release("--kv-cache-dtype", "ultraquant_4bit") == "0.32.0"
    assert vf.first_release("kv_cache_dtype", "ultraquant_4bit") == "0.32.0"
    assert vf.flag("--kv-cache-dtype", "0.32.0").enforced
    assert not vf.flag("--kv-cache-dtype", "0.33.0").enforced
    assert "ultraquant_4bit" in vf.flag("--kv-cache-dtype", "0.33.0").choices


def test_attention_backends():
    # vllm==0.27.1 and 0.32.0 vllm/v1/attention/backends/registry.py:44
    # `FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"`; vllm==0.30.0
    # registry.py:110 `FLASHMLA_SPARSE_DSV41 = (` (not in 0.29.0's AttentionBackendEnum)
    assert "FLASH_ATTN" in vf.choices("attention_backend", "0.27.1")
    assert vf.first_release("attention_backend", "FLASHMLA_SPARSE_DSV41") == "0.30.0"
    # AttentionConfig.validate_backend_before looks names up upper-cased (0.32.0 config/attention.py:192)
    assert vf.first_release("--attention-backend", "flash_attn") == "0.27.1"
    assert vf.as_spelled("attention_backend", "flash-attn") == "FLASH_ATTN"


def test_quantization_and_tokenizer_modes():
    # vllm==0.27.1 vllm/model_executor/layers/quantization/__init__.py:28 `"bitsandbytes",` (gone from 0.28.0's
    # QuantizationMethods); vllm==0.27.1 vllm/config/model.py:90 `"slow",` in TokenizerMode
    assert "bitsandbytes" in vf.choices("quantization", "0.27.1")
    assert "bitsandbytes" not in vf.choices("quantization", "0.28.0")
    assert vf.first_release("quantization", "bitsandbytes") == "0.27.1"
    assert "fp8" in vf.choices("-q", "0.32.0")
    assert "slow" in vf.choices("tokenizer_mode", "0.27.1")
    assert "deepseek_v4" in vf.choices("--tokenizer-mode", "0.32.0")


def test_nearest_names():
    assert vf.as_spelled("tool_call_parser", "deepseek-v4") == "deepseek_v4"
    assert vf.as_spelled("--kv-cache-dtype", "fp8-e4m3") == "fp8_e4m3"
    assert vf.as_spelled("--kv-cache-dtype", "auto") == "auto"
    assert vf.as_spelled("--kv-cache-dtype", "zzzzzz") is None
    # A near name is no evidence: a letter off is not the same name.
    assert vf.as_spelled("--kv-cache-dtype", "fp8_e4m3fnuz") is None
    # The flags that hold the words of a misspelt one: a lookup by words, not by distance.
    assert "--max-lora-rank" in vf.flags_with_words("--max-lora-ranks") or vf.flags_with_words("--max-lora-ranks") == ()
    assert "--gpu-memory-utilization" in vf.flags_with_words("--gpu-memory-utilisation")
    assert vf.flags_with_words("--zzzzzzzzzz") == ()


def test_first_release_of_a_flag():
    # --grpc-port is a FrontendArgs field from 0.32.0 on (vllm==0.32.0
    # vllm/entrypoints/launchers/cli_args.py:287 `grpc_port: int | None = None`), not in 0.31.0's FrontendArgs
    assert vf.first_release("--grpc-port") == "0.32.0"
    assert vf.flag("--grpc-port", "0.31.0") is None
    assert vf.first_release("--max-lora-rank") == "0.27.1"


@pytest.mark.parametrize(("asked", "release", "exact"), [
    (None, "0.34.0", True),
    ("0.32.0", "0.32.0", True),
    ("0.32.0+cpu", "0.32.0", True),
    ("0.33.0rc1", "0.33.0", False),
    ("0.31.5", "0.31.0", False),
    ("0.34.0", "0.34.0", True),
    ("0.35.0", "0.34.0", False),
    ("0.25.0", "0.27.1", False),
    ("0.1.dev20610+g1f2e3d4", "0.27.1", False),
    ("not a version", "0.34.0", False),
])
def test_releases_outside_the_table_say_so(asked, release, exact):
    m = vf.resolved_release(asked)
    assert (m.release, m.exact) == (release, exact)
    assert (m.note is None) == exact
    info = vf.flag("--max-lora-rank", asked)
    assert info.release == release and info.exact_release == exact and info.note == m.note
    if asked == "0.1.dev20610+g1f2e3d4":
        assert "age is unknown" in m.note


def test_a_missing_or_corrupt_table_gives_none(tmp_path):
    bad = tmp_path / "flags.json.gz"
    bad.write_bytes(b"not gzip")
    vf.reset(bad)
    assert not vf.available() and vf.load_error()
    assert vf.flag("--max-lora-rank") is None and vf.flag_for_field("max_lora_rank") is None
    assert vf.choices("tool_call_parser") == () and vf.releases() == ()
    assert vf.first_release("tool_call_parser", "deepseek_v4") is None
    assert vf.as_spelled("tool_call_parser", "deepseek_v4") is None and vf.resolved_release("0.32.0") is None
    other = tmp_path / "schema.json.gz"
    other.write_bytes(gzip.compress(json.dumps({"schema": 99}).encode()))
    vf.reset(other)
    assert not vf.available() and "schema" in vf.load_error()
    vf.reset(tmp_path / "absent.json.gz")
    assert vf.flag("-tp") is None


def test_odd_input_never_raises():
    for bad in (None, 3, "", "-", "--", "=", "--=x"):
        assert vf.flag(bad) is None  # type: ignore[arg-type]
        assert vf.flag_for_field(bad) is None  # type: ignore[arg-type]
        assert vf.choices(bad) == ()  # type: ignore[arg-type]
        assert vf.as_spelled("tool_call_parser", bad) in (None, "")  # type: ignore[arg-type]
        assert vf.flags_with_words(bad) == ()  # type: ignore[arg-type]
    assert vf.first_release(None) is None  # type: ignore[arg-type]
