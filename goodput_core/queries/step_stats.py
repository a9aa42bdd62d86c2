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
from typing import Dict, Optional

import numpy as np

from goodput_core.timeline.segments import CLOSE_STEP_END

__all__ = [
    "StepStats",
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
      steps: step numbers, ascending (int64 array).
      step_times: seconds per step, aligned with ``steps``.
      ideal_step_time: the configured value, else the computed one; None
        when there are no step times.
      deviations: ``|step_time - ideal_step_time|`` (empty without an ideal).
      deviation_aggregate: the monitoring figure (cumulative mode).
    """

    steps: np.ndarray
    step_times: np.ndarray
    ideal_step_time: Optional[float]
    deviations: np.ndarray
    deviation_aggregate: float

    def as_dict(self) -> Dict[int, float]:
        """``{step: deviation}`` in step order (the reference's format)."""
        return dict(zip(self.steps.tolist(), self.deviations.tolist()))

    def times_dict(self) -> Dict[int, float]:
        """``{step: step time}`` in step order."""
        return dict(zip(self.steps.tolist(), self.step_times.tolist()))


def step_times(timeline) -> tuple:
    """(steps, times) of every measured step, latest run per step, by step.

    Args:
      timeline: an up-to-date :class:`~goodput_core.timeline.spans.Timeline`.
    """
    st = timeline.tables["step_start"]
    t, s = st["t"], st["step"]
    seg = timeline.segments
    n = len(t)
    if not len(seg) or n < 1:
        return np.empty(0, np.int64), np.empty(0)
    # inside[i]: step i and step i+1 are consecutive starts of one segment
    mark = np.zeros(n + 1, np.int64)
    np.add.at(mark, seg["i0"], 1)
    np.add.at(mark, seg["i1"], -1)
    inside = np.cumsum(mark)[: n - 1] > 0 if n > 1 else np.zeros(0, bool)
    i = np.flatnonzero(inside)
    steps = s[i]
    times = (t[i + 1] - t[i]) / (s[i + 1] - s[i])
    when = t[i]
    last = seg["close_kind"] == CLOSE_STEP_END
    li = seg["i1"][last]
    steps = np.concatenate((steps, s[li]))
    times = np.concatenate((times, seg["close"][last] - t[li]))
    when = np.concatenate((when, t[li]))
    order = np.argsort(when, kind="stable")
    steps, times = steps[order][::-1], times[order][::-1]
    uniq, first = np.unique(steps, return_index=True)  # first in reverse = latest run
    return uniq, times[first]


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
    d = np.abs(np.asarray(deviations, np.float64))
    if not len(d):
        return 0.0
    if len(d) < RECENT_WINDOW:
        return float(d.mean())
    spike = percentile(d[-recent:], pct)
    if mode == "interval" or len(d) < recent + baseline:
        return spike
    if mode != "cumulative":
        raise ValueError(f"unsupported mode {mode!r}")
    return spike - float(np.median(d[-(recent + baseline):-recent]))


def compute_step_stats(timeline, configured_ideal: Optional[float] = None) -> StepStats:
    """Step statistics of an up-to-date timeline.

    Args:
      timeline: the Timeline.
      configured_ideal: a configured ideal step time (seconds), or None.

    Returns:
      A :class:`StepStats`.
    """
    steps, times = step_times(timeline)
    ideal = configured_ideal if configured_ideal is not None else ideal_step_time(times)
    dev = np.abs(times - ideal) if ideal is not None else np.empty(0)
    return StepStats(steps, times, None if ideal is None else float(ideal), dev,
                     deviation_aggregate(dev))
