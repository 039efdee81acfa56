"""dsv4ctl's runtime fixes for vLLM, loaded by vLLM itself as a `vllm.general_plugins` plugin.

vLLM calls `register()` (entry point `dsv4ctl`) once in every one of its processes: the API server,
the model-registry subprocess, EngineCore and each worker. So this module must be cheap to import
(standard library only), idempotent, and must never break a startup: every surprise turns into a
skipped fix and a warning.

The fixes are lazy: a fix whose target module is not imported yet in this process is `deferred`;
a post-import hook (`dsv4ctl.fixes.post_import`) checks and applies it right after vLLM itself
imports the target (in the process that builds the model runner). So the processes that never
import it (the API server, EngineCore in multiprocess mode) pay nothing for it.

Whatever is chosen, `register()` first registers Python's faulthandler on SIGUSR2 (`stacks.py`): each vLLM
process writes its stacks on that signal, for `serve --watchdog` and `check --dump`.

Which fixes run is chosen by `DSV4CTL_FIXES`:
- unset, empty or `none`: nothing is touched (one DEBUG line);
- `all`: every fix whose check says this installation needs it;
- a comma list of fix names: those fixes, installed even where the check says they are not needed
  (as long as their target exists).

Each process logs one INFO line starting with `dsv4ctl fixes:` through vLLM's logger at registration,
and one more when deferred fixes land; when `DSV4CTL_FIXES_REPORT` names a file, each of these
events appends one JSON line (`"event": "register"` / `"import"`; see docs/fixes.md).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from dataclasses import dataclass, field

from dsv4ctl.fixes.base import (  # noqa: F401 - the registry's face re-exports what the fix modules share
    FIXES_ENV,
    REPORT_ENV,
    LOGGER_NAME,
    LOG_PREFIX,
    STALE_MAX_MODEL_LEN,
    DEEPGEMM_METADATA_CLAMP,
    FLASHMLA_EMPTY_PREFILL_CHUNK,
    FIX_NAMES,
    TARGET_MODULES,
    MARKER,
    APPLIED,
    NOT_NEEDED,
    SKIPPED,
    NOT_REQUESTED,
    DEFERRED,
    NOT_APPLICABLE,
    REPORTS_NOT_APPLICABLE,
    EVENT_REGISTER,
    EVENT_IMPORT,
    FixCheck,
    is_wrapper,
    mark_wrapper,
    unwrap,
)

@dataclass(frozen=True)
class FixSelection:
    """What `DSV4CTL_FIXES` asks for. `mode` is `none`, `all` or `named`."""

    mode: str
    names: tuple[str, ...]
    unknown: tuple[str, ...] = ()
    raw: str | None = None

    def requested(self, name: str) -> bool:
        return self.mode == "all" or name in self.names

    def forced(self, name: str) -> bool:
        """Named explicitly: install even where the check says it is not needed."""
        return self.mode == "named" and name in self.names


def parse_selection(value: str | None) -> FixSelection:
    """Parse a `DSV4CTL_FIXES` value. Pure; unknown names are kept aside, not fatal."""
    if value is None or value.strip().lower() in ("", "none", "0", "off"):
        return FixSelection("none", (), (), value)
    items = [item.strip().lower() for item in value.split(",") if item.strip()]
    if "all" in items:
        unknown = tuple(i for i in items if i != "all" and i not in FIX_NAMES)
        return FixSelection("all", FIX_NAMES, unknown, value)
    names = tuple(dict.fromkeys(i for i in items if i in FIX_NAMES))
    unknown = tuple(i for i in items if i not in FIX_NAMES and i != "none")
    if not names:
        return FixSelection("none", (), unknown, value)
    return FixSelection("named", names, unknown, value)


@dataclass(frozen=True)
class FixOutcome:
    """What `register()` did with one fix in this process."""

    name: str
    status: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


@dataclass
class _ProcessState:
    outcomes: dict[str, FixOutcome] = field(default_factory=dict)
    pid: int = 0  # register() in a forked child starts over (it inherited its parent's state)
    selection: FixSelection | None = None
    deferred: dict[str, tuple[str, ...]] = field(default_factory=dict)  # target module -> fix names


_STATE = _ProcessState()




def _fix_module(name: str):
    # Imported lazily: each module imports vLLM pieces only inside its functions.
    if name == STALE_MAX_MODEL_LEN:
        from dsv4ctl.fixes import stale_max_model_len as module
    elif name == DEEPGEMM_METADATA_CLAMP:
        from dsv4ctl.fixes import deepgemm_metadata_clamp as module
    elif name == FLASHMLA_EMPTY_PREFILL_CHUNK:
        from dsv4ctl.fixes import flashmla_empty_prefill_chunk as module
    else:  # pragma: no cover - FIX_NAMES is closed
        raise KeyError(name)
    return module


def check(name: str) -> FixCheck:
    """Compute one fix's need and applicability from the installed vLLM, applying nothing.

    Imports the vLLM modules the fix targets (so vLLM must be importable); never raises."""
    try:
        return _fix_module(name).check()
    except Exception as exc:  # noqa: BLE001 - a check must never raise
        return FixCheck(name, False, None, f"check failed: {type(exc).__name__}: {exc}")


def status() -> dict[str, FixCheck]:
    """`check()` for every fix (used by `dsv4ctl doctor`)."""
    return {name: check(name) for name in FIX_NAMES}


def outcomes() -> dict[str, FixOutcome]:
    """What the plugin did in this process, latest state (empty before `register()` ran): a
    `deferred` fix turns into its final status once its target module is imported."""
    return dict(_STATE.outcomes)


def plan(selection: FixSelection, result: FixCheck) -> FixOutcome:
    """What `register()` would do with a fix, given the selection and the fix's check. Pure.

    Requested and applicable: applied when needed, when named explicitly, or when the check could
    not tell (every fix is harmless where not needed); otherwise not needed. Not applicable: skipped,
    or `not-applicable` for the fixes of one model's code path (`REPORTS_NOT_APPLICABLE`)."""
    name = result.name
    if not selection.requested(name):
        return FixOutcome(name, NOT_REQUESTED, f"not in {FIXES_ENV}")
    if not result.applicable:
        return FixOutcome(name, NOT_APPLICABLE if name in REPORTS_NOT_APPLICABLE else SKIPPED, result.reason)
    forced = selection.forced(name)
    if result.needed is False and not forced:
        return FixOutcome(name, NOT_NEEDED, result.reason)
    if forced and result.needed is False:
        why = f"requested by name although not needed ({result.reason})"
    elif result.needed is None:
        why = f"applied as a precaution ({result.reason})"
    else:
        why = result.reason
    return FixOutcome(name, APPLIED, why)


def _decide(name: str, selection: FixSelection) -> FixOutcome:
    if not selection.requested(name):
        return FixOutcome(name, NOT_REQUESTED, f"not in {FIXES_ENV}")
    try:
        module = _fix_module(name)
        planned = plan(selection, module.check())
        if planned.status != APPLIED:
            return planned
        what = module.install()
        return FixOutcome(name, APPLIED, f"{what}; {planned.reason}")
    except Exception as exc:  # noqa: BLE001 - a fix must never break a startup
        return FixOutcome(name, SKIPPED, f"unexpected {type(exc).__name__}: {exc}")


def _process_identity() -> dict[str, object]:
    import multiprocessing

    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "process": multiprocessing.current_process().name,
        "argv0": sys.argv[0] if sys.argv else "",
    }


def _append_report(path: str, results: dict[str, FixOutcome], selection: FixSelection,
                   event: str = EVENT_REGISTER, module: str | None = None) -> str | None:
    record = {
        "event": event,
        **_process_identity(),
        "requested": selection.raw,
        "module": module,
        "fixes": {name: outcome.to_json() for name, outcome in results.items()},
    }
    data = (json.dumps(record, sort_keys=False) + "\n").encode("utf-8")
    from dsv4ctl.errors import OutputError
    from dsv4ctl.files import append_line

    try:
        append_line(path, data, hint=None)  # one write on an O_APPEND descriptor: lines do not interleave
    except OutputError as exc:
        return f"{REPORT_ENV}: {exc.message}"
    return None


def summary_line(results: dict[str, FixOutcome], imported: str | None = None) -> str:
    """The INFO line: `dsv4ctl fixes: <name> applied (...); <name> not needed (...)`, and for fixes
    that landed with a module's import, `... on import of <module>` at the end."""
    parts = []
    for name, outcome in results.items():
        label = outcome.status.replace("-", " ")
        parts.append(f"{name} {label} ({outcome.reason})")
    line = f"{LOG_PREFIX} " + "; ".join(parts)
    return f"{line} on import of {imported}" if imported else line


def _vllm_logger() -> logging.Logger:
    """vLLM's logger for our name (`vllm.plugins.dsv4ctl`, under vLLM's `vllm` logger).

    vLLM >= 0.3x configures its logging only once the CLI has parsed its arguments, but the API
    server loads plugins while it builds the parser, before that. Where nothing would print our line
    yet (no handler) and vLLM is allowed to configure logging (VLLM_CONFIGURE_LOGGING), we apply
    vLLM's own environment-driven configuration early, as vLLM <= 0.27 did at import; vLLM applies
    its final configuration again later."""
    try:
        import vllm.logger as vllm_logger

        logger = vllm_logger.init_logger(LOGGER_NAME)
    except Exception:  # noqa: BLE001 - outside vLLM (or a broken one) use the same name
        return logging.getLogger(LOGGER_NAME)
    if not logger.hasHandlers():
        try:
            import vllm.envs as envs

            configure = getattr(vllm_logger, "_configure_vllm_root_logger", None)
            if configure is not None and envs.VLLM_CONFIGURE_LOGGING:
                configure()
        except Exception:  # noqa: BLE001 - logging must never break a startup
            pass
    return logger


def register() -> None:
    """The `vllm.general_plugins` entry point. Cheap, idempotent and never raises."""
    try:
        from dsv4ctl.fixes.stacks import register_stack_signal

        register_stack_signal()  # every process's stacks on a signal, whatever fixes are asked for (stacks.py)
        _register()
    except Exception as exc:  # noqa: BLE001 - last line of defence
        logging.getLogger(LOGGER_NAME).warning("%s internal error, no fixes applied: %s: %s",
                                               LOG_PREFIX, type(exc).__name__, exc)


def _register() -> None:
    selection = parse_selection(os.environ.get(FIXES_ENV))
    if _STATE.pid != os.getpid():  # first call here, or a forked child holding its parent's state
        _STATE.pid, _STATE.outcomes, _STATE.deferred = os.getpid(), {}, {}
    _STATE.selection = selection
    if selection.mode == "none":
        results = {name: FixOutcome(name, NOT_REQUESTED, f"{FIXES_ENV} is unset or none") for name in FIX_NAMES}
        first = not _STATE.outcomes
        _STATE.outcomes = results
        logger = logging.getLogger(LOGGER_NAME)  # no vLLM import when nothing is requested
        _warn_unknown(logger, selection)
        if first:
            logger.debug("%s none requested (%s unset or none)", LOG_PREFIX, FIXES_ENV)
            report = os.environ.get(REPORT_ENV)
            if report:
                _append_report(report, results, selection)
        return

    results = {name: _register_one(name, selection) for name in FIX_NAMES}
    previous = {name: outcome.status for name, outcome in _STATE.outcomes.items()}
    if previous == {name: outcome.status for name, outcome in results.items()}:
        return  # loaded again in the same process: nothing changed, nothing new to say
    _STATE.outcomes = results
    logger = _vllm_logger()
    _warn_unknown(logger, selection)
    _log_and_report(logger, results, results, selection, EVENT_REGISTER, None)


def _warn_unknown(logger: logging.Logger, selection: FixSelection) -> None:
    if selection.unknown:
        logger.warning("%s unknown fix name(s) in %s: %s (known: %s)", LOG_PREFIX, FIXES_ENV,
                       ", ".join(selection.unknown), ", ".join(FIX_NAMES))


def _log_and_report(logger: logging.Logger, landed: dict[str, FixOutcome], snapshot: dict[str, FixOutcome],
                    selection: FixSelection, event: str, module: str | None) -> None:
    for outcome in landed.values():
        if outcome.status == SKIPPED:
            logger.warning("%s %s skipped: %s", LOG_PREFIX, outcome.name, outcome.reason)
    logger.info(summary_line(landed, module))
    report = os.environ.get(REPORT_ENV)
    if report:
        problem = _append_report(report, snapshot, selection, event, module)
        if problem:
            logger.warning("%s %s", LOG_PREFIX, problem)


def _precheck(name: str, selection: FixSelection) -> FixOutcome | None:
    """A final outcome decided without importing the fix's target (only reads files), or None.

    Not applicable (this vLLM lacks the code the fix wraps) also for a fix named explicitly; not needed
    only under `all`: a fix named explicitly is installed whatever its need, which needs the target."""
    module = _fix_module(name)
    absent = getattr(module, "applicable_without_target", None)
    reason = absent() if absent is not None else None
    if reason:
        return FixOutcome(name, NOT_APPLICABLE, reason)
    if selection.forced(name):
        return None
    need = getattr(module, "need_without_target", None)
    if need is None:
        return None
    needed, reason = need()
    return FixOutcome(name, NOT_NEEDED, reason) if needed is False else None


def _register_one(name: str, selection: FixSelection) -> FixOutcome:
    """At registration: decide now when the target is imported already (or cheaply decidable),
    else defer to the target's import."""
    if not selection.requested(name):
        return FixOutcome(name, NOT_REQUESTED, f"not in {FIXES_ENV}")
    target = TARGET_MODULES[name]
    if target in sys.modules:
        return _decide(name, selection)
    try:
        early = _precheck(name, selection)
        if early is not None:
            return early
        from dsv4ctl.fixes import post_import

        names = _STATE.deferred.get(target, ())
        _STATE.deferred[target] = names + (name,) if name not in names else names
        post_import.finder().watch(target, LOGGER_NAME, functools.partial(_land, target))
    except Exception as exc:  # noqa: BLE001 - a fix must never break a startup
        return FixOutcome(name, SKIPPED, f"unexpected {type(exc).__name__}: {exc}")
    return FixOutcome(name, DEFERRED, f"applies when {target} is imported in this process")


def _land(target: str, module: object = None) -> None:
    """The post-import hook's callback: decide the fixes deferred on `target`. Never raises."""
    try:
        if _STATE.selection is None:  # pragma: no cover - watches are set by register() only
            return
        names = _STATE.deferred.pop(target, ())
        if not names:
            return
        selection = _STATE.selection
        landed = {name: _decide(name, selection) for name in names}
        _STATE.outcomes.update(landed)
        _log_and_report(_vllm_logger(), landed, dict(_STATE.outcomes), selection, EVENT_IMPORT, target)
    except Exception as exc:  # noqa: BLE001 - the import itself must succeed
        logging.getLogger(LOGGER_NAME).warning("%s internal error on import of %s: %s: %s",
                                               LOG_PREFIX, target, type(exc).__name__, exc)
