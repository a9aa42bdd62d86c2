"""Step-time statistics (semantics.md rule 12).

A step's time is its span length divided by the number of steps the span
covers (steps logged sparsely share their span evenly). Spans are those
between two recorded step starts of a segment, and a segment's last step
when its ``step_end_time`` was recorded (a span closed by the job end would
include the teardown). In a segment with step ends recorded at sync points
(the JAX adapter's ``sync_every=N``, ``with rec.step(k)``), step times come
from completion instead: the steps between two sync points share the time
between them, phases (evaluations, saves, compiles...) left out
(:mod:`goodput_core.queries.step_groups`). When a step was run more than once (restarts), its
latest run counts. The ideal step time is the mean of the step times at or
below median + 3·MAD (raw MAD, as the reference; unlike the reference, steps
shorter than one second are kept), unless a value is configured. The
monitoring aggregate follows the reference's
``compute_step_deviation_from_baseline``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import numpy as np

from goodput_core.queries.sorted_times import SortedTimes
from goodput_core.queries.step_blocks import step_times_once
from goodput_core.queries.step_groups import completion_rows, group_entries, step_time_basis
from goodput_core.queries.step_series import Consecutive, StepColumns, StepSeries
from goodput_core.timeline.segments import CLOSE_STEP_END

__all__ = [
    "StepStats",
    "StepTimes",
    "compute_step_stats",
    "ideal_step_time",
    "percentile",
    "deviation_aggregate",
    "RECENT_WINDOW",
    "BASELINE_WINDOW",
    "SPIKE_PERCENTILE",
]

logger = logging.getLogger(__name__)

RECENT_WINDOW = 100
BASELINE_WINDOW = 1000
SPIKE_PERCENTILE = 90


class StepStats:
    """Step times and their deviation from the ideal step time.

    Attributes:
      steps: step numbers, ascending (int64 array).
      step_times: seconds per step, aligned with ``steps``.
      ideal_step_time: the configured value, else the computed one; None
        when there are no step times.
      deviations: ``|step_time - ideal_step_time|`` (empty without an ideal).
      deviation_aggregate: the monitoring figure (cumulative mode).
      series: the same steps and times as a :class:`StepSeries` (held in
        chunks: what a monitor cycle reads, a few steps at a time).
      basis: where the step times come from
        (:func:`~goodput_core.queries.step_groups.step_time_basis`):
        ``"sync points"`` (completed work between recorded step ends),
        ``"step starts"`` (the spans between step starts: dispatch intervals
        under asynchronous dispatch), ``"mixed"``, or None.

    A monitor's statistics hold their steps in chunks (a run going on
    appends): ``steps``, ``step_times`` and ``deviations`` are joined or
    computed on first use (O(n), then kept); ``count``, ``series`` and
    :meth:`deviations_of` never read the whole run.
    """

    def __init__(self, steps: Any, step_times: Any, ideal_step_time: Optional[float],
                 deviations: Any = None, deviation_aggregate: Optional[float] = None, *,
                 series: Optional[StepSeries] = None,
                 percentiles: Optional[Dict[float, float]] = None,
                 basis: Optional[str] = None):
        self.basis = basis
        if series is None:
            series = StepSeries.of(steps, step_times)
        self.series = series
        self.ideal_step_time = ideal_step_time
        #: Percentiles of the step times found with them ({pct: seconds}).
        self.known_percentiles = dict(percentiles or {})
        self._deviations = None if deviations is None else np.asarray(deviations)
        if deviation_aggregate is None:
            deviation_aggregate = _aggregate_of_last(self, RECENT_WINDOW + BASELINE_WINDOW)
        self.deviation_aggregate = float(deviation_aggregate)

    @classmethod
    def of_series(cls, series: StepSeries, ideal_step_time: Optional[float],
                  percentiles: Optional[Dict[float, float]] = None,
                  basis: Optional[str] = None) -> "StepStats":
        """The statistics of a chunked series (deviations computed on demand)."""
        return cls(None, None, ideal_step_time, series=series, percentiles=percentiles,
                   basis=basis)

    def time_percentile(self, pct: float) -> float:
        """:func:`percentile` of the step times (found with them where it was)."""
        known = self.known_percentiles.get(pct)
        return known if known is not None else percentile(self.step_times, pct)

    @property
    def count(self) -> int:
        """How many steps have a time."""
        return len(self.series)

    @property
    def steps(self) -> np.ndarray:
        return self.series.arrays()[0]

    @property
    def step_times(self) -> np.ndarray:
        return self.series.arrays()[1]

    @property
    def deviations(self) -> np.ndarray:
        if self._deviations is None:  # (two threads may both compute it: the same array)
            self._deviations = self.deviations_of(self.step_times)
        return self._deviations

    def deviations_of(self, times: np.ndarray) -> np.ndarray:
        """``|times - ideal_step_time|`` (empty without an ideal step time)."""
        if self.ideal_step_time is None:
            return np.empty(0)
        dev = np.subtract(np.asarray(times, np.float64), self.ideal_step_time)
        return np.abs(dev, out=dev)

    def as_dict(self) -> Dict[int, float]:
        """``{step: deviation}`` in step order (the reference's format)."""
        return dict(zip(self.steps.tolist(), self.deviations.tolist()))

    def times_dict(self) -> Dict[int, float]:
        """``{step: step time}`` in step order."""
        return dict(zip(self.steps.tolist(), self.step_times.tolist()))

    def __repr__(self) -> str:
        return (f"StepStats(count={self.count}, ideal_step_time={self.ideal_step_time!r}, "
                f"deviation_aggregate={self.deviation_aggregate!r})")


def _aggregate_of_last(stats: StepStats, last: int) -> float:
    """:func:`deviation_aggregate` of ``stats`` from its last ``last`` steps only."""
    n = stats.count
    if stats.ideal_step_time is None or not n:
        return 0.0
    if stats._deviations is not None:
        return deviation_aggregate(stats._deviations)
    return _aggregate(stats.deviations_of(stats.series.slice(n - last, n)[1]), n)


def step_times(timeline, cache: Optional["StepTimes"] = None) -> tuple:
    """(steps, times) of every measured step, latest run per step, by step.

    Args:
      timeline: an up-to-date :class:`~goodput_core.timeline.spans.Timeline`.
      cache: a :class:`StepTimes` kept between calls on the same timeline
        (then only the steps the timeline may still change are recomputed).
    """
    if cache is not None:
        return cache.update(timeline).arrays()
    return step_times_once(timeline, _latest, _entries)


def _entries(timeline, lo: int, first_row: int, completion: Optional[np.ndarray] = None
             ) -> tuple:
    """(steps, times, when, start) of the spans of step starts ``i >= lo`` and
    of the last steps of segment rows ``>= first_row`` closed by a step end,
    in segments measured by step starts; and of the steps measured by
    completion (:mod:`goodput_core.queries.step_groups`) whose group ends at or
    after start ``lo`` (``start``: the index of the step start each is final
    with: the one it was measured from, or the last of its group).

    Args:
      completion: :func:`~goodput_core.queries.step_groups.completion_rows`
        of the timeline (None: computed).
    """
    st = timeline.tables["step_start"]
    t, s = st["t"], st["step"]
    seg = timeline.segments
    n = len(t)
    if not len(seg) or n < 1:
        return np.empty(0, np.int64), np.empty(0), np.empty(0), np.empty(0, np.int64)
    if completion is None:
        completion = completion_rows(timeline)
    if completion.any():
        spans = _span_entries(timeline, lo, first_row, ~completion)
        groups = group_entries(timeline, lo, completion)
        return tuple(np.concatenate((a, b)) for a, b in zip(spans, groups))
    return _span_entries(timeline, lo, first_row, None)


def _span_entries(timeline, lo: int, first_row: int, rows: Optional[np.ndarray]) -> tuple:
    """:func:`_entries` of the segment rows selected by ``rows`` (None: all)
    measured by the spans between step starts."""
    st = timeline.tables["step_start"]
    t, s = st["t"], st["step"]
    seg = timeline.segments
    n = len(t)
    # inside[i]: step i and step i+1 are consecutive starts of one segment
    # (int32 counts: segments never overlap by 2**31)
    mark = np.zeros(n + 1 - lo, np.int32)
    i0, i1 = seg["i0"], seg["i1"]
    keep = i1 > lo  # segments with a pair at or after lo
    if rows is not None:
        keep &= rows
    np.add.at(mark, np.maximum(i0[keep], lo) - lo, 1)
    np.add.at(mark, i1[keep] - lo, -1)
    inside = np.cumsum(mark, dtype=np.int32)[: max(n - 1 - lo, 0)] > 0
    del mark
    i = np.flatnonzero(inside)
    del inside
    i += lo
    steps = s[i]
    # (t[i + 1] - t[i]) / (s[i + 1] - s[i]), the same operations in place:
    # at millions of steps each temporary is tens of MiB
    times = t[i + 1]
    times -= t[i]
    span = s[i + 1]
    span -= steps
    np.true_divide(times, span, out=times)
    del span
    when = t[i]
    last = seg["close_kind"][first_row:] == CLOSE_STEP_END
    if rows is not None:
        last &= rows[first_row:]
    if not last.any():
        return steps, times, when, i
    li = i1[first_row:][last]
    steps = np.concatenate((steps, s[li]))
    times = np.concatenate((times, seg["close"][first_row:][last] - t[li]))
    when = np.concatenate((when, t[li]))
    return steps, times, when, np.concatenate((i, li))


def _latest(steps: np.ndarray, times: np.ndarray, when: np.ndarray) -> tuple:
    """(unique steps, the time of each one's latest run). The arguments are
    the caller's temporaries: they may be returned as they are."""
    if _increasing(when, strict=False):
        # the stable sort below would not move anything; with every step run
        # once, in order (no restart re-ran one), the unique steps are the steps
        if _increasing(steps, strict=True):
            return steps, times
        steps, times = steps[::-1], times[::-1]
    else:
        order = np.argsort(when, kind="stable")
        steps, times = steps[order][::-1], times[order][::-1]
        del order
    uniq, first = _first_of_each(steps)  # first in reverse = latest run
    return uniq, times[first]


def _first_of_each(a: np.ndarray) -> tuple:
    """``numpy.unique(a, return_index=True)`` (the same stable sort), with a
    third fewer temporaries: at millions of steps each is tens of MiB."""
    perm = np.argsort(a, kind="stable")
    aux = a[perm]
    new = np.empty(len(aux), bool)
    new[:1] = True
    np.not_equal(aux[1:], aux[:-1], out=new[1:])
    uniq = aux[new]
    del aux
    return uniq, perm[new]


def _increasing(a: np.ndarray, strict: bool) -> bool:
    if len(a) < 2:
        return True
    return bool((a[1:] > a[:-1]).all() if strict else (a[1:] >= a[:-1]).all())


class StepTimes:
    """:func:`step_times` kept up to date incrementally for one timeline.

    The timeline freezes what came before its freeze point: segment rows
    before the one it reopens are never recomputed, and step starts before
    it never move, unless it rebuilds everything (late events from long
    ago). The steps of those final rows are folded into a base once (chunked
    columns: a run going on appends); each call recomputes only the spans
    of the rows the timeline may still change and lays them over the base
    (the latest run of a step wins, and those are the latest). A full
    rebuild of the timeline starts afresh. The step times are also kept
    sorted (:attr:`sorted`), told only the times that changed.
    """

    def __init__(self) -> None:
        self._key: Any = None  # (timeline id, its full rebuilds): the base's validity
        self._lo = 0  # spans of step starts >= lo are recomputed
        self._row = 0  # and last steps of segment rows >= row
        self._base = StepColumns()
        self._tail = (np.empty(0, np.int64), np.empty(0))  # provisional at the last update
        self._by_sync = np.empty(0, np.int64)  # first starts of the rows measured by completion
        #: The step times of the last update, kept sorted (the ideal step time).
        self.sorted = SortedTimes()

    def update(self, timeline) -> StepSeries:
        """The step times of ``timeline`` now (steps in step order)."""
        key = (id(timeline), timeline.full_rebuilds)
        completion = completion_rows(timeline)
        by_sync = timeline.segments["i0"][completion]
        afresh = key != self._key
        if not afresh and not np.array_equal(by_sync, self._by_sync):
            # a segment now measured the other way (its first sync point in the
            # middle arrived; a restart cut it short) whose steps were folded
            # already: afresh, once
            switched = np.setxor1d(by_sync, self._by_sync, assume_unique=True)
            afresh = bool(len(switched)) and int(switched.min()) < self._lo
        if afresh:
            self._lo, self._row, self._base = 0, 0, StepColumns()
            self._tail, self.sorted = (np.empty(0, np.int64), np.empty(0)), SortedTimes()
            self._key = key
        self._by_sync = by_sync
        steps, times, when, start = _entries(timeline, self._lo, self._row, completion)
        seg = timeline.segments
        # the rows the timeline keeps from now on (as SegmentTable.rebuild_tail
        # finds them): every row before the one its freeze point reopens
        i_frozen = int(np.searchsorted(timeline.tables["step_start"]["t"], timeline.F, "left"))
        row = max(int(np.searchsorted(seg["i0"], i_frozen, side="left")) - 1, 0)
        row_lo = int(seg["i0"][row]) if len(seg) else 0
        # and inside the reopened row, the spans between two starts before the
        # freeze time: nothing before it changes any more (a run without restarts
        # is one row: without this, each update would redo the whole attempt)
        lo = max(row_lo, i_frozen - 1)
        tail = slice(None)
        fin_steps, fin_times = np.empty(0, np.int64), np.empty(0)
        if lo > self._lo:
            # spans from starts before lo are final (rows are ordered and
            # disjoint: a row's last start is before the next row's first)
            final = start < lo
            del start  # (tens of MiB at millions of steps: not held through the sorts)
            k = int(final.sum())
            if final[:k].all():  # a prefix (no step ends): views, not copies
                final, tail = slice(0, k), slice(k, None)
            else:
                tail = ~final  # the final ones go to the base now
            fin_steps, fin_times = _latest(steps[final], times[final], when[final])
            del final
            self._lo, self._row = lo, row
        tail_steps, tail_times = _latest(steps[tail], times[tail], when[tail])
        del steps, times, when
        self._fold(fin_steps, fin_times, tail_steps, tail_times)
        return self._base.series(tail_steps, tail_times)

    def _fold(self, fin_steps: np.ndarray, fin_times: np.ndarray, tail_steps: np.ndarray,
              tail_times: np.ndarray) -> None:
        """Folds the final steps into the base, keeps the provisional ones, and
        tells the sorted times which times left and which came."""
        old_steps, old_times = self._tail
        self._tail = (tail_steps, tail_times)
        if not len(self._base) and not len(old_steps):  # a first update: all new
            # (the latest run of a step both final and provisional: the provisional)
            kept = ~np.isin(fin_steps, tail_steps, assume_unique=True)
            self.sorted.reset(np.concatenate((fin_times[kept], tail_times)))
            del kept
            self._base.set(fin_steps, fin_times)
            return
        # only the steps laid over the base, now or at the last update, may change
        touched = np.union1d(np.union1d(old_steps, fin_steps), tail_steps)
        before = _overlay(touched, self._base.lookup(touched), old_steps, old_times)
        self._base.set(fin_steps, fin_times)
        after = _overlay(touched, self._base.lookup(touched), tail_steps, tail_times)
        (had, was), (has, now) = before, after
        same = had & has & (was == now)
        try:
            self.sorted.update(was[had & ~same], now[has & ~same])
        except ValueError:  # (a bug: a time left that was not held) sorted afresh, O(n)
            logger.warning("step times: the sorted times were rebuilt", exc_info=True)
            self.sorted.reset(self._base.series(tail_steps, tail_times).arrays()[1])


def _overlay(steps: np.ndarray, base: tuple, over_steps: np.ndarray,
             over_times: np.ndarray) -> tuple:
    """``(found, times)`` of sorted ``steps``: ``over_*`` (sorted, unique) where
    they hold the step, else ``base`` (``(found, times)`` of the base)."""
    found, times = base
    if len(over_steps):
        pos = np.minimum(np.searchsorted(over_steps, steps), len(over_steps) - 1)
        hit = over_steps[pos] == steps
        times = np.where(hit, over_times[pos], times)
        found = found | hit
    return found, times

def ideal_step_time(times: np.ndarray) -> Optional[float]:
    """Mean of the step times at or below median + 3·MAD (raw MAD)."""
    times = np.asarray(times, np.float64)
    if not len(times):
        return None
    med = float(np.median(times))
    mad = float(np.median(np.abs(times - med)))
    normal = times[times <= med + 3.0 * mad]
    return float(normal.mean()) if len(normal) else None


def percentile(values: np.ndarray, pct: float) -> float:
    """Linear-interpolation percentile (the reference's compute_percentile)."""
    values = np.asarray(values, np.float64)
    return float(np.percentile(values, pct)) if len(values) else 0.0


def deviation_aggregate(deviations: np.ndarray, mode: str = "cumulative",
                        recent: int = RECENT_WINDOW, baseline: int = BASELINE_WINDOW,
                        pct: float = SPIKE_PERCENTILE) -> float:
    """The spike-sensitive step-deviation figure uploaded for monitoring.

    Below 100 steps: the mean deviation. Otherwise the ``pct`` percentile of
    the last ``recent`` deviations; in cumulative mode, once ``recent +
    baseline`` steps exist, minus the median of the ``baseline`` before them.

    Args:
      deviations: absolute deviations in step order.
      mode: 'cumulative' or 'interval'.

    Returns:
      The aggregate in seconds (0.0 without deviations).
    """
    deviations = np.asarray(deviations)  # (an array: not copied)
    # only the last recent + baseline count: a long run's others are not even read
    return _aggregate(deviations[-max(recent + baseline, RECENT_WINDOW):], len(deviations),
                      mode, recent, baseline, pct)


def _aggregate(last: np.ndarray, n: int, mode: str = "cumulative", recent: int = RECENT_WINDOW,
               baseline: int = BASELINE_WINDOW, pct: float = SPIKE_PERCENTILE) -> float:
    """:func:`deviation_aggregate` of ``n`` deviations, of which ``last`` are the
    last ``max(recent + baseline, RECENT_WINDOW)`` (or all of them, when fewer)."""
    if not n:
        return 0.0
    d = np.abs(np.asarray(last, np.float64))
    if n < RECENT_WINDOW:
        return float(d.mean())
    spike = percentile(d[-recent:], pct)
    if mode == "interval" or n < recent + baseline:
        return spike
    if mode != "cumulative":
        raise ValueError(f"unsupported mode {mode!r}")
    return spike - float(np.median(d[-(recent + baseline):-recent]))


def compute_step_stats(timeline, configured_ideal: Optional[float] = None,
                       cache: Optional[StepTimes] = None) -> StepStats:
    """Step statistics of an up-to-date timeline.

    Args:
      timeline: the Timeline.
      configured_ideal: a configured ideal step time (seconds), or None.
      cache: a :class:`StepTimes` kept for this timeline (incremental step times).

    Returns:
      A :class:`StepStats`.
    """
    if cache is None:
        return _stats_once(timeline, configured_ideal)
    # the monitor's way: nothing in the run's length
    series = cache.update(timeline)
    ideal = configured_ideal if configured_ideal is not None else cache.sorted.ideal()
    return StepStats.of_series(series, None if ideal is None else float(ideal),
                               basis=step_time_basis(timeline))


#: The percentiles a report shows (found with the ideal step time when computed once).
REPORT_PERCENTILES = (50.0, 90.0)


def _stats_once(timeline, configured_ideal: Optional[float]) -> StepStats:
    """:func:`compute_step_stats` without a cache (a report asks once): the
    times are sorted in place for the ideal step time (the figure a cache's
    first update gives: the same sums in the same order) and the report's
    percentiles, then computed again in step order, so that no two arrays
    of the run's length (tens of MiB at millions of steps) are held at once."""
    ideal, found = configured_ideal, None
    if ideal is None:
        times = step_times_once(timeline, _latest, _entries, as_range=True)[1]  # (ours)
        times.sort()
        ideal = SortedTimes.of_sorted(times).ideal()
        if len(times):
            values = np.percentile(times, REPORT_PERCENTILES, overwrite_input=True)
            found = dict(zip(REPORT_PERCENTILES, (float(v) for v in values)))
        del times
    steps, times = step_times_once(timeline, _latest, _entries, as_range=True)
    if isinstance(steps, range):  # (held as two numbers: StepStats.steps builds them if read)
        steps = Consecutive(steps.start, len(steps))
    return StepStats.of_series(StepSeries([(steps, times)]),
                               None if ideal is None else float(ideal), found,
                               basis=step_time_basis(timeline))
