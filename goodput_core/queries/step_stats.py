"""Step-time statistics (semantics.md rule 12).

A step's time is its span length divided by the number of steps the span
covers (steps logged sparsely share their span evenly). Spans are those
between two recorded step starts of a segment, and a segment's last step
when its ``step_end_time`` was recorded (a span closed by the job end would
include the teardown). When a step was run more than once (restarts), its
latest run counts. The ideal step time is the mean of the step times at or
below median + 3·MAD (raw MAD, as the reference; unlike the reference, steps
shorter than one second are kept), unless a value is configured. The
monitoring aggregate follows the reference's
``compute_step_deviation_from_baseline``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, Optional, Union

import numpy as np

from goodput_core.queries.sorted_times import SortedTimes, ideal_of_sorted
from goodput_core.queries.step_blocks import step_times_once
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

RECENT_WINDOW = 100
BASELINE_WINDOW = 1000
SPIKE_PERCENTILE = 90


@dataclasses.dataclass(frozen=True)
class StepStats:
    """Step times and their deviation from the ideal step time.

    Attributes:
      steps: step numbers, ascending (int64 array; built when first read
        where they are a whole range, as a report's usually are).
      step_times: seconds per step, aligned with ``steps``.
      ideal_step_time: the configured value, else the computed one; None
        when there are no step times.
      deviation_aggregate: the monitoring figure (cumulative mode).
      deviations: ``|step_time - ideal_step_time|`` (empty without an ideal),
        computed when first read (a report reads only the aggregate: at
        millions of steps the array is tens of MiB).
    """

    step_times: np.ndarray
    ideal_step_time: Optional[float]
    deviation_aggregate: float
    #: The steps as given: an array, or a range of as many steps as times.
    step_numbers: Union[np.ndarray, range] = dataclasses.field(default=range(0), repr=False)
    #: Percentiles of the step times found with them ({pct: seconds}).
    known_percentiles: Dict[float, float] = dataclasses.field(default_factory=dict, repr=False,
                                                              compare=False)

    def time_percentile(self, pct: float) -> float:
        """:func:`percentile` of the step times (found with them where it was)."""
        known = self.known_percentiles.get(pct)
        return known if known is not None else percentile(self.step_times, pct)

    @functools.cached_property
    def steps(self) -> np.ndarray:
        n = self.step_numbers
        if isinstance(n, range):
            return np.arange(n.start, n.stop, dtype=np.int64)
        return n

    @functools.cached_property
    def deviations(self) -> np.ndarray:
        if self.ideal_step_time is None:
            return np.empty(0)
        return _deviations(self.step_times, self.ideal_step_time)

    def as_dict(self) -> Dict[int, float]:
        """``{step: deviation}`` in step order (the reference's format)."""
        return dict(zip(self.steps.tolist(), self.deviations.tolist()))

    def times_dict(self) -> Dict[int, float]:
        """``{step: step time}`` in step order."""
        return dict(zip(self.steps.tolist(), self.step_times.tolist()))


def step_times(timeline, cache: Optional["StepTimes"] = None) -> tuple:
    """(steps, times) of every measured step, latest run per step, by step.

    Args:
      timeline: an up-to-date :class:`~goodput_core.timeline.spans.Timeline`.
      cache: a :class:`StepTimes` kept between calls on the same timeline
        (then only the steps the timeline may still change are recomputed).
    """
    if cache is not None:
        return cache.update(timeline)
    return step_times_once(timeline, _latest, _entries)


def _entries(timeline, lo: int, first_row: int) -> tuple:
    """(steps, times, when, start) of the spans of step starts ``i >= lo`` and
    of the last steps of segment rows ``>= first_row`` closed by a step end
    (``start``: the index of the step start each was measured from)."""
    st = timeline.tables["step_start"]
    t, s = st["t"], st["step"]
    seg = timeline.segments
    n = len(t)
    if not len(seg) or n < 1:
        return np.empty(0, np.int64), np.empty(0), np.empty(0), np.empty(0, np.int64)
    # inside[i]: step i and step i+1 are consecutive starts of one segment
    # (int32 counts: segments never overlap by 2**31)
    mark = np.zeros(n + 1 - lo, np.int32)
    i0, i1 = seg["i0"], seg["i1"]
    keep = i1 > lo  # segments with a pair at or after lo
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


def _override(steps: np.ndarray, times: np.ndarray, new_steps: np.ndarray,
              new_times: np.ndarray) -> tuple:
    """``(steps, times)`` (unique, sorted) with the later runs ``new_*`` (unique,
    sorted; temporaries of the caller, which the result may be) replacing or
    added: O(n) copies, no sort while steps only grow."""
    if not len(new_steps):
        return steps, times
    if not len(steps):
        return new_steps, new_times  # (the caller's temporaries: no copy)
    if new_steps[0] > steps[-1]:  # a run going on
        return np.concatenate((steps, new_steps)), np.concatenate((times, new_times))
    if len(new_steps) >= len(steps) and np.array_equal(new_steps[:len(steps)], steps):
        # every step replaced, later ones added (a first update): no index arrays
        return new_steps, new_times
    pos = np.searchsorted(steps, new_steps)
    hit = pos < len(steps)
    hit[hit] = steps[pos[hit]] == new_steps[hit]
    times = times.copy()
    times[pos[hit]] = new_times[hit]
    if hit.all():
        return steps, times
    add = ~hit
    steps = np.insert(steps, pos[add], new_steps[add])
    times = np.insert(times, pos[add], new_times[add])
    return steps, times


class StepTimes:
    """:func:`step_times` kept up to date incrementally for one timeline.

    The timeline freezes what came before its freeze point: segment rows
    before the one it reopens are never recomputed, and step starts before
    it never move, unless it rebuilds everything (late events from long
    ago). The steps of those final rows are folded into a base once; each
    call recomputes only the spans of the rows the timeline may still
    change and lays them over the base (the latest run of a step wins, and
    those are the latest). A full rebuild of the timeline starts afresh.
    """

    def __init__(self) -> None:
        self._key: Any = None  # (timeline id, its full rebuilds): the base's validity
        self._lo = 0  # spans of step starts >= lo are recomputed
        self._row = 0  # and last steps of segment rows >= row
        self._steps = np.empty(0, np.int64)
        self._times = np.empty(0)
        #: The step times of the last update, kept sorted (the ideal step time).
        self.sorted = SortedTimes()
        self._tail = np.empty(0, np.int64)  # the steps left provisional at the last update

    def update(self, timeline) -> tuple:
        key = self._key
        steps, times, recomputed, tail = self._update(timeline)
        # times change only where a span was recomputed, now (folded into the
        # base or not) or at the last update
        touched = None if key != self._key else np.union1d(self._tail, recomputed)
        self.sorted.update(steps, times, touched)
        self._tail = tail
        return steps, times

    def _update(self, timeline) -> tuple:
        key = (id(timeline), timeline.full_rebuilds)
        if key != self._key:
            self._key, self._lo, self._row = key, 0, 0
            self._steps, self._times = np.empty(0, np.int64), np.empty(0)
        steps, times, when, start = _entries(timeline, self._lo, self._row)
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
        base = self._steps
        if _follows(base, fin_steps) and _follows(fin_steps if len(fin_steps) else base,
                                                  tail_steps):
            # a run going on: one copy, the base a view of it (never modified in place)
            n = len(base) + len(fin_steps)
            out_steps = np.concatenate((base, fin_steps, tail_steps))
            out_times = np.concatenate((self._times, fin_times, tail_times))
            self._steps, self._times = out_steps[:n], out_times[:n]
            return out_steps, out_times, steps, tail_steps
        self._steps, self._times = _override(self._steps, self._times, fin_steps, fin_times)
        return (*_override(self._steps, self._times, tail_steps, tail_times), steps, tail_steps)


def _follows(steps: np.ndarray, later: np.ndarray) -> bool:
    """Whether sorted ``later`` only holds steps after all of sorted ``steps``."""
    return not len(steps) or not len(later) or later[0] > steps[-1]


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
    return _aggregate(len(deviations), deviations[-_last(recent, baseline):], mode, recent,
                      baseline, pct)


def _last(recent: int, baseline: int) -> int:
    """How many of the last deviations :func:`deviation_aggregate` reads."""
    return max(recent + baseline, RECENT_WINDOW)


def _deviations(times: np.ndarray, ideal: float) -> np.ndarray:
    dev = np.subtract(times, ideal)
    np.abs(dev, out=dev)  # no second array of the run's length
    return dev


def _aggregate(n: int, tail: np.ndarray, mode: str = "cumulative", recent: int = RECENT_WINDOW,
               baseline: int = BASELINE_WINDOW, pct: float = SPIKE_PERCENTILE) -> float:
    """:func:`deviation_aggregate` of ``n`` deviations from the last of them."""
    if not n:
        return 0.0
    d = np.abs(np.asarray(tail, np.float64))
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
    steps, times = cache.update(timeline)
    if configured_ideal is not None:
        ideal = configured_ideal
    else:  # the same figure from the times kept sorted: no partition
        ideal = ideal_of_sorted(cache.sorted.sorted)
    return _stats(steps, times, ideal)


def _stats(steps, times: np.ndarray, ideal: Optional[float], known=None) -> StepStats:
    if ideal is None:
        return StepStats(times, None, 0.0, steps)
    ideal = float(ideal)
    tail = _deviations(times[-_last(RECENT_WINDOW, BASELINE_WINDOW):], ideal)
    return StepStats(times, ideal, _aggregate(len(times), tail), steps, known or {})


#: The percentiles a report shows (found with the ideal step time when computed once).
REPORT_PERCENTILES = (50.0, 90.0)


def _stats_once(timeline, configured_ideal: Optional[float]) -> StepStats:
    """:func:`compute_step_stats` without a cache (a report asks once): the
    times are sorted in place for the ideal step time (the figure the cache
    gives: the same sum in the same order) and the report's percentiles, then
    computed again in step order, so that no two arrays of the run's length
    (tens of MiB at millions of steps) are ever held at once."""
    steps, times = step_times_once(timeline, _latest, _entries, as_range=True)  # (ours)
    if configured_ideal is not None or not len(times):
        return _stats(steps, times, configured_ideal)
    del steps
    times.sort()
    ideal = ideal_of_sorted(times)
    found = np.percentile(times, REPORT_PERCENTILES, overwrite_input=True)
    known = dict(zip(REPORT_PERCENTILES, (float(v) for v in found)))
    del times
    steps, times = step_times_once(timeline, _latest, _entries, as_range=True)
    return _stats(steps, times, ideal, known)
