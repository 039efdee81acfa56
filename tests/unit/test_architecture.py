"""The shape of the code (docs/architecture.md): one direction of flow, no import circle, no room that hides
a program. Read from the sources' own imports and definitions, so the test fails the day the shape does."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dsv4ctl"

# What each part may import (besides itself). Lower parts never import higher ones.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": {"errors"},
    "files": {"errors"},
    "cache_dir": {"errors", "files"},
    "re_cache": {"cache_dir"},
    "hs_cache": {"cache_dir"},
    "stamps": set(),
    "catalogue": {"errors", "units", "re_cache", "hs_cache"},
    "logs": {"errors", "units", "files", "catalogue", "cache_dir", "re_cache", "hs_cache", "stamps"},
    "diagnosis": {"errors", "units", "catalogue", "logs", "re_cache"},
    "host": {"errors"},
    "gpu": {"errors", "units", "files", "host"},
    "planning": {"errors", "units", "files", "cache_dir", "logs", "gpu", "host"},
    "advice": {"errors", "units", "catalogue", "logs", "diagnosis", "planning"},
    "probe": {"errors", "files"},
    "fixes": {"probe", "errors", "files"},
    "redaction": set(),
    "doctor": {"root", "errors", "fixes", "gpu", "host", "probe", "planning", "redaction"},
    "collect": {"errors", "units", "files", "redaction", "stamps"},
    "group": {"errors", "units", "files", "stamps", "catalogue", "logs", "diagnosis", "advice", "collect"},
    "check": {"errors", "units", "stamps", "logs", "advice", "redaction"},
    "health": {"check"},
    "compare": {"errors", "re_cache", "stamps", "logs", "diagnosis", "advice"},
    "serve": {"errors", "units", "files", "catalogue", "logs", "planning", "advice", "fixes", "gpu", "host", "check", "cache_dir", "compare",
              "health"},
    "upgrade": {"errors", "catalogue", "planning", "fixes", "gpu"},
    "render": {"units", "catalogue", "logs", "diagnosis", "planning", "gpu", "host", "probe", "doctor", "serve", "check", "group", "compare",
               "upgrade"},
    "commands": {"root", "errors", "units", "files", "logs", "planning", "advice", "gpu", "host", "fixes", "probe", "doctor", "serve", "render",
                 "check", "collect", "group", "compare", "upgrade"},
    "cli": {"root", "errors", "render", "commands"},
    "__main__": {"cli", "errors", "diagnosis", "logs", "group", "render", "commands"},
    "root": set(),
}
# planning takes a log's figures as data: of logs/, only these modules.
PLANNING_READS_FROM_LOGS = {"dsv4ctl.logs.facts", "dsv4ctl.logs.deployment"}
# planning's rooms and what each may import besides itself: what a checkpoint is, vLLM's planner mirrored per
# release, the plan dsv4ctl makes. planning/__init__.py is the face above them: the only planning module the rest
# of dsv4ctl imports, and one no room imports.
PLANNING_ROOMS: dict[str, set[str]] = {
    "checkpoint": {"errors", "units", "files", "cache_dir"},
    "mirror": {"errors", "units", "checkpoint"},
    "plan": {"errors", "units", "files", "logs", "gpu", "host", "checkpoint", "mirror"},
}
PLANNING_TOP_MAX = 8  # modules and rooms side by side at planning/'s top
# Outside planning/, imports of a planning module other than the face, each with its reason (none today).
PLANNING_BEHIND_THE_FACE: dict[str, str] = {}
# Lazy imports that still close a circle: a package named here may load its own modules inside a function while
# they import it. Each with its reason; the test fails once the circle is gone, so the entry goes with it.
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


def _module_graph() -> dict[str, set[str]]:
    """Every import between dsv4ctl modules, those inside functions included (a lazy import closes a circle as
    surely, only later)."""
    modules = _modules()
    return {module: {t for t in _imports(path) if t in modules and t != module} for module, path in modules.items()}


def test_modules_import_without_a_circle():
    """No circle between modules anywhere in dsv4ctl/, lazy imports and TYPE_CHECKING blocks included."""
    _assert_no_circle(_module_graph())


def _importtime(argv: tuple[str, ...]) -> tuple[list[tuple[str, str]], set[str]]:
    """Run `python -X importtime -m dsv4ctl *argv`: (loader, loaded) pairs of dsv4ctl modules as its tree shows
    them (a module's children print before it, one level deeper), and every dsv4ctl module it loaded."""
    env = dict(os.environ, NO_COLOR="1", DSV4CTL_DEBUG="")
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "dsv4ctl", *argv], capture_output=True, text=True,
                         env=env, timeout=120, cwd=PACKAGE.parent)
    modules, pairs, waiting = _modules(), [], {}
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        name = line.split("|")[2]
        depth, name = (len(name) - len(name.lstrip())) // 2, name.strip()
        pairs += [(name, child) for child in waiting.pop(depth + 1, [])]
        waiting.setdefault(depth, []).append(name)
    loaded = {n for d in waiting.values() for n in d} | {c for _, c in pairs}
    return [(a, b) for a, b in pairs if a in modules and b in modules], loaded & modules.keys()


@pytest.mark.parametrize("argv", [
    ("--help",),
    ("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "-tp", "8", "--kv-cache-memory", "40GiB", "--json"),
    ("diagnose", "--example", "stale-max-model-len", "--json"),
])
def test_what_a_command_loads_follows_the_graph(argv):
    """The graph read from the sources is the one Python runs: each module a command's run loads under another is
    one that module imports (or the package of one, which loads first); --help loads only the top level's."""
    graph = _module_graph()

    def packages(name: str) -> set[str]:
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

    pairs, loaded = _importtime(argv)
    assert "dsv4ctl.cli" in loaded, "the command did not run"
    unread = [f"{a} loaded {b}" for a, b in pairs
              if b not in graph[a] and b not in packages(a) and not any(b in packages(t) for t in graph[a])]
    assert not unread, "\n".join(unread)
    if argv == ("--help",):
        top, todo = set(), ["dsv4ctl.__main__", "dsv4ctl.cli"]  # __main__ loads the CLI in its `main`
        while todo:
            module = todo.pop()
            if module not in top:
                top.add(module)
                todo += [t for t in _imports(_modules()[module], top_level_only=True) if t in graph]
        top |= {p for module in top for p in packages(module) if p in graph}  # a module's package loads first
        assert loaded == top - {"dsv4ctl.__main__"}  # __main__ runs as the script, not as an import


def _planning_room(module: str) -> str:
    """`checkpoint`, `mirror` or `plan` for a module in one of planning's rooms; `face` for planning/__init__.py."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "face"


def test_planning_rooms_import_only_the_rooms_below_them():
    rooms = [p.name for p in (PACKAGE / "planning").iterdir() if (p / "__init__.py").is_file()]
    assert sorted(rooms) == sorted(PLANNING_ROOMS), "each room of planning/ has its entry in PLANNING_ROOMS"
    wrong = []
    for module, path in _modules().items():
        if _part(module) != "planning" or (room := _planning_room(module)) == "face":
            continue
        for target in _imports(path):
            other = _planning_room(target) if _part(target) == "planning" else _part(target)
            if other != room and other not in PLANNING_ROOMS[room]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_planning_rooms_form_no_circle():
    _assert_no_circle({room: below & PLANNING_ROOMS.keys() for room, below in PLANNING_ROOMS.items()})


def test_the_rest_of_dsv4ctl_imports_planning_through_its_face():
    behind = sorted(f"{module} imports {target}" for module, path in _modules().items() if _part(module) != "planning"
                    for target in _imports(path) if target.startswith("dsv4ctl.planning.") and module not in PLANNING_BEHIND_THE_FACE)
    assert not behind, "\n".join(behind) + "\n(import it from dsv4ctl.planning, or say why in PLANNING_BEHIND_THE_FACE)"


def test_planning_has_few_modules_at_its_top():
    top = [p.name for p in (PACKAGE / "planning").iterdir()
           if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()]
    assert len(top) <= PLANNING_TOP_MAX, f"planning/ holds {sorted(top)}: put each module in its room"


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


def test_the_exit_code_tables_are_the_enums():
    """README.md and docs/exit-codes.md carry `ExitCode`'s table as scripts/write_exit_codes.py writes it; `--help`
    prints it wrapped to 80 columns."""
    import runpy

    script = runpy.run_path(str(PACKAGE.parent / "scripts" / "write_exit_codes.py"))
    for path in script["FILES"]:
        text = path.read_text(encoding="utf-8")
        assert script["rendered"](text) == text, f"{path}: run scripts/write_exit_codes.py"
    from dsv4ctl.errors import ExitCode, exit_code_table

    table = exit_code_table()
    assert all(len(line) <= 76 for line in table.splitlines())
    assert [line.split()[0] for line in table.splitlines() if not line.startswith("     ")] == [str(int(c)) for c in ExitCode]
