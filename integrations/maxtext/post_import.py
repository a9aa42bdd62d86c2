"""Run a callback right after a module is imported, without importing it.

The launcher must patch Orbax's ``CheckpointManager``, but importing Orbax
ourselves costs seconds before the job's first event (time no bucket sees).
:func:`when_imported` instead puts a one-shot finder in front of
``sys.meta_path``: when somebody imports the module, the finder asks the
other finders for its spec, wraps that spec's loader's ``exec_module`` (the
loader object and its type stay the same, so ``module.__loader__`` and
resource readers are untouched) and calls the callback once the module has
executed. If the module is already imported, the callback runs at once.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
import threading
from typing import Any, Callable, Optional

__all__ = ["ModulePatch", "PostImportHook", "when_imported"]

logger = logging.getLogger("goodput")


class PostImportHook(importlib.abc.MetaPathFinder):
    """One pending callback for one module name (see :func:`when_imported`)."""

    def __init__(self, name: str, callback: Callable[[Any], None]):
        self.name = name
        self._callback = callback
        self._local = threading.local()
        self._lock = threading.Lock()
        self.fired = False
        self.cancelled = False

    # ----------------------------------------------------------- finder API
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if fullname != self.name or self.cancelled or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._local.busy = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec  # nothing to wrap: the import goes on as without us
        original = loader.exec_module
        hook = self

        def exec_module(module: Any) -> None:
            original(module)
            try:
                del loader.exec_module  # back to the class's method
            except AttributeError:
                pass
            hook.fire(module)

        loader.exec_module = exec_module
        return spec

    # ------------------------------------------------------------- control
    def fire(self, module: Any) -> None:
        """Runs the callback once (never raises) and leaves ``sys.meta_path``."""
        with self._lock:
            if self.fired or self.cancelled:
                return
            self.fired = True
        self._remove()
        try:
            self._callback(module)
        except Exception:  # a failing hook must not fail the user's import
            logger.warning("goodput: the hook on importing %s failed", self.name, exc_info=True)

    def cancel(self) -> None:
        """The callback will not run (idempotent)."""
        self.cancelled = True
        self._remove()

    def _remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def when_imported(name: str, callback: Callable[[Any], None]) -> PostImportHook:
    """Calls ``callback(module)`` once ``name`` has been imported.

    At once when ``name`` is already in ``sys.modules`` (and not in the
    middle of its own import); otherwise right after whoever imports it
    first has executed it. The callback never raises into the importer.

    Returns:
      The hook; :meth:`PostImportHook.cancel` withdraws it.
    """
    hook = PostImportHook(name, callback)
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is not None and not getattr(spec, "_initializing", False):
        hook.fire(module)
        return hook
    sys.meta_path.insert(0, hook)
    return hook


class ModulePatch:
    """A patch applied to a module when it is imported (:func:`when_imported`),
    undone by :meth:`disarm`.

    ``apply(module)`` patches and returns a function that undoes the patch (or
    None when there was nothing to patch).
    """

    def __init__(self, name: str, apply: Callable[[Any], Optional[Callable[[], None]]]):
        self.name = name
        self._apply = apply
        self._lock = threading.Lock()
        self._hook: Optional[PostImportHook] = None
        self._undo: Optional[Callable[[], None]] = None

    def _fire(self, module: Any) -> None:
        undo = self._apply(module)
        if undo is not None:
            self._undo = undo

    def arm(self) -> None:
        """Patches when the module is imported (at once if it is); idempotent."""
        with self._lock:
            if self._hook is None:
                self._hook = when_imported(self.name, self._fire)

    def disarm(self) -> None:
        """Cancels the hook and undoes the patch."""
        with self._lock:
            if self._hook is not None:
                self._hook.cancel()
            if self._undo is not None:
                self._undo()
            self._hook = self._undo = None
