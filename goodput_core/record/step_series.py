"""The hang watchdog's step times: what a hang is measured against.

A :class:`~goodput_core.record.watchdog.HangWatchdog` *has* one
:class:`StepSeries` per job (made again at a job start). It follows the
step starts and ends the writer drains, one by one (:meth:`StepSeries.start`,
:meth:`StepSeries.end`) or a run of them at once as columns
(:meth:`StepSeries.add_columns`, the batches read from a journal: the same
state as one by one, without a Python step per event). The watchdog reads
the expected step time from it: from completion where step ends are recorded
at sync points (a step end of the step started last: the steps since the
previous sync point share the time since it; under asynchronous dispatch a
step start is a dispatch), else from the step starts.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

__all__ = ["StepSeries", "RECENT_STEPS"]

RECENT_STEPS = 200  # step starts and completed step times kept


class StepSeries:
    """Step starts and ends of one job, as the watchdog needs them."""

    __slots__ = ("step", "starts", "longest", "sync", "series_start", "completed")

    def __init__(self) -> None:
        self.step: Optional[int] = None  # the step started last
        self.starts: collections.deque = collections.deque(maxlen=RECENT_STEPS)
        self.longest = 0.0
        # step times from completion (semantics rule 12): the last sync point
        # (a step end of the step started last) and the recent steps' shares
        self.sync: Optional[tuple] = None  # (time, step) of the last sync point
        self.series_start: Optional[tuple] = None  # (time, step) of the series' first start
        self.completed: collections.deque = collections.deque(maxlen=RECENT_STEPS)

    def start(self, t: float, step: Any) -> None:
        """A step start at ``t`` (a float, not NaN)."""
        starts = self.starts
        if starts and t > starts[-1]:
            self.longest = max(self.longest, t - starts[-1])
        elif starts and t < starts[-1]:
            starts.clear()  # a restart inside the attempt: a new series
            self.sync = self.series_start = None
        if type(step) is int and (self.series_start is None or (
                self.step is not None and step <= self.step)):
            self.series_start, self.sync = (t, step), None  # a new segment
        starts.append(t)
        self.step = step if type(step) is int else self.step

    def end(self, t: float, step: Any) -> None:
        """A step end: a sync point when it ends the step started last; the
        steps since the previous one share the time since it (step times from
        completion, as the calculator's: under asynchronous dispatch, step
        starts are dispatches)."""
        if type(step) is not int or step != self.step or self.series_start is None:
            return
        t0, s0 = self.sync if self.sync is not None else (
            self.series_start[0], self.series_start[1] - 1)
        if step <= s0 or t < t0:
            return
        per_step = (t - t0) / (step - s0)
        self.completed.extend([per_step] * min(step - s0, RECENT_STEPS))
        self.sync = (t, step)

    def add_columns(self, is_start: Any, t: Any, step: Any) -> bool:
        """Step starts (``is_start``) and ends, in order, as numpy columns
        (times not NaN, every event with its step): the state :meth:`start`
        and :meth:`end` would leave, computed at once. Returns False, having
        changed nothing, for what only they take (a restart: a start earlier
        than the one before, or a step not after the one before it; a
        repeated or out-of-order step end): the caller then goes one by one."""
        # lazy: numpy, here only for a journal's batches (import goodput_core stays light)
        import numpy as np

        starts_at = is_start.nonzero()[0]
        t_starts, k_starts = t[starts_at], step[starts_at]
        last_t = self.starts[-1] if self.starts else None
        series_start, sync, current = self.series_start, self.sync, self.step
        if len(starts_at):
            if last_t is not None and t_starts[0] < last_t:
                return False
            if len(starts_at) > 1 and ((np.diff(t_starts) < 0).any()
                                       or (np.diff(k_starts) <= 0).any()):
                return False
        # a step end is a sync point when it ends the step started last then
        ends_at = (~is_start).nonzero()[0]
        before = np.searchsorted(starts_at, ends_at)  # starts before each end
        of_start = k_starts[np.maximum(before - 1, 0)] if len(starts_at) else \
            np.zeros(len(ends_at), np.int64)
        synced = (before > 0) & (step[ends_at] == of_start)
        new_series = len(starts_at) and (series_start is None or (
            current is not None and int(k_starts[0]) <= current))
        if current is not None and series_start is not None:
            early = (before == 0) & (step[ends_at] == current)
            if new_series and early.any():
                return False  # a sync point of the old series, then a new one: one by one
            synced |= early
        if new_series:
            series_start, sync = (float(t_starts[0]), int(k_starts[0])), None
        at = ends_at[synced]
        if len(at):
            t_sync, k_sync = t[at], step[at]
            t0, s0 = sync if sync is not None else (series_start[0], series_start[1] - 1)
            dt = np.diff(t_sync, prepend=t0)
            dk = np.diff(k_sync, prepend=s0)
            if (dk <= 0).any() or (dt < 0).any():
                return False
            tail = slice(-RECENT_STEPS, None)  # only the last shares are kept
            shares = np.repeat(dt[tail] / dk[tail], np.minimum(dk[tail], RECENT_STEPS))
            self.completed.extend(shares[-RECENT_STEPS:].tolist())
            sync = (float(t_sync[-1]), int(k_sync[-1]))
        if len(starts_at):
            gaps = np.diff(t_starts, prepend=t_starts[0] if last_t is None else last_t)
            if len(gaps) and gaps.max() > 0:
                self.longest = max(self.longest, float(gaps.max()))
            self.starts.extend(t_starts.tolist())
            current = int(k_starts[-1])
        self.series_start, self.sync, self.step = series_start, sync, current
        return True
