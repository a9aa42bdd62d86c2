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

Metrics are recorded under clean names (:data:`METRIC_NAMES`:
``checkpoint/async_save_total_seconds``, ``checkpoint/async_save_background_seconds``,
``checkpoint/save_gbytes``) with the step of the save they describe. Orbax's
events carry no step, so managers built by :func:`goodput_checkpoint_manager`
or given to :func:`attach` note each ``save(step)`` when it starts
(:func:`note_save`); a duration event belongs to the latest save that started
before ``now - duration`` (Orbax finishes the previous async save inside the
next ``save()`` call, after that call started), a size to the latest save
started. Without a noted save the metric has no step.
"""

from __future__ import annotations

import bisect
import collections
import threading
import time
from typing import Any, Deque, Optional, Tuple

from goodput_integrations.jax import _probe
from goodput_integrations.jax.gate import ProcessGate
from goodput_integrations.jax.listeners import ListenerSet

__all__ = ["OrbaxMonitoring", "ASYNC_DURATION_EVENTS", "METRIC_NAMES", "SCALAR_EVENTS",
           "note_save", "save_step_at"]

ASYNC_DURATION_EVENTS = frozenset((
    "/jax/checkpoint/write/async/total_duration_secs",
    "/jax/checkpoint/write/async/thread_duration_sec",
))
SCALAR_EVENTS = frozenset(("/jax/orbax/write/gbytes",))
METRIC_NAMES = {
    "/jax/checkpoint/write/async/total_duration_secs": "checkpoint/async_save_total_seconds",
    "/jax/checkpoint/write/async/thread_duration_sec": "checkpoint/async_save_background_seconds",
    "/jax/orbax/write/gbytes": "checkpoint/save_gbytes",
}

# (start time, step) of the most recent saves, in start order
_SAVES: Deque[Tuple[float, int]] = collections.deque(maxlen=64)
_SAVES_LOCK = threading.Lock()


def note_save(step: Any, when: Optional[float] = None) -> None:
    """Notes that ``save(step)`` starts now (never raises)."""
    try:
        entry = (time.time() if when is None else float(when), int(step))
    except (TypeError, ValueError, OverflowError):
        return
    with _SAVES_LOCK:
        _SAVES.append(entry)


def save_step_at(t: float) -> Optional[int]:
    """The step of the latest noted save that started at or before ``t``."""
    with _SAVES_LOCK:
        starts = [s for s, _ in _SAVES]
        i = bisect.bisect_right(starts, t) - 1
        return _SAVES[i][1] if i >= 0 else None


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
            self._metric(event, duration, float(duration))

    def _on_scalar(self, event: str, value: Any, **kwargs: Any) -> None:
        if event in SCALAR_EVENTS and self.active:
            self._metric(event, value, 0.0)

    def _metric(self, event: str, value: Any, lasted: float) -> None:
        try:
            now = time.time()
            step = save_step_at(now - lasted)
            self._gate.submit(self.recorder.record_metric, METRIC_NAMES[event], float(value),
                              step, now)
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
