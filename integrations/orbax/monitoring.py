"""Async-save accounting from Orbax's ``jax.monitoring`` events.

The manager's statistics dict is logged at the end of the *blocking* part of
a save; when the background commit finishes is visible only through
``jax.monitoring``. We keep the events that add information as metrics:

* ``/jax/checkpoint/write/async/total_duration_secs``: blocking + background
  time of an async save, emitted (on Orbax's commit thread) when the commit
  completes, so the metric's time is the completion instant and
  ``time - value`` the save's start. Orbax emits the same number again under
  ``/jax/orbax/write/async/total_duration_secs``; we keep one.
* ``/jax/checkpoint/write/async/thread_duration_sec``: the background part alone.
* ``/jax/orbax/write/gbytes``: the size written (a scalar).

We do not use ``/jax/orbax/write/async/start_time`` and ``.../blocking_end_time``:
they are epoch *milliseconds* and repeat what the statistics dict already
holds in seconds.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from goodput_integrations.jax import _probe
from goodput_integrations.jax.gate import ProcessGate
from goodput_integrations.jax.listeners import ListenerSet

__all__ = ["OrbaxMonitoring", "ASYNC_DURATION_EVENTS", "SCALAR_EVENTS"]

ASYNC_DURATION_EVENTS = frozenset((
    "/jax/checkpoint/write/async/total_duration_secs",
    "/jax/checkpoint/write/async/thread_duration_sec",
))
SCALAR_EVENTS = frozenset(("/jax/orbax/write/gbytes",))


class OrbaxMonitoring:
    """Listens to Orbax's async-save events and records them as metrics.

    Args:
      recorder: where the metrics go.
      per_host: every process records, not only process 0.
    """

    def __init__(self, recorder: Any, *, per_host: bool = False):
        _probe.require_jax()
        self.recorder = recorder
        self.active = False
        self._lock = threading.Lock()
        self._listeners = ListenerSet()
        self._gate = ProcessGate(recorder, per_host=per_host)

    def instrument(self) -> "OrbaxMonitoring":
        """Registers the listeners (idempotent). Returns self."""
        with self._lock:
            if self.active:
                return self
            self.active = True
            self._listeners.add("duration", self._on_duration)
            self._listeners.add("scalar", self._on_scalar)
        return self

    def uninstrument(self) -> None:
        """Removes the listeners (idempotent)."""
        with self._lock:
            self.active = False
            self._listeners.remove_all()

    def __enter__(self) -> "OrbaxMonitoring":
        return self.instrument()

    def __exit__(self, *exc: Any) -> None:
        self.uninstrument()

    # These run on whatever thread Orbax emits from: cheap set lookups first,
    # then a guarded record (a listener exception would break Orbax's save).
    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event in ASYNC_DURATION_EVENTS and self.active:
            self._metric(event, duration)

    def _on_scalar(self, event: str, value: Any, **kwargs: Any) -> None:
        if event in SCALAR_EVENTS and self.active:
            self._metric(event, value)

    def _metric(self, name: str, value: Any) -> None:
        try:
            self._gate.submit(self.recorder.record_metric, name, float(value))
        except Exception:
            _probe.log_once("orbax-metric", "goodput: recording an Orbax metric failed")


_CURRENT: Optional[OrbaxMonitoring] = None
_CURRENT_LOCK = threading.Lock()


def instrument(recorder: Any, **options: Any) -> OrbaxMonitoring:
    """Turns on async-save metrics for ``recorder`` (replaces a previous one)."""
    global _CURRENT
    with _CURRENT_LOCK:
        if _CURRENT is not None and _CURRENT.active and _CURRENT.recorder is recorder:
            return _CURRENT
        if _CURRENT is not None:
            _CURRENT.uninstrument()
        _CURRENT = OrbaxMonitoring(recorder, **options).instrument()
        return _CURRENT


def uninstrument() -> None:
    """Turns async-save metrics off (no-op when off)."""
    global _CURRENT
    with _CURRENT_LOCK:
        if _CURRENT is not None:
            _CURRENT.uninstrument()
        _CURRENT = None
