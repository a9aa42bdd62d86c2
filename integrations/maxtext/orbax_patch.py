"""Orbax checkpoint statistics for unmodified MaxText (alias mode only).

MaxText builds its ``ocp.CheckpointManager`` itself, passing Orbax's
``CloudLogger`` as ``logger=`` only when ``enable_checkpoint_cloud_logger``.
Under the alias (:mod:`goodput_integrations.maxtext.alias`, with
``checkpoint_stats=True``, which the launcher sets) we wrap
``CheckpointManager.__init__`` so that every manager built meanwhile gets our
:class:`~goodput_integrations.orbax.logger.GoodputLogger` in front of the
logger it was given (or of Orbax's default ``StandardLogger``): the given
logger still receives every entry, untouched.

The statistics go to the recorder the alias last built (MaxText builds its
recorder before its checkpoint manager); looked up at each entry, so none is
needed when the manager is built. The patch is recorded and undone by
:meth:`OrbaxPatch.uninstall`; if someone patched on top of us meanwhile, our
wrapper stays but falls straight through.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable, Optional

from goodput_integrations.errors import AdapterUnavailable

__all__ = ["OrbaxPatch"]

logger = logging.getLogger("goodput")


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


class OrbaxPatch:
    """Adds our logger to every ``CheckpointManager`` built while installed.

    Args:
      current_recorder: returns the recorder statistics go to (None: drop).
    """

    def __init__(self, current_recorder: Callable[[], Optional[Any]]):
        self._proxy = _LiveRecorder(current_recorder)
        self.active = False
        self._cls: Any = None
        self._original: Any = None
        self._patched: Any = None
        self.managers_patched = 0

    @property
    def installed(self) -> bool:
        """True while our constructor wrapper is in force."""
        return self.active and self._patched is not None

    def install(self) -> "OrbaxPatch":
        """Wraps ``CheckpointManager.__init__`` (idempotent).

        Raises:
          AdapterUnavailable: orbax-checkpoint is not installed.
        """
        if self._patched is not None:
            self.active = True
            return self
        try:
            import orbax.checkpoint as ocp

            from goodput_integrations.orbax.logger import GoodputLogger
        except ImportError as exc:
            raise AdapterUnavailable(
                "checkpoint statistics need orbax-checkpoint: pip install 'goodput-core[jax]', "
                f"or turn them off ({exc})") from exc
        cls = ocp.CheckpointManager
        original = cls.__dict__.get("__init__")
        try:
            signature = inspect.signature(original)
        except (TypeError, ValueError):
            signature = None
        if signature is None or "logger" not in signature.parameters:
            logger.warning("goodput: this Orbax CheckpointManager takes no logger=; "
                           "checkpoint statistics are not recorded")
            return self
        patch = self

        @functools.wraps(original)
        def __init__(manager: Any, *args: Any, **kwargs: Any) -> None:
            if patch.active:
                try:
                    args, kwargs = patch._with_logger(signature, GoodputLogger, manager,
                                                      args, kwargs)
                except Exception:  # never break the user's checkpoint manager
                    logger.warning("goodput: could not add the checkpoint logger",
                                   exc_info=True)
            return original(manager, *args, **kwargs)

        self._cls, self._original, self._patched = cls, original, __init__
        cls.__init__ = __init__
        self.active = True
        return self

    def _with_logger(self, signature: inspect.Signature, logger_cls: type, manager: Any,
                     args: tuple, kwargs: dict):
        bound = signature.bind(manager, *args, **kwargs)
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
        """Puts the original constructor back (or falls through if patched over)."""
        self.active = False
        cls = self._cls
        if cls is not None and cls.__dict__.get("__init__") is self._patched:
            cls.__init__ = self._original
            self._cls = self._original = self._patched = None
