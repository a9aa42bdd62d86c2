"""Goodput queries over a run's events: cumulative, windows, rolling windows,
exclusions and step-time statistics.

API summary::

    from goodput_core.queries.calculator import Calculator

    calc = Calculator("run-1", "sqlite:///goodput.sqlite")  # reads the store (its
                                        # first query reads what is stored)
    calc.refresh()                      # reads only the events new since last time
    n, cursor = calc.pull(store, cursor)  # or read any store yourself, in pages
    calc = Calculator()                 # or feed events yourself:
    calc.add(events)                    #   EventRecords (any order, duplicates ok)
    calc.add_payloads(dicts)            #   reference-format payloads

    r = calc.cumulative()               # GoodputResult over the whole lifetime
    r = calc.cumulative(exclude=[(a, b), ...])   # minus the union of intervals
    r = calc.window(a, b)               # any window [a, b] (also with exclude=)
    rs = calc.rolling([60, 3600])       # windows ending now (an ended or stopped run:
                                        #   at its lifetime's end), from one timeline
    s = calc.step_stats()               # StepStats: step times, ideal, deviations
    calc.spans(a, b)                    # [(start, end, label), ...] for pictures
    calc.skipped                        # {reason: count} of unusable inputs
    calc.slice_efficiency(a, b)         # SliceEfficiency(stepping, available, ...)
    calc.slice_counts()                 # SliceCounts(times, active, available, total)
    calc.metrics("loss")                # MetricSeries(steps, times, values)
    new, cursor = calc.metrics_since(cursor)     # points new since the last call, by name
    calc.metadata()                     # run metadata, latest value per key
    calc.program_goodput()              # ProgramGoodput(mfu, ...) or None
    calc.state()                        # RunState: running / stopped at T (cause) / ended
    calc.hangs()                        # [Hang(step, start, end, seconds, stack), ...]
    calc.checkpoint_advice()            # CheckpointAdvice (Young/Daly) or its reason
    calc.hosts()                        # HostBreakdown: per-host host-local time, outliers

    r.goodput, r.productive_seconds, r.total_seconds, r.idle_seconds,
    r.excluded_seconds, r.badput_seconds[BadputType.X], r.badput_percent,
    r.custom_badput_seconds["EVAL"], r.data_loading_async_seconds,
    r.disruptions, r.max_productive_step, r.last_step, r.skipped, r.window

Times are POSIX seconds (or datetimes; naive = local time). ``now`` defaults to the
injected ``clock``. Queries never raise on bad data (bad events are skipped
and counted); they raise ``ValueError`` only for impossible arguments (a
window that ends before it starts, NaN bounds, a negative rolling size).
Semantics: ``docs/semantics.md`` in the repository (every rule, with a
worked example and its test); the spans: :mod:`goodput_core.timeline.spans`.
The calculator is thread-safe (one lock around updates and queries). Every
query is a method of this one class; the work of each is done by the query
module it names (queries below the calculator never import it; per-host
figures come from calculators it makes for :mod:`goodput_core.queries.host_outliers`).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.queries.arguments import Interval, exclusion_intervals, time_arg
from goodput_core.queries.blocking_loads import blocking_load_seconds
from goodput_core.queries.checkpoint_advice import CheckpointAdvice, advice_of_run
from goodput_core.queries.diagnostics import (
    MetricSeries, merged_metadata, metric_series, metrics_since)
from goodput_core.queries.elastic import (
    SliceCounts, SliceEfficiency, slice_counts, slice_efficiency_of_run)
from goodput_core.queries.hangs import Hang, hangs_at
from goodput_core.queries.host_outliers import HostBreakdown
from goodput_core.queries.program_goodput import ProgramGoodput, program_goodput_of_run
from goodput_core.queries.run_feed import RunFeed
from goodput_core.queries.save_storage import save_seconds_by_storage
from goodput_core.queries.results import GoodputResult
from goodput_core.queries.scheduling import SchedulingWaits, scheduling_waits
from goodput_core.queries.step_stats import StepStats, StepTimes, compute_step_stats
from goodput_core.queries.windows import (
    labelled_spans, lifetime_of, rolling_end, span_label, window_result)
from goodput_core.timeline.liveness import RunState, timeline_state
from goodput_core.timeline.spans import Timeline
from goodput_core.stores import open_store

__all__ = ["Calculator", "GoodputResult", "MetricSeries", "ProgramGoodput", "SliceCounts",
           "SliceEfficiency", "StepStats"]


class Calculator:
    """Incremental goodput calculator for one run.

    Args:
      run: the run name. Required with ``store``; with :meth:`add`, events
        of other runs are skipped (None: accept every event).
      store: a store URL, path or open Store to read with :meth:`refresh`
        (the first query reads it when :meth:`refresh` was not called: never
        a 0 % of nothing read); None with a run: the default store, the one
        ``Recorder(run)`` writes to (``$GOODPUT_STORE`` or the embedded
        file), opened at the first :meth:`refresh`.
      clock: returns the current POSIX time (``now`` of queries).
      ideal_step_time: a configured ideal step time in seconds (optional).
      liveness: False keeps rule 1 for every run: an open attempt runs to
        the query time, never stopped (the compatibility layer's setting).

    Raises:
      ValueError: a store without a run name, or a bad ideal step time.
      StoreError: the store cannot be opened.
    """

    def __init__(self, run: Optional[str] = None, store: Any = None, *,
                 clock: Callable[[], float] = time.time,
                 ideal_step_time: Optional[float] = None, liveness: bool = True):
        if store is not None and not run:
            raise ValueError("a run name is needed to read a store")
        if ideal_step_time is not None and not (
                isinstance(ideal_step_time, (int, float)) and ideal_step_time > 0):
            raise ValueError(f"ideal_step_time must be a positive number, got {ideal_step_time!r}")
        self.run = run
        if store is not None:
            store = open_store(store)
        self._clock = clock
        self._ideal = None if ideal_step_time is None else float(ideal_step_time)
        self._lock = threading.RLock()
        self._feed = RunFeed(run, store, lock=self._lock, liveness=bool(liveness), clock=clock,
                             new_host_calculator=functools.partial(Calculator, run or "",
                                                                   clock=clock))

    # --------------------------------------------------------------- input
    def add(self, events: Iterable[Any]) -> int:
        """Adds events (EventRecords); returns how many were stored.

        Events of several writer processes (``host``, ``pid``) make the job
        figures come from the lead stream (``docs/semantics.md``, many writers).
        """
        return self._feed.add(events)

    def add_payloads(self, payloads: Iterable[Any]) -> int:
        """Adds reference-format payload dicts; unparsable ones are counted."""
        return self._feed.add_payloads(payloads)

    def refresh(self) -> int:
        """Reads the events appended to the store since the last refresh.

        Events recorded for this run in this process by a :class:`Recorder`
        writing to the same store are stored first (read-your-writes; a
        bounded wait, none when nothing is pending).

        Returns:
          The number of events read (0 without a store).
        """
        return self._feed.refresh()

    def pull(self, store: Any, cursor: Any = None) -> Tuple[int, Any]:
        """Adds this run's events appended to ``store`` after ``cursor``.

        Read in pages, so that memory does not grow with the run beyond the
        engine's compact tables; as numpy columns where the store has them
        (``read_columns``: no Python object per event).

        Returns:
          ``(events read, cursor)``: pass the cursor to the next pull.
        """
        return self._feed.pull(store, cursor)

    @property
    def _tl(self) -> Timeline:
        """The job timeline as fed so far (replaced when a second writer appears);
        a calculator given a store has read it by then (its first query reads)."""
        self._feed.read_before_first_query()
        return self._feed.tl

    @property
    def _store(self) -> Any:
        return self._feed.store

    # ------------------------------------------------------------- queries
    @property
    def timeline(self) -> Timeline:
        """The underlying timeline, brought up to date."""
        with self._lock:
            self._tl.update()
            return self._tl

    @property
    def skipped(self) -> Dict[str, int]:
        """Unusable inputs so far, by reason."""
        with self._lock:
            self._tl.update()
            return self._tl.skipped()

    def lifetime(self, now: Any = None) -> Optional[Tuple[float, float]]:
        """(first job start, last job end or now), or None before a job start."""
        with self._lock:
            self._tl.update()
            att = self._tl.attempts
            if not len(att):
                return None
            t = self._now(now)
            return lifetime_of(self._tl, t)

    def cumulative(self, now: Any = None, exclude: Optional[Sequence[Interval]] = None
                   ) -> GoodputResult:
        """Goodput over the whole lifetime (minus the union of ``exclude``)."""
        return self.window(-math.inf, math.inf, now=now, exclude=exclude)

    def window(self, start: Any, end: Any, now: Any = None,
               exclude: Optional[Sequence[Interval]] = None) -> GoodputResult:
        """Goodput over ``[start, end]`` clipped to the lifetime.

        Args:
          start, end: the window (POSIX seconds or datetimes; +-inf allowed).
          now: the query time (default: the clock).
          exclude: intervals to remove from every span and from total time.

        Raises:
          ValueError: NaN bounds, ``end < start``, or such an exclusion.
        """
        a, b = time_arg(start, "start"), time_arg(end, "end")
        if b < a:
            raise ValueError(f"window ends before it starts: [{a}, {b}]")
        excl = exclusion_intervals(exclude)
        with self._lock:
            t = self._now(now)
            self._tl.update()
            return window_result(self._tl, a, b, excl, t)

    def scheduling(self, now: Any = None) -> SchedulingWaits:
        """The run's waits for resources (empty without scheduling events)."""
        with self._lock:
            self._tl.update()
            return scheduling_waits(self._tl.tables, self._tl.attempts.start, self._now(now))

    def rolling_end(self, now: Any = None) -> float:
        """Where rolling windows end at ``now``: ``now`` while the run runs, the
        lifetime's end once it ended or stopped (semantics.md rules 10 and 15:
        a finished run's rolling figures do not decay as it is read later)."""
        with self._lock:
            t = self._now(now)
            self._tl.update()
            return rolling_end(self._tl, t)

    def rolling(self, seconds: Iterable[float], now: Any = None,
                exclude: Optional[Sequence[Interval]] = None) -> List[GoodputResult]:
        """Windows of the given lengths ending at :meth:`rolling_end` (``now``
        while the run runs; its lifetime's end once it ended or stopped), in
        the given order."""
        sizes = [float(s) for s in seconds]
        if any(not (s >= 0) for s in sizes):
            raise ValueError(f"rolling window sizes must be >= 0, got {sizes}")
        with self._lock:
            t = self._now(now)
            end = self.rolling_end(t)
            return [self.window(end - s, end, now=t, exclude=exclude) for s in sizes]

    def spans(self, start: Any = -math.inf, end: Any = math.inf, now: Any = None
              ) -> List[Tuple[float, float, str]]:
        """The attributed spans of ``[start, end]`` clipped to the lifetime, in
        time order (for timeline pictures).

        Returns:
          ``(start, end, label)`` tuples; labels are ``PRODUCTIVE``, ``IDLE``,
          ``SCHEDULING`` (a wait for resources after a requeue), a BadputType
          name, or ``CUSTOM_BADPUT_EVENTS:<TYPE>``.
        """
        s, e, c, names = self._labelled(start, end, now)
        return [(x, y, span_label(code, names)) for x, y, code in zip(s.tolist(), e.tolist(),
                                                                  c.tolist())]

    def span_arrays(self, start: Any = -math.inf, end: Any = math.inf, now: Any = None
                    ) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        """As :meth:`spans`, as ``{label: (starts, ends)}`` numpy arrays in time
        order (no Python object per span: pictures of long runs)."""
        s, e, c, names = self._labelled(start, end, now)
        out = {}
        for code in np.unique(c).tolist():
            sel = c == code
            out[span_label(code, names)] = (s[sel], e[sel])
        return out

    def _labelled(self, start: Any, end: Any, now: Any):
        """``(starts, ends, codes, custom names)`` of the spans of ``[start, end]``."""
        a, b = time_arg(start, "start"), time_arg(end, "end")
        if b < a:
            raise ValueError(f"window ends before it starts: [{a}, {b}]")
        life = self.lifetime(now)
        with self._lock:
            if life is None:
                return np.empty(0), np.empty(0), np.empty(0, np.int64), []
            return labelled_spans(self._tl, max(a, life[0]), min(b, life[1]), self._now(now))

    def state(self, now: Any = None) -> RunState:
        """Running, stopped (where and why) or ended, and the time from the last
        sign of life to each restart (semantics.md rule 15,
        :mod:`goodput_core.timeline.liveness`)."""
        with self._lock:
            t = self._now(now)
            self._tl.update()
            return timeline_state(self._tl, t)

    def step_stats(self, ideal_step_time: Optional[float] = None, *,
                   incremental: bool = True) -> StepStats:
        """Step times, ideal step time and deviations (semantics.md rule 12).

        Args:
          ideal_step_time: overrides the configured ideal step time.
          incremental: False when asking once (a report): then, unless an
            earlier call started it, no state is kept for the next calls to
            recompute only what changed, and the computation holds less
            memory (the same figures either way).
        """
        with self._lock:
            self._tl.update()
            ideal = ideal_step_time if ideal_step_time is not None else self._ideal
            # one computation per timeline version: a monitor cycle asks twice
            # (deviations, checkpoint advice), and nothing new may have arrived
            key = (id(self._tl), self._tl.version, ideal)
            cached = getattr(self, "_step_cache", None)
            if cached is None or cached[0] != key:
                kept = getattr(self, "_step_times", None)
                if kept is None and incremental:
                    kept = self._step_times = StepTimes()  # only what may still change
                cached = self._step_cache = (key, compute_step_stats(self._tl, ideal, kept))
            return cached[1]

    def step_time_percentiles(self, pcts: Sequence[float]) -> List[Optional[float]]:
        """Percentiles of :meth:`step_stats`' step times (linear interpolation, as
        ``numpy.percentile``; None without step times), from the times kept sorted."""
        with self._lock:
            self.step_stats()  # (brings the sorted times up to date)
            return [self._step_times.sorted.percentile(p) for p in pcts]

    # ----------------------------------------- elastic and diagnostics
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
            self._tl.update()
            return slice_efficiency_of_run(self._tl, a, b, t)

    def metadata(self) -> Dict[str, Any]:
        """Run metadata: the latest recorded value of each key."""
        with self._lock:
            return merged_metadata(self._tl.tables)

    def metrics(self, name: str) -> MetricSeries:
        """The time series of one model metric (``recorder.record_metric``):
        ``MetricSeries(steps, times, values)`` numpy arrays in time order;
        steps are -1 where none was recorded; empty for an unknown name."""
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

    # ----------------------------------------- insights (docs/insights.md)
    def hangs(self, now: Any = None) -> List[Hang]:
        """The hangs the watchdog recorded, in time order (:mod:`goodput_core.queries.hangs`);
        ``now``: the query time (the length of a hang still open)."""
        with self._lock:
            t = self._now(now)
            self._tl.update()
            return hangs_at(self._tl, t)

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

    def save_seconds_by_storage(self, start: Any = -math.inf, end: Any = math.inf,
                                now: Any = None, exclude: Optional[Sequence[Interval]] = None
                                ) -> Dict[str, float]:
        """The checkpoint save bucket of ``[start, end]`` (clipped to the
        lifetime) minus ``exclude``, split into ``local`` and ``persistent``
        saves (:mod:`goodput_core.queries.save_storage`); the parts add up to
        the bucket of the same window and exclusions."""
        excl = exclusion_intervals(exclude)
        life = self.lifetime(now)
        if life is None:
            return {"local": 0.0, "persistent": 0.0}
        a, b = max(time_arg(start, "start"), life[0]), min(time_arg(end, "end"), life[1])
        with self._lock:
            self._tl.update()
            return save_seconds_by_storage(self._tl, a, b, excl)

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
            tracker = self._feed.host_tracker
            tracker.refresh()
            return tracker.breakdown(self._now(now), **kwargs)

    def _now(self, now: Any) -> float:
        return time_arg(self._clock() if now is None else now, "now")

