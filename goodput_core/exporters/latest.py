"""The latest figures of each run, for exporters that are read (or pushed) on
their own schedule rather than once per snapshot: Prometheus (scraped) and
OpenTelemetry (collected at the end of each export).

A monitor cycle may compute only some parts (goodput, rolling windows, step
deviation, insights); each part of :class:`RunFigures` keeps its last value
until a snapshot that computed it says otherwise, so a scrape between two
cycles of different parts still sees every figure.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from goodput_core.exporters.base import MonitorSnapshot

__all__ = ["LatestFigures", "RunFigures", "window_label"]


def window_label(size: Any) -> str:
    """A rolling window's label: ``"3600s"`` (``"0.5s"`` for a fractional size)."""
    f = float(size)
    return f"{int(f) if f.is_integer() else f}s"


class RunFigures:
    """The latest figures of one run (each part keeps its last value)."""

    def __init__(self) -> None:
        self.cumulative: Any = None
        self.rolling: Dict[Any, Any] = {}
        self.quantiles: Dict[float, float] = {}
        self.ideal: Optional[float] = None
        self.dropped: Optional[int] = None
        self.efficiency: Dict[str, Any] = {}  # "cumulative" / "<N>s" -> SliceEfficiency
        self.program: Any = None
        self.metrics: Dict[str, float] = {}
        self.insights: Optional[MonitorSnapshot] = None  # the last snapshot that had them

    def update(self, snap: MonitorSnapshot, quantiles: Dict[float, float]) -> None:
        """Takes the parts ``snap`` computed (``quantiles``: its step-time quantiles)."""
        if snap.cumulative is not None:
            self.cumulative = snap.cumulative
        if snap.rolling:
            self.rolling = dict(snap.rolling)
        if snap.step_stats is not None:
            self.quantiles, self.ideal = quantiles, snap.step_stats.ideal_step_time
        if snap.recorder_dropped is not None:
            self.dropped = snap.recorder_dropped
        if snap.cumulative is not None:
            eff = {k: v for k, v in self.efficiency.items() if k != "cumulative"}
            if snap.slice_efficiency is not None:
                eff["cumulative"] = snap.slice_efficiency
            self.efficiency = eff
            self.program = snap.program_goodput
        if snap.rolling:
            eff = {k: v for k, v in self.efficiency.items() if k == "cumulative"}
            for size, e in sorted(snap.rolling_slice_efficiency.items()):
                eff[window_label(size)] = e
            self.efficiency = eff
        if snap.metrics:  # a new dict: a scrape may be iterating the old one
            self.metrics = {**self.metrics,
                            **{name: point.value for name, point in snap.metrics.items()}}
        if snap.checkpoint_advice is not None:
            self.insights = snap


class LatestFigures:
    """Thread-safe :class:`RunFigures` per run, updated from snapshots.

    Args:
      quantiles: the step-time quantiles to keep (each within [0, 1]).
    """

    def __init__(self, quantiles: Sequence[float]):
        self.quantiles = tuple(float(q) for q in quantiles)
        self._lock = threading.Lock()
        self._runs: Dict[str, RunFigures] = {}

    def update(self, snap: MonitorSnapshot) -> None:
        """Takes the parts ``snap`` computed (the quantiles are computed outside the lock)."""
        quantiles: Dict[float, float] = {}
        stats = snap.step_stats
        if stats is not None and len(stats.step_times) and self.quantiles:
            values = np.quantile(np.asarray(stats.step_times, np.float64), self.quantiles)
            quantiles = dict(zip(self.quantiles, values.tolist()))
        with self._lock:
            self._runs.setdefault(snap.run, RunFigures()).update(snap, quantiles)

    def runs(self) -> List[tuple]:
        """``[(run, RunFigures), ...]``. Updates replace a part's value (never
        mutate a dict or list in place), so a reader may walk a part unlocked."""
        with self._lock:
            return list(self._runs.items())
