#!/usr/bin/env python3
"""Builds dsv4ctl/catalogue/message_index.json.gz and .bin: every message that the vLLM releases of scripts/vllm_releases.txt raise, asserts or
logs at error level, plus those of the packages operators meet next to vLLM, each with its source.

    python scripts/build_message_index.py                 # downloads into /work/wheels what is missing
    python scripts/build_message_index.py --wheels DIR    # another download/unpack folder
    python scripts/build_message_index.py --pack          # only message_index.bin, from the committed JSON

The project's rule holds for every entry: the text is taken from the installed source of the package that
prints it (`pip download X==V --no-deps`), cited file:line. Layout under the wheels folder (the one the
catalogue tests already use): src/vllm-<v>/vllm/..., other/<dist>-<v>/<pkg>/... . Wheels are deleted after
unpacking unless --keep-wheels is given.

What is read, and how
- Python sources are parsed with `ast` (never a regex over source). Per statement:
  `raise X(msg, ...)` (kind "raise"); `assert c, msg` ("assert"); `assert c` without a message ("assert_bare":
  Python 3.11+ prints the failing statement's first source line above a bare AssertionError, so that line is
  the template); `<logger>.error/exception/critical/fatal/error_once(...)` ("log"; a logger is a name bound by
  init_logger()/getLogger()/get_logger(), or any name like logger, _logger, log, LOGGER, *_logger, logging);
  torch's `torch._check*(cond, lambda: msg)` ("raise", with the exception torch raises for it).
  Templates are built from str constants, f-strings, implicit and `+` concatenation, `"..." % args`,
  `"...".format(...)` and the %-style args of logger calls. A message made of a variable alone
  (`raise ValueError(msg)`) is followed to its assignment only when that assignment reaches the statement
  for sure: the nearest preceding `msg = ...` in the same block or an enclosing block of the same function,
  with no other binding of the name in between (counted as resolved_variable; huggingface_hub builds all
  its HTTP errors that way); otherwise it gives no template (skipped_variable). A raise of a factory call
  whose first argument is an exception class (`raise _format(GatedRepoError, message, response)`) is
  recorded with that class and its second argument as the message.
- torch's C++ headers (torch/include/{c10,ATen,torch/csrc}): a small C/C++ tokenizer (strings, comments,
  macros) reads TORCH_CHECK*/TORCH_INTERNAL_ASSERT/C10_THROW_ERROR/TORCH_CHECK_WITH arguments (c10::str
  concatenation), `throw T(...)` and `std::string err/msg = "..." + ...` message builds (kind "format").
- safetensors' Rust extension: its sdist (pip download --no-binary; its metadata step needs maturin, so a
  stand-in backend that writes only METADATA is put on PYTHONPATH for that one call) is tokenized the same
  way for `X::new_err("..."/format!(...))` and `write!(f, ...)` (Display of SafeTensorError, kind "format");
  a Rust entry is kept only when each of its literal pieces is found in the wheel's compiled
  _safetensors_rust.abi3.so (counted as rust_unverified otherwise).
- CUDA runtime / NCCL: libcudart.so.13's cudaGetErrorString(i) and libnccl.so.2's ncclGetErrorString(i),
  called through ctypes over the enum range (pure table lookups, no GPU needed); kind "error_string".

What is kept (vLLM): the parts met at startup and while serving: vllm/*.py (top level, less collect_env,
scripts, version), config, engine, v1 (all of it), executor, worker, attention, compilation, distributed,
entrypoints, inputs, multimodal, platforms, plugins, reasoning, renderers, tokenizers, tool_parsers,
transformers_utils, utils, model_executor/*.py, model_executor/model_loader, model_executor/layers,
model_executor/models/deepseek_v4*, models/deepseek_v4* and models/common. Left out: the other model
implementations (hundreds of architectures nobody runs next to DeepSeek-V4), lora, benchmarks, profiler,
usage, tracing, assets, and the vendored third_party/vllm_flash_attn code.
Neighbours (versions the project cites): torch 2.14.1 (cuda, distributed less fsdp/rpc/pipelining/
checkpoint/_shard, _dynamo, _inductor, fx, compiler, _subclasses, _functorch, _higher_order_ops, _library,
multiprocessing, nn/modules, backends, utils/cpp_extension, the top-level modules, plus the C++ headers);
huggingface_hub 2.4.0 (all but inference/cli/commands/templates); transformers 5.19.0 (top level, utils,
models/auto, integrations; not the per-model code); ray 2.60.0 (core: top level, _private, _common, util,
dag, experimental, runtime_env; not rllib/tune/train/data/serve/dashboard/autoscaler/llm); safetensors 0.8.0
(the newest that vLLM 0.33.0's `safetensors>=0.6.2` allows when this was written); triton 3.8.0
(torch 2.14.1 pins triton~=3.8.0); nvidia-cuda-runtime 13.0.96 and nvidia-nccl-cu13 2.30.7. Besides the
sources, libtorch_cuda.so and Ray's raylet/gcs_server are unpacked (not read here) because the hand-written
catalogue's tests look for their cited texts in them.
Dropped everywhere: tests, testing, examples, docs, benchmarks and vendored third-party folders
(third_party, thirdparty, _vendor, vendor), since operators do not meet their messages.

Filter: a template whose literal text has fewer than 12 characters or fewer than 2 words (letters, 2+)
identifies nothing and is dropped (skipped_short).

Output: message_index.json.gz, the reviewable source, and message_index.bin, the same data packed for lookup
(`dsv4ctl.catalogue.message_index.pack`: the buckets as arrays, the rows in zlib blocks; what diagnose opens,
and the one shipped). Both are byte-identical for the same data. The JSON is gzip (mtime 0), sorted: a header (schema, generator command,
package versions, counts per package/kind and per release, entries with a check per package, `later` per
kind, helpers; files that did not parse), `helpers`, and `entries`, rows of `fields`. One entry per (package, kind, exception, level, function, literal text): the same message in
several releases is one entry even when a placeholder's expression was renamed (the template shown is the
newest release's); its sources list each (file, line) with the releases that have the message there.
`anchor` holds, per entry, the rarest whole word of its literal text (one per line that is specific on its
own, for multi-line messages): the loader's lookup buckets. Per-entry redundancy is dropped: releases are
listed once per source row, the literal length and chunks are derived by the loader from the template, and
no column repeats a value that another one implies. For a log entry the line is the logger call's (what vLLM prints as [file.py:N]); for the others the
line where the message expression starts; for the C libraries line 0 and the function is the lookup call.
`flags` (vLLM only): the `--` flags of that release's EngineArgs fields (and of the config attributes that
EngineArgs fields default from, e.g. cache_dtype -> --kv-cache-dtype, when that name has an underscore)
named as a variable or as an attribute of self/cls/a config-like object in the assert condition, the
innermost enclosing `if` test (with its elif chain) or the message's placeholders.

`check` (schema 2; Python entries of every package): the condition that guards the statement, as source text
(`ast.unparse`, whitespace collapsed), so that an answer can say when the message is printed:
- `assert T[, msg]` and `torch._check*(T, ...)`: "assert T" (T must hold);
- a raise or error log in the body of the innermost enclosing `if T:` of its function: "if T" (printed when T);
  in an `elif U:` branch "if U" (the earlier branches' tests are not repeated); in the `else:` of `if T:`
  "if not (T)", and in the `else:` that ends an if/elif chain "if not (A or B or ...)" of all the chain's tests;
- "" when no `if` of the function encloses it, when the innermost enclosing block is a try/except (any part) or
  a match case, when the text is longer than 400 characters, and for the C++/Rust/table entries.
The entry's check is that of the statement its citation names (the newest release's, lowest line). A source
row whose releases were guarded otherwise carries their check as a fourth item, [file, line, releases, check]
(a (file, line) whose releases differ gives one row per check); rows without it have the entry's.

`later` (vLLM entries whose releases end before the newest indexed; {} for all others and when there is
nothing to say): what the index shows of the message after its last release L, computed over all vLLM entries
(`later_of`): {"same_text": R, "exception": E} (the same literal text is raised or logged in release R > L, E
its exception, e.g. ValueError -> VLLMValidationError), else {"reworded": R, "template": T} (a message new
after L in the same file and function fails on the same condition in R), else {"check_gone": R} (R the release
after L: no later release tests that condition anywhere in the files read). Otherwise the check moved.

`helpers` (a table beside `entries`, keyed by name): the source of the @property methods and module-level
functions of vllm/config/*.py and vllm/transformers_utils/*.py that vLLM's checks read or call by name
(`self.uses_mrope`, `uses_mrope(cfg)`), and those that these use in turn, from the newest release that defines
each, at most 30 lines each: {"uses_mrope": [[citation, source], ...], "ModelConfig.uses_mrope": [...]}.
The packed file keeps it in its own section, decoded at its first use.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import difflib
import gzip
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SCHEMA = 2
REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "dsv4ctl" / "catalogue" / "message_index.json.gz"
PACKED = OUTPUT.with_name("message_index.bin")
DEFAULT_WHEELS = Path("/work/wheels")  # the one download/unpack folder: src/vllm-<v>/vllm/..., other/..., whl/
RELEASES_FILE = Path(__file__).resolve().with_name("vllm_releases.txt")


def read_releases(path: Path = RELEASES_FILE) -> tuple[str, ...]:
    """The known vLLM releases, oldest first (scripts/vllm_releases.txt; add_release.py appends to it)."""
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text(encoding="utf-8").splitlines())
    return tuple(ln for ln in lines if ln)


def release_source(wheels: Path, version: str) -> Path:
    """Where a release's Python sources are unpacked: <wheels>/src/vllm-<version> (holding vllm/...)."""
    return wheels / "src" / f"vllm-{version}"


VLLM_RELEASES = read_releases()
MIN_LITERAL_CHARS = 12
MIN_WORDS = 2
FIELDS = ("package", "kind", "exception", "level", "function", "template", "pattern", "anchor", "sources", "flags",
          "check", "later")
KEY_FIELDS = ("package", "kind", "exception", "level", "function", "pattern")  # what makes an entry one message
PACKAGE_ORDER = ("vllm", "torch", "transformers", "huggingface_hub", "ray", "safetensors", "triton",
                 "nvidia-cuda-runtime", "nvidia-nccl-cu13", "vllm_ascend", "torch_npu")

EXCLUDED_PARTS = frozenset({"tests", "test", "testing", "examples", "docs", "benchmarks", "third_party",
                            "thirdparty", "_vendor", "vendor", "vendored", "__pycache__"})

VLLM_INCLUDE = (
    "vllm/*.py", "vllm/config/", "vllm/engine/", "vllm/v1/", "vllm/executor/", "vllm/worker/",
    "vllm/attention/", "vllm/compilation/", "vllm/distributed/", "vllm/entrypoints/", "vllm/inputs/",
    "vllm/multimodal/", "vllm/platforms/", "vllm/plugins/", "vllm/reasoning/", "vllm/renderers/",
    "vllm/tokenizers/", "vllm/tool_parsers/", "vllm/transformers_utils/", "vllm/utils/",
    "vllm/model_executor/*.py", "vllm/model_executor/model_loader/", "vllm/model_executor/layers/",
    "vllm/model_executor/models/deepseek_v4", "vllm/models/deepseek_v4", "vllm/models/common/",
)
VLLM_EXCLUDE = ("vllm/collect_env.py", "vllm/scripts.py", "vllm/_version.py", "vllm/version.py",
                "vllm/vllm_flash_attn/")

# name -> (distribution for pip, version, folder under other/, include prefixes, exclude prefixes)
NEIGHBOURS = {
    "torch": ("torch", "2.14.1", "torch-2.14.1", (
        "torch/*.py", "torch/cuda/", "torch/distributed/", "torch/_dynamo/", "torch/_inductor/", "torch/fx/",
        "torch/compiler/", "torch/_subclasses/", "torch/_functorch/", "torch/_higher_order_ops/",
        "torch/_library/", "torch/multiprocessing/", "torch/nn/modules/", "torch/nn/functional.py",
        "torch/backends/", "torch/utils/cpp_extension.py", "torch/utils/_triton.py", "torch/accelerator/",
        "torch/_logging/", "torch/_prims_common/",
    ), (
        "torch/distributed/fsdp/", "torch/distributed/_composable/", "torch/distributed/rpc/",
        "torch/distributed/pipelining/", "torch/distributed/checkpoint/", "torch/distributed/_shard/",
        "torch/distributed/_sharded_tensor/", "torch/distributed/_sharding_spec/", "torch/distributed/optim/",
        "torch/distributed/algorithms/", "torch/distributed/nn/", "torch/_inductor/fx_passes/serialized_patterns/",
        "torch/_dynamo/polyfills/", "torch/fx/experimental/unification/", "torch/_decomp/",
        "torch/_meta_registrations.py", "torch/_torch_docs.py", "torch/_tensor_docs.py", "torch/_storage_docs.py",
        "torch/overrides.py", "torch/_lobpcg.py", "torch/functional.py", "torch/_linalg_utils.py",
    )),
    "huggingface_hub": ("huggingface_hub", "2.4.0", "huggingface_hub-2.4.0", ("huggingface_hub/",), (
        "huggingface_hub/inference/", "huggingface_hub/cli/", "huggingface_hub/commands/",
        "huggingface_hub/templates/",
    )),
    "transformers": ("transformers", "5.19.0", "transformers-5.19.0", (
        "transformers/*.py", "transformers/utils/", "transformers/models/auto/", "transformers/integrations/",
    ), ("transformers/utils/dummy_",)),
    "ray": ("ray", "2.60.0", "ray-2.60.0", (
        "ray/*.py", "ray/_private/", "ray/_common/", "ray/util/", "ray/dag/", "ray/experimental/",
        "ray/runtime_env/",
    ), (
        "ray/util/dask/", "ray/util/spark/", "ray/util/joblib/", "ray/util/multiprocessing/",
        "ray/util/collective/collective_group/torch_gloo", "ray/_private/runtime_env/agent/thirdparty_files",
        "ray/experimental/rllib", "ray/util/sgd/",
    )),
    "safetensors": ("safetensors", "0.8.0", "safetensors-0.8.0", ("safetensors/",), ()),
    "triton": ("triton", "3.8.0", "triton-3.8.0", ("triton/",), ("triton/tools/", "triton/_C/")),
}
# Other accelerators. vllm-ascend is published as an sdist only, and no release of it that pairs with vLLM 0.27-0.33
# is on the registry (`pip index versions vllm-ascend`: 0.23.0.post1 is the newest), so the newest is read. torch_npu
# 2.14.0 pairs with torch 2.14: its Python, the C++ checks of its headers (torch_npu/include/torch_npu/csrc) and the
# ACL error-code table its messages end with (NPUErrorCodes.h, `[Error]: <text>`).
ACCELERATORS = {
    "vllm_ascend": ("vllm-ascend", "0.23.0.post1", "vllm_ascend-0.23.0.post1", ("vllm_ascend/",), (
        "vllm_ascend/_cann_ops_custom/",)),
    "torch_npu": ("torch-npu", "2.14.0", "torch_npu-2.14.0", ("torch_npu/",), (
        "torch_npu/testing/", "torch_npu/onnx/", "torch_npu/_op_plugin_docs.py", "torch_npu/profiler/")),
}
TORCH_NPU_HEADERS = "torch_npu/include/torch_npu/csrc/"
ACL_ERROR_CODES = "torch_npu/include/torch_npu/csrc/core/npu/NPUErrorCodes.h"
CUDART = ("nvidia-cuda-runtime", "13.0.96", "nvidia-cuda-runtime-13.0.96", "nvidia/cu13/lib/libcudart.so.13")
NCCL = ("nvidia-nccl-cu13", "2.30.7", "nvidia-nccl-cu13-2.30.7", "nvidia/nccl/lib/libnccl.so.2")
# binaries unpacked too, not read here: the hand-written catalogue's tests look for its cited texts in them
EXTRA_BINARIES = {"torch": ("torch/lib/libtorch_cuda.so",),
                  "ray": ("ray/core/src/ray/raylet/raylet", "ray/core/src/ray/gcs/gcs_server")}
SAFETENSORS_RUST_SO = "safetensors/_safetensors_rust.abi3.so"
TORCH_HEADER_DIRS = ("torch/include/c10/", "torch/include/ATen/", "torch/include/torch/csrc/")

_WORD = re.compile(r"\w+")
_ALPHA_WORD = re.compile(r"[A-Za-z]{2,}")


# --------------------------------------------------------------------------------------------- templates
class Ph:
    """A placeholder in a template; `text` is the source expression that fills it (for humans and flags)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _norm(parts: list) -> list:
    """Merge adjacent literals and adjacent placeholders; drop empty literals."""
    out: list = []
    for p in parts:
        if isinstance(p, str):
            if not p:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += p
                continue
        elif out and isinstance(out[-1], Ph):
            out[-1] = Ph(out[-1].text + "," + p.text)
            continue
        out.append(p)
    return out


def _ph_text(text: str) -> str:
    text = " ".join(text.split()).replace("{", "(").replace("}", ")")
    return text if len(text) <= 60 else text[:57] + "..."


def display(parts: list) -> str:
    """Template text: literal braces doubled, placeholders as {expr} (str.format-like, parseable back)."""
    return "".join(p.replace("{", "{{").replace("}", "}}") if isinstance(p, str) else "{" + _ph_text(p.text) + "}"
                   for p in parts)


def pattern_of(parts: list) -> str:
    core = list(parts)
    while core and isinstance(core[0], Ph):
        core.pop(0)
    while core and isinstance(core[-1], Ph):
        core.pop()
    return "".join(escape(p) if isinstance(p, str) else ".*?" for p in core)


# The index's patterns are written with the escape lookups compile with (one function, so they cannot drift).
sys.path.insert(0, str(REPO))
from dsv4ctl.catalogue.message_index import escape, pack, template_parts  # noqa: E402


def literal_text(parts: list) -> str:
    return "\x00".join(p for p in parts if isinstance(p, str))


def specific_enough(parts: list) -> bool:
    lit = literal_text(parts)
    return len(lit.replace("\x00", "").strip()) >= MIN_LITERAL_CHARS and len(_ALPHA_WORD.findall(lit)) >= MIN_WORDS


_PCT = re.compile(r"%(?:\((?P<key>[^)]*)\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?(?P<conv>[diouxXeEfFgGcrsa%])")


def percent_format(parts: list, args: list[str] | dict[str, str] | None) -> list:
    """Apply %-formatting to the literal parts: specifiers become placeholders named by their argument."""
    out: list = []
    i = 0
    for p in parts:
        if not isinstance(p, str):
            out.append(p)
            continue
        pos = 0
        for m in _PCT.finditer(p):
            out.append(p[pos:m.start()])
            pos = m.end()
            if m.group("conv") == "%":
                out.append("%")
                continue
            key = m.group("key")
            if key is not None:
                out.append(Ph(args.get(key, key) if isinstance(args, dict) else key))
            else:
                name = args[i] if isinstance(args, list) and i < len(args) else "%" + m.group("conv")
                i += 1
                out.append(Ph(name))
        out.append(p[pos:])
    return _norm(out)


def brace_format(parts: list, args: list[str], kwargs: dict[str, str]) -> list:
    """Apply str.format to the literal parts: {fields} become placeholders, {{ }} single braces."""
    out: list = []
    auto = 0
    for p in parts:
        if not isinstance(p, str):
            out.append(p)
            continue
        i, buf = 0, []
        while i < len(p):
            c = p[i]
            if c == "{" and p.startswith("{{", i):
                buf.append("{")
                i += 2
            elif c == "}" and p.startswith("}}", i):
                buf.append("}")
                i += 2
            elif c == "{":
                depth, j = 1, i + 1
                while j < len(p) and depth:
                    depth += {"{": 1, "}": -1}.get(p[j], 0)
                    j += 1
                field = re.split(r"[!:\[.]", p[i + 1:j - 1], maxsplit=1)[0]
                if field == "":
                    name = args[auto] if auto < len(args) else "{}"
                    auto += 1
                elif field.isdigit():
                    name = args[int(field)] if int(field) < len(args) else field
                else:
                    name = kwargs.get(field, field)
                out.append("".join(buf))
                buf = []
                out.append(Ph(name))
                i = j
            else:
                buf.append(c)
                i += 1
        out.append("".join(buf))
    return _norm(out)


def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - unparse of odd nodes
        return "?"


def parts_of(node: ast.AST | None) -> list | None:
    """Template parts of a message expression, or None when it holds no literal text."""
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) and node.value else None
    if isinstance(node, ast.JoinedStr):
        out: list = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.append(v.value)
            elif isinstance(v, ast.FormattedValue):
                out.append(Ph(_src(v.value)))
        out = _norm(out)
        return out if any(isinstance(p, str) for p in out) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = parts_of(node.left), parts_of(node.right)
        if left is None and right is None:
            return None
        return _norm((left or [Ph(_src(node.left))]) + (right or [Ph(_src(node.right))]))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = parts_of(node.left)
        if left is None:
            return None
        r = node.right
        if isinstance(r, ast.Tuple):
            return percent_format(left, [_src(e) for e in r.elts])
        if isinstance(r, ast.Dict):
            return percent_format(left, {k.value: _src(v) for k, v in zip(r.keys, r.values)
                                         if isinstance(k, ast.Constant) and isinstance(k.value, str)})
        return percent_format(left, [_src(r)])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        base = parts_of(node.func.value)
        if base is None:
            return None
        return brace_format(base, [_src(a) for a in node.args],
                            {k.arg: _src(k.value) for k in node.keywords if k.arg})
    if isinstance(node, ast.Lambda):
        return parts_of(node.body)
    return None


_CONFIGISH = re.compile(r"config|args|cfg", re.I)


def names_in(node: ast.AST | None) -> set[str]:
    """Names that may stand for an engine argument (for `flags`): variables, and attributes of self/cls or
    of a config-like object (model_config.max_model_len, self.max_num_seqs), not of anything else
    (t.dtype of a tensor is not --dtype)."""
    out: set[str] = set()
    if node is None:
        return out
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            owner = n.value
            oname = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if oname in ("self", "cls") or _CONFIGISH.search(oname):
                out.add(n.attr)
    return out


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return dotted(node.value) + "." + node.attr
    return _src(node)


# ------------------------------------------------------------------------------------------- Python files
LOG_METHODS = {"error": "ERROR", "exception": "ERROR", "error_once": "ERROR", "exception_once": "ERROR",
               "critical": "CRITICAL", "fatal": "CRITICAL"}
LOGGER_FACTORIES = ("init_logger", "getLogger", "get_logger")
TORCH_CHECKS = {"_check": "RuntimeError", "_check_value": "ValueError", "_check_type": "TypeError",
                "_check_index": "IndexError", "_check_not_implemented": "NotImplementedError",
                "_check_is_size": "RuntimeError", "_check_tensor_all": "RuntimeError"}


_EXC_NAME = re.compile(r"(?:Error|Exception|Exit|Interrupt|Warning|Failure)$")


def _looks_like_logger(name: str) -> bool:
    low = name.lower()
    return low in ("log", "logging", "lgr") or low.endswith("logger") or low.endswith("_log")


MAX_CHECK = 400  # a longer condition is not shown (it would not help a reader): check ""


def check_text(prefix: str, test: ast.AST, suffix: str = "") -> str:
    """`prefix + source of test + suffix`, whitespace collapsed; "" when longer than MAX_CHECK."""
    text = " ".join((prefix + _src(test) + suffix).split())
    return text if len(text) <= MAX_CHECK else ""


class Extractor:
    """Walks one module; `occ` collects (kind, exception, level, function, parts, line, names, check)."""

    def __init__(self, tree: ast.Module, source: str, conditions: bool = False) -> None:
        self.source_lines = source.splitlines()
        self.occ: list[tuple] = []
        self.stats: Counter = Counter()
        self.loggers: set[str] = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Call):
                f = n.value.func
                fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if fname in LOGGER_FACTORIES:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    for t in targets:
                        if isinstance(t, ast.Name):
                            self.loggers.add(t.id)
                        elif isinstance(t, ast.Attribute):
                            self.loggers.add(t.attr)
        self.scope: list[str] = []
        self.ifs: list[ast.If] = []
        self.elif_parent: dict[int, ast.If] = {}
        self.blocks: list[tuple[list[ast.stmt], int]] = []
        # the compound statements around the current one that decide whether it runs, innermost last:
        # (if node, True in its body / False in its else) or (None, None) for a try/except or match part
        self.guards: list[tuple[ast.If | None, bool | None]] = []
        # every condition an `if`, assert or torch._check* of the module tests, both ways (T and not T), when asked
        self.conditions: set[str] | None = set() if conditions else None
        self.visit(tree)

    # scopes, blocks and ifs
    def visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in getattr(node, "decorator_list", ()):
                self.visit(d)
            self.scope.append(node.name)
            saved = self.ifs, self.blocks, self.guards
            self.ifs, self.blocks, self.guards = [], [], []
            self.visit_block(node.body)
            self.ifs, self.blocks, self.guards = saved
            self.scope.pop()
            return
        if isinstance(node, ast.If):
            self.visit(node.test)
            self.note(node.test)
            self.ifs.append(node)
            self.guards.append((node, True))
            self.visit_block(node.body)
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                self.elif_parent[id(node.orelse[0])] = node
            elif node.orelse and id(node) in self.elif_parent:
                self.note(self.chain_test(node))  # what the chain's final else: runs for
            self.guards[-1] = (node, False)
            self.visit_block(node.orelse)
            self.guards.pop()
            self.ifs.pop()
            return
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try), ast.Match)):
            # what raises in a try/except or a match case does so for the exception or the case, not for an if
            self.guards.append((None, None))
            self.generic_visit(node)
            self.guards.pop()
            return
        if isinstance(node, ast.Raise):
            self.on_raise(node)
        elif isinstance(node, ast.Assert):
            self.on_assert(node)
        elif isinstance(node, ast.Call):
            self.on_call(node)
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        for _name, value in ast.iter_fields(node):
            if isinstance(value, list):
                if value and isinstance(value[0], ast.stmt):
                    self.visit_block(value)
                else:
                    for v in value:
                        if isinstance(v, ast.AST):
                            self.visit(v)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def note(self, test: ast.AST) -> None:
        if self.conditions is not None:
            self.conditions.add(" ".join(_src(test).split()))
            self.conditions.add(" ".join(_src(ast.UnaryOp(ast.Not(), test)).split()))

    def visit_block(self, stmts: list[ast.stmt]) -> None:
        for i, st in enumerate(stmts):
            self.blocks.append((stmts, i))
            self.visit(st)
            self.blocks.pop()

    def resolve(self, name: str) -> ast.AST | None:
        """The value of the assignment to `name` that reaches the current statement for sure: the nearest
        preceding `name = ...` in this block or an enclosing one of the same function, with no other
        binding of `name` in between (else None)."""
        for stmts, i in reversed(self.blocks):
            for st in reversed(stmts[:i]):
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                        and st.targets[0].id == name:
                    return st.value
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == name:
                    return st.value
                if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del))
                       for n in ast.walk(st)):
                    return None
        return None

    def message(self, node: ast.AST | None) -> tuple[list | None, int, ast.AST | None]:
        """(parts, line, expression) of a message argument; a plain name is followed to its assignment."""
        if node is None:
            return None, 0, None
        if isinstance(node, ast.Name):
            value = self.resolve(node.id)
            if value is not None:
                parts = parts_of(value)
                if parts is not None:
                    self.stats["resolved_variable"] += 1
                    return parts, value.lineno, value
        return parts_of(node), node.lineno, node

    def function(self) -> str:
        return ".".join(self.scope) or "<module>"

    def if_check(self) -> str:
        """The condition under which the current statement runs, from the innermost enclosing `if` of this
        function: "if T" in its body (an `elif U:` branch gives "if U"), "if not (T)" in its `else:`; "" with
        no enclosing `if`, or when the innermost enclosing block is a try/except or match part."""
        if not self.guards:
            return ""
        node, body = self.guards[-1]
        if node is None:
            return ""
        return check_text("if ", node.test) if body else check_text("if not (", self.chain_test(node), ")")

    def chain_test(self, node: ast.If) -> ast.AST:
        """The test that an `else:` after `node` negates: node's own, or for the `else:` that ends an if/elif
        chain, `A or B or ...` of all the chain's tests (first to last)."""
        tests = [node.test]
        while id(node) in self.elif_parent:
            node = self.elif_parent[id(node)]
            tests.insert(0, node.test)
        return tests[0] if len(tests) == 1 else ast.BoolOp(ast.Or(), tests)

    def if_names(self) -> set[str]:
        out: set[str] = set()
        node = self.ifs[-1] if self.ifs else None
        while node is not None:
            out |= names_in(node.test)
            node = self.elif_parent.get(id(node))
        return out

    def add(self, kind: str, exc: str | None, level: str | None, msg: ast.AST | None, parts: list | None,
            line: int, names: set[str], check: str) -> None:
        if parts is None:
            self.stats["skipped_variable"] += 1
            return
        if not specific_enough(parts):
            self.stats["skipped_short"] += 1
            return
        self.stats[kind] += 1
        self.occ.append((kind, exc, level, self.function(), parts, line, names | names_in(msg), check))

    def on_raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if exc is None:
            return
        if not isinstance(exc, ast.Call):
            self.stats["skipped_no_message"] += 1
            return
        exc_type, args = dotted(exc.func), exc.args
        last = exc_type.rsplit(".", 1)[-1]
        # a factory: raise _format(GatedRepoError, message, response) raises its first argument's type
        if (last[:1].islower() or last.startswith("_")) and len(args) >= 2 \
                and isinstance(args[0], (ast.Name, ast.Attribute)) and _EXC_NAME.search(dotted(args[0])):
            exc_type, args = dotted(args[0]), args[1:]
        msg = args[0] if args else next(
            (k.value for k in exc.keywords if k.arg in ("msg", "message", "detail", "reason")), None)
        if msg is None:
            self.stats["skipped_no_message"] += 1
            return
        parts, line, expr = self.message(msg)
        self.add("raise", exc_type, None, expr, parts, line, self.if_names(), self.if_check())

    def on_assert(self, node: ast.Assert) -> None:
        self.note(node.test)
        if node.msg is not None:
            parts, line, expr = self.message(node.msg)
            self.add("assert", "AssertionError", None, expr, parts, line, names_in(node.test),
                     check_text("assert ", node.test))
            return
        line = self.source_lines[node.lineno - 1].strip() if node.lineno <= len(self.source_lines) else ""
        if not line.startswith("assert"):
            self.stats["skipped_variable"] += 1
            return
        self.add("assert_bare", "AssertionError", None, None, [line], node.lineno, names_in(node.test),
                 check_text("assert ", node.test))

    def on_call(self, node: ast.Call) -> None:
        f = node.func
        if not isinstance(f, ast.Attribute):
            return
        if f.attr in LOG_METHODS:
            owner = f.value
            oname = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if not oname or not (oname in self.loggers or _looks_like_logger(oname)):
                return
            if not node.args:
                return
            parts, _line, msg = self.message(node.args[0])
            extra = node.args[1:]
            if parts is not None and extra:
                if len(extra) == 1 and isinstance(extra[0], ast.Dict):
                    d = extra[0]
                    parts = percent_format(parts, {k.value: _src(v) for k, v in zip(d.keys, d.values)
                                                   if isinstance(k, ast.Constant) and isinstance(k.value, str)})
                else:
                    parts = percent_format(parts, [_src(a) for a in extra])
            names = self.if_names()
            for a in extra:
                names |= names_in(a)
            self.add("log", None, LOG_METHODS[f.attr], msg, parts, node.lineno, names, self.if_check())
            return
        if f.attr in TORCH_CHECKS or f.attr == "_check_with":
            if not (isinstance(f.value, ast.Name) and f.value.id == "torch"):
                return
            if f.attr == "_check_with":
                if len(node.args) < 2:
                    return
                exc, cond, rest = dotted(node.args[0]), node.args[1], node.args[2:]
            else:
                if not node.args:
                    return
                exc, cond, rest = TORCH_CHECKS[f.attr], node.args[0], node.args[1:]
            self.note(cond)
            msg = rest[0] if rest else next((k.value for k in node.keywords if k.arg == "message"), None)
            if msg is None:
                self.stats["skipped_no_message"] += 1
                return
            parts, line, expr = self.message(msg)
            self.add("raise", exc, None, expr, parts, line, names_in(cond), check_text("assert ", cond))


def extract_python(job: tuple[str, str, bool]) -> tuple[str, list, Counter, str | None, set[str]]:
    """(file, occurrences, counts, why it did not parse, the conditions it tests when `job[2]`)."""
    root, rel, conditions = job
    path = Path(root) / rel
    try:
        source = path.read_text(encoding="utf-8-sig")  # a BOM is not code
        tree = ast.parse(source, filename=rel)
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        return rel, [], Counter({"unparsable_files": 1}), f"{rel}: {type(e).__name__}: {e}", set()
    ex = Extractor(tree, source, conditions)
    return rel, ex.occ, ex.stats, None, ex.conditions or set()


# --------------------------------------------------------------------------------- C++ and Rust sources
def c_unescape(s: str) -> str:
    out, i = [], 0
    simple = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"', "a": "\a",
              "b": "\b", "f": "\f", "v": "\v", "?": "?", "e": "\x1b"}
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "x":
                m = re.match(r"[0-9a-fA-F]+", s[i + 2:])
                if m:
                    out.append(chr(int(m.group(), 16) & 0xFF))
                    i += 2 + len(m.group())
                    continue
            if n in "01234567" and re.match(r"[0-7]{1,3}", s[i + 1:]):
                m = re.match(r"[0-7]{1,3}", s[i + 1:])
                out.append(chr(int(m.group(), 8)))
                i += 1 + len(m.group())
                continue
            out.append(simple.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def tokenize_c(text: str, rust: bool = False) -> list[tuple[str, str, int, str]]:
    """Tokens (kind, value, line, macro) of C/C++ (or Rust) source: kinds id, str, num, op.

    Comments are dropped; string literals are decoded (raw strings too); in C, preprocessor directives are
    skipped except #define bodies, whose tokens carry the macro's name (`#x` stringification becomes id "#x").
    """
    toks: list[tuple[str, str, int, str]] = []
    i, n, line = 0, len(text), 1
    macro = ""
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            line += 1
            continue
        if c == "\n":
            line += 1
            i += 1
            macro = ""
            at_line_start = True
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
            continue
        if not rust and c == "#" and at_line_start:
            m = re.match(r"#\s*(\w+)", text[i:])
            directive = m.group(1) if m else ""
            if directive == "define":
                m2 = re.match(r"#\s*define\s+(\w+)", text[i:])
                macro = m2.group(1) if m2 else ""
                i += m2.end() if m2 else 1
                at_line_start = False
                continue
            # skip the directive's logical line
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    line += 1
                    i += 1
                i += 1
            continue
        at_line_start = False
        # string literals
        m = None
        if rust:
            m = re.match(r'b?r(#*)"', text[i:])
            if m:
                hashes = m.group(1)
                end = text.find('"' + hashes, i + m.end())
                end = n if end < 0 else end
                toks.append(("str", text[i + m.end():end], line, macro))
                line += text.count("\n", i, end)
                i = end + 1 + len(hashes)
                continue
        else:
            m = re.match(r'(?:u8|u|U|L)?R"([^()\\ ]{0,16})\(', text[i:])
            if m:
                delim = ")" + m.group(1) + '"'
                end = text.find(delim, i + m.end())
                end = n if end < 0 else end
                toks.append(("str", text[i + m.end():end], line, macro))
                line += text.count("\n", i, end)
                i = end + len(delim)
                continue
        m = re.match(r'(?:u8|u|U|L|b)?"', text[i:])
        if m:
            j = i + m.end()
            start_line = line
            buf = []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    if text[j + 1] == "\n":
                        line += 1
                        j += 2
                        if rust:  # Rust: backslash-newline skips the next line's leading whitespace
                            while j < n and text[j] in " \t":
                                j += 1
                        continue
                    buf.append(text[j:j + 2])
                    j += 2
                    continue
                if text[j] == "\n":
                    line += 1
                buf.append(text[j])
                j += 1
            toks.append(("str", c_unescape("".join(buf)), start_line, macro))
            i = j + 1
            continue
        if c == "'":
            if rust:
                m = re.match(r"'(?:\\.[^']*|[^'\\])'", text[i:])
                if m:
                    toks.append(("chr", m.group(), line, macro))
                    i += m.end()
                    continue
                m = re.match(r"'\w+", text[i:])  # lifetime
                if m:
                    i += m.end()
                    continue
            else:
                m = re.match(r"'(?:\\.|[^'\\])*'", text[i:])
                if m:
                    toks.append(("chr", m.group(), line, macro))
                    i += m.end()
                    continue
        if c.isalpha() or c == "_":
            m = re.match(r"\w+", text[i:])
            toks.append(("id", m.group(), line, macro))
            i += m.end()
            continue
        if c.isdigit():
            m = re.match(r"[\w.']+" if not rust else r"[\w.]+", text[i:])
            toks.append(("num", m.group(), line, macro))
            i += m.end()
            continue
        if c == "#" and not rust and macro:
            m = re.match(r"#\s*(\w+)", text[i:])
            if m and not text.startswith("##", i):
                toks.append(("id", "#" + m.group(1), line, macro))
                i += m.end()
                continue
        m = re.match(r"::|->|=>|==|!=|<=|>=|&&|\|\||##|<<|>>|\+=", text[i:])
        if m:
            toks.append(("op", m.group(), line, macro))
            i += m.end()
            continue
        toks.append(("op", c, line, macro))
        i += 1
    return toks


_OPEN, _CLOSE = {"(": ")", "[": "]", "{": "}"}, {")", "]", "}"}


def call_args(toks: list, i: int) -> tuple[list[list], int] | None:
    """toks[i] is '(' : the comma-separated top-level argument token lists and the index after ')'."""
    if i >= len(toks) or toks[i][1] != "(":
        return None
    depth, args, cur = 0, [], []
    j = i
    while j < len(toks):
        kind, val = toks[j][0], toks[j][1]
        if kind == "op" and val in _OPEN:
            depth += 1
            if depth == 1:
                j += 1
                continue
        elif kind == "op" and val in _CLOSE:
            depth -= 1
            if depth == 0:
                if cur or args:
                    args.append(cur)
                return args, j + 1
        elif kind == "op" and val == "," and depth == 1:
            args.append(cur)
            cur = []
            j += 1
            continue
        if depth >= 1:
            cur.append(toks[j])
        j += 1
    return None


def _toks_text(ts: list) -> str:
    """Source-like text of tokens: a space only between two words."""
    out: list[str] = []
    prev = ""
    for t in ts:
        text = json.dumps(t[1]) if t[0] == "str" else t[1]
        if out and prev in ("id", "num") and t[0] in ("id", "num"):
            out.append(" ")
        out.append(text)
        prev = t[0]
    return "".join(out)


def c_arg_parts(ts: list) -> list:
    """One C++ argument: adjacent string literals concatenate; `a + "b" + c` splits; otherwise a placeholder."""
    if not ts:
        return []
    if all(t[0] == "str" for t in ts):
        return ["".join(t[1] for t in ts)]
    # split at top-level '+'
    depth, operands, cur = 0, [], []
    for t in ts:
        if t[0] == "op" and t[1] in _OPEN:
            depth += 1
        elif t[0] == "op" and t[1] in _CLOSE:
            depth -= 1
        if depth == 0 and t[0] == "op" and t[1] == "+":
            operands.append(cur)
            cur = []
            continue
        cur.append(t)
    operands.append(cur)
    if len(operands) > 1:
        out: list = []
        for op in operands:
            out.extend(c_arg_parts(op))
        return out
    # string literal followed by stringified macro args: " when calling `" #EXPR "`"
    if all(t[0] == "str" or (t[0] == "id" and t[1].startswith("#")) for t in ts):
        return [t[1] if t[0] == "str" else Ph(t[1]) for t in ts]
    # std::string("lit") / c10::str("lit")
    if len(ts) >= 4 and ts[-1][1] == ")" and any(t[0] == "str" for t in ts):
        k = next(idx for idx, t in enumerate(ts) if t[1] == "(")
        inner = call_args(ts, k)
        if inner is not None and inner[1] == len(ts) and len(inner[0]) == 1 and \
                _toks_text(ts[:k]) in ("std::string", "c10::str", "std::string_view"):
            return c_arg_parts(inner[0][0])
    return [Ph(_toks_text(ts))]


CPP_CHECKS = {  # macro -> (exception, index of the first message argument)
    "TORCH_CHECK": ("RuntimeError", 1), "TORCH_CHECK_VALUE": ("ValueError", 1),
    "TORCH_CHECK_TYPE": ("TypeError", 1), "TORCH_CHECK_INDEX": ("IndexError", 1),
    "TORCH_CHECK_NOT_IMPLEMENTED": ("NotImplementedError", 1), "TORCH_CHECK_LINALG": ("torch.linalg.LinAlgError", 1),
    "TORCH_CHECK_ALWAYS_SHOW_CPP_STACKTRACE": ("RuntimeError", 1), "TORCH_INTERNAL_ASSERT": ("RuntimeError", 1),
    "TORCH_INTERNAL_ASSERT_DEBUG_ONLY": ("RuntimeError", 1), "TORCH_CHECK_MSG": ("RuntimeError", 1),
    "TORCH_CHECK_WITH": (None, 2), "C10_THROW_ERROR": (None, 1), "TORCH_CHECK_ARG": ("RuntimeError", 2),
}
C10_TYPES = {"Error": "RuntimeError", "ValueError": "ValueError", "TypeError": "TypeError",
             "IndexError": "IndexError", "NotImplementedError": "NotImplementedError",
             "DistBackendError": "torch.distributed.DistBackendError", "DistError": "torch.distributed.DistError",
             "DistNetworkError": "torch.distributed.DistNetworkError",
             "DistStoreError": "torch.distributed.DistStoreError", "OutOfMemoryError": "torch.OutOfMemoryError",
             "AcceleratorError": "torch.AcceleratorError", "LinAlgError": "torch.linalg.LinAlgError",
             "EnforceFiniteError": "RuntimeError", "ErrorAlwaysShowCppStacktrace": "RuntimeError",
             "SyntaxError": "SyntaxError", "runtime_error": "RuntimeError", "invalid_argument": "ValueError",
             "out_of_range": "IndexError", "logic_error": "RuntimeError"}


def _c10_type(ts: list) -> str:
    name = ts[-1][1] if ts else "Error"
    return C10_TYPES.get(name, "c10::" + name)


def extract_cpp(text: str) -> tuple[list, Counter]:
    """Occurrences (kind, exception, level, function, parts, line, names, check) of a C++ header."""
    toks = tokenize_c(text)
    occ: list = []
    stats: Counter = Counter()

    def add(kind: str, exc: str | None, parts: list, line: int, macro: str) -> None:
        parts = _norm(parts)
        if not any(isinstance(p, str) for p in parts):
            stats["skipped_variable"] += 1
        elif not specific_enough(parts):
            stats["skipped_short"] += 1
        else:
            stats[kind] += 1
            occ.append((kind, exc, None, macro, parts, line, set(), ""))

    for i, (kind, val, line, macro) in enumerate(toks):
        if kind != "id":
            continue
        if val in CPP_CHECKS and i + 1 < len(toks) and toks[i + 1][1] == "(" and macro != val:
            got = call_args(toks, i + 1)
            if not got:
                continue
            args = got[0]
            exc, first = CPP_CHECKS[val]
            if exc is None:
                exc = _c10_type(args[0]) if args else "RuntimeError"
            msg_args = args[first:]
            if not msg_args or all(not a for a in msg_args):
                stats["skipped_no_message"] += 1
                continue
            parts: list = []
            for a in msg_args:
                if a and a[0][0] == "id" and a[0][1] == "__VA_ARGS__":
                    parts.append(Ph("__VA_ARGS__"))
                else:
                    parts.extend(c_arg_parts(a))
            mline = next((t[2] for a in msg_args for t in a if t[0] == "str"), line)
            add("raise", exc, parts, mline, macro)
        elif val == "throw" and i + 1 < len(toks) and toks[i + 1][0] == "id":
            j = i + 1
            while j < len(toks) and (toks[j][0] == "id" or toks[j][1] == "::"):
                j += 1
            got = call_args(toks, j) if j < len(toks) else None
            if not got or not got[0]:
                continue
            parts = []
            for a in got[0][:1]:
                parts.extend(c_arg_parts(a))
            typ = [t for t in toks[i + 1:j] if t[0] == "id"]
            mline = next((t[2] for t in got[0][0] if t[0] == "str"), line)
            add("raise", _c10_type(typ), parts, mline, macro)
        elif val == "string" and i >= 2 and toks[i - 1][1] == "::" and toks[i - 2][1] == "std" \
                and i + 2 < len(toks) and toks[i + 1][0] == "id" and toks[i + 2][1] == "=" \
                and re.search(r"err|msg|message|what|reason", toks[i + 1][1], re.I):
            j, depth, expr = i + 3, 0, []
            while j < len(toks) and not (depth == 0 and toks[j][1] == ";"):
                if toks[j][1] in _OPEN:
                    depth += 1
                elif toks[j][1] in _CLOSE:
                    depth -= 1
                    if depth < 0:
                        break
                expr.append(toks[j])
                j += 1
            if any(t[0] == "str" for t in expr):
                mline = next(t[2] for t in expr if t[0] == "str")
                add("format", None, c_arg_parts(expr), mline, macro)
    return occ, stats


_RUST_FMT = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def rust_format(fmt: str, args: list[str]) -> list:
    out: list = []
    pos, auto = 0, 0
    for m in _RUST_FMT.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        if m.group() in ("{{", "}}"):
            out.append(m.group()[0])
            continue
        field = m.group(1).split(":", 1)[0]
        if field == "":
            out.append(Ph(args[auto] if auto < len(args) else "{}"))
            auto += 1
        elif field.isdigit():
            out.append(Ph(args[int(field)] if int(field) < len(args) else field))
        else:
            out.append(Ph(field))
    out.append(fmt[pos:])
    return _norm(out)


def _rust_exc(path: list[str]) -> str:
    name = path[-1] if path else "Exception"
    if name == "SafetensorError":
        return "safetensors_rust.SafetensorError"
    if name.startswith("Py") and name[2:3].isupper():
        return name[2:]
    return name


def extract_rust(text: str) -> tuple[list, Counter]:
    toks = tokenize_c(text, rust=True)
    occ: list = []
    stats: Counter = Counter()
    fn = "<module>"

    def fmt_parts(ts: list) -> list | None:
        """A `"lit"` or `format!("lit", args)` argument."""
        if len(ts) == 1 and ts[0][0] == "str":
            return [ts[0][1]] if ts[0][1] else None
        if len(ts) >= 4 and ts[0][1] == "format" and ts[1][1] == "!" and ts[2][1] == "(":
            got = call_args(ts, 2)
            if got and got[0] and len(got[0][0]) == 1 and got[0][0][0][0] == "str":
                return rust_format(got[0][0][0][1], [_toks_text(a) for a in got[0][1:]])
        return None

    def add(kind: str, exc: str | None, parts: list | None, line: int) -> None:
        if parts is None:
            stats["skipped_variable"] += 1
        elif not specific_enough(parts):
            stats["skipped_short"] += 1
        else:
            stats[kind] += 1
            occ.append((kind, exc, None, fn, parts, line, set(), ""))

    for i, (kind, val, line, _m) in enumerate(toks):
        if kind != "id":
            continue
        if val == "fn" and i + 1 < len(toks) and toks[i + 1][0] == "id":
            fn = toks[i + 1][1]
        elif val == "new_err" and i >= 2 and toks[i - 1][1] == "::" and i + 1 < len(toks) and toks[i + 1][1] == "(":
            got = call_args(toks, i + 1)
            if not got or not got[0]:
                continue
            path, k = [], i - 2
            while k >= 0 and toks[k][0] == "id":
                path.insert(0, toks[k][1])
                if k >= 1 and toks[k - 1][1] == "::":
                    k -= 2
                else:
                    break
            arg = got[0][0]
            mline = next((t[2] for t in arg if t[0] == "str"), line)
            add("raise", _rust_exc(path), fmt_parts(arg), mline)
        elif val == "write" and i + 2 < len(toks) and toks[i + 1][1] == "!" and toks[i + 2][1] == "(":
            got = call_args(toks, i + 2)
            if not got or len(got[0]) < 2 or len(got[0][1]) != 1 or got[0][1][0][0] != "str":
                continue
            add("format", None, rust_format(got[0][1][0][1], [_toks_text(a) for a in got[0][2:]]),
                got[0][1][0][2])
    return occ, stats


# ------------------------------------------------------------------------------------- C library tables
def c_error_strings(lib_path: Path, func: str, codes: range, unknown: str) -> list[tuple[int, str]]:
    lib = ctypes.CDLL(str(lib_path))
    f = getattr(lib, func)
    f.restype = ctypes.c_char_p
    f.argtypes = [ctypes.c_int]
    out = []
    for code in codes:
        raw = f(code)
        text = raw.decode("utf-8", "replace") if raw else ""
        if code and text and text != unknown:
            out.append((code, text))
    return out


# -------------------------------------------------------------------------------------------- downloads
def pip_download(spec: str, dest: Path, extra: list[str] | None = None, env: dict | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    before = set(dest.iterdir())
    cmd = [sys.executable, "-m", "pip", "download", spec, "--no-deps", "-d", str(dest), "-q", *(extra or [])]
    print("  $", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)
    new = sorted(set(dest.iterdir()) - before)
    name = spec.split("==")[0].replace("-", "_").lower()
    found = new or sorted(p for p in dest.iterdir() if p.name.lower().replace("-", "_").startswith(name + "-"))
    if not found:
        raise SystemExit(f"pip download {spec}: no file in {dest}")
    return found[0]


def unpack_wheel(whl: Path, dest: Path, keep) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            if not info.is_dir() and keep(info.filename):
                z.extract(info, dest)


# Stand-in build backend (as maturin for safetensors, as setuptools.build_meta elsewhere), filled with
# (distribution, version, name, version): `pip download` then saves the sdist without building anything.
_BACKEND_SHIM = '''"""Stand-in build backend: only lets `pip download` save an sdist whose metadata step needs its build tools."""
import os
def get_requires_for_build_wheel(config_settings=None):
    return []
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, "%s-%s.dist-info")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n")
    return os.path.basename(d)
'''


def ensure_accelerators(wheels: Path, keep_wheels: bool) -> None:
    """vllm-ascend's sdist (its Python only) and torch_npu's wheel (Python, headers) under other/."""
    whl_dir = wheels / "whl"
    for pkg, (dist, v, folder, _inc, _exc) in ACCELERATORS.items():
        dest = wheels / "other" / folder
        if (dest / pkg / "__init__.py").exists():
            continue
        print(f"{pkg} {v}: downloading", flush=True)
        if pkg == "vllm_ascend":
            with tempfile.TemporaryDirectory() as shim:
                (Path(shim) / "setuptools").mkdir()
                (Path(shim) / "setuptools" / "__init__.py").write_text("")
                (Path(shim) / "setuptools" / "build_meta.py").write_text(_BACKEND_SHIM % (pkg, v, dist, v))
                env = dict(os.environ, PYTHONPATH=shim + os.pathsep + os.environ.get("PYTHONPATH", ""))
                sd = pip_download(f"{dist}=={v}", wheels / "sdist", ["--no-build-isolation"], env=env)
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(sd) as t:
                top = f"{pkg}-{v}/"
                members = []
                for m in t.getmembers():
                    if m.isfile() and m.name.startswith(top + pkg + "/") and m.name.endswith(".py"):
                        m.name = m.name[len(top):]
                        members.append(m)
                t.extractall(dest, members=members, filter="data")
            if not keep_wheels:
                sd.unlink()
            continue
        whl = pip_download(f"{dist}=={v}", whl_dir)
        unpack_wheel(whl, dest, lambda n: n.endswith(".py") or n.endswith(".dist-info/METADATA")
                     or (n.startswith(TORCH_NPU_HEADERS) and n.endswith((".h", ".hpp"))))
        if not keep_wheels:
            whl.unlink()


def acl_error_codes(path: Path) -> list[tuple[int, str]]:
    """(code, text) of torch_npu's AclErrorCode table (`{100000, "Parameter verification failed.\\n…"}`): the text
    its NPU/OPS/HCCL checks append to a failed call's message (`[Error]: <text>`)."""
    toks = [t for t in tokenize_c(path.read_text(encoding="utf-8")) if t[0] != "op" or t[1] in "{},"]
    out: list[tuple[int, str]] = []
    i = 0
    while i + 3 < len(toks):
        if toks[i][1] == "{" and toks[i + 1][0] == "num" and toks[i + 2][1] == ",":
            j, parts = i + 3, []
            while j < len(toks) and toks[j][0] == "str":
                parts.append(toks[j][1])
                j += 1
            if parts and j < len(toks) and toks[j][1] == "}":
                # the table's lines continue with a backslash and the next line's indentation; a log line is read stripped
                text = "\n".join(ln.strip() for ln in "".join(parts).split("\n")).strip()
                out.append((int(toks[i + 1][1]), text))
                i = j
        i += 1
    return out


def ensure_sources(wheels: Path, keep_wheels: bool) -> None:
    whl_dir = wheels / "whl"
    for v in VLLM_RELEASES:
        dest = release_source(wheels, v)
        if (dest / "vllm" / "config" / "model.py").exists():
            continue
        print(f"vllm {v}: downloading", flush=True)
        whl = pip_download(f"vllm=={v}", whl_dir)
        unpack_wheel(whl, dest, lambda n: n.endswith(".py") or n.endswith(".dist-info/METADATA"))
        if not keep_wheels:
            whl.unlink()
    for pkg, (dist, v, folder, _inc, _exc) in NEIGHBOURS.items():
        dest = wheels / "other" / folder
        wanted = [dest / pkg / "__init__.py", *(dest / b for b in EXTRA_BINARIES.get(pkg, ()))]
        if pkg == "safetensors":
            wanted.append(dest / SAFETENSORS_RUST_SO)
        if all(w.exists() for w in wanted):
            continue
        print(f"{pkg} {v}: downloading", flush=True)
        whl = pip_download(f"{dist}=={v}", whl_dir)

        def keep(n: str, pkg=pkg) -> bool:
            return (n.endswith(".py") or n.endswith(".dist-info/METADATA")
                    or (pkg == "torch" and n.startswith("torch/include/"))
                    or (pkg == "safetensors" and n == SAFETENSORS_RUST_SO)
                    or n in EXTRA_BINARIES.get(pkg, ()))
        unpack_wheel(whl, dest, keep)
        if not keep_wheels:
            whl.unlink()
    for dist, v, folder, lib in (CUDART, NCCL):
        dest = wheels / "other" / folder
        if (dest / lib).exists():
            continue
        print(f"{dist} {v}: downloading", flush=True)
        whl = pip_download(f"{dist}=={v}", whl_dir)
        unpack_wheel(whl, dest, lambda n, lib=lib: n == lib)
        if not keep_wheels:
            whl.unlink()
    v = NEIGHBOURS["safetensors"][1]
    sdist_root = wheels / "other" / f"safetensors-{v}-sdist"
    if not (sdist_root / f"safetensors-{v}" / "bindings" / "python" / "src" / "lib.rs").exists():
        print(f"safetensors {v}: downloading the sdist (Rust sources)", flush=True)
        with tempfile.TemporaryDirectory() as shim:
            (Path(shim) / "maturin").mkdir()
            (Path(shim) / "maturin" / "__init__.py").write_text(_BACKEND_SHIM % ("safetensors", v, "safetensors", v))
            env = dict(os.environ, PYTHONPATH=shim + os.pathsep + os.environ.get("PYTHONPATH", ""))
            sd = pip_download(f"safetensors=={v}", wheels / "sdist",
                              ["--no-binary", ":all:", "--no-build-isolation"], env=env)
        sdist_root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sd) as t:
            members = [m for m in t.getmembers() if m.isfile() and (m.name.endswith(".rs") or m.name.endswith(".toml"))]
            t.extractall(sdist_root, members=members, filter="data")


# ----------------------------------------------------------------------------------------------- selection
def selected(rel: str, include: tuple, exclude: tuple) -> bool:
    if not rel.endswith(".py") or any(part in EXCLUDED_PARTS for part in rel.split("/")[:-1]):
        return False
    name = rel.rsplit("/", 1)[-1]
    if name.startswith("test_") or name == "conftest.py":
        return False
    if any(rel.startswith(x) for x in exclude):
        return False
    for inc in include:
        if inc.endswith("/*.py"):
            if rel.startswith(inc[:-4]) and "/" not in rel[len(inc) - 4:]:
                return True
        elif rel.startswith(inc):
            return True
    return False


def py_files(root: Path, include: tuple, exclude: tuple) -> list[str]:
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root).as_posix()
        if selected(rel, include, exclude):
            out.append(rel)
    return sorted(out)


def engine_args_fields(path: Path) -> tuple[set[str], dict[str, str]]:
    """EngineArgs field names and {config attribute: field} for fields that default from a config class."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fields: set[str] = set()
    alias: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EngineArgs":
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    name = st.target.id
                    fields.add(name)
                    v = st.value
                    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id.endswith("Config"):
                        alias.setdefault(v.attr, name)
                    elif isinstance(v, ast.Call) and len(v.args) >= 2 and isinstance(v.args[1], ast.Constant) \
                            and isinstance(v.args[1].value, str):
                        alias.setdefault(v.args[1].value, name)
    # one-word config attributes (backend, policy) are too common elsewhere to stand for a flag
    for a in [a for a, f in alias.items() if a == f or a in fields or "_" not in a]:
        del alias[a]
    return fields, alias


# ---------------------------------------------------------------------------------------------- building
def version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.+-]", v))


class Builder:
    def __init__(self) -> None:
        # key -> {"flags": set, "rows": {(file, line): set(releases)}, "shown": {release: (template, anchors)},
        #         "checks": {(file, line, release): check}}
        self.entries: dict[tuple, dict] = {}
        self.stats: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        self.problems: list[str] = []
        self.helpers: dict[str, list[list[str]]] | None = None  # taken as committed when vLLM is not read again
        self.later: dict[tuple, dict] | None = None  # likewise
        self.tested: dict[str, set[str]] = defaultdict(set)  # vLLM release -> every condition its sources test

    def _entry(self, key: tuple) -> dict:
        return self.entries.setdefault(key, {"flags": set(), "rows": defaultdict(set), "shown": {}, "checks": {}})

    def add(self, pkg: str, release: str, rel: str, occ: list, flags_of=None) -> None:
        for kind, exc, level, func, parts, line, names, check in occ:
            key = (pkg, kind, exc, level, func, pattern_of(parts))
            e = self._entry(key)
            e["rows"][(rel, line)].add(release)
            # the template shown is the newest release's (placeholder names may change between releases)
            tpl = (display(parts), tuple(anchor_candidates(parts)))
            old = e["shown"].get(release)
            e["shown"][release] = tpl if old is None else min(old, tpl)
            where = (rel, line, release)
            e["checks"][where] = min(e["checks"].get(where, check), check)
            if flags_of is not None:
                e["flags"] |= flags_of(names)

    def keep(self, data: dict, only: set[str]) -> None:
        """The entries, counts and problems of the packages not in `only`, as the committed JSON `data` has them."""
        col = {name: i for i, name in enumerate(data["fields"])}
        for row in data["entries"]:
            pkg = row[col["package"]]
            if pkg in only:
                continue
            key = (pkg, row[col["kind"]], row[col["exception"]], row[col["level"]], row[col["function"]], row[col["pattern"]])
            e = self._entry(key)
            for src in row[col["sources"]]:
                f, line, rels = src[:3]
                e["rows"][(f, line)].update(rels)
                for r in rels:
                    e["checks"][(f, line, r)] = src[3] if len(src) > 3 else row[col["check"]]
            e["flags"] |= set(row[col["flags"]])
            parts = [p if p is not None else Ph("") for p in template_parts(row[col["template"]])]
            newest = max((r for src in row[col["sources"]] for r in src[2]), key=version_key)
            e["shown"][newest] = (row[col["template"]], tuple(anchor_candidates(parts)))
        for pkg, per in data["counts"]["occurrences"].items():
            if pkg not in only:
                for rel, c in per.items():
                    self.stats[pkg][rel].update(c)
        self.problems += [x for x in data.get("unparsable", []) if x.split("==", 1)[0] not in only]
        if "vllm" not in only:
            self.helpers = data.get("helpers", {})
            self.later = {}
            for row in data["entries"]:
                if row[col["package"]] == "vllm":
                    self.later[tuple(row[col[k]] for k in KEY_FIELDS)] = row[col["later"]]

    def shown(self, key: tuple) -> tuple[str, tuple[str, ...]]:
        shown = self.entries[key]["shown"]
        return shown[max(shown, key=version_key)]

    def check(self, key: tuple) -> str:
        """The entry's check: that of the statement its citation names (the newest release's, lowest line, as
        IndexedMessage.newest picks it)."""
        checks = self.entries[key]["checks"]
        return checks[max(checks, key=lambda w: (version_key(w[2]), -w[1], w[0]))]

    def sources(self, key: tuple, check: str) -> list[list]:
        """The source rows [file, line, releases] (releases oldest first), by file and line; a row whose releases'
        check is not the entry's carries it as a fourth item (a (file, line) whose releases differ in their check
        gives one row per check, ordered by their oldest release)."""
        e = self.entries[key]
        out = []
        for (f, line), rels in sorted(e["rows"].items()):
            by_check: dict[str, list[str]] = defaultdict(list)
            for r in sorted(rels, key=version_key):
                by_check[e["checks"][(f, line, r)]].append(r)
            for c, group in sorted(by_check.items(), key=lambda kv: version_key(kv[1][0])):
                out.append([f, line, group] if c == check else [f, line, group, c])
        return out


def line_variants(parts: list) -> list[list]:
    """The lines of a multi-line template that are specific on their own (vLLM's logger prints each line
    of a record as its own line); [] for a one-line template. The loader derives the same lines."""
    lines: list[list] = [[]]
    for p in parts:
        if isinstance(p, str):
            for k, piece in enumerate(p.split("\n")):
                if k:
                    lines.append([])
                if piece:
                    lines[-1].append(piece)
        else:
            lines[-1].append(p)
    if len(lines) == 1:
        return []
    return [_norm(line) for line in lines if specific_enough(line)]


def anchor_candidates(parts: list) -> list[str]:
    """Groups of anchor words, space-separated: one group per specific line of a multi-line template
    (each gets an anchor, so that any one of its lines finds the entry), else one for the whole template."""
    groups = [_anchor_words_text(v, cut_end=False) for v in line_variants(parts)]
    groups = [g for g in groups if g]
    return groups or [_anchor_words_text(parts, cut_end=False)]


def _anchor_words_text(parts: list, cut_end: bool) -> str:
    """Words usable as anchors, space-separated: bounded on both sides by non-word chars or template edges."""
    words: list[str] = []
    last = len(parts) - 1
    for idx, p in enumerate(parts):
        if not isinstance(p, str):
            continue
        for m in _WORD.finditer(p):
            left_ok = m.start() > 0 or idx == 0
            right_ok = m.end() < len(p) or (idx == last and not cut_end)
            if left_ok and right_ok and len(m.group()) >= 3 and not m.group().isdigit():
                words.append(m.group())
    return " ".join(words)


def choose_anchors(keys: list[tuple], shown: dict[tuple, tuple]) -> dict[tuple, str]:
    """Per entry (per specific line of a multi-line one) the rarest of its anchor words, then the longest,
    so that each lookup bucket stays small; space-separated."""
    df: Counter = Counter()
    for k in keys:
        df.update({w for group in shown[k][1] for w in group.split()})
    out = {}
    for k in keys:
        picked: list[str] = []
        for group in shown[k][1]:
            words = sorted(set(group.split()), key=lambda w: (df[w], -len(w), w))
            if words and words[0] not in picked:
                picked.append(words[0])
        out[k] = " ".join(picked)
    return out


def failing_condition(check: str) -> str | None:
    """The condition under which a check's statement raises or logs, as `ast.unparse` writes it: "if T" -> T,
    "if not (T)" -> not T, "assert T" -> not T; None for "" (or text that does not parse)."""
    if check.startswith("assert "):
        expr = "not (" + check[len("assert "):] + ")"
    elif check.startswith("if "):
        expr = check[len("if "):]
    else:
        return None
    try:
        return " ".join(_src(ast.parse(expr, mode="eval").body).split())
    except SyntaxError:
        return None


REWORDED_RATIO = 0.8


def later_of(rows: list[list], col: dict[str, int], tested: dict[str, set[str]]) -> dict[int, dict]:
    """`later` per vLLM row whose releases end before the newest indexed one (rows without anything to say are
    left out): what the index shows of the message after its last release L, the first that applies of
    - {"same_text": R, "exception": E}: another entry with the same literal text (same pattern) is in release R > L
      (the earliest such; E its exception, None for a log);
    - {"reworded": R, "template": T}: an entry new after L, of the same file and function as at L and of the same
      family (log / not log), is guarded by the same non-empty check in R, or by one that fails on the same condition
      (`assert T` and `if not T: raise`, see failing_condition), or (its condition rewritten too) has a template
      at least REWORDED_RATIO alike by difflib's ratio (vLLM 0.34.0 rewrote the DP config-hash check and added
      the reference engine to its message) (the earliest such; of several, the one whose template is closest to
      this one's);
    - {"check_gone": R}: R is the release after L, and no later release has a vLLM entry with the same non-empty
      check nor tests that condition anywhere in the files read (an `if`, assert or torch._check*, either way round).
    Otherwise nothing: the check was moved, or is still tested by code whose message the index does not hold."""
    order = {r: i for i, r in enumerate(VLLM_RELEASES)}
    newest = len(VLLM_RELEASES) - 1
    ci, cs, cf, ck, cx, cp, ct = (col[k] for k in ("check", "sources", "function", "kind", "exception", "pattern",
                                                  "template"))
    vrows = [i for i, r in enumerate(rows) if r[col["package"]] == "vllm"]
    rels: dict[int, set[int]] = {}
    files_at: dict[int, dict[int, set[str]]] = {}
    by_pattern: dict[str, list[int]] = defaultdict(list)
    by_place: dict[tuple[str, str], list[tuple[int, str, int]]] = defaultdict(list)
    checks_in: dict[int, set[str]] = defaultdict(set)  # release -> the checks of its entries
    conds: dict[str, str | None] = {}

    def cond_of(check: str) -> str | None:
        if check not in conds:
            conds[check] = failing_condition(check)
        return conds[check]

    for i in vrows:
        r = rows[i]
        rels[i], files_at[i] = set(), defaultdict(set)
        for src in r[cs]:
            c = src[3] if len(src) > 3 else r[ci]
            for rel in src[2]:
                k = order[rel]
                rels[i].add(k)
                files_at[i][k].add(src[0])
                by_place[(src[0], r[cf])].append((k, cond_of(c), i))
                checks_in[k].add(c)
        by_pattern[r[col["pattern"]]].append(i)
    out: dict[int, dict] = {}
    for i in vrows:
        r = rows[i]
        last = max(rels[i])
        if last == newest:
            continue
        same = [(min(k for k in rels[j] if k > last), rows[j][ck] != r[ck], rows[j][cx] or "", j)
                for j in by_pattern[r[cp]] if j != i and max(rels[j]) > last]
        if same:
            k, _kind, _exc, j = min(same)
            out[i] = {"same_text": VLLM_RELEASES[k], "exception": rows[j][cx]}
            continue
        check = r[ci]
        if not check:
            continue
        log = r[ck] == "log"
        cond = cond_of(check)
        candidates = [(k, c, j) for f in sorted(files_at[i][last]) for k, c, j in by_place[(f, r[cf])]
                      if j != i and k > last and min(rels[j]) > last and (rows[j][ck] == "log") == log]
        reworded = {(k, j) for k, c, j in candidates if c is not None and c == cond}
        if not reworded:  # the condition was rewritten too: the same words, nearly, in the same place
            reworded = {(k, j) for k, _c, j in candidates
                        if difflib.SequenceMatcher(None, r[ct], rows[j][ct]).ratio() >= REWORDED_RATIO}
        if reworded:
            # the earliest release, then the closest wording
            k, template = min((k, -difflib.SequenceMatcher(None, r[ct], rows[j][ct]).ratio(), rows[j][ct])
                              for k, j in reworded)[::2]
            out[i] = {"reworded": VLLM_RELEASES[k], "template": template}
            continue
        after = range(last + 1, newest + 1)
        if cond is not None and all(VLLM_RELEASES[k] in tested for k in after) \
                and not any(check in checks_in[k] or cond in tested[VLLM_RELEASES[k]] for k in after):
            out[i] = {"check_gone": VLLM_RELEASES[last + 1]}
    return out


HELPER_FILES = ("vllm/config/", "vllm/transformers_utils/")  # their top-level .py files
HELPER_DECORATORS = ("property", "cached_property")
MAX_HELPER_LINES = 30


def check_names(check: str) -> tuple[set[str], set[str]]:
    """(attribute names read, names called) of a check's condition: `self.uses_mrope` reads uses_mrope,
    `is_encoder_decoder(cfg)` calls is_encoder_decoder (a method call `x.f()` is neither: it names no property
    and no module-level function)."""
    expr = check[len("assert "):] if check.startswith("assert ") else check[len("if "):] if check.startswith("if ") \
        else ""
    try:
        tree = ast.parse(expr, mode="eval") if expr else None
    except SyntaxError:
        return set(), set()
    return names_read_and_called(tree)


def names_read_and_called(tree: ast.AST | None) -> tuple[set[str], set[str]]:
    read: set[str] = set()
    called: set[str] = set()
    methods: set[int] = set()
    for n in ast.walk(tree) if tree is not None else ():
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Name):
                called.add(n.func.id)
            elif isinstance(n.func, ast.Attribute):
                methods.add(id(n.func))
    for n in ast.walk(tree) if tree is not None else ():
        if isinstance(n, ast.Attribute) and id(n) not in methods:
            read.add(n.attr)
    return read, called


def helper_definitions(root: Path, release: str) -> dict[str, list[tuple[str, str, str | None, ast.AST]]]:
    """name -> [(citation, dedented source from its first decorator to its end, class or None, the def)] for the
    module-level functions (not @overload stubs) and the @property/@cached_property methods of top-level classes in
    the top-level files of HELPER_FILES."""
    import textwrap

    out: dict[str, list[tuple[str, str, str | None, ast.AST]]] = defaultdict(list)
    for d in HELPER_FILES:
        for path in sorted((root / d).glob("*.py")):
            rel = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue

            def one(node: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None) -> None:
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                src = textwrap.dedent("\n".join(lines[start - 1:node.end_lineno]))
                out[node.name].append((f"vllm=={release} {rel}:{start}-{node.end_lineno}", src, cls, node))

            def decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
                return {dotted(dec.func if isinstance(dec, ast.Call) else dec).rsplit(".", 1)[-1]
                        for dec in node.decorator_list}

            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "overload" not in decorators(node):
                    one(node, None)
                elif isinstance(node, ast.ClassDef):
                    for st in node.body:
                        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                                and decorators(st) & set(HELPER_DECORATORS):
                            one(st, node.name)
    return out


def helper_table(wheels: Path, rows: list[list], col: dict[str, int]) -> dict[str, list[list[str]]]:
    """The definitions that vLLM's checks use by name, and those they use in turn: a property for an attribute
    that a check reads (`self.uses_mrope`), a module-level function for a name it calls (`uses_mrope(cfg)`), then
    the same for the names the kept definitions read and call, until no new name comes. Each name is taken from
    the newest release that defines it; a definition longer than MAX_HELPER_LINES lines is left out (and the
    names it uses are not followed). Keys: the bare name (every kept definition of that release, in citation
    order) and "Class.name" for a property; value [[citation, source], ...]."""
    read: set[str] = set()
    called: set[str] = set()
    for r in rows:
        if r[col["package"]] == "vllm":
            for c in {r[col["check"]], *(src[3] for src in r[col["sources"]] if len(src) > 3)}:
                a, b = check_names(c)
                read |= a
                called |= b
    defs = {v: helper_definitions(release_source(wheels, v), v) for v in VLLM_RELEASES}
    out: dict[str, list[list[str]]] = {}
    done: set[tuple[str, bool]] = set()
    todo = {(n, True) for n in read} | {(n, False) for n in called}  # (name, as a property)
    while todo:
        name, prop = todo.pop()
        done.add((name, prop))
        v = next((v for v in reversed(VLLM_RELEASES)
                  if any((d[2] is not None) == prop for d in defs[v].get(name, ()))), None)
        if v is None:
            continue
        short = sorted((d for d in defs[v][name] if (d[2] is not None) == prop
                        and d[1].count("\n") < MAX_HELPER_LINES), key=lambda d: d[0])
        for cite, src, cls, node in short:
            if [cite, src] not in out.setdefault(name, []):
                out[name].append([cite, src])
            if cls is not None:
                out.setdefault(f"{cls}.{name}", []).append([cite, src])
            a, b = names_read_and_called(node)
            todo |= ({(n, True) for n in a} | {(n, False) for n in b}) - done
    return {k: sorted(v) for k, v in sorted(out.items())}


def build(wheels: Path, jobs: int, only: set[str] | None = None, kept: dict | None = None) -> dict:
    """The index from the sources under `wheels`; with `only`, just those packages are read and the others' entries,
    counts and problems are taken from `kept` (the committed JSON), the anchors chosen again over all of them."""
    b = Builder()
    pool = ProcessPoolExecutor(max_workers=jobs)

    def wanted(pkg: str) -> bool:
        return only is None or pkg in only

    def run_python(pkg: str, release: str, root: Path, files: list[str], flags_of) -> None:
        st = b.stats[pkg][release]
        st["files"] += len(files)
        conds = pkg == "vllm"
        for rel, occ, stats, problem, tested in pool.map(extract_python, [(str(root), f, conds) for f in files],
                                                         chunksize=8):
            st.update(stats)
            if problem:
                b.problems.append(f"{pkg}=={release} {problem}")
            b.add(pkg, release, rel, occ, flags_of)
            if conds:
                b.tested[release] |= tested

    for v in VLLM_RELEASES if wanted("vllm") else ():
        root = release_source(wheels, v)
        fields, alias = engine_args_fields(root / "vllm" / "engine" / "arg_utils.py")

        def flags_of(names: set[str], fields=fields, alias=alias) -> set[str]:
            out = set()
            for n in names:
                f = n if n in fields else alias.get(n)
                if f:
                    out.add("--" + f.replace("_", "-"))
            return out

        files = [f for f in py_files(root, VLLM_INCLUDE, VLLM_EXCLUDE)]
        print(f"vllm {v}: {len(files)} files", flush=True)
        run_python("vllm", v, root, files, flags_of)

    for pkg, (_dist, v, folder, inc, exc) in NEIGHBOURS.items():
        if not wanted(pkg):
            continue
        root = wheels / "other" / folder
        files = py_files(root, inc, exc)
        print(f"{pkg} {v}: {len(files)} files", flush=True)
        run_python(pkg, v, root, files, None)
        if pkg == "torch":
            st = b.stats[pkg][v]
            hdrs = sorted(p for d in TORCH_HEADER_DIRS for p in (root / d).rglob("*")
                          if p.suffix in (".h", ".hpp", ".cuh") and p.is_file())
            st["headers"] += len(hdrs)
            for h in hdrs:
                rel = h.relative_to(root).as_posix()
                if any(part in EXCLUDED_PARTS for part in rel.split("/")):
                    continue
                occ, stats = extract_cpp(h.read_text(encoding="utf-8", errors="replace"))
                st.update(stats)
                b.add(pkg, v, rel, occ)
        if pkg == "safetensors":
            st = b.stats[pkg][v]
            so = (root / SAFETENSORS_RUST_SO).read_bytes()
            sroot = wheels / "other" / f"safetensors-{v}-sdist" / f"safetensors-{v}"
            rs = sorted(p for d in ("bindings/python/src", "safetensors/src") for p in (sroot / d).rglob("*.rs"))
            for p in rs:
                occ, stats = extract_rust(p.read_text(encoding="utf-8"))
                st.update(stats)
                kept = []
                for o in occ:
                    if all(len(c) < 4 or c.encode() in so for c in o[4] if isinstance(c, str)):
                        kept.append(o)
                    else:
                        st["rust_unverified"] += 1
                        st[o[0]] -= 1
                b.add(pkg, v, p.relative_to(sroot).as_posix(), kept)
    for pkg, (_dist, v, folder, inc, exc) in ACCELERATORS.items():
        if not wanted(pkg):
            continue
        root = wheels / "other" / folder
        files = py_files(root, inc, exc)
        print(f"{pkg} {v}: {len(files)} files", flush=True)
        run_python(pkg, v, root, files, None)
        if pkg == "torch_npu":
            st = b.stats[pkg][v]
            hdrs = sorted(p for p in (root / TORCH_NPU_HEADERS).rglob("*") if p.suffix in (".h", ".hpp") and p.is_file())
            st["headers"] += len(hdrs)
            for h in hdrs:
                occ, stats = extract_cpp(h.read_text(encoding="utf-8", errors="replace"))
                st.update(stats)
                b.add(pkg, v, h.relative_to(root).as_posix(), occ)
            for code, text in acl_error_codes(root / ACL_ERROR_CODES):
                if specific_enough([text]):
                    st["error_string"] += 1
                    b.add(pkg, v, ACL_ERROR_CODES,
                          [("error_string", None, None, f"AclErrorCode({code})", [text], 0, set(), "")])
    pool.shutdown()

    for dist, v, folder, lib, func, codes, unknown in (
            (*CUDART, "cudaGetErrorString", range(0, 1100), "unrecognized error code"),
            (*NCCL, "ncclGetErrorString", range(0, 64), "unknown result code")):
        if not wanted(dist):
            continue
        st = b.stats[dist][v]
        strings = c_error_strings(wheels / "other" / folder / lib, func, codes, unknown)
        for code, text in strings:
            parts = [text]
            if not specific_enough(parts):
                st["skipped_short"] += 1
                continue
            st["error_string"] += 1
            b.add(dist, v, lib, [("error_string", None, None, f"{func}({code})", parts, 0, set(), "")])

    if kept is not None and only is not None:
        b.keep(kept, only)
    keys = list(b.entries)
    shown = {k: b.shown(k) for k in keys}
    anchors = choose_anchors(keys, shown)
    rank = {p: i for i, p in enumerate(PACKAGE_ORDER)}
    rows = []
    for k in sorted(keys, key=lambda k: (rank.get(k[0], 99), k[0], shown[k][0], k[1], k[2] or "", k[3] or "", k[4],
                                         k[5])):
        e = b.entries[k]
        check = b.check(k)
        rows.append([k[0], k[1], k[2], k[3], k[4], shown[k][0], k[5], anchors[k], b.sources(k, check),
                     sorted(e["flags"]), check, {}])
    col = {name: i for i, name in enumerate(FIELDS)}
    if b.later is not None:  # vLLM not read again: its entries' `later` as committed
        for row in rows:
            if row[0] == "vllm":
                row[col["later"]] = b.later.get(tuple(row[col[k]] for k in KEY_FIELDS), {})
    else:
        for i, later in later_of(rows, col, b.tested).items():
            rows[i][col["later"]] = later
    helpers = b.helpers if b.helpers is not None else helper_table(wheels, rows, col)

    versions = {"vllm": list(VLLM_RELEASES)}
    versions.update({pkg: [cfg[1]] for pkg, cfg in NEIGHBOURS.items()})
    versions[CUDART[0]] = [CUDART[1]]
    versions[NCCL[0]] = [NCCL[1]]
    versions.update({pkg: [cfg[1]] for pkg, cfg in ACCELERATORS.items()})
    by_pkg = Counter(r[0] for r in rows)
    by_kind = Counter(r[1] for r in rows)
    checks = Counter(r[0] for r in rows if r[col["check"]])
    later_kinds = Counter(next(iter(r[col["later"]])) for r in rows if r[col["later"]])
    stats = {pkg: {rel: dict(sorted(c.items())) for rel, c in sorted(per.items(), key=lambda x: version_key(x[0]))}
             for pkg, per in sorted(b.stats.items(), key=lambda x: rank.get(x[0], 99))}
    return {
        "schema": SCHEMA,
        "generator": "python scripts/build_message_index.py",
        "packages": versions,
        "counts": {"entries": len(rows), "by_package": dict(sorted(by_pkg.items())),
                   "by_kind": dict(sorted(by_kind.items())), "occurrences": stats,
                   "checks": dict(sorted(checks.items())), "later": dict(sorted(later_kinds.items())),
                   "helpers": len(helpers)},
        "unparsable": sorted(b.problems),
        "fields": list(FIELDS),
        "helpers": helpers,
        "entries": rows,
    }


def write(data: dict, out: Path, packed: Path) -> int:
    """The JSON source (gzip, mtime 0) and the packed file built from it; returns the JSON's size."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())
    packed.write_bytes(pack(data))
    return len(buf.getvalue())


def read(path: Path) -> dict:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="download/unpack folder (default /work/wheels)")
    ap.add_argument("--out", type=Path, default=OUTPUT, help="the JSON source (default %(default)s)")
    ap.add_argument("--packed", type=Path, default=None, help="the packed file (default: message_index.bin beside --out)")
    ap.add_argument("--pack", action="store_true", help="only pack --out into the packed file (reads no sources)")
    ap.add_argument("--keep-wheels", action="store_true", help="keep the downloaded .whl files")
    ap.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    ap.add_argument("--no-download", action="store_true", help="fail instead of downloading what is missing")
    ap.add_argument("--only", default="", metavar="PKG,...",
                    help="read only these packages (vllm, torch, ..., vllm_ascend, torch_npu); keep the others' entries "
                         "from --out as committed")
    args = ap.parse_args(argv)
    packed = args.packed or args.out.with_name(PACKED.name)
    if args.pack:
        packed.write_bytes(pack(read(args.out)))
        print(f"wrote {packed} ({packed.stat().st_size / 1e6:.2f} MB) from {args.out}")
        return 0
    only = {p.strip() for p in args.only.split(",") if p.strip()} or None
    known = {"vllm", *NEIGHBOURS, *ACCELERATORS, CUDART[0], NCCL[0]}
    if only is not None and only - known:
        ap.error(f"--only: unknown package(s) {sorted(only - known)}; known: {sorted(known)}")
    if not args.no_download:
        if only is None or only - set(ACCELERATORS):
            ensure_sources(args.wheels, args.keep_wheels)
        ensure_accelerators(args.wheels, args.keep_wheels)
    data = build(args.wheels, args.jobs, only, read(args.out) if only is not None else None)
    if args.wheels != DEFAULT_WHEELS:
        data["generator"] += " --wheels " + shlex.quote(str(args.wheels))
    size = write(data, args.out, packed)
    kinds = ("raise", "assert", "assert_bare", "log", "format", "error_string")
    skips = ("skipped_variable", "skipped_short", "skipped_no_message", "resolved_variable")
    short = {"assert_bare": "bare", "error_string": "errstr", "skipped_variable": "skip_var",
             "skipped_short": "skip_short", "skipped_no_message": "skip_nomsg", "resolved_variable": "resolved"}
    print(f"\n{'package':<21}{'release':<9}" + "".join(f"{short.get(k, k):>11}" for k in kinds + skips))
    for pkg, per in data["counts"]["occurrences"].items():
        for rel, c in per.items():
            print(f"{pkg:<21}{rel:<9}" + "".join(f"{c.get(k, 0):>11}" for k in kinds + skips))
    print(f"\nentries: {data['counts']['entries']}  by package: {data['counts']['by_package']}")
    print(f"by kind: {data['counts']['by_kind']}")
    if data["unparsable"]:
        print(f"unparsable files: {len(data['unparsable'])} (first: {data['unparsable'][0]})")
    print(f"wrote {args.out} ({size / 1e6:.2f} MB) and {packed} ({packed.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
