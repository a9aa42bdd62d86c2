"""One-line ways to get checkpoint statistics out of a CheckpointManager.

``goodput_checkpoint_manager(directory, options, recorder=rec)`` builds one
with our logger; ``attach(manager, rec)`` adds it to a manager that already
exists. Orbax keeps the logger in the private attribute ``_logger`` and has
no setter, so ``attach`` replaces that attribute (and the same logger object
in the sub-managers an emergency manager built at construction); if the
attribute is missing it raises instead of silently recording nothing.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from goodput_integrations.orbax.logger import GoodputLogger, unwrap
from goodput_integrations.orbax.monitoring import note_save

__all__ = ["attach", "detach", "goodput_checkpoint_manager"]

_LOGGER_ATTR = "_logger"


def _default_logger() -> Any:
    # What CheckpointManager uses when given none: keep Orbax's absl log lines.
    from orbax.checkpoint.logging import StandardLogger

    return StandardLogger()


def goodput_checkpoint_manager(directory: Any, options: Any = None, *, recorder: Any,
                               logger: Any = None, per_host: bool = False,
                               **kwargs: Any) -> Any:
    """Builds an ``ocp.CheckpointManager`` whose statistics go to ``recorder``.

    Args:
      directory: the checkpoint directory (as for CheckpointManager).
      options: a ``CheckpointManagerOptions`` or None.
      recorder: where checkpoint statistics are recorded.
      logger: another Orbax logger to keep (default: Orbax's StandardLogger).
      per_host: every process records, not only process 0.
      **kwargs: further CheckpointManager arguments (``item_names``, ...).

    Returns:
      The CheckpointManager.
    """
    import orbax.checkpoint as ocp

    ours = GoodputLogger(recorder, (logger if logger is not None else _default_logger(),),
                         per_host=per_host)
    manager = ocp.CheckpointManager(directory, options=options, logger=ours, **kwargs)
    _note_saves(manager)
    return manager


def attach(manager: Any, recorder: Any, *, per_host: bool = False) -> GoodputLogger:
    """Makes an existing checkpoint manager record its statistics to ``recorder``.

    Idempotent: attaching the same recorder twice returns the logger already
    attached. The manager's previous logger keeps receiving every entry.

    Args:
      manager: an ``ocp.CheckpointManager`` (or the emergency one).
      recorder: where checkpoint statistics are recorded.
      per_host: every process records, not only process 0.

    Returns:
      The attached :class:`GoodputLogger`.

    Raises:
      TypeError: the manager keeps no logger where this Orbax version does.
    """
    if not hasattr(manager, _LOGGER_ATTR):
        raise TypeError(f"{type(manager).__name__} has no {_LOGGER_ATTR!r}: pass "
                        "logger=GoodputLogger(recorder) when building it instead")
    current = getattr(manager, _LOGGER_ATTR)
    if isinstance(current, GoodputLogger) and current.recorder is recorder:
        return current
    previous = current if current is not None else _default_logger()
    ours = GoodputLogger(recorder, (previous,), per_host=per_host)
    _replace(manager, current, ours)
    _note_saves(manager)
    return ours


def detach(manager: Any) -> Optional[Any]:
    """Undoes :func:`attach`: puts the previous logger back.

    Returns:
      The logger now in place (None if there was nothing to undo).
    """
    current = getattr(manager, _LOGGER_ATTR, None)
    if not isinstance(current, GoodputLogger):
        return None
    previous = unwrap(current)
    _replace(manager, current, previous)
    if getattr(manager.__dict__.get("save"), _NOTES_STEPS, False):
        del manager.save  # the class's own save again
    return previous


_NOTES_STEPS = "_goodput_notes_save_steps"


def _note_saves(manager: Any) -> None:
    """Makes ``manager.save(step, ...)`` note its step when it starts, so that
    Orbax's async-save metrics get their step (see monitoring.py)."""
    original = getattr(manager, "save", None)
    if original is None or getattr(original, _NOTES_STEPS, False):
        return

    @functools.wraps(original)
    def save(step: Any, *args: Any, **kwargs: Any) -> Any:
        note_save(step)
        return original(step, *args, **kwargs)

    setattr(save, _NOTES_STEPS, True)
    try:
        manager.save = save
    except Exception:  # a manager that refuses instance attributes: no steps
        pass


def _replace(manager: Any, old: Any, new: Any) -> None:
    setattr(manager, _LOGGER_ATTR, new)
    # The emergency manager handed its logger to the sub-managers it built;
    # swap it there too (one level, only where it is the same object).
    for value in list(getattr(manager, "__dict__", {}).values()):
        if value is not manager and getattr(value, _LOGGER_ATTR, None) is old and old is not None:
            try:
                setattr(value, _LOGGER_ATTR, new)
            except Exception:
                pass
