"""The Calculator's queries beyond runtime goodput.

Elastic slice counts and slice efficiency (:mod:`goodput_core.queries.elastic`),
run metadata and model metrics (:mod:`goodput_core.queries.diagnostics`),
program goodput (:mod:`goodput_core.queries.program_goodput`) and the insights:
hangs, checkpoint-interval advice and host outliers (docs/insights.md). Mixed
into :class:`~goodput_core.queries.calculator.Calculator`, which owns the state
they read (``_lock``, the timeline ``_tl``, the store and the host tracker).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from goodput_core.queries.arguments import time_arg
from goodput_core.queries.blocking_loads import blocking_load_seconds
from goodput_core.queries.checkpoint_advice import CheckpointAdvice, advice_of_run
from goodput_core.queries.diagnostics import (
    MetricSeries, merged_metadata, metric_series, metrics_since)
from goodput_core.queries.elastic import (
    SliceCounts, SliceEfficiency, slice_counts, slice_efficiency)
from goodput_core.queries.hangs import Hang, hangs_of_run
from goodput_core.queries.host_outliers import HostBreakdown
from goodput_core.queries.program_goodput import ProgramGoodput, program_goodput_of_run
from goodput_core.queries.results import GoodputResult

__all__ = ["BeyondGoodputMixin"]


class BeyondGoodputMixin:
    """Slice efficiency, metadata, metrics, program goodput and insights of a run."""

    # ------------------------------------------- elastic and diagnostics
    def slice_counts(self) -> SliceCounts:
        """The recorded elastic slice counts, in time order (arrays)."""
        with self._lock:
            return slice_counts(self._tl.tables)

    def slice_efficiency(self, start: Any = None, end: Any = None, now: Any = None
                         ) -> Optional[SliceEfficiency]:
        """Time-weighted stepping and available slice efficiency over a window
        clipped to the lifetime, idle time excepted (:mod:`goodput_core.queries.elastic`).

        Args:
          start, end: the window (None: the whole lifetime on that side).
          now: the query time (default: the clock).

        Returns:
          A SliceEfficiency, or None without a job start or slice counts.

        Raises:
          ValueError: NaN bounds or ``end < start``.
        """
        a = -math.inf if start is None else time_arg(start, "start")
        b = math.inf if end is None else time_arg(end, "end")
        if b < a:
            raise ValueError(f"window ends before it starts: [{a}, {b}]")
        with self._lock:
            t = self._now(now)
            tl = self._tl
            tl.update()
            if not len(tl.attempts):
                return None
            lo = float(tl.attempts.start[0])
            wa = max(a, lo)
            wb = max(min(b, max(tl.attempts.lifetime_end(t), lo)), wa)
            return slice_efficiency(slice_counts(tl.tables), (wa, wb), tl.attempts.idle())

    def metadata(self) -> Dict[str, Any]:
        """Run metadata: the latest recorded value of each key."""
        with self._lock:
            return merged_metadata(self._tl.tables)

    def metrics(self, name: str) -> MetricSeries:
        """The time series of one model metric (``recorder.record_metric``).

        Returns:
          ``MetricSeries(steps, times, values)`` numpy arrays in time order;
          steps are -1 where none was recorded; empty for an unknown name.
        """
        with self._lock:
            return metric_series(self._tl.tables, name)

    def metrics_since(self, cursor: int = -1) -> Tuple[Dict[str, MetricSeries], int]:
        """The metric points added since the previous call (the monitor's feed).

        Args:
          cursor: what the previous call returned (-1: every point so far).

        Returns:
          ``({name: MetricSeries}, cursor)``: each series in time order; pass
          the cursor to the next call.
        """
        with self._lock:
            return metrics_since(self._tl.tables, cursor)

    def program_goodput(self, now: Any = None, *, flops_per_step: Optional[float] = None,
                        peak_flops: Optional[float] = None, num_devices: Optional[int] = None,
                        result: Optional[GoodputResult] = None) -> Optional[ProgramGoodput]:
        """Program goodput (MFU) and ML productivity goodput, cumulative
        (:mod:`goodput_core.queries.program_goodput`).

        Args:
          now: the query time (default: the clock).
          flops_per_step, peak_flops, num_devices: override the run metadata
            (``flops_per_step``, ``peak_flops_per_device`` or the peak table
            entry of ``device_kind``, ``num_devices``).
          result: this calculator's cumulative result at ``now``, when the
            caller has it already (the monitor): saves computing it again.

        Returns:
          A ProgramGoodput, or None when a figure is missing or no step has
          been productive yet.
        """
        with self._lock:
            if result is None:
                result = self.cumulative(now=now)
            self._tl.update()  # a given result may predate the last refresh
            return program_goodput_of_run(
                self._tl, result, merged_metadata(self._tl.tables, deep_copy=False),
                flops_per_step=flops_per_step, peak_flops=peak_flops, num_devices=num_devices)

    # ------------------------------------------- insights (docs/insights.md)
    def hangs(self, now: Any = None) -> List[Hang]:
        """The hangs the watchdog recorded, in time order (:mod:`goodput_core.queries.hangs`).

        Args:
          now: the query time (the length of a hang still open).
        """
        with self._lock:
            t = self._now(now)
            self._tl.update()
            return hangs_of_run(self._tl.tables, self._tl.attempts.start, t)

    def blocking_load_seconds(self, start: Any = -math.inf, end: Any = math.inf,
                              now: Any = None) -> float:
        """Seconds of ``[start, end]`` (clipped to the lifetime) covered by loads
        recorded with ``with rec.data_loading():``, blocking by default
        (:mod:`goodput_core.queries.blocking_loads`)."""
        life = self.lifetime(now)
        if life is None:
            return 0.0
        a, b = max(time_arg(start, "start"), life[0]), min(time_arg(end, "end"), life[1])
        with self._lock:
            return blocking_load_seconds(self._tl.tables, a, b)

    def checkpoint_advice(self, now: Any = None) -> CheckpointAdvice:
        """Checkpoint-interval advice from this run's failures, saves and
        restarts (:mod:`goodput_core.queries.checkpoint_advice`); ``available`` is False
        with a reason when the run had no failure or no save."""
        with self._lock:
            result = self.cumulative(now=now)
            return advice_of_run(self._tl, result, self.step_stats())

    def hosts(self, now: Any = None, **kwargs: Any) -> HostBreakdown:
        """Per-host host-local time and the outlier hosts
        (:mod:`goodput_core.queries.host_outliers`), from the store's events split by
        process index (on multi-host runs, read incrementally beside this
        calculator's own reads; nothing extra on single-host runs).

        Raises:
          ValueError: this calculator reads no store (use
            :class:`~goodput_core.queries.host_outliers.HostTracker` with events).
        """
        if self._store is None:
            raise ValueError("hosts() needs a calculator that reads a store")
        with self._lock:
            self.refresh()
            self._host_tracker.refresh()
            return self._host_tracker.breakdown(self._now(now), **kwargs)
