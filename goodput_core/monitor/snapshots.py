"""What one monitor cycle computes: a :class:`MonitorSnapshot` from the calculator.

:class:`SnapshotBuilder` holds what a cycle carries to the next: the steps
whose deviation was handed out already (each written once), the streaming
quantile sketch of their times (Prometheus' and OpenTelemetry's step-time
quantiles) and whether the run's stop was already said. The monitor's loop
(:mod:`goodput_core.monitor.loop`) decides when a cycle runs; this decides what
it holds. A failing store or query is reported and the cycle skipped, never
raised.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Collection, Dict, Optional, Sequence

import numpy as np

from goodput_core.exporters.base import MonitorSnapshot
from goodput_core.monitor.cycle import Extras, fresh_deviations
from goodput_core.queries.quantile_sketch import QuantileSketch

__all__ = ["SnapshotBuilder"]

logger = logging.getLogger("goodput_core.monitor.loop")  # the monitor's log, as before


class SnapshotBuilder:
    """Builds each cycle's snapshot of one run.

    Args:
      run: the run name.
      extras: the optional parts (:class:`~goodput_core.monitor.cycle.Extras`).
      ideal_step_time: the configured ideal step time (None: computed).
      recorder: a local Recorder whose dropped-event count is reported (or None).
      report: ``report(source, error)`` for a store or query failure.
    """

    def __init__(self, run: str, extras: Extras, ideal_step_time: Optional[float],
                 recorder: Any, report: Callable[[str, Any], None]):
        self.run = run
        self._extras = extras
        self._ideal = ideal_step_time
        self._recorder = recorder
        self._report = report
        self._exported = np.empty(0, np.int64)  # steps whose deviation was handed out
        self._sketch = QuantileSketch()  # the times of those steps (Prometheus' quantiles)
        self._said_stopped: Optional[str] = None  # "stopped at T (cause)", logged once

    def compute(self, calc: Any, clock: Callable[[], float], parts: Collection[str],
                windows: Sequence[Any], final: bool) -> Optional[MonitorSnapshot]:
        """The snapshot of ``parts`` at ``clock()`` (None: the store or a query failed)."""
        try:
            calc.refresh()
        except Exception as exc:  # noqa: BLE001 - a store outage must not end monitoring
            self._report("store", exc)
            return None
        now = clock()
        try:
            cumulative = calc.cumulative(now) if "goodput" in parts else None
            rolling: Dict[Any, Any] = {}
            if "rolling" in parts and windows:
                rolling = dict(zip(windows, calc.rolling(windows, now)))
            extras = self._extras.compute(calc, parts, now, cumulative,
                                          windows if "rolling" in parts else (), final)
            stats, new, sketch = None, [], None
            if "step_deviation" in parts:
                stats = calc.step_stats(self._ideal)
                new, self._exported = fresh_deviations(stats, self._exported,
                                                       self._sketch.add)
                sketch = self._sketch.copy()  # the exporters read it on their threads
        except Exception as exc:  # noqa: BLE001 - queries should not raise; never end the loop
            self._report("calculator", exc)
            return None
        snapshot = MonitorSnapshot(self.run, float(now), cumulative, rolling, stats, new,
                                   self._dropped(), final, step_time_sketch=sketch, **extras)
        if snapshot.stopped and hasattr(snapshot.state, "describe") \
                and snapshot.state.describe() != self._said_stopped:
            self._said_stopped = snapshot.state.describe()  # rule 15: said once per stop
            logger.warning("goodput monitor %s: the run %s; its figures end there", self.run,
                           self._said_stopped)
        return snapshot

    def _dropped(self) -> Optional[int]:
        if self._recorder is None:
            return None
        try:
            return int(self._recorder.stats()["dropped"])
        except Exception:  # noqa: BLE001 - a diagnostic figure is not worth a failed cycle
            return None
