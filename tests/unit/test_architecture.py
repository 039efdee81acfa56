"""The shape of the code (docs/architecture.md): one direction of flow, no import circle, no room that hides
a program. Read from the sources' own imports and definitions, so the test fails the day the shape does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dsv4ctl"

# What each part may import (besides itself). Lower parts never import higher ones.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": {"errors"},
    "catalogue": {"errors", "units"},
    "logs": {"errors", "units", "catalogue"},
    "diagnosis": {"errors", "units", "catalogue", "logs"},
    "gpu": {"errors", "units"},
    "planning": {"errors", "units", "logs", "gpu"},
    "advice": {"errors", "units", "catalogue", "logs", "diagnosis", "planning"},
    "probe": {"errors"},
    "fixes": {"probe"},
    "doctor": {"root", "errors", "fixes", "gpu", "probe", "planning"},
    "check": {"errors", "units", "logs", "advice"},
    "serve": {"errors", "units", "logs", "planning", "advice", "fixes", "gpu", "check"},
    "render": {"units", "catalogue", "logs", "diagnosis", "planning", "gpu", "probe", "doctor", "serve", "check"},
    "cli": {"root", "errors", "units", "logs", "planning", "advice", "gpu", "fixes", "probe", "doctor", "serve", "render", "check"},
    "__main__": {"cli"},
    "root": set(),
}
# planning takes a log's figures as data: of logs/, only these modules.
PLANNING_READS_FROM_LOGS = {"dsv4ctl.logs.facts", "dsv4ctl.logs.deployment"}
MAX_MODULE_LINES = 500
MAX_BODY_LINES = 80
REASON = "Kept whole"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _part(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__version__":
        return "root"
    return parts[1]


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """The dsv4ctl modules `path` imports (with `top_level_only`, those a module's import runs: not the ones
    inside a function, which load when it is called)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = list(ast.walk(tree))
    if top_level_only:
        nodes = []
        stack = list(tree.body)
        while stack:
            node = stack.pop()
            nodes.append(node)
            if isinstance(node, (ast.If, ast.Try)):
                stack.extend(node.body + node.orelse + getattr(node, "finalbody", []) +
                             [h for handler in getattr(node, "handlers", []) for h in handler.body])
    out: set[str] = set()
    known = _modules()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dsv4ctl"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("dsv4ctl"))
    return out


def test_each_part_imports_only_the_parts_below_it():
    wrong = []
    for module, path in _modules().items():
        part = _part(module)
        assert part in ALLOWED, f"{module}: part {part!r} has no place in ALLOWED (docs/architecture.md)"
        for target in _imports(path):
            other = _part(target)
            if other != part and other not in ALLOWED[part]:
                wrong.append(f"{module} imports {target}")
            if part == "planning" and other == "logs" and target not in PLANNING_READS_FROM_LOGS:
                wrong.append(f"{module} imports {target}: planning takes a log's figures as data (logs.facts)")
    assert not wrong, "\n".join(wrong)


def _assert_no_circle(graph: dict[str, set[str]]) -> None:
    """Depth-first over `graph`; a node met again while still open closes a circle (shown as a path)."""
    state: dict[str, str] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", " -> ".join((*path, node))
        state[node] = "open"
        for below in graph[node]:
            visit(below, (*path, node))
        state[node] = "done"

    for node in graph:
        visit(node, ())


def test_the_parts_form_no_circle():
    # The allowed directions themselves are acyclic, so no code that obeys them can close a circle.
    _assert_no_circle(ALLOWED)


def test_modules_import_without_a_circle():
    """The imports a module's loading runs (top level, TYPE_CHECKING blocks included) form no circle."""
    modules = _modules()
    _assert_no_circle({m: {t for t in _imports(p, top_level_only=True) if t in modules and t != m} for m, p in modules.items()})


def test_the_reading_layer_knows_nothing_of_what_it_means():
    for module, path in _modules().items():
        if _part(module) == "logs":
            above = {t for t in _imports(path) if _part(t) in ("diagnosis", "advice", "planning", "render", "serve", "cli")}
            assert not above, f"{module} imports {sorted(above)}"


@pytest.mark.parametrize("module", sorted(_modules()))
def test_no_module_over_500_lines_without_its_reason(module):
    path = _modules()[module]
    source = path.read_text(encoding="utf-8")
    lines = source.count("\n")
    if lines > MAX_MODULE_LINES:
        doc = ast.get_docstring(ast.parse(source)) or ""
        assert REASON in doc, f"{path}: {lines} lines; split it, or say why at its top ({REASON}: …)"


def test_no_function_body_over_80_lines_without_its_reason():
    long = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node) or ""
            body = node.body[1:] if doc and len(node.body) > 1 else node.body
            size = node.end_lineno - body[0].lineno + 1
            if size > MAX_BODY_LINES and REASON not in doc:
                long.append(f"{path.name}:{node.lineno} {node.name}: {size} lines")
    assert not long, "\n".join(long)
