"""What changed between two vLLM releases in what dsv4ctl keys on, read from their unpacked `vllm/` trees.

Pure: every function here takes the roots of two trees (the folders holding `vllm/`) and returns plain data;
nothing is downloaded, imported from vLLM or written. scripts/add_release.py drives it and renders the result.
Sources are read with `ast` only (the wheels are CUDA builds; nothing of them is imported).

Sections (each a function returning a dict that is part of the `--json` report):
- `functions`: the vLLM functions the planner mirror (dsv4ctl/planning/mirror/) and the runtime fixes
  (dsv4ctl/fixes/) key on, compared by AST (`ast.dump` of the def without its docstring): same / changed /
  gone / new, with file:line in both trees.
- `messages`: the error-level templates scripts/build_message_index.py extracts (its own `extract_python`
  over its `VLLM_INCLUDE`): new, gone, reworded (a gone and a new template of the same file and function
  guarded by the same condition), counts.
- `flags`: `vllm serve`'s flags (scripts/build_vllm_flags.py `serve_flags`): added, removed, default changed.
- `env`: vllm/envs.py's `environment_variables` table: added, removed, default changed (the lambda's body),
  with the variables dsv4ctl names called out.
- `metrics`: the names dsv4ctl/check/metrics.py reads, present or gone in vllm/v1/metrics/loggers.py.
- `log_lines`: for each regex of the startup timeline (dsv4ctl/logs/timeline.py `_RE`), the format string
  in the release that it matches (`find_log_line`), or none.
- `fixes`: each fix's targets found and compared, with the source facts a person judges the need from.
- `startup_plan`: `PLAN_SCHEMA_VERSION` of vllm/v1/worker/startup_plan.py.
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from re import _parser as sre_parse  # noqa: E402 - the regex parser `re` compiles with (3.11+)

from build_message_index import (VLLM_EXCLUDE, VLLM_INCLUDE, display, extract_python, parts_of,  # noqa: E402
                                 percent_format, py_files)

SCHEMA_VERSION = 1


# ------------------------------------------------------------------------------------------ the trees
class Tree:
    """One release's unpacked sources (`root/vllm/...`): file texts and parsed modules, read on demand."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._files: list[str] | None = None
        self._texts: dict[str, str] = {}
        self._trees: dict[str, ast.Module | None] = {}

    def files(self) -> list[str]:
        if self._files is None:
            self._files = sorted(p.relative_to(self.root).as_posix() for p in (self.root / "vllm").rglob("*.py"))
        return self._files

    def text(self, rel: str) -> str:
        if rel not in self._texts:
            p = self.root / rel
            try:
                self._texts[rel] = p.read_text(encoding="utf-8-sig") if p.is_file() else ""
            except (OSError, UnicodeDecodeError):
                self._texts[rel] = ""
        return self._texts[rel]

    def module(self, rel: str) -> ast.Module | None:
        if rel not in self._trees:
            try:
                self._trees[rel] = ast.parse(self.text(rel)) if self.text(rel) else None
            except (SyntaxError, ValueError):
                self._trees[rel] = None
        return self._trees[rel]


def module_file(module: str) -> str:
    """`vllm.a.b` -> `vllm/a/b.py`."""
    return module.replace(".", "/") + ".py"


# ------------------------------------------------------------------------------------------ functions
@dataclass(frozen=True)
class Target:
    """A vLLM function (or class attribute) dsv4ctl keys on: its qualified name, where to look first
    (a file or folder prefix; the whole tree when not there: code moves between files), and who keys on it."""

    qualname: str
    where: str
    user: str


# The planner mirror's counterparts (dsv4ctl/planning/mirror/kv_planner.py, kv_specs.py, layers.py name
# them in their docstrings and comments) and the functions on DeepSeek-V4's planning path around them.
MIRROR_TARGETS = tuple(Target(q, w, "planning/mirror") for q, w in (
    ("get_kv_cache_groups", "vllm/v1/core/"),
    ("_get_packed_kv_cache_groups", "vllm/v1/core/"),
    ("_approximate_gcd", "vllm/v1/core/"),
    ("_get_kv_cache_bytes_per_block", "vllm/v1/core/"),
    ("_max_memory_usage_bytes_from_groups", "vllm/v1/core/"),
    ("_estimate_max_model_len_from_groups", "vllm/v1/core/"),
    ("_project_kv_cache_groups_to_worker", "vllm/v1/core/"),
    ("_pool_bytes_per_block_from_builder", "vllm/v1/core/"),
    ("get_kv_cache_config_from_groups", "vllm/v1/core/"),
    ("get_kv_cache_configs", "vllm/v1/core/"),
    ("get_global_kv_cache_groups", "vllm/v1/core/"),
    ("_check_enough_kv_cache_memory", "vllm/v1/core/"),
    ("_auto_fit_max_model_len", "vllm/v1/core/"),
    ("VllmConfig.max_concurrent_batches", "vllm/config/vllm.py"),
    ("get_pp_indices", "vllm/distributed/utils.py"),
    ("DeepseekV4Attention.get_kv_cache_spec", "vllm/models/deepseek_v4/"),
    ("DeepseekV4IndexerCache.get_kv_cache_spec", "vllm/models/deepseek_v4/"),
    ("CompressorStateCache.get_kv_cache_spec", "vllm/models/deepseek_v4/"),
    ("DeepseekV4SWACache.get_kv_cache_spec", "vllm/v1/attention/backends/mla/sparse_swa.py"),
    ("DeepseekV4IndexerBackend.get_supported_kernel_block_sizes", "vllm/v1/attention/backends/mla/indexer.py"),
    ("_resolve_dsv4_kv_cache_dtype", "vllm/models/deepseek_v4/"),
    ("_select_dsv4_attn_cls", "vllm/models/deepseek_v4/nvidia/"),
    ("UniformTypeKVCacheSpecs.max_memory_usage_bytes", "vllm/v1/kv_cache_interface.py"),
    ("UniformTypeKVCacheSpecs.page_size_bytes", "vllm/v1/kv_cache_interface.py"),
    ("SlidingWindowSpec.max_memory_usage_bytes", "vllm/v1/kv_cache_interface.py"),
))


def fix_targets() -> tuple[Target, ...]:
    """What dsv4ctl/fixes/ wraps or reads, from the fix modules' own constants."""
    from dsv4ctl.fixes import deepgemm_metadata_clamp as dg
    from dsv4ctl.fixes import flashmla_empty_prefill_chunk as fm
    from dsv4ctl.fixes import stale_max_model_len as st

    return (
        Target(f"{st.RUNNER_CLASS}.{st.METHOD}", module_file(st.RUNNER_MODULE), st.NAME),
        Target(f"{st.MODEL_STATE_CLASS}.max_model_len", module_file(st.MODEL_STATE_MODULE), st.NAME),
        Target(dg.FUNCTION, "vllm/utils/deep_gemm.py", dg.NAME),
        Target(f"{fm.ATTENTION_CLASS}.{fm.METHOD}", module_file(fm.ATTENTION_MODULE), fm.NAME),
        Target(f"{fm.METADATA_CLASS}.{fm.PLAN_METHOD}", module_file(fm.PLAN_MODULE), fm.NAME),
    )


@dataclass(frozen=True)
class Def:
    qualname: str
    file: str
    line: int
    dump: str
    node: ast.AST


def _body_dump(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The def's AST without its docstring, positions or type comments: what it computes."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    clone = ast.FunctionDef(name=node.name, args=node.args, body=body, decorator_list=node.decorator_list,
                            returns=node.returns, type_comment=None, type_params=[])
    return ast.dump(clone, include_attributes=False)


def defs_in(module: ast.Module, rel: str) -> list[Def]:
    """Every function of a module with its dotted qualified name (Class.method, outer.inner)."""
    out: list[Def] = []

    def walk(nodes: list[ast.stmt], prefix: str) -> None:
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = prefix + n.name
                out.append(Def(q, rel, n.lineno, _body_dump(n), n))
                walk(n.body, q + ".")
            elif isinstance(n, ast.ClassDef):
                walk(n.body, prefix + n.name + ".")
            elif isinstance(n, (ast.If, ast.Try)):
                walk(n.body, prefix)
                walk(getattr(n, "orelse", []), prefix)
    walk(module.body, "")
    return out


def find_def(tree: Tree, target: Target) -> Def | None:
    """The target's def: under `target.where` first, else anywhere in the tree when exactly one file has it."""
    name = target.qualname.rsplit(".", 1)[-1]
    needle = f"def {name}("

    def search(files: list[str]) -> list[Def]:
        found = []
        for rel in files:
            if needle not in tree.text(rel):
                continue
            mod = tree.module(rel)
            if mod is None:
                continue
            found += [d for d in defs_in(mod, rel) if d.qualname == target.qualname]
        return found

    here = search([f for f in tree.files() if f.startswith(target.where)])
    if not here:
        here = search(tree.files())
        if len({d.file for d in here}) != 1:
            return None
    return min(here, key=lambda d: (d.file, d.line))


def compare_functions(old: Tree, new: Tree, targets: tuple[Target, ...]) -> list[dict]:
    """Per target: `same` (identical AST), `changed`, `gone` (in the old release only), `new` (in the new only)
    or `absent` (in neither), with file:line in both."""
    rows = []
    for t in targets:
        a, b = find_def(old, t), find_def(new, t)
        if a and b:
            status = "same" if a.dump == b.dump else "changed"
        elif a:
            status = "gone"
        elif b:
            status = "new"
        else:
            status = "absent"
        rows.append({"function": t.qualname, "user": t.user, "status": status,
                     "old": f"{a.file}:{a.line}" if a else None, "new": f"{b.file}:{b.line}" if b else None})
    return rows


# ------------------------------------------------------------------------------------------- messages
def message_templates(tree: Tree) -> dict[tuple, tuple[str, int, str, str]]:
    """{(kind, exception, level, template): (file, line, check, function)} of every error-level message
    build_message_index.py extracts from the files it reads (the first file and line when several hold it)."""
    out: dict[tuple, tuple[str, int, str, str]] = {}
    for rel in py_files(tree.root, VLLM_INCLUDE, VLLM_EXCLUDE):
        _, occ, _stats, _problem, _tested = extract_python((str(tree.root), rel, True))
        for kind, exc, level, function, parts, line, _names, check in occ:
            key = (kind, exc or "", level or "", display(parts))
            if key not in out or (rel, line) < out[key][:2]:
                out[key] = (rel, line, check or "", function or "")
    return out


def compare_messages(old_t: dict, new_t: dict) -> dict:
    """New, gone, reworded and moved templates. A message is its text and kind wherever it now is (the file,
    function or line it moved to aside); reworded: a gone and a new one of the same kind and function guarded by
    the same condition (the closest text when several)."""
    gone_keys = old_t.keys() - new_t.keys()
    new_keys = new_t.keys() - old_t.keys()
    by_place: dict[tuple, list[tuple]] = {}
    for k in sorted(new_keys):
        by_place.setdefault((k[0], new_t[k][3], new_t[k][2]), []).append(k)
    reworded, matched_old, matched_new = [], set(), set()
    for k in sorted(gone_keys):
        check = old_t[k][2]
        cands = [c for c in by_place.get((k[0], old_t[k][3], check), []) if c not in matched_new] if check else []
        if not cands:
            continue
        best = max(cands, key=lambda c: difflib.SequenceMatcher(None, k[3], c[3]).ratio())
        matched_old.add(k)
        matched_new.add(best)
        reworded.append({"old": k[3], "new": best[3], "old_at": "%s:%d" % old_t[k][:2],
                         "new_at": "%s:%d" % new_t[best][:2], "check": check})
    gone = [{"template": k[3], "kind": k[0], "at": "%s:%d" % old_t[k][:2]}
            for k in sorted(gone_keys, key=lambda k: old_t[k][:2]) if k not in matched_old]
    new = [{"template": k[3], "kind": k[0], "at": "%s:%d" % new_t[k][:2]}
           for k in sorted(new_keys, key=lambda k: new_t[k][:2]) if k not in matched_new]
    common = old_t.keys() & new_t.keys()
    moved = sum(1 for k in common if old_t[k][:2] != new_t[k][:2])
    return {"counts": {"old": len(old_t), "new": len(new_t), "added": len(new), "gone": len(gone),
                       "reworded": len(reworded), "common": len(common), "moved": moved},
            "added": new, "gone": gone, "reworded": reworded}


# ---------------------------------------------------------------------------------------------- flags
def serve_flag_table(root: Path) -> dict[str, dict]:
    """{first long option: {"default": repr or None when not a literal, "src": file:line, "opts": [...]}}."""
    from build_vllm_flags import UNKNOWN, serve_flags

    flags, _fields = serve_flags(Path(root))
    out: dict[str, dict] = {}
    for f in flags:
        longs = [o for o in f.opts if o.startswith("--")]
        if not longs or longs[0] in out:
            continue
        default = None if f.kw.default is UNKNOWN else repr(f.kw.default)
        out[longs[0]] = {"default": default, "src": f.src, "opts": list(f.opts)}
    return out


def compare_flags(old: dict[str, dict], new: dict[str, dict]) -> dict:
    added = sorted(new.keys() - old.keys())
    removed = sorted(old.keys() - new.keys())
    changed = [{"flag": k, "old": old[k]["default"], "new": new[k]["default"], "old_at": old[k]["src"],
                "new_at": new[k]["src"]} for k in sorted(old.keys() & new.keys())
               if old[k]["default"] != new[k]["default"]]
    return {"counts": {"old": len(old), "new": len(new), "added": len(added), "removed": len(removed),
                       "default_changed": len(changed)},
            "added": [{"flag": k, "default": new[k]["default"], "at": new[k]["src"]} for k in added],
            "removed": [{"flag": k, "default": old[k]["default"], "at": old[k]["src"]} for k in removed],
            "default_changed": changed}


# ------------------------------------------------------------------------------------------------ env
ENV_FILE = "vllm/envs.py"


def env_table(tree: Tree) -> dict[str, dict]:
    """{name: {"default": the literal os.getenv/environ.get default (source text) or None, "body": the
    lambda's source, "line": N}} from `environment_variables` in vllm/envs.py."""
    mod = tree.module(ENV_FILE)
    out: dict[str, dict] = {}
    if mod is None:
        return out
    for node in mod.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if not (isinstance(target, ast.Name) and target.id == "environment_variables"
                and isinstance(node.value, ast.Dict)):
            continue
        for k, v in zip(node.value.keys, node.value.values):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                continue
            body = v.body if isinstance(v, ast.Lambda) else v
            out[k.value] = {"default": _env_default(body, k.value), "body": ast.unparse(body), "line": k.lineno}
    return out


def _env_default(body: ast.AST, name: str) -> str | None:
    for n in ast.walk(body):
        if isinstance(n, ast.Call) and len(n.args) >= 2 and isinstance(n.args[0], ast.Constant) \
                and n.args[0].value == name and ast.unparse(n.func) in ("os.getenv", "os.environ.get", "getenv"):
            return ast.unparse(n.args[1])
    return None


def compare_env(old: dict[str, dict], new: dict[str, dict], watched: tuple[str, ...] = ()) -> dict:
    added = sorted(new.keys() - old.keys())
    removed = sorted(old.keys() - new.keys())
    changed = [{"name": k, "old": old[k]["default"], "new": new[k]["default"], "old_body": old[k]["body"],
                "new_body": new[k]["body"], "old_at": f"{ENV_FILE}:{old[k]['line']}",
                "new_at": f"{ENV_FILE}:{new[k]['line']}"}
               for k in sorted(old.keys() & new.keys()) if old[k]["body"] != new[k]["body"]]
    watch = []
    for k in watched:
        a, b = old.get(k), new.get(k)
        status = ("gone" if a and not b else "new" if b and not a else "absent" if not a else
                  "same" if a["body"] == b["body"] else "changed")
        watch.append({"name": k, "status": status, "old": a["default"] if a else None,
                      "new": b["default"] if b else None,
                      "old_at": f"{ENV_FILE}:{a['line']}" if a else None,
                      "new_at": f"{ENV_FILE}:{b['line']}" if b else None})
    return {"counts": {"old": len(old), "new": len(new), "added": len(added), "removed": len(removed),
                       "changed": len(changed)},
            "added": [{"name": k, "default": new[k]["default"], "at": f"{ENV_FILE}:{new[k]['line']}"} for k in added],
            "removed": [{"name": k, "default": old[k]["default"], "at": f"{ENV_FILE}:{old[k]['line']}"}
                        for k in removed],
            "changed": changed, "watched": watch}


# -------------------------------------------------------------------------------------------- metrics
METRICS_FILE = "vllm/v1/metrics/loggers.py"
_EXPOSITION_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def metric_sites(tree: Tree, names: tuple[str, ...]) -> dict[str, str | None]:
    """Where each metric name is defined (file:line of the string constant), looking in loggers.py first and
    then anywhere in vllm/; a name read with an exposition suffix (`_total`, `_count`) is looked up without
    it too. None: not found."""
    wanted = {}
    for n in names:
        bases = [n] + [n[: -len(s)] for s in _EXPOSITION_SUFFIXES if n.endswith(s)]
        wanted[n] = bases
    out: dict[str, str | None] = {n: None for n in names}
    files = [METRICS_FILE] + [f for f in tree.files() if f != METRICS_FILE]
    for rel in files:
        if all(out.values()):
            break
        text = tree.text(rel)
        if "vllm:" not in text and not any(b in text for bs in wanted.values() for b in bs):
            continue
        mod = tree.module(rel)
        if mod is None:
            continue
        consts = [(n.value, n.lineno) for n in ast.walk(mod) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for name, bases in wanted.items():
            if out[name]:
                continue
            for base in bases:
                hit = min((ln for v, ln in consts if v == base), default=None)
                if hit is not None:
                    out[name] = f"{rel}:{hit}"
                    break
    return out


def compare_metrics(old: dict[str, str | None], new: dict[str, str | None]) -> list[dict]:
    return [{"name": n, "status": ("same" if old[n] == new[n] else "moved") if old[n] and new[n] else
             "gone" if old[n] else "new" if new[n] else "absent", "old": old[n], "new": new[n]} for n in old]


# ------------------------------------------------------------------------------------------ log lines
_LOG_CALLS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "info_once",
              "warning_once", "debug_once", "error_once", "log"}
_HOLE = "\x00"
END = "\x00$"  # a branch's last run when the regex is anchored at the line end


def regex_branches(pattern: str) -> list[tuple[bool, list[str]]]:
    """Each alternative of a regex (also one inside a group) as (anchored at the line start, its runs of literal text in order):
    what a format string holds for the regex to match a line it prints. Anything not a literal (classes,
    repeats, groups) ends a run; a branch whose last literal ends the line (`...down$`) gets END as its last run."""
    out = []
    for br in _alternatives(list(sre_parse.parse(pattern))):
        anchored = bool(br) and br[0][0] is sre_parse.AT and br[0][1] is sre_parse.AT_BEGINNING
        runs: list[str] = []
        cur = ""
        for op, av in br:
            if op is sre_parse.LITERAL:
                cur += chr(av)
            else:
                if cur.strip():
                    runs.append(cur)
                cur = ""
        if cur.strip():
            runs.append(cur)
        if runs and len(br) > 1 and br[-1][0] is sre_parse.AT and br[-1][1] is sre_parse.AT_END \
                and br[-2][0] is sre_parse.LITERAL:  # the line ends right after a literal
            runs.append(END)
        out.append((anchored, runs))
    return out


def _alternatives(items: list, limit: int = 64) -> list[list]:
    """The regex's items as plain sequences: every alternative (`a|b`, also inside a group) a sequence of its
    own, groups (always present) inlined."""
    seqs: list[list] = [[]]
    for op, av in items:
        if op is sre_parse.BRANCH:
            alts = [a for b in av[1] for a in _alternatives(list(b), limit)]
        elif op is sre_parse.SUBPATTERN:
            alts = _alternatives(list(av[3]), limit)
        else:
            alts = [[(op, av)]]
        seqs = [s + a for s in seqs for a in alts][:limit]
    return seqs


def match_runs(text: str, runs: list[str], anchored: bool = False) -> tuple[bool, int] | None:
    """How a template holds a branch's runs: None when it does not hold the first one (at its start when
    anchored); else (all held in order, how many characters of them). A template that stops holding them may still print the
    line when what follows the last run held is a placeholder or nothing (tqdm's counters, a path): accepted,
    ranked lower; literal text there is not (another message that starts alike)."""
    if not runs or (anchored and not text.startswith(runs[0]) and not text.startswith(_HOLE)):
        return None
    i = text.find(runs[0])
    if i < 0:
        return None
    pos, held = i + len(runs[0]), len(runs[0])
    for r in runs[1:]:
        if r is END:  # the line ends here: nothing but a placeholder may follow
            return (True, held) if text[pos:] in ("", _HOLE) else None
        j = text.find(r, pos)
        if j < 0:
            return (False, held) if text[pos:pos + 1] in ("", _HOLE) else None
        pos, held = j + len(r), held + len(r)
    return True, held


_FORMAT_SPEC = re.compile(r"%[-#0 +]*(?:[0-9]+|\*)?(?:\.[0-9]+)?[sdifgeExXr]|\{[0-9]*(?::[^{}]*)?\}")
_PLATFORM_FILE = re.compile(r"(?:^|/|_)(?:cpu|xpu|tpu|rocm|amd|hpu|neuron|standalone)(?:/|_|\.)")
_OTHER_MODEL_FILE = re.compile(r"^vllm/(?:model_executor/)?models/(?!deepseek_v4/)")


def string_templates(tree: Tree, files: list[str] | None = None) -> list[tuple[int, str, str, str, int]]:
    """(rank, text as printed with its placeholders as holes, the format string as written, file, line) of every string expression of the tree but docstrings: rank 0 a logger
    call's message (line: the call's, as vLLM prints [file.py:N]), 1 any other string (a tqdm desc, a
    constant); +2 in a file of another platform than CUDA (cpu_worker.py, xpu/...) or of another model than
    DeepSeek-V4."""
    out = []
    for rel in files if files is not None else tree.files():
        mod = tree.module(rel)
        if mod is None:
            continue
        other = 2 if _PLATFORM_FILE.search(rel) or _OTHER_MODEL_FILE.search(rel) else 0
        skip: set[int] = set()
        for n in ast.walk(mod):
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body \
                    and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant):
                skip.add(id(n.body[0].value))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _LOG_CALLS and n.args:
                at = 1 if n.func.attr == "log" and len(n.args) > 1 else 0
                parts = parts_of(n.args[at])
                if parts:
                    args = [ast.unparse(a) for a in n.args[at + 1:]]
                    printed = percent_format(parts, args) if args else parts
                    out.append((0 + other, _hole_text(printed), display(parts), rel, n.lineno))
                    skip.update(id(x) for x in ast.walk(n.args[at]))
        for n in ast.walk(mod):
            if id(n) in skip or not isinstance(n, (ast.Constant, ast.JoinedStr)):
                continue
            if isinstance(n, ast.Constant) and not isinstance(n.value, str):
                continue
            if isinstance(n, ast.JoinedStr):
                skip.update(id(v) for v in n.values)
            parts = parts_of(n)
            if parts:  # a format string used later (joined, %-formatted elsewhere): its specs are holes
                out.append((1 + other, _FORMAT_SPEC.sub(_HOLE, _hole_text(parts)), display(parts), rel, n.lineno))
    return out


def _hole_text(parts: list) -> str:
    return "".join(p if isinstance(p, str) else _HOLE for p in parts)


def find_log_line(templates: list[tuple[int, str, str, str, int]], pattern: str) -> dict | None:
    """The format string the regex matches: {"text": the format string as the source writes it (a logger's
    %-style string; an f-string's {expr}), "where": file:line}. Best first: every literal of the regex held, then more of them, a logger call's message
    before another string, CUDA's files before other platforms', then file and line. None: the release
    prints no such line (as far as its string literals show)."""
    best = None
    for anchored, runs in regex_branches(pattern):
        if not runs:
            continue
        first = runs[0]
        for rank, text, written, rel, line in templates:
            if first not in text:
                continue
            m = match_runs(text, runs, anchored)
            if m is None:
                continue
            key = (not m[0], -m[1], len(text) - m[1], rank, rel, line)
            if best is None or key < best[0]:
                best = (key, written)
    if best is None:
        return None
    key, written = best
    return {"text": written, "where": f"{key[4]}:{key[5]}"}


def _needle(runs: list[str]) -> tuple[str, ...]:
    """Words a file must hold to print a line of this branch: the first literal's, or every literal's when the
    first has no word of 5 characters (`- "` alone is in most files)."""
    words = runs[0].split() or [runs[0]]
    if max(len(w) for w in words) < 5:
        words = [w for r in runs if r is not END for w in r.split()] or words
    return tuple(words)


def log_lines(tree: Tree, regexes: dict[str, str]) -> dict[str, dict | None]:
    """For each timeline key, the release's format string its regex matches, or None."""
    # a file worth parsing holds every word of a branch's first literal (a literal may be split over several
    # source lines by implicit concatenation, so the words are looked for one by one)
    needles = {_needle(runs) for p in regexes.values() for _a, runs in regex_branches(p) if runs}
    files = [f for f in tree.files() if any(all(w in tree.text(f) for w in ws) for ws in needles)]
    templates = string_templates(tree, files)
    return {key: find_log_line(templates, pattern) for key, pattern in regexes.items()}


def compare_log_lines(old: dict[str, dict | None], new: dict[str, dict | None]) -> list[dict]:
    rows = []
    for key in old:
        a, b = old[key], new.get(key)
        status = ("same" if a["text"] == b["text"] else "reworded") if a and b else \
            "gone" if a else "new" if b else "absent"
        rows.append({"key": key, "status": status, "old": a, "new": b})
    return rows


# ------------------------------------------------------------------------------------------ the fixes
def fix_facts(tree: Tree) -> dict:
    """Source facts the fixes' need is judged from, read without importing vLLM."""
    from dsv4ctl.fixes import deepgemm_metadata_clamp as dg
    from dsv4ctl.fixes import flashmla_empty_prefill_chunk as fm

    facts: dict = {}
    d = find_def(tree, Target(f"{fm.ATTENTION_CLASS}.{fm.METHOD}", module_file(fm.ATTENTION_MODULE), fm.NAME))
    facts[fm.NAME] = {"guarded": fm.guards_empty_range_tree(d.node) if d else None}
    idx = tree.module(module_file(dg.INDEXER_MODULE))
    imports = calls = None
    if idx is not None:
        imports = any(isinstance(n, ast.ImportFrom) and any(a.name == dg.FUNCTION for a in n.names)
                      for n in ast.walk(idx))
        calls = sorted(n.lineno for n in ast.walk(idx) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Name) and n.func.id == dg.FUNCTION)
    dd = find_def(tree, Target(dg.FUNCTION, "vllm/utils/deep_gemm.py", dg.NAME))
    params = [a.arg for a in dd.node.args.args] if dd else None
    facts[dg.NAME] = {"imported_by_name": imports, "call_lines": calls, "params": params,
                      "signature_ok": (params[:3] == dg.EXPECTED_LEADING_PARAMS
                                       and all(p == "indices" for p in params[3:])) if params else None}
    return facts


# -------------------------------------------------------------------------------------- startup plans
def startup_plan_schema(tree: Tree) -> dict | None:
    rel = "vllm/v1/worker/startup_plan.py"
    mod = tree.module(rel)
    if mod is None:
        return None
    for n in mod.body:
        t = n.targets[0] if isinstance(n, ast.Assign) and len(n.targets) == 1 else getattr(n, "target", None)
        if isinstance(t, ast.Name) and t.id == "PLAN_SCHEMA_VERSION" and isinstance(n.value, ast.Constant):
            return {"schema": n.value.value, "at": f"{rel}:{n.lineno}"}
    return None


__all__ = ["SCHEMA_VERSION", "Target", "Tree", "compare_env", "compare_flags", "compare_functions",
           "compare_log_lines", "compare_messages", "compare_metrics", "env_table", "find_def", "find_log_line",
           "fix_facts", "fix_targets", "log_lines", "message_templates", "metric_sites",
           "match_runs", "regex_branches", "serve_flag_table", "startup_plan_schema", "string_templates"]
