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
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.exporters.base import MonitorSnapshot
from goodput_core.timeline.buckets import BadputType

__all__ = ["LatestFigures", "RunFigures", "figures", "window_label"]

# Left out of the badput figures: DATA_LOADING_ASYNC overlaps productive time (not
# part of the partition, as in Cloud Monitoring); custom events go out per type.
_SKIPPED = (BadputType.DATA_LOADING_ASYNC, BadputType.CUSTOM_BADPUT_EVENTS)


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
        self.state: Any = None  # RunState: running, stopped at T (cause) or ended

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
        if snap.state is not None:
            self.state = snap.state


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
        sketch = snap.step_time_sketch
        if sketch is not None and sketch.count and self.quantiles:
            # the monitor's sketch: O(buckets), not a sort of every step time per cycle
            quantiles = dict(zip(self.quantiles, sketch.quantiles(self.quantiles)))
        elif stats is not None and len(stats.step_times) and self.quantiles:
            values = np.quantile(np.asarray(stats.step_times, np.float64), self.quantiles)
            quantiles = dict(zip(self.quantiles, values.tolist()))
        with self._lock:
            self._runs.setdefault(snap.run, RunFigures()).update(snap, quantiles)

    def runs(self) -> List[tuple]:
        """``[(run, RunFigures), ...]``. Updates replace a part's value (never
        mutate a dict or list in place), so a reader may walk a part unlocked."""
        with self._lock:
            return list(self._runs.items())


Figure = Tuple[str, Tuple[str, ...], float]


def figures(s: RunFigures) -> Iterator[Figure]:
    """Every figure of one run as ``(key, label values, value)``.

    The keys and their labels (after the run's), one per exported metric:
    ``ratio``, ``prod``, ``bad`` (bucket), ``total``, ``disr``, ``step``,
    ``q`` (quantile), ``ideal``, ``win`` (window), ``drop``, ``eff`` (kind,
    window), ``prog``, ``mlp``, ``metric`` (name), ``hung``, ``hang``,
    ``ckpt`` (kind), ``host`` (process index), ``outlier`` (process index,
    bucket), ``stopped`` (where the engine tells a run's state), ``running`` (1
    while the run is neither ended nor stopped: alert rules fire for running
    runs only), and, for runs
    with scheduling events or incidents, ``sg``, ``ettr``, ``mpg``, ``sched``,
    ``inc``, ``mtbf``, ``mttr``; for a run that stopped without a job end
    (semantics rule 15), ``stopped_cause`` (cause: 1) and ``stopped_at``
    (POSIX time). Each exporter names them in its own conventions.
    """
    r = s.cumulative
    if r is not None:
        yield "ratio", (), r.goodput / 100.0
        yield "prod", (), r.productive_seconds
        for bucket, secs in r.badput_seconds.items():
            if bucket not in _SKIPPED:
                yield "bad", (bucket.name,), secs
        for kind, secs in r.custom_badput_seconds.items():
            yield "bad", (f"CUSTOM_BADPUT_EVENTS.{kind}",), secs
        yield "total", (), r.total_seconds
        yield "disr", (), r.disruptions
        yield "step", (), r.max_productive_step
    for q, value in s.quantiles.items():
        yield "q", (repr(float(q)),), value
    if s.ideal is not None:
        yield "ideal", (), s.ideal
    for size, window in sorted(s.rolling.items()):
        yield "win", (window_label(size),), window.goodput / 100.0
    if s.dropped is not None:
        yield "drop", (), s.dropped
    for window, eff in s.efficiency.items():
        yield "eff", ("stepping", window), eff.stepping
        yield "eff", ("available", window), eff.available
    if s.program is not None:
        yield "prog", (), s.program.mfu
        yield "mlp", (), s.program.ml_productivity_goodput
    for name, value in sorted(s.metrics.items()):
        yield "metric", (name,), value
    if s.insights is not None:
        yield from _insight_figures(s.insights)
    if s.state is not None:  # semantics rule 15
        st = s.state  # a RunState, or what another engine's state() tells
        # what alert rules key on: a finished run's figures are final, not an alarm
        yield "running", (), 1.0 if getattr(st, "state", None) == "running" else 0.0
        if getattr(st, "state", None) == "stopped" and getattr(st, "stopped_at", None) is not None:
            # "stopped" itself comes with the insights (run_state)
            yield "stopped_cause", (str(getattr(st, "cause", None)),), 1.0
            yield "stopped_at", (), st.stopped_at


def _insight_figures(snap: MonitorSnapshot) -> Iterator[Figure]:
    lc = snap.lifecycle
    if lc is not None:
        for key, value in (("sg", lc.scheduling_goodput), ("ettr", lc.ettr), ("mpg", lc.mpg)):
            if value is not None:
                yield key, (), value
        yield "sched", (), lc.scheduling_seconds
    inc = snap.incidents
    if inc is not None:
        yield "inc", (), len(inc.incidents)
        if inc.mtbf_seconds is not None:
            yield "mtbf", (), inc.mtbf_seconds
        if inc.mttr_seconds is not None:
            yield "mttr", (), inc.mttr_seconds
    yield "hung", (), 1.0 if snap.hung else 0.0
    yield "hang", (), snap.hang_seconds
    if snap.run_state is not None:
        yield "stopped", (), 1.0 if snap.run_state == "stopped" else 0.0
    advice = snap.checkpoint_advice
    if advice is not None and advice.available:
        if advice.current_interval_seconds is not None:
            yield "ckpt", ("current",), advice.current_interval_seconds
        yield "ckpt", ("recommended",), advice.recommended_interval_seconds
    if snap.hosts is not None:
        for host in snap.hosts.top(10):
            yield "host", (str(host.process_index),), host.host_local_seconds
        yield "host", ("median",), snap.hosts.median["host_local_seconds"]
        for index, bucket, _ in snap.hosts.outliers:
            yield "outlier", (str(index), bucket), 1.0
