"""An Orbax ``AbstractLogger`` that records checkpoint statistics.

``ocp.CheckpointManager`` calls ``logger.log_entry(dict)`` once per ``save()``
(at the end of its blocking part, before the async commit finishes) and once
per ``restore()``, on the thread that called them; the emergency manager adds
``emergency_restore`` entries. We record a copy of each dict (Orbax's own
``CloudLogger`` mutates it and writes synchronously on the training thread),
forward the untouched original to the loggers we wrap, and never raise.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, Optional, Sequence

from goodput_integrations.errors import AdapterUnavailable

try:
    from orbax.checkpoint.logging import AbstractLogger
except ImportError as exc:  # pragma: no cover - exercised only without orbax
    raise AdapterUnavailable(
        "the Orbax adapter needs orbax-checkpoint: pip install 'goodput-core[jax]'") from exc

from goodput_integrations.jax import _probe
from goodput_integrations.jax.gate import ProcessGate

__all__ = ["GoodputLogger", "sanitize_entry"]

_SCALARS = (str, bool, int, float, type(None))


def sanitize_entry(entry: Dict[str, Any]) -> Dict[str, Any]:
    """A JSON-safe shallow copy of an Orbax statistics dict (the input is untouched).

    numpy scalars become Python numbers; anything else that is not a JSON
    scalar (an ``epath.Path``...) becomes its ``str``.
    """
    out = {}
    for key, value in entry.items():
        if not isinstance(value, _SCALARS):
            if isinstance(value, numbers.Integral):
                value = int(value)
            elif isinstance(value, numbers.Real):
                value = float(value)
            else:
                item = getattr(value, "item", None)  # 0-d numpy / jax arrays
                try:
                    value = item() if callable(item) else str(value)
                except Exception:
                    value = str(value)
                if not isinstance(value, _SCALARS):
                    value = str(value)
        out[str(key)] = value
    return out


class GoodputLogger(AbstractLogger):
    """Records Orbax save/restore statistics through a recorder.

    Pass it as ``ocp.CheckpointManager(..., logger=GoodputLogger(recorder))``,
    or use :func:`attach` / :func:`goodput_checkpoint_manager`. Like the JAX
    adapter, only process 0 records unless ``per_host`` (decided lazily).

    Args:
      recorder: a :class:`goodput_core.Recorder`.
      forward_to: loggers that also receive every entry, untouched and after
        we recorded our copy (e.g. Orbax's ``StandardLogger`` or ``CloudLogger``);
        a failing one is logged and skipped.
      per_host: every process records (with its process index), not only 0.
    """

    def __init__(self, recorder: Any, forward_to: Sequence[AbstractLogger] = (), *,
                 per_host: bool = False):
        if recorder is None:
            raise ValueError("recorder is required")
        if isinstance(forward_to, AbstractLogger):
            forward_to = (forward_to,)
        self.recorder = recorder
        self.forward_to = tuple(f for f in forward_to if f is not None)
        self._gate = ProcessGate(recorder, per_host=per_host)
        self.entries_recorded = 0
        self.errors = 0

    def log_entry(self, entry: Any, *args: Any, **kwargs: Any) -> None:
        """Records a copy of ``entry`` (when it is a dict), then forwards it."""
        if isinstance(entry, dict):
            try:
                self._gate.submit(self._record, sanitize_entry(entry))
            except Exception:
                self.errors += 1
                _probe.log_once("orbax-record", "goodput: recording an Orbax entry failed")
        for other in self.forward_to:
            try:
                other.log_entry(entry, *args, **kwargs)
            except Exception:
                self.errors += 1
                _probe.log_once(f"orbax-forward-{type(other).__name__}",
                                "goodput: forwarded Orbax logger %r failed", other)

    def _record(self, copy: Dict[str, Any]) -> None:
        self.recorder.record_checkpoint_stats(copy)
        self.entries_recorded += 1

    def __repr__(self) -> str:
        run = getattr(self.recorder, "run", "?")
        return f"GoodputLogger(run={run!r}, forward_to={list(self.forward_to)!r})"


def unwrap(logger: Optional[AbstractLogger]) -> Optional[AbstractLogger]:
    """The single logger a GoodputLogger forwards to, else ``logger`` itself."""
    if isinstance(logger, GoodputLogger) and len(logger.forward_to) == 1:
        return logger.forward_to[0]
    return logger
