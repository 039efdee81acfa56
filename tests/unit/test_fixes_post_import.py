"""The fixes' post-import hook on fake modules written to a tmp dir (no vLLM needed), and the plugin's
deferral through it: a fix runs once, right after its target's body, and never breaks the import."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import logging
import sys
import textwrap
from types import SimpleNamespace

import pytest

import dsv4ctl.fixes as fixes
from dsv4ctl.fixes import post_import
from dsv4ctl.fixes.post_import import PostImportFinder

BODY = """
import sys
STEPS = ["body start"]
SEEN_IN_SYS_MODULES = __name__ in sys.modules
STEPS.append("body end")
"""


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Write modules under a fresh name prefix into a directory on sys.path; forget them afterwards."""
    prefix = f"dsv4ctl_fake_{tmp_path.name.replace('-', '_')}"
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(name: str, body: str = BODY) -> str:
        full = f"{prefix}_{name}"
        parts = full.split(".")
        folder = tmp_path.joinpath(*parts[:-1])
        folder.mkdir(parents=True, exist_ok=True)
        for depth in range(1, len(parts)):
            init = tmp_path.joinpath(*parts[:depth], "__init__.py")
            if not init.exists():
                init.write_text("")
        (folder / f"{parts[-1]}.py").write_text(textwrap.dedent(body))
        importlib.invalidate_caches()
        written.append(full)
        return full

    yield write
    for name in list(sys.modules):
        if name.startswith(prefix):
            del sys.modules[name]


@pytest.fixture
def finder():
    hook = PostImportFinder()
    yield hook
    while hook in sys.meta_path:
        sys.meta_path.remove(hook)


def test_callback_runs_once_after_the_body_then_the_finder_leaves(modules, finder):
    name = modules("target")
    calls = []

    def callback(module):
        calls.append((list(module.STEPS), sys.modules.get(name) is module))
        module.STEPS.append("fixed")

    finder.watch(name, "fix", callback)
    assert sys.meta_path[0] is finder
    module = importlib.import_module(name)
    assert calls == [(["body start", "body end"], True)]
    assert module.STEPS == ["body start", "body end", "fixed"]
    assert finder not in sys.meta_path and finder.pending() == {}
    # The module is an ordinary one: its own loader class, no leftover wrapper, reloadable.
    assert type(module.__loader__) is importlib.machinery.SourceFileLoader
    assert "exec_module" not in vars(module.__loader__)
    importlib.import_module(name)
    reloaded = importlib.reload(module)
    assert reloaded.STEPS == ["body start", "body end"]
    assert len(calls) == 1


def test_import_error_propagates_unchanged_and_the_fix_waits(modules, finder, tmp_path):
    name = modules("broken", "raise ValueError('the body failed on purpose')\n")
    calls = []
    finder.watch(name, "fix", calls.append)
    with pytest.raises(ValueError, match="the body failed on purpose") as info:
        importlib.import_module(name)
    assert type(info.value) is ValueError
    assert calls == [] and name not in sys.modules
    assert finder in sys.meta_path  # still waiting
    # Once the module imports cleanly, the fix runs.
    path = tmp_path / f"{name}.py"
    path.write_text(BODY)
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    module = importlib.import_module(name)
    assert calls == [module] and finder not in sys.meta_path


def test_missing_module_is_left_to_the_normal_machinery(finder):
    finder.watch("dsv4ctl_no_such_module_anywhere", "fix", lambda m: None)
    with pytest.raises(ModuleNotFoundError, match="dsv4ctl_no_such_module_anywhere"):
        importlib.import_module("dsv4ctl_no_such_module_anywhere")
    assert finder in sys.meta_path


def test_other_modules_are_not_touched(modules, finder):
    target = modules("watched")
    other = modules("other")
    finder.watch(target, "fix", lambda m: None)
    assert finder.find_spec(other, None) is None
    module = importlib.import_module(other)
    assert type(module.__loader__) is importlib.machinery.SourceFileLoader
    assert "exec_module" not in vars(module.__loader__)
    assert finder in sys.meta_path and set(finder.pending()) == {target}


def test_reentrant_import_of_another_watched_module_and_a_package_submodule(modules, finder):
    inner = modules("pkg.inner")
    outer = modules("outer")
    order = []

    def on_outer(module):
        order.append("outer")
        importlib.import_module(inner)  # imports a watched module from inside a callback

    finder.watch(outer, "fix", on_outer)
    finder.watch(inner, "fix", lambda m: order.append("inner"))
    importlib.import_module(outer)
    assert order == ["outer", "inner"]
    assert finder not in sys.meta_path


class SharedLoader:
    """One loader instance for several in-memory modules (as a zipimporter is for its archive)."""

    SOURCES = {
        "dsv4ctl_shared_outer": "import dsv4ctl_shared_inner\nSTEPS = ['outer body', dsv4ctl_shared_inner.NAME]\n",
        "dsv4ctl_shared_inner": "NAME = 'inner body'\n",
    }

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.SOURCES:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(self.SOURCES[module.__name__], module.__dict__)


def test_a_loader_shared_with_other_modules_fires_only_for_the_target(finder):
    shared = SharedLoader()
    sys.meta_path.append(shared)
    calls = []
    try:
        finder.watch("dsv4ctl_shared_outer", "fix", lambda m: calls.append((m.__name__, list(m.STEPS))))
        importlib.import_module("dsv4ctl_shared_outer")  # its body imports a sibling through the same loader
        assert calls == [("dsv4ctl_shared_outer", ["outer body", "inner body"])]
        assert "exec_module" not in vars(shared) and finder not in sys.meta_path
    finally:
        sys.meta_path.remove(shared)
        for name in SharedLoader.SOURCES:
            sys.modules.pop(name, None)


def test_a_failing_callback_does_not_break_the_import(modules, finder):
    name = modules("target")
    ran = []

    def boom(module):
        raise RuntimeError("fix exploded")

    finder.watch(name, "a", boom)
    finder.watch(name, "b", ran.append)
    module = importlib.import_module(name)
    assert module.STEPS == ["body start", "body end"] and ran == [module]


def test_already_imported_applies_immediately_and_installs_no_finder(modules, monkeypatch):
    # The process-wide finder may be waiting for another target already (a test before this one registered the real
    # fixes, whose V4.1 module is not imported here): this test starts without it and gets it back after.
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is not post_import.finder()])
    name = modules("target")
    module = importlib.import_module(name)
    calls = []
    assert post_import.when_imported(name, "fix", calls.append) is True
    assert calls == [module]
    assert post_import.finder() not in sys.meta_path


# -- the plugin's deferral, through the hook, with fake fixes on fake targets ---------------------


@pytest.fixture
def plugin(modules, monkeypatch, tmp_path):
    """The plugin reduced to two fixes pointed at fake target modules and fake check/install (the
    hook's behaviour does not depend on how many fixes there are)."""
    targets = {fixes.STALE_MAX_MODEL_LEN: modules("runner"), fixes.DEEPGEMM_METADATA_CLAMP: modules("indexer")}
    installs: list[tuple[str, list[str]]] = []
    behaviour = {"install_raises": False}

    def fake_fix(name):
        def check():
            module = sys.modules.get(targets[name])
            if module is None:
                return fixes.FixCheck(name, False, None, "target not imported")
            return fixes.FixCheck(name, True, True, "fake target needs it")

        def install():
            if behaviour["install_raises"]:
                raise RuntimeError("install exploded")
            installs.append((name, list(sys.modules[targets[name]].STEPS)))
            return f"wrapped fake {name}"

        return SimpleNamespace(check=check, install=install)

    monkeypatch.setattr(fixes, "FIX_NAMES", tuple(targets))
    fake_modules = {name: fake_fix(name) for name in fixes.FIX_NAMES}
    hook = PostImportFinder()
    monkeypatch.setattr(fixes, "TARGET_MODULES", targets)
    monkeypatch.setattr(fixes, "_fix_module", fake_modules.__getitem__)
    monkeypatch.setattr(fixes, "_STATE", fixes._ProcessState())
    monkeypatch.setattr(fixes, "_vllm_logger", lambda: logging.getLogger(fixes.LOGGER_NAME))
    monkeypatch.setattr(post_import, "_FINDER", hook)
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(fixes.REPORT_ENV, str(report))
    monkeypatch.setenv(fixes.FIXES_ENV, "all")
    yield SimpleNamespace(targets=targets, installs=installs, behaviour=behaviour, report=report, hook=hook)
    while hook in sys.meta_path:
        sys.meta_path.remove(hook)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


class Records(logging.Handler):
    """Attached to the plugin's logger directly (vLLM's logging config may stop propagation)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def logged():
    logger = logging.getLogger(fixes.LOGGER_NAME)
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler.records
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_register_defers_then_the_import_applies_and_reports(plugin, logged):
    fixes.register()
    statuses = {n: o.status for n, o in fixes.outcomes().items()}
    assert statuses == {n: fixes.DEFERRED for n in fixes.FIX_NAMES}
    assert plugin.installs == [] and set(plugin.hook.pending()) == set(plugin.targets.values())
    fixes.register()  # again: same state, nothing new
    assert len(_lines(plugin.report)) == 1

    importlib.import_module(plugin.targets[fixes.STALE_MAX_MODEL_LEN])
    assert plugin.installs == [(fixes.STALE_MAX_MODEL_LEN, ["body start", "body end"])]
    assert fixes.outcomes()[fixes.STALE_MAX_MODEL_LEN].status == fixes.APPLIED
    assert fixes.outcomes()[fixes.DEEPGEMM_METADATA_CLAMP].status == fixes.DEFERRED
    importlib.import_module(plugin.targets[fixes.DEEPGEMM_METADATA_CLAMP])
    assert {n: o.status for n, o in fixes.outcomes().items()} == {n: fixes.APPLIED for n in fixes.FIX_NAMES}
    assert plugin.hook not in sys.meta_path
    fixes.register()  # after landing: targets imported, already applied, nothing new
    lines = _lines(plugin.report)
    assert [line["event"] for line in lines] == ["register", "import", "import"]
    assert len({(line["pid"], line["ppid"], line["process"], line["argv0"]) for line in lines}) == 1
    assert lines[0]["module"] is None
    assert lines[0]["fixes"][fixes.STALE_MAX_MODEL_LEN]["status"] == "deferred"
    assert "applies when " + plugin.targets[fixes.STALE_MAX_MODEL_LEN] in lines[0]["fixes"][fixes.STALE_MAX_MODEL_LEN]["reason"]
    assert lines[1]["module"] == plugin.targets[fixes.STALE_MAX_MODEL_LEN]
    assert {n: v["status"] for n, v in lines[1]["fixes"].items()} == {
        fixes.STALE_MAX_MODEL_LEN: "applied", fixes.DEEPGEMM_METADATA_CLAMP: "deferred"}
    assert {v["status"] for v in lines[2]["fixes"].values()} == {"applied"}
    info = [r.getMessage() for r in logged if r.levelno == logging.INFO]
    assert len(info) == 3 and all(m.startswith("dsv4ctl fixes: ") for m in info)
    assert info[1].endswith("on import of " + plugin.targets[fixes.STALE_MAX_MODEL_LEN])
    assert "stale-max-model-len applied (wrapped fake stale-max-model-len" in info[1]


def test_a_failing_fix_in_the_hook_is_skipped_and_the_import_succeeds(plugin, logged):
    fixes.register()
    plugin.behaviour["install_raises"] = True
    module = importlib.import_module(plugin.targets[fixes.STALE_MAX_MODEL_LEN])
    assert module.STEPS == ["body start", "body end"]
    outcome = fixes.outcomes()[fixes.STALE_MAX_MODEL_LEN]
    assert outcome.status == fixes.SKIPPED and "install exploded" in outcome.reason
    warnings = [r.getMessage() for r in logged if r.levelno == logging.WARNING]
    assert any("stale-max-model-len skipped" in w and "install exploded" in w for w in warnings)
    assert _lines(plugin.report)[-1]["fixes"][fixes.STALE_MAX_MODEL_LEN]["status"] == "skipped"


def test_target_already_imported_applies_at_registration(plugin):
    importlib.import_module(plugin.targets[fixes.STALE_MAX_MODEL_LEN])
    fixes.register()
    assert fixes.outcomes()[fixes.STALE_MAX_MODEL_LEN].status == fixes.APPLIED
    assert set(plugin.hook.pending()) == {plugin.targets[fixes.DEEPGEMM_METADATA_CLAMP]}
    (line,) = _lines(plugin.report)
    assert line["event"] == "register" and line["fixes"][fixes.STALE_MAX_MODEL_LEN]["status"] == "applied"


def test_register_with_nothing_requested_installs_no_hook(plugin, monkeypatch):
    monkeypatch.setenv(fixes.FIXES_ENV, "none")
    fixes.register()
    assert plugin.hook not in sys.meta_path
    (line,) = _lines(plugin.report)
    assert line["event"] == "register" and {v["status"] for v in line["fixes"].values()} == {"not-requested"}


def test_clamp_decided_from_the_headers_without_its_target(monkeypatch):
    """Under `all` the clamp's need comes from DeepGEMM's headers (files), not from the indexer."""
    from dsv4ctl.fixes import deepgemm_metadata_clamp as clamp

    monkeypatch.setattr(clamp, "need_without_target", lambda: (False, "headers have the guard"))
    early = fixes._precheck(fixes.DEEPGEMM_METADATA_CLAMP, fixes.parse_selection("all"))
    assert early == fixes.FixOutcome(fixes.DEEPGEMM_METADATA_CLAMP, fixes.NOT_NEEDED, "headers have the guard")
    assert fixes._precheck(fixes.DEEPGEMM_METADATA_CLAMP, fixes.parse_selection("deepgemm-metadata-clamp")) is None
    monkeypatch.setattr(clamp, "need_without_target", lambda: (True, "no guard"))
    assert fixes._precheck(fixes.DEEPGEMM_METADATA_CLAMP, fixes.parse_selection("all")) is None
    assert fixes._precheck(fixes.STALE_MAX_MODEL_LEN, fixes.parse_selection("all")) is None
