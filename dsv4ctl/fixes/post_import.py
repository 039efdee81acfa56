"""Run a callback right after a named module has been imported, without importing it ourselves.

`when_imported(module_name, key, callback)` calls `callback(module)` at once when the module is
already imported; otherwise it puts one `sys.meta_path` finder first. For exactly the watched names
that finder asks the remaining finders for the spec and wraps the found loader's `exec_module`, so
the callbacks run once the module body has executed successfully (the module is then complete and
in `sys.modules`). Everything else is left to the other finders untouched (the finder answers
None). An import error in the module propagates unchanged and runs no callback (the watch stays,
so a later successful import still fires). Each callback runs exactly once; exceptions from a
callback are swallowed (callers handle their own failures). The finder removes itself once every
watched module has fired. Standard library only.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]


class PostImportFinder:
    """The one meta-path finder of this process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._watches: dict[str, dict[str, Callback]] = {}
        self._searching = threading.local()

    # -- registration -----------------------------------------------------------------------------

    def watch(self, module_name: str, key: str, callback: Callback) -> None:
        """Run `callback` after `module_name` is next imported. A second watch with the same key
        for the same module replaces the first (so calling it again is idempotent)."""
        with self._lock:
            self._watches.setdefault(module_name, {})[key] = callback
            if self not in sys.meta_path:
                sys.meta_path.insert(0, self)

    def pending(self) -> dict[str, tuple[str, ...]]:
        with self._lock:
            return {name: tuple(keys) for name, keys in self._watches.items()}

    def _remove_if_done(self) -> None:
        with self._lock:
            if not self._watches:
                try:
                    sys.meta_path.remove(self)
                except ValueError:
                    pass

    # -- the finder protocol ----------------------------------------------------------------------

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        with self._lock:
            if fullname not in self._watches:
                return None
        searching: set[str] = self._searching.__dict__.setdefault("names", set())
        if fullname in searching:  # reentered while we ask the other finders: stay out of the way
            return None
        searching.add(fullname)
        try:
            spec = self._delegate(fullname, path, target)
        except Exception:  # noqa: BLE001 - let the normal machinery find (and fail) on its own
            return None
        finally:
            searching.discard(fullname)
        if spec is None or spec.loader is None:
            return None  # nothing found, or a namespace package: import as if we were not here
        if not self._wrap(fullname, spec.loader):
            return None
        return spec

    def invalidate_caches(self) -> None:
        return None

    def _delegate(self, fullname: str, path: Any, target: Any) -> Any:
        finders = list(sys.meta_path)
        if self in finders:
            finders = finders[finders.index(self) + 1:]
        for finder in finders:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _wrap(self, fullname: str, loader: Any) -> bool:
        """Make this loader instance run our callbacks after its exec_module. Returns False where
        the loader is shared (a class, or an instance without its own attributes)."""
        if isinstance(loader, type) or not hasattr(loader, "__dict__") or not hasattr(loader, "exec_module"):
            return False
        if "exec_module" in vars(loader):  # already wrapped (this spec was found twice)
            return True
        original = loader.exec_module
        finder = self

        def exec_module(module: ModuleType) -> None:
            if getattr(module, "__name__", None) != fullname:  # a loader shared with other modules
                original(module)
                return
            try:
                original(module)  # errors propagate unchanged; no callback then
            finally:
                try:
                    del loader.exec_module  # back to the class's method: reloads are plain again
                except AttributeError:
                    pass
            finder._fire(fullname, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return False
        return True

    def _fire(self, fullname: str, module: ModuleType) -> None:
        with self._lock:
            callbacks = self._watches.pop(fullname, {})
        self._remove_if_done()
        for callback in callbacks.values():
            try:
                callback(module)
            except Exception:  # noqa: BLE001 - never break an import
                pass


_FINDER = PostImportFinder()


def when_imported(module_name: str, key: str, callback: Callback) -> bool:
    """Run `callback(module)` now if `module_name` is in `sys.modules` (returns True), else right
    after it is first imported in this process (returns False)."""
    if module_name in sys.modules:
        try:
            callback(sys.modules[module_name])
        except Exception:  # noqa: BLE001
            pass
        return True
    _FINDER.watch(module_name, key, callback)
    return False


def finder() -> PostImportFinder:
    return _FINDER
