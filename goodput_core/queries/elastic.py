"""Elastic training: the three elastic buckets and time-weighted slice efficiency.

Buckets (painted by :mod:`goodput_core.timeline.spans`, semantics.md rules 7-8).
The recorder's elastic events become intervals, paired per kind as the
reference's ``ElasticGoodputCalculator`` pairs them (a second start replaces
a pending one, an end without a start is skipped):

* ``record_elastic_wait_start_time(type)`` / ``_end_time(type)``, paired by
  the raw type: ``ELASTIC_SCALE_UP`` when ``'scale_up'`` is in the lower-cased
  type, else ``ELASTIC_SLICE_DOWN`` (the reference's test, so ``"SCALE_UP"``
  and ``"wait_scale_up"`` are scale-ups and every other type is a slice-down);
* ``record_elastic_reinit_start_time`` / ``_end_time``: ``ELASTIC_REINITIALIZATION``.

A re-initialisation usually re-runs accelerator init and training prep: that
time is counted once, as re-initialisation (it outranks TPU init and prep,
and scale-up outranks slice-down). The reference gets the same numbers on
well-formed logs by subtracting the overlap afterwards; where a wait overlaps
a step or another wait it counts the time twice, we count it once.

Slice efficiency (this module), the reference's
``_compute_time_weighted_efficiency``: every ``record_elastic_slice_counts(
active, total, available)`` holds from its time until the next record, and

* stepping efficiency  = time-weighted mean of ``active / max(total, 1)``,
* available efficiency = time-weighted mean of ``available / max(total, 1)``,

over a window; time before the first record counts as 0, records at the same
time: the last one recorded holds. Unlike the reference, any window works
(the record in force when the window opens counts even when it was written
before it; the reference's interval query does not see it), the window is
clipped to the job's lifetime, and idle time between attempts is left out of
both the weights and the duration (as it is left out of total time).
The fractions are not clamped, as in the reference (a log with more active
than total slices gives an efficiency above 1).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Tuple

import numpy as np

from goodput_core.timeline.intervals import complement
from goodput_core.timeline.liveness import lifetime_end

__all__ = ["SliceCounts", "SliceEfficiency", "reportable", "slice_counts", "slice_efficiency",
           "slice_efficiency_of_run", "time_weighted_mean"]


class SliceCounts(NamedTuple):
    """The recorded slice counts of a run, in time order (float64 arrays).

    Attributes:
      times: POSIX seconds of each record.
      active: slices stepping (the reference's ``active_slices``).
      available: slices available to the job.
      total: slices the job is configured for.
    """

    times: np.ndarray
    active: np.ndarray
    available: np.ndarray
    total: np.ndarray


@dataclasses.dataclass(frozen=True)
class SliceEfficiency:
    """Time-weighted slice efficiency over a window.

    Attributes:
      stepping: mean fraction of the total slices that were stepping.
      available: mean fraction of the total slices that were available.
      seconds: the time the means are over (window ∩ lifetime, idle excepted);
        0 for an empty window (both fractions are then 0, as the reference).
      window: the effective ``(start, end)`` (clipped to the lifetime).
    """

    stepping: float
    available: float
    seconds: float
    window: Tuple[float, float]


def slice_counts(tables) -> SliceCounts:
    """The slice-count records of an :class:`~goodput_core.timeline.ingest.EventTables`.

    Args:
      tables: the event tables (their ``slices`` side table).

    Returns:
      Copies of the columns (safe to keep across later additions).
    """
    tab = tables["slices"]
    return SliceCounts(tab["t"].copy(), tab["active"].copy(), tab["avail"].copy(),
                       tab["total"].copy())


def _cumulative(times: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """∫ from -inf to each ``x`` of the step function that takes ``values[i]``
    on ``[times[i], times[i+1])`` and 0 before ``times[0]``.

    Ties in ``times`` give zero-length steps, so the last of equal times holds.
    """
    x = np.asarray(x, np.float64)
    if not len(times):
        return np.zeros(x.shape)
    area = np.concatenate(([0.0], np.cumsum(np.diff(times) * values[:-1])))
    j = np.searchsorted(times, x, side="right") - 1
    jj = np.maximum(j, 0)
    return np.where(j >= 0, area[jj] + values[jj] * (x - times[jj]), 0.0)


def time_weighted_mean(times: np.ndarray, values: np.ndarray,
                       starts: np.ndarray, ends: np.ndarray) -> Tuple[float, float]:
    """Time-weighted mean of a step function over disjoint pieces.

    Args:
      times: sorted change points of the step function.
      values: its value from each change point to the next (0 before the first).
      starts, ends: the pieces ``[starts[i], ends[i])`` (finite, disjoint).

    Returns:
      ``(mean, seconds)``; the mean is 0.0 when the pieces have no length.
    """
    starts = np.asarray(starts, np.float64)
    ends = np.asarray(ends, np.float64)
    seconds = float((ends - starts).sum()) if len(starts) else 0.0
    if not seconds > 0:
        return 0.0, 0.0
    area = float((_cumulative(times, values, ends) - _cumulative(times, values, starts)).sum())
    return area / seconds, seconds


def slice_efficiency(counts: SliceCounts, window: Tuple[float, float],
                     idle: Tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))
                     ) -> Optional[SliceEfficiency]:
    """Stepping and available slice efficiency over a window (module docstring).

    Args:
      counts: the run's slice counts (sorted by time, ties by arrival).
      window: ``(start, end)``, finite, already clipped to the lifetime.
      idle: idle gaps ``(starts, ends)`` to leave out (any, clipped here).

    Returns:
      A :class:`SliceEfficiency`, or None when no slice count was recorded.
    """
    if not len(counts.times):
        return None
    a, b = float(window[0]), float(window[1])
    if not b > a:
        return SliceEfficiency(0.0, 0.0, 0.0, (a, max(a, b)))
    ps, pe = complement(a, b, idle[0], idle[1])
    total = np.maximum(counts.total, 1.0)  # as the reference: max(total, 1)
    stepping, seconds = time_weighted_mean(counts.times, counts.active / total, ps, pe)
    available, _ = time_weighted_mean(counts.times, counts.available / total, ps, pe)
    return SliceEfficiency(stepping, available, seconds, (a, b))


def slice_efficiency_of_run(tl, a: float, b: float, now: float) -> Optional[SliceEfficiency]:
    """Slice efficiency of ``[a, b]`` clipped to the lifetime of the updated
    timeline ``tl`` at ``now``, idle time excepted; None without a job start."""
    if not len(tl.attempts):
        return None
    lo = float(tl.attempts.start[0])
    wa = max(a, lo)
    wb = max(min(b, max(lifetime_end(tl, now), lo)), wa)
    return slice_efficiency(slice_counts(tl.tables), (wa, wb), tl.attempts.idle())


def reportable(eff: Optional[SliceEfficiency], counts: SliceCounts) -> bool:
    """Whether an efficiency is worth publishing: it covers some time, and a
    slice count was in force during it.

    Time before the first record counts as 0 in the mean (the reference's
    rule), so a window that ends before the first record would read as 0 %
    efficiency for a job that merely had not recorded its counts yet. The
    reference leaves such windows out (its details carry the keys only when
    the window's entries hold a record); the exporters and the compat
    calculator do the same through this test.

    Args:
      eff: an efficiency of the run (None: nothing to publish).
      counts: the run's slice counts.

    Returns:
      True when ``eff`` measured time and the first record precedes its end.
    """
    return (eff is not None and eff.seconds > 0 and len(counts.times) > 0
            and float(counts.times[0]) < eff.window[1])
