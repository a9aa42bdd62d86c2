"""Orbax checkpoint statistics for unmodified MaxText.

MaxText builds its Orbax checkpointer itself: up to 0.2.4 an
``ocp.CheckpointManager`` (given Orbax's ``CloudLogger`` as ``logger=`` only
when ``enable_checkpoint_cloud_logger``), from 0.2.5 an Orbax v1
``ocp.v1.training.Checkpointer``, which builds a ``CheckpointManager``
inside but logs its restores itself, to the logger it was given. So we
wrap the constructor of both classes: every one built while the patch is
installed gets our :class:`~goodput_integrations.orbax.logger.GoodputLogger`
in front of the logger it was given (or of Orbax's default
``StandardLogger``); the given logger still receives every entry, untouched.
A ``CheckpointManager`` handed our logger already (by the v1 class) is left
alone.

The statistics go to the recorder ``current_recorder()`` returns at each
entry (MaxText builds its recorder before its checkpointer, but nothing
depends on that order). The patch is undone by :meth:`OrbaxPatch.uninstall`;
if someone patched on top of us meanwhile, our wrapper stays but falls
straight through. The patch imports nothing: it is installed once Orbax is
imported (:mod:`goodput_integrations.maxtext.runtime`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from typing import Any, Callable, List, Optional, Tuple

from goodput_integrations.errors import AdapterUnavailable

__all__ = ["OrbaxPatch", "TARGETS"]

logger = logging.getLogger("goodput")

#: Attribute paths from ``orbax.checkpoint`` to the classes we patch.
TARGETS = ("CheckpointManager", "v1.training.Checkpointer")


class _LiveRecorder:
    """Forwards checkpoint statistics to whatever recorder is current."""

    def __init__(self, current: Callable[[], Optional[Any]]):
        self._current = current

    @property
    def run(self) -> str:
        rec = self._current()
        return getattr(rec, "run", "?") if rec is not None else "?"

    def record_checkpoint_stats(self, entry: dict) -> None:
        rec = self._current()
        if rec is not None:
            rec.record_checkpoint_stats(entry)


def _resolve(root: Any, path: str) -> Optional[type]:
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


class OrbaxPatch:
    """Adds our logger to every Orbax checkpointer built while installed.

    Args:
      current_recorder: returns the recorder statistics go to (None: drop).
    """

    def __init__(self, current_recorder: Callable[[], Optional[Any]]):
        self._proxy = _LiveRecorder(current_recorder)
        self.active = False
        # (class, original __init__, our wrapper)
        self._patched: List[Tuple[type, Any, Any]] = []
        self.managers_patched = 0

    @property
    def installed(self) -> bool:
        """True while at least one constructor wrapper is in force."""
        return self.active and bool(self._patched)

    def install(self) -> "OrbaxPatch":
        """Wraps the constructors of :data:`TARGETS` that exist (idempotent).

        Orbax must be importable; it is imported here if it is not yet (the
        runtime calls this only once Orbax is imported).

        Raises:
          AdapterUnavailable: orbax-checkpoint is not installed.
        """
        if self._patched:
            self.active = True
            return self
        try:
            ocp = sys.modules.get("orbax.checkpoint")
            if ocp is None:
                import orbax.checkpoint as ocp

            # lazy: imports orbax: only once MaxText imported it
            from goodput_integrations.orbax.logger import GoodputLogger
        except ImportError as exc:
            raise AdapterUnavailable(
                "checkpoint statistics need orbax-checkpoint: pip install 'goodput-core[jax]', "
                f"or turn them off ({exc})") from exc
        for path in TARGETS:
            cls = _resolve(ocp, path)
            if cls is not None:
                self._wrap(cls, GoodputLogger)
        if not self._patched:
            logger.warning("goodput: this Orbax's checkpointers take no logger=; "
                           "checkpoint statistics are not recorded")
        self.active = True
        return self

    def _wrap(self, cls: type, logger_cls: type) -> None:
        original = cls.__dict__.get("__init__")
        try:
            signature = inspect.signature(original)
        except (TypeError, ValueError):
            return
        if "logger" not in signature.parameters:
            return
        patch = self

        @functools.wraps(original)
        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            if patch.active:
                try:
                    args, kwargs = patch._with_logger(signature, logger_cls, obj, args, kwargs)
                except Exception:  # never break the user's checkpointer
                    logger.warning("goodput: could not add the checkpoint logger",
                                   exc_info=True)
            return original(obj, *args, **kwargs)

        cls.__init__ = __init__
        self._patched.append((cls, original, __init__))

    def _with_logger(self, signature: inspect.Signature, logger_cls: type, obj: Any,
                     args: tuple, kwargs: dict):
        bound = signature.bind(obj, *args, **kwargs)
        given = bound.arguments.get("logger")
        if isinstance(given, logger_cls):
            return args, kwargs
        if given is None:
            from orbax.checkpoint.logging import StandardLogger

            given = StandardLogger()  # what Orbax would have used: keep its log lines
        bound.arguments["logger"] = logger_cls(self._proxy, (given,))
        self.managers_patched += 1
        return bound.args[1:], bound.kwargs

    def uninstall(self) -> None:
        """Puts the original constructors back (or falls through if patched over)."""
        self.active = False
        for cls, original, ours in self._patched:
            if cls.__dict__.get("__init__") is ours:
                cls.__init__ = original
        self._patched = []
