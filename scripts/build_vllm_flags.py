#!/usr/bin/env python3
"""Builds dsv4ctl/catalogue/vllm_flags.json.gz: the flags of `vllm serve` in the vLLM releases of
scripts/vllm_releases.txt, with their
defaults, choices and the config fields they set, and the named registries operators pass names to.

    python scripts/build_vllm_flags.py                  # downloads into /work/wheels what is missing
    python scripts/build_vllm_flags.py --wheels DIR     # another download/unpack folder

The sources are the released wheels (`pip download vllm==X --no-deps`, the helpers and the folder layout of
scripts/build_message_index.py: <wheels>/src/vllm-<v>/vllm/...). They are CUDA builds, so nothing is imported:
every file is read with `ast`.

What is read, per release
- `vllm serve`'s parser is `make_arg_parser` (vllm/entrypoints/{openai,launchers,common}/cli_args.py): its own
  add_argument calls, then `FrontendArgs.add_cli_args` (one `--<field>` per field of FrontendArgs and its
  bases, after `_customize_cli_kwargs`), then `AsyncEngineArgs.add_cli_args` and `EngineArgs.add_cli_args`
  (vllm/engine/arg_utils.py).
- Those methods are followed statement by statement: `X = get_kwargs(SomeConfig)` binds the argparse keyword
  table vLLM's `_compute_kwargs` derives from that config dataclass; `X["f"]["k"] = v`, `del X["f"]["k"]`,
  `X["f"]["choices"].remove(NAME)`, `{**X["f"], "default": None}` and explicit keywords change an entry the
  way they change vLLM's; each `add_argument("--flag", "-f", **X["field"])` is a flag that sets
  SomeConfig.field. Both branches of an `if` are taken (a flag registered only under a condition, such as
  `--model` outside `serve --help`, is still a flag of `vllm serve`).
- A field's type hint is resolved through the module's imports (type aliases such as CacheDType, nested
  Literal aliases, unions, Optional, Annotated) as `_compute_kwargs` reads it: a bool makes a
  BooleanOptionalAction (`--no-<flag>` too), a Literal makes `choices` (sorted, as literal_to_kwargs does) or,
  with `str` in the union, only a metavar (the values are listed but argparse does not enforce them); an Enum
  (AttentionBackendEnum) lists its member names, likewise not enforced by argparse.
- Defaults are kept where they are literals (constants, containers of constants, `field(default=...)`,
  `default_factory=list/dict/set`, a reference to another config's literal field, argparse.SUPPRESS).
- Registries: tool call parsers (`_TOOL_PARSERS_TO_REGISTER` in vllm/tool_parsers/__init__.py, plus
  `register_module("name")` calls), reasoning parsers (`_REASONING_PARSERS_TO_REGISTER`), attention backends
  (AttentionBackendEnum members), quantization methods (the QuantizationMethods Literal), --kv-cache-dtype
  (CacheDType) and tokenizer modes (the TokenizerMode Literal and the tokenizer registry's `_VLLM_TOKENIZERS`).

Output: gzip (mtime 0) JSON, sorted, so two runs give identical bytes. One table for all releases; every
per-release fact is a bit mask over `releases` (bit i = releases[i]): a flag's option strings, its default
and choice values, its config field and its source line each carry the mask of the releases that have them.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "dsv4ctl" / "catalogue" / "vllm_flags.json.gz"
SCHEMA = 1
sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_message_index import (DEFAULT_WHEELS, VLLM_RELEASES, pip_download, release_source,  # noqa: E402
                                 unpack_wheel)

SUPPRESS = "==SUPPRESS=="  # argparse.SUPPRESS, as the parser holds it
UNKNOWN = object()  # a default that is not a literal
_TYPE_ALIAS = getattr(ast, "TypeAlias", ())  # `type X = ...` (Python 3.12+)
FRONTEND_FILES = ("vllm/entrypoints/common/cli_args.py", "vllm/entrypoints/launchers/cli_args.py",
                  "vllm/entrypoints/openai/cli_args.py")
# registry name -> (the flag that takes its names, how to read it)
REGISTRIES = {
    "tool_call_parser": "--tool-call-parser",
    "reasoning_parser": "--reasoning-parser",
    "attention_backend": "--attention-backend",
    "quantization": "--quantization",
    "kv_cache_dtype": "--kv-cache-dtype",
    "tokenizer_mode": "--tokenizer-mode",
}


def ensure_sources(wheels: Path) -> None:
    """Each release's .py files under <wheels>/src/vllm-<v> (the layout build_message_index.py uses)."""
    for v in VLLM_RELEASES:
        dest = release_source(wheels, v)
        if (dest / "vllm" / "engine" / "arg_utils.py").exists():
            continue
        print(f"vllm {v}: downloading", flush=True)
        whl = pip_download(f"vllm=={v}", wheels / "whl")
        unpack_wheel(whl, dest, lambda n: n.endswith(".py") or n.endswith(".dist-info/METADATA"))
        whl.unlink()


# ------------------------------------------------------------------------------------------- the sources
class Source:
    """One release's unpacked tree: modules parsed on demand, names resolved through imports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trees: dict[str, ast.Module | None] = {}
        self._config_classes: dict[str, tuple[str, ast.ClassDef]] | None = None

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for rel in (base + ".py", base + "/__init__.py"):
            if (self.root / rel).is_file():
                return rel
        return None

    def tree(self, rel: str) -> ast.Module | None:
        if rel not in self.trees:
            p = self.root / rel
            try:
                self.trees[rel] = ast.parse(p.read_text(encoding="utf-8")) if p.is_file() else None
            except SyntaxError:
                self.trees[rel] = None
        return self.trees[rel]

    @staticmethod
    def module_of(rel: str) -> str:
        return rel[:-3].removesuffix("/__init__").replace("/", ".")

    def definition(self, rel: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """(file, node) of `name` as module `rel` sees it: a class, an assignment's value, or an import
        followed to its module. Falls back to a class of that name under vllm/config/."""
        tree = self.tree(rel)
        if tree is None or depth > 8:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == name and node in tree.body:
                return rel, node
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return rel, node.value
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                    and node.value is not None:
                return rel, node.value
            if isinstance(node, _TYPE_ALIAS) and node.name.id == name:
                return rel, node.value
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if (a.asname or a.name) == name:
                        target = self.module_file(node.module)
                        if target is not None:
                            found = self.definition(target, a.name, depth + 1)
                            if found is not None:
                                return found
                        sub = self.module_file(node.module + "." + a.name)
                        if sub is not None:
                            return sub, self.tree(sub)
        return self.config_class(name)

    def config_class(self, name: str) -> tuple[str, ast.ClassDef] | None:
        if self._config_classes is None:
            self._config_classes = {}
            for p in sorted((self.root / "vllm" / "config").rglob("*.py")):
                rel = p.relative_to(self.root).as_posix()
                tree = self.tree(rel)
                for node in tree.body if tree else ():
                    if isinstance(node, ast.ClassDef):
                        self._config_classes.setdefault(node.name, (rel, node))
        return self._config_classes.get(name)


def const(node: ast.AST | None):
    """A literal's value, or UNKNOWN."""
    if node is None:
        return UNKNOWN
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


# ------------------------------------------------------------------------------------------- type hints
@dataclass(frozen=True)
class Hint:
    kind: str  # bool str int float none literal enum dict list tuple set dataclass other
    values: tuple = ()  # literal values / enum member names
    inner: tuple = ()  # element hints of a collection


class Types:
    def __init__(self, src: Source) -> None:
        self.src = src

    def hints(self, rel: str, node: ast.AST | None, depth: int = 0) -> list[Hint]:
        if node is None or depth > 12:
            return [Hint("other")]
        if isinstance(node, ast.Constant):
            if node.value is None:
                return [Hint("none")]
            if isinstance(node.value, str):
                try:
                    return self.hints(rel, ast.parse(node.value, mode="eval").body, depth + 1)
                except SyntaxError:
                    return [Hint("other")]
            return [Hint("other")]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.hints(rel, node.left, depth + 1) + self.hints(rel, node.right, depth + 1)
        if isinstance(node, ast.Subscript):
            base = _dotted(node.value).rsplit(".", 1)[-1]
            args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            if base in ("Optional",):
                return self.hints(rel, args[0], depth + 1) + [Hint("none")]
            if base == "Union":
                return [h for a in args for h in self.hints(rel, a, depth + 1)]
            if base in ("Annotated", "SkipValidation", "ClassVar", "InitVar", "Final"):
                return self.hints(rel, args[0], depth + 1)
            if base == "Literal":
                return [Hint("literal", tuple(self.literal_values(rel, args, depth + 1)))]
            if base in ("list", "List", "Sequence", "tuple", "Tuple", "set", "Set", "frozenset"):
                kind = {"List": "list", "Sequence": "list", "Tuple": "tuple", "Set": "set",
                        "frozenset": "set"}.get(base, base)
                inner = [h for a in args if not (isinstance(a, ast.Constant) and a.value is Ellipsis)
                         for h in self.hints(rel, a, depth + 1)]
                return [Hint(kind, inner=tuple(inner))]
            if base in ("dict", "Dict", "Mapping"):
                return [Hint("dict")]
            return [Hint("other")]
        name = _dotted(node)
        if not name:
            return [Hint("other")]
        last = name.rsplit(".", 1)[-1]
        builtin = {"bool": "bool", "str": "str", "int": "int", "float": "float", "None": "none", "dict": "dict",
                   "list": "list", "tuple": "tuple", "set": "set", "Any": "other"}
        if last in builtin:
            return [Hint(builtin[last])]
        found = self.src.definition(rel, last)
        if found is None:
            return [Hint("other")]
        frel, fnode = found
        if isinstance(fnode, ast.ClassDef):
            bases = {_dotted(b).rsplit(".", 1)[-1] for b in fnode.bases}
            meta = {_dotted(k.value).rsplit(".", 1)[-1] for k in fnode.keywords if k.arg == "metaclass"}
            if bases & {"Enum", "StrEnum", "IntEnum"} or any(m.endswith("EnumMeta") for m in meta):
                return [Hint("enum", tuple(enum_members(fnode)))]
            if bases & {"dict", "TypedDict"}:
                return [Hint("dict")]
            if _is_dataclass(fnode):
                return [Hint("dataclass")]
            return [Hint("other")]
        if isinstance(fnode, ast.AST) and not isinstance(fnode, ast.Module):
            return self.hints(frel, fnode, depth + 1)
        return [Hint("other")]

    def literal_values(self, rel: str, args: list[ast.AST], depth: int) -> list:
        out: list = []
        for a in args:
            v = const(a)
            if v is not UNKNOWN and not isinstance(a, (ast.Name, ast.Attribute)):
                out.append(v)
                continue
            for h in self.hints(rel, a, depth + 1):
                if h.kind == "literal":
                    out.extend(h.values)
        return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any(_dotted(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1] in ("dataclass", "config")
               for d in cls.decorator_list)


def enum_members(cls: ast.ClassDef) -> list[str]:
    out = []
    for st in cls.body:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) and \
            st.value is not None else []
        for t in targets:
            if isinstance(t, ast.Name) and not t.id.startswith("_"):
                out.append(t.id)
    return out


# ------------------------------------------------------------------------------------ argparse keywords
@dataclass
class Kw:
    """One argparse keyword table entry, as vLLM's _compute_kwargs builds it for a config field."""

    origin: str | None  # "LoRAConfig.max_lora_rank"
    default: object = UNKNOWN
    choices: list | None = None  # argparse choices (enforced)
    values: list | None = None  # listed but not enforced (metavar / enum members)
    boolean: bool = False  # BooleanOptionalAction
    action: str | None = None
    flags: list[str] = field(default_factory=list)

    def copy(self) -> Kw:
        return Kw(self.origin, self.default, list(self.choices) if self.choices is not None else None,
                  list(self.values) if self.values is not None else None, self.boolean, self.action,
                  list(self.flags))


class Configs:
    """Config dataclasses: their fields' keyword entries (cached per class)."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.types = Types(src)
        self.cache: dict[tuple[str, str], dict[str, Kw]] = {}

    def fields(self, rel: str, cls_name: str) -> dict[str, Kw]:
        found = self.src.definition(rel, cls_name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return {}
        frel, cls = found
        key = (frel, cls.name)
        if key in self.cache:
            return self.cache[key]
        out: dict[str, Kw] = {}
        for b in cls.bases:  # bases first, as dataclasses.fields orders them
            bname = _dotted(b).rsplit(".", 1)[-1]
            if bname and bname not in ("object", "Generic", "BaseModel"):
                for k, v in self.fields(frel, bname).items():
                    out[k] = v.copy()
        for st in cls.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann = ast.unparse(st.annotation)
            if ann.startswith(("ClassVar", "typing.ClassVar")) or st.target.id.startswith("_"):
                continue
            out[st.target.id] = self.entry(frel, cls.name, st)
        self.cache[key] = out
        return out

    def default_of(self, rel: str, node: ast.AST | None, depth: int = 0):
        if node is None or depth > 6:
            return UNKNOWN
        if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] in ("field", "Field"):
            for k in node.keywords:
                if k.arg == "default":
                    return self.default_of(rel, k.value, depth + 1)
                if k.arg == "default_factory":
                    f = k.value
                    if isinstance(f, ast.Name) and f.id in ("list", "dict", "set", "tuple"):
                        return {"list": [], "dict": {}, "set": [], "tuple": []}[f.id]
                    if isinstance(f, ast.Lambda):
                        v = const(f.body)
                        return list(v) if isinstance(v, (set, tuple)) else v
                    return UNKNOWN
            if node.args and _dotted(node.func).endswith("Field"):
                return self.default_of(rel, node.args[0], depth + 1)
            return UNKNOWN
        v = const(node)
        if v is not UNKNOWN:
            return list(v) if isinstance(v, (set, tuple)) else v
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "argparse" and node.attr == "SUPPRESS":
                return SUPPRESS
            kws = self.fields(rel, node.value.id)
            if node.attr in kws:
                return kws[node.attr].default
        if isinstance(node, ast.Name):
            found = self.src.definition(rel, node.id)
            if found is not None and not isinstance(found[1], (ast.ClassDef, ast.Module)):
                return self.default_of(found[0], found[1], depth + 1)
        return UNKNOWN

    def entry(self, rel: str, cls_name: str, st: ast.AnnAssign) -> Kw:
        name = st.target.id
        kw = Kw(f"{cls_name}.{name}", self.default_of(rel, st.value))
        hints = self.types.hints(rel, st.annotation)
        kinds = {h.kind for h in hints}
        if "dataclass" in kinds:
            return kw
        if kinds == {"bool", "str", "none"}:
            return kw  # optional-valued: bare flag -> True, else a string
        if "bool" in kinds:
            kw.boolean = True
            return kw
        lits = [v for h in hints if h.kind == "literal" for v in h.values]
        for h in hints:  # a collection of literals gets choices too
            if h.kind in ("list", "tuple", "set"):
                lits += [v for i in h.inner if i.kind == "literal" for v in i.values]
        if lits:
            vals = sorted(set(lits), key=lambda x: (str(type(x)), x))
            if "str" in kinds:
                kw.values = vals
            else:
                kw.choices = vals
        enums = [v for h in hints if h.kind == "enum" for v in h.values]
        if enums and not lits:
            kw.values = enums
        return kw


# ------------------------------------------------------------------------------------ add_cli_args walk
@dataclass
class Flag:
    opts: list[str]
    kw: Kw
    src: str  # file:line


class Walker:
    """Follows an add_cli_args body: keyword tables bound to names, their edits, add_argument calls."""

    def __init__(self, src: Source, configs: Configs, rel: str) -> None:
        self.src, self.configs, self.rel = src, configs, rel
        self.env: dict[str, object] = {}  # name -> dict[str, Kw] (a table) or Kw (one entry)
        self.flags: list[Flag] = []

    def table(self, node: ast.AST):
        """The table/entry an expression stands for, or None."""
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] == "get_kwargs" and node.args:
            cls = node.args[0]
            name = _dotted(cls).rsplit(".", 1)[-1]
            if isinstance(cls, ast.Name) and cls.id == "cls":
                name = self.cls_name
            return {k: v.copy() for k, v in self.configs.fields(self.rel, name).items()}
        if isinstance(node, ast.Subscript):
            base = self.table(node.value)
            key = const(node.slice)
            if isinstance(base, dict) and isinstance(key, str):
                return base.get(key)
        if isinstance(node, ast.Dict):  # {**X["f"], "default": None}
            out = None
            for k, v in zip(node.keys, node.values):
                if k is None:
                    t = self.table(v)
                    if isinstance(t, Kw):
                        out = t.copy()
                elif out is not None:
                    self.set_key(out, const(k), v)
            return out
        return None

    cls_name = ""

    def set_key(self, kw: Kw, key, value: ast.AST) -> None:
        if key == "default":
            kw.default = self.configs.default_of(self.rel, value)
        elif key == "choices":
            v = self.choices_of(value)
            kw.choices, kw.values = v, None
            if v is None and isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
                # a static list plus a platform's own (["auto", "cpu"] + [current_platform.device_type]):
                # the static part is listed, not as the whole set argparse enforces
                kw.values = [x for part in (value.left, value.right) for x in (self.choices_of(part) or ())]
        elif key == "action":
            a = _dotted(value) or const(value)
            kw.action = a if isinstance(a, str) else None
            kw.boolean = isinstance(a, str) and a.endswith("BooleanOptionalAction")
        elif key == "flags":
            v = const(value)
            kw.flags = list(v) if isinstance(v, (list, tuple)) else []
        elif key == "metavar":
            pass

    def choices_of(self, node: ast.AST) -> list | None:
        v = const(node)
        if v is not UNKNOWN:
            return list(v) if isinstance(v, (list, tuple, set)) else None
        if isinstance(node, ast.Call):
            fn = _dotted(node.func).rsplit(".", 1)[-1]
            if fn in ("get_args",) and node.args:
                return self.configs.types.literal_values(self.rel, [node.args[0]], 0) or None
            if fn in ("list", "sorted", "tuple") and node.args:
                return self.choices_of(node.args[0])
        if isinstance(node, ast.Name):
            found = self.src.definition(self.rel, node.id)
            if found is not None and not isinstance(found[1], (ast.ClassDef, ast.Module)):
                v = const(found[1])
                if isinstance(v, (list, tuple, set)):
                    return list(v)
                if isinstance(found[1], ast.Call):
                    return Walker(self.src, self.configs, found[0]).choices_of(found[1])
        return None

    def run(self, body: list[ast.stmt]) -> None:
        for st in body:
            self.stmt(st)

    def stmt(self, st: ast.stmt) -> None:
        if isinstance(st, (ast.If, ast.With, ast.Try)):
            for part in ("body", "orelse", "finalbody"):
                self.run(getattr(st, part, []) or [])
            for h in getattr(st, "handlers", []) or []:
                self.run(h.body)
            return
        if isinstance(st, ast.Assign):
            for t in st.targets:
                if isinstance(t, ast.Name):
                    v = self.table(st.value)
                    if v is not None:
                        self.env[t.id] = v
                    else:
                        self.env.pop(t.id, None)
                elif isinstance(t, ast.Subscript):
                    target = self.table(t.value)
                    key = const(t.slice)
                    if isinstance(target, Kw) and isinstance(key, str):
                        self.set_key(target, key, st.value)
        elif isinstance(st, ast.Delete):
            for t in st.targets:
                if isinstance(t, ast.Subscript):
                    target = self.table(t.value)
                    key = const(t.slice)
                    if isinstance(target, Kw) and key == "choices":
                        target.choices = None
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            self.call(st.value)
        if not isinstance(st, ast.Expr):  # add_argument inside another statement (x = g.add_argument(...))
            for node in ast.walk(st):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr == "add_argument":
                    self.call(node)

    def call(self, c: ast.Call) -> None:
        if not isinstance(c.func, ast.Attribute):
            return
        if c.func.attr == "remove" and isinstance(c.func.value, ast.Subscript) and \
                const(c.func.value.slice) == "choices":
            kw = self.table(c.func.value.value)
            if isinstance(kw, Kw) and kw.choices is not None and c.args:
                v = const(c.args[0])
                if v is UNKNOWN and isinstance(c.args[0], ast.Name):
                    found = self.src.definition(self.rel, c.args[0].id)
                    v = const(found[1]) if found else UNKNOWN
                if v in kw.choices:
                    kw.choices.remove(v)
            return
        if c.func.attr != "add_argument":
            return
        opts = [const(a) for a in c.args]
        if not opts or any(not isinstance(o, str) for o in opts):
            return
        kw = None
        for k in c.keywords:
            if k.arg is None:
                t = self.table(k.value)
                if isinstance(t, Kw):
                    kw = t.copy()
        if kw is None:  # argparse's own defaults: None, False for store_true, True for store_false
            action = next((const(k.value) for k in c.keywords if k.arg == "action"), None)
            kw = Kw(None, {"store_true": False, "store_false": True}.get(action, None)
                    if not any(k.arg is None for k in c.keywords) else UNKNOWN)
        for k in c.keywords:
            if k.arg is not None:
                self.set_key(kw, k.arg, k.value)
        self.flags.append(Flag(opts, kw, f"{self.rel}:{c.lineno}"))


def function(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for st in cls.body:
        if isinstance(st, ast.FunctionDef) and st.name == name:
            return st
    return None


def class_in(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for st in tree.body:
        if isinstance(st, ast.ClassDef) and st.name == name:
            return st
    return None


def frontend_flags(src: Source, configs: Configs, rel: str, tree: ast.Module) -> list[Flag]:
    """FrontendArgs.add_cli_args: one `--<field>` per field, after `_customize_cli_kwargs` (the class's own
    and its bases', base first)."""
    fa = class_in(tree, "FrontendArgs")
    if fa is None:
        return []
    table = {k: v.copy() for k, v in configs.fields(rel, "FrontendArgs").items()}
    chain: list[ast.ClassDef] = []
    cur: ast.ClassDef | None = fa
    while cur is not None:
        chain.insert(0, cur)
        nxt = None
        for b in cur.bases:
            found = src.definition(rel, _dotted(b).rsplit(".", 1)[-1])
            if found and isinstance(found[1], ast.ClassDef):
                nxt = found[1]
        cur = nxt
    for c in chain:
        fn = function(c, "_customize_cli_kwargs")
        if fn is None:
            continue
        w = Walker(src, configs, rel)
        arg = fn.args.args[1].arg if len(fn.args.args) > 1 else "frontend_kwargs"
        w.env[arg] = table
        w.run([st for st in fn.body if not (isinstance(st, ast.Assign) and "super()" in ast.unparse(st.value))])
    lines = {}
    for c in chain:
        for st in c.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                lines[st.target.id] = st.lineno
    return [Flag([*kw.flags, "--" + k.replace("_", "-")], kw, f"{rel}:{lines.get(k, fa.lineno)}")
            for k, kw in table.items()]


def serve_flags(root: Path) -> tuple[list[Flag], dict[str, str]]:
    """Every flag `vllm serve`'s parser declares in this release, in declaration order, and
    {EngineArgs field: config field} for fields that default from a config class."""
    src = Source(root)
    configs = Configs(src)
    flags: list[Flag] = []
    front = next((f for f in FRONTEND_FILES if (root / f).is_file()), None)
    if front is None:
        raise SystemExit(f"{root}: no cli_args.py with make_arg_parser")
    ftree = src.tree(front)
    mk = next((st for st in ftree.body if isinstance(st, ast.FunctionDef) and st.name == "make_arg_parser"), None)
    if mk is not None:
        w = Walker(src, configs, front)
        w.run([st for st in mk.body if "add_cli_args" not in ast.unparse(st)])
        flags += w.flags
    flags += frontend_flags(src, configs, front, ftree)
    au = "vllm/engine/arg_utils.py"
    atree = src.tree(au)
    engine_fields: dict[str, str] = {}
    for cname in ("AsyncEngineArgs", "EngineArgs"):
        cls = class_in(atree, cname)
        fn = function(cls, "add_cli_args") if cls else None
        if fn is None:
            continue
        w = Walker(src, configs, au)
        w.cls_name = cname
        w.run(fn.body)
        flags += w.flags
    ea = class_in(atree, "EngineArgs")
    for st in ea.body if ea else ():
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            v = st.value
            if isinstance(v, ast.Call) and _dotted(v.func).endswith("field"):
                v = next((k.value for k in v.keywords if k.arg == "default"), None)
            if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and \
                    v.value.id.endswith(("Config", "Args")):
                engine_fields[st.target.id] = f"{v.value.id}.{v.attr}"
            elif isinstance(v, ast.Call) and _dotted(v.func).endswith("get_field") and len(v.args) >= 2:
                engine_fields[st.target.id] = f"{_dotted(v.args[0])}.{const(v.args[1])}"
            else:
                engine_fields.setdefault(st.target.id, f"EngineArgs.{st.target.id}")
    return flags, engine_fields


# ------------------------------------------------------------------------------------------- registries
def registries(root: Path) -> dict[str, tuple[list[str], str]]:
    """{registry: (names, file:line of the definition)} for this release."""
    src = Source(root)
    types = Types(src)
    out: dict[str, tuple[list[str], str]] = {}

    def dict_keys(rel: str, var: str) -> tuple[list[str], str] | None:
        tree = src.tree(rel)
        for st in tree.body if tree else ():
            targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) \
                else []
            if any(isinstance(t, ast.Name) and t.id == var for t in targets) and isinstance(st.value, ast.Dict):
                return [k.value for k in st.value.keys if isinstance(k, ast.Constant)], f"{rel}:{st.lineno}"
        return None

    def decorated(folder: str, manager: str) -> list[str]:
        names = []
        for p in sorted((root / folder).glob("*.py")):
            tree = src.tree(p.relative_to(root).as_posix())
            for node in ast.walk(tree) if tree else ():
                if isinstance(node, ast.Call) and _dotted(node.func) == f"{manager}.register_module":
                    arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"),
                                                              None)
                    v = const(arg)
                    names += [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] \
                        if isinstance(v, (list, tuple)) else []
        return names

    for reg, folder, var, manager in (("tool_call_parser", "vllm/tool_parsers", "_TOOL_PARSERS_TO_REGISTER",
                                       "ToolParserManager"),
                                      ("reasoning_parser", "vllm/reasoning", "_REASONING_PARSERS_TO_REGISTER",
                                       "ReasoningParserManager")):
        found = dict_keys(f"{folder}/__init__.py", var)
        if found:
            out[reg] = (sorted(set(found[0]) | set(decorated(folder, manager))), found[1])

    def literal_alias(rel: str, name: str) -> tuple[list, str] | None:
        found = src.definition(rel, name)
        if found is None:
            return None
        vals = [v for h in types.hints(found[0], found[1]) if h.kind == "literal" for v in h.values]
        tree = src.tree(found[0])
        line = next((st.lineno for st in tree.body if isinstance(st, (ast.Assign, ast.AnnAssign)) and
                     any(isinstance(t, ast.Name) and t.id == name
                         for t in (st.targets if isinstance(st, ast.Assign) else [st.target]))), 0)
        return vals, f"{found[0]}:{line}"

    reg_rel = "vllm/v1/attention/backends/registry.py"
    cls = class_in(src.tree(reg_rel), "AttentionBackendEnum") if src.tree(reg_rel) else None
    if cls is not None:
        out["attention_backend"] = (enum_members(cls), f"{reg_rel}:{cls.lineno}")
    q = literal_alias("vllm/model_executor/layers/quantization/__init__.py", "QuantizationMethods")
    if q:
        out["quantization"] = q
    c = literal_alias("vllm/config/cache.py", "CacheDType")
    if c:
        out["kv_cache_dtype"] = c
    t = literal_alias("vllm/config/model.py", "TokenizerMode")
    if t:
        extra = dict_keys("vllm/tokenizers/registry.py", "_VLLM_TOKENIZERS")
        out["tokenizer_mode"] = (sorted(set(t[0]) | set(extra[0] if extra else ())), t[1])
    return out


# --------------------------------------------------------------------------------------------- the table
def build(wheels: Path) -> dict:
    releases = list(VLLM_RELEASES)
    # flag (first long option) -> attribute -> value -> mask
    table: dict[str, dict] = {}
    regs: dict[str, dict] = {}

    def add(d: dict, key, bit: int) -> None:
        k = json.dumps(key, sort_keys=True)
        d[k] = d.get(k, 0) | bit

    counts = {}
    for i, v in enumerate(releases):
        bit = 1 << i
        root = release_source(wheels, v)
        flags, engine_fields = serve_flags(root)
        reg = registries(root)
        counts[v] = {"flags": len(flags), **{k: len(x[0]) for k, x in reg.items()}}
        for name, (vals, where) in reg.items():
            r = regs.setdefault(name, {"flag": REGISTRIES[name], "values": {}, "src": {}})
            for val in vals:
                r["values"][val] = r["values"].get(val, 0) | bit
            add(r["src"], where, bit)
        seen: set[str] = set()
        for f in flags:
            longs = [o for o in f.opts if o.startswith("--")]
            if not longs:
                continue
            key = longs[0]
            if key in seen:
                continue  # argparse would refuse a second registration: the first one is the flag
            seen.add(key)
            e = table.setdefault(key, {"mask": 0, "opts": {}, "default": {}, "choices": {}, "values": {},
                                       "field": {}, "src": {}, "kind": {}})
            e["mask"] |= bit
            opts = list(f.opts)
            if f.kw.boolean:
                opts += ["--no-" + o[2:] for o in f.opts if o.startswith("--")]
            for o in opts:
                if o != key:
                    e["opts"][o] = e["opts"].get(o, 0) | bit
            if f.kw.default is not UNKNOWN:
                add(e["default"], f.kw.default, bit)
            for c in f.kw.choices or ():
                if c is not None:
                    add(e["choices"], c, bit)
            for c in f.kw.values or ():
                if c is not None:
                    add(e["values"], c, bit)
            dest = key[2:].replace("-", "_")
            origin = f.kw.origin or engine_fields.get(dest)
            if origin:
                add(e["field"], origin, bit)
            add(e["src"], f.src, bit)
            kind = "bool" if f.kw.boolean else (f.kw.action or "store")
            add(e["kind"], kind.rsplit(".", 1)[-1], bit)
        for name, r in regs.items():
            e = table.get(r["flag"])
            if e is not None and not e["choices"]:
                for val, m in r["values"].items():
                    if m & bit:
                        add(e["values"], val, bit)

    def pairs(d: dict) -> list:
        return sorted(([json.loads(k), m] for k, m in d.items()), key=lambda p: (json.dumps(p[0]), p[1]))

    flags_out = {}
    for key in sorted(table):
        e = table[key]
        row = {"mask": e["mask"]}
        for attr in ("opts", "default", "choices", "values", "field", "src", "kind"):
            if attr == "opts":
                if e["opts"]:
                    row["opts"] = dict(sorted(e["opts"].items()))
            elif e[attr]:
                row[attr] = pairs(e[attr])
        flags_out[key] = row
    regs_out = {name: {"flag": r["flag"], "values": dict(sorted(r["values"].items())),
                       "src": pairs(r["src"])} for name, r in sorted(regs.items())}
    return {"schema": SCHEMA, "generator": "python scripts/build_vllm_flags.py", "releases": releases,
            "counts": counts, "flags": flags_out, "registries": regs_out}


def write(data: dict, out: Path) -> int:
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())
    return len(buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="download/unpack folder (default /work/wheels)")
    ap.add_argument("--out", type=Path, default=OUTPUT)
    ap.add_argument("--no-download", action="store_true", help="fail instead of downloading what is missing")
    args = ap.parse_args(argv)
    if not args.no_download:
        ensure_sources(args.wheels)
    data = build(args.wheels)
    if args.wheels != DEFAULT_WHEELS:
        data["generator"] += f" --wheels {args.wheels}"
    size = write(data, args.out)
    for v, c in data["counts"].items():
        print(f"vllm {v}: " + ", ".join(f"{k} {n}" for k, n in c.items()))
    print(f"flags: {len(data['flags'])}; wrote {args.out} ({size / 1e3:.1f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
