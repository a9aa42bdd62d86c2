"""Step times of a whole timeline computed once, block by block.

:func:`~goodput_core.queries.step_stats.step_times` without a kept
:class:`~goodput_core.queries.step_stats.StepTimes` (a report asks once).
The figures are those of the general computation (every span at once, then
the latest run of each step), but the spans are taken a block of step
starts at a time and each block's latest runs are written into an array
indexed by step number, so that a later run overwrites an earlier one: no
array of the run's length is held besides that one and the result, where
the general computation holds seven (tens of MiB each at millions of steps).

Step numbers far apart (a range much wider than the number of step starts)
would make that array large: such timelines take the general computation.
"""

from __future__ import annotations

from typing import Callable, Tuple, Union

import numpy as np

from goodput_core.queries.step_groups import completion_rows, group_entries
from goodput_core.timeline.segments import CLOSE_STEP_END

__all__ = ["step_times_once"]

BLOCK = 1 << 17  # step starts per block: a few MiB of temporaries
_SPREAD = 2  # step range per step start above which the general computation is used


def step_times_once(timeline, latest: Callable, entries: Callable, as_range: bool = False
                    ) -> Tuple[Union[np.ndarray, range], np.ndarray]:
    """(unique steps ascending, time of each one's latest run) of an
    up-to-date Timeline.

    Args:
      latest, entries: ``step_stats._latest`` (the latest run of each step
        among some spans) and ``step_stats._entries`` (every span at once),
        given by step_stats, which this module does not import (it imports
        this one).
      as_range: steps that are a whole range of numbers come as a ``range``
        (not an array of tens of MiB at millions of steps).
    """
    st = timeline.tables["step_start"]
    t, s = st["t"], st["step"]
    seg = timeline.segments
    n = len(t)
    if not len(seg) or n < 1:
        return np.empty(0, np.int64), np.empty(0)
    lo_step, hi_step = int(s.min()), int(s.max())
    width = hi_step - lo_step + 1
    if width > _SPREAD * n + BLOCK:
        return latest(*entries(timeline, 0, 0)[:3])
    i0, i1 = seg["i0"], seg["i1"]
    # segments measured by completion (step_groups): their steps come from
    # their groups, listed with the block of their group's last step start
    completion = completion_rows(timeline)
    g_steps, g_times, g_when, g_at = group_entries(timeline, 0, completion)
    # a segment's last step, closed by its step end: (start index, time), in
    # the order the general computation lists them (after every span)
    last = (seg["close_kind"] == CLOSE_STEP_END) & ~completion
    end_i = i1[last]
    if completion.any():
        i0, i1 = i0[~completion], i1[~completion]
    end_times = seg["close"][last] - t[end_i]
    # where each falls among the spans in (start time, list position) order:
    # after every span that starts at or before it (spans are in time order)
    end_at = np.searchsorted(t, t[end_i], side="right")
    times = np.empty(width)
    seen = np.zeros(width, bool)
    pairs = max(n - 1, 0)  # span i runs from start i to start i + 1
    for lo in range(0, max(pairs, 1), BLOCK):
        hi = min(lo + BLOCK, pairs)
        i = _spans_in(i0, i1, lo, hi)
        steps = s[i]
        span_times = t[i + 1] - t[i]
        np.true_divide(span_times, s[i + 1] - steps, out=span_times)
        when = t[i]
        # the step ends placed after this block's spans and before the next's
        mine = (end_at > lo) & (end_at <= hi) if lo else end_at <= hi
        if hi >= pairs:
            mine |= end_at > hi
        if mine.any():
            ei = end_i[mine]
            steps = np.concatenate((steps, s[ei]))
            span_times = np.concatenate((span_times, end_times[mine]))
            when = np.concatenate((when, t[ei]))
        if len(g_at):
            a = int(np.searchsorted(g_at, lo, side="left")) if lo else 0
            b = len(g_at) if hi >= pairs else int(np.searchsorted(g_at, hi, side="left"))
            if b > a:
                steps = np.concatenate((steps, g_steps[a:b]))
                span_times = np.concatenate((span_times, g_times[a:b]))
                when = np.concatenate((when, g_when[a:b]))
        if not len(steps):
            continue
        steps, span_times = latest(steps, span_times, when)
        steps -= lo_step  # (its own array: latest copies, or s[i] did)
        times[steps] = span_times  # a later block is a later run: it overwrites
        seen[steps] = True
    steps, times = _measured(times, seen, lo_step)
    if isinstance(steps, range) and not as_range:
        steps = np.arange(steps.start, steps.stop, dtype=np.int64)
    return steps, times


def _measured(times: np.ndarray, seen: np.ndarray, lo_step: int):
    """(steps, times) of the measured steps of the array by step number
    (``lo_step`` at index 0), without a second array of its length."""
    if not seen.any():
        return np.empty(0, np.int64), np.empty(0)
    a = int(np.argmax(seen))
    b = len(seen) - int(np.argmax(seen[::-1]))
    if seen[a:b].all():  # unmeasured steps only at the ends (the open last step): a view
        return range(lo_step + a, lo_step + b), times[a:b]
    steps = np.flatnonzero(seen)
    steps += lo_step
    k = 0  # the measured times moved to the front, a block at a time (never ahead of k)
    for lo in range(0, len(seen), BLOCK):
        kept = times[lo:lo + BLOCK][seen[lo:lo + BLOCK]]
        times[k:k + len(kept)] = kept
        k += len(kept)
    return steps, times[:k]


def _spans_in(i0: np.ndarray, i1: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Indices ``i`` in ``[lo, hi)`` where starts ``i`` and ``i + 1`` are
    consecutive starts of one segment (segment rows ``[i0, i1]``)."""
    keep = (i1 > lo) & (i0 < hi)
    if not keep.any():
        return np.empty(0, np.int64)
    mark = np.zeros(hi - lo + 1, np.int32)
    np.add.at(mark, np.maximum(i0[keep], lo) - lo, 1)
    np.add.at(mark, np.minimum(i1[keep], hi) - lo, -1)
    inside = np.cumsum(mark[:-1], dtype=np.int32) > 0
    i = np.flatnonzero(inside)
    i += lo
    return i
