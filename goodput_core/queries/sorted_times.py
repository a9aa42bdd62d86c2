"""The ideal step time of a growing run without sorting every step time each time.

:func:`~goodput_core.queries.step_stats.ideal_step_time` (the mean of the step
times at or below median + 3·MAD) partitions every step time twice per call.
:class:`SortedTimes` keeps the step times sorted between calls, updated with
what changed (new steps, and the few whose time the timeline recomputed), so
that the median is one index, the MAD a binary search over the two sorted
halves of ``|x - median|``, and the mean one sum over the normal prefix:
O(n) copying and summing, no partition and no sort while the run goes on.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["SortedTimes", "ideal_of_sorted"]


class SortedTimes:
    """The step times of ``(steps, times)`` pairs, kept sorted across updates."""

    def __init__(self) -> None:
        self._steps = np.empty(0, np.int64)
        self._times = np.empty(0)
        self.sorted = np.empty(0)

    def update(self, steps: np.ndarray, times: np.ndarray,
               touched: Optional[np.ndarray] = None) -> np.ndarray:
        """Takes the current (steps, times) (steps sorted, unique, never fewer
        than before); returns the times sorted.

        Args:
          touched: the steps whose time may have changed since the last update
            (None: any of them); the others are not compared.
        """
        m = len(self._steps)
        # the old steps are a prefix: as many steps up to the old last one as before
        grew = len(steps) >= m and (not m or (
            steps[m - 1] == self._steps[-1]
            and int(np.searchsorted(steps, self._steps[-1], side="right")) == m))
        if not m or not grew or np.isnan(times[m:]).any():
            # the first update (what the merge below would give, with fewer
            # temporaries), or a step appeared before others (rare): afresh
            self.sorted = np.sort(times)
        else:
            if touched is None:
                changed = np.flatnonzero(times[:m] != self._times[:m])
            else:
                idx = np.searchsorted(self._steps, touched)
                ok = idx < m
                idx, touched = idx[ok], touched[ok]
                idx = np.unique(idx[self._steps[idx] == touched])
                changed = idx[times[idx] != self._times[idx]]
            removed = np.sort(self._times[changed])
            added = np.sort(np.concatenate((times[changed], times[m:])))
            if np.isnan(removed).any() or np.isnan(added).any():
                self.sorted = np.sort(times)
            else:
                self.sorted = _replace(self.sorted, removed, added)
        self._steps, self._times = steps, times
        return self.sorted


def _replace(x: np.ndarray, removed: np.ndarray, added: np.ndarray) -> np.ndarray:
    """Sorted ``x`` less ``removed`` (values of it, sorted) plus ``added`` (sorted)."""
    if len(removed):
        # equal values: the i-th of a run of equals takes the i-th slot of that value
        first = np.searchsorted(removed, removed, side="left")
        pos = np.searchsorted(x, removed, side="left") + (np.arange(len(removed)) - first)
        x = np.delete(x, pos)
    if len(added):
        x = np.insert(x, np.searchsorted(x, added, side="left"), added)
    return x


def ideal_of_sorted(x: np.ndarray) -> Optional[float]:
    """The ideal step time (mean at or below median + 3·MAD) of sorted times ``x``."""
    n = len(x)
    if not n:
        return None
    med = _median_sorted(x)
    split = int(np.searchsorted(x, med, side="right"))
    # |x - med| as two ascending runs: med - x[:split] reversed, and x[split:] - med
    below, above = x[:split], x[split:]
    if n % 2:
        mad = _kth(below, above, med, n // 2)
    else:
        mad = 0.5 * (_kth(below, above, med, n // 2 - 1) + _kth(below, above, med, n // 2))
    idx = int(np.searchsorted(x, med + 3.0 * mad, side="right"))
    return float(x[:idx].mean()) if idx else None


def _median_sorted(x: np.ndarray) -> float:
    n = len(x)
    return float(x[n // 2]) if n % 2 else 0.5 * (float(x[n // 2 - 1]) + float(x[n // 2]))


def _kth(below: np.ndarray, above: np.ndarray, med: float, k: int) -> float:
    """The k-th smallest (0-based) of ``med - below`` and ``above - med``, where
    ``below`` and ``above`` are ascending (so ``med - below`` descends)."""
    a, b = len(below), len(above)

    def da(i: int) -> float:  # i-th smallest of med - below
        return med - float(below[a - 1 - i])

    def db(j: int) -> float:
        return float(above[j]) - med

    # take i from the first run and k + 1 - i from the second: find the split
    lo, hi = max(0, k + 1 - b), min(k + 1, a)
    while lo < hi:
        i = (lo + hi) // 2
        j = k + 1 - i
        if j > 0 and i < a and db(j - 1) > da(i):
            lo = i + 1
        else:
            hi = i
    i, j = lo, k + 1 - lo
    return max(da(i - 1) if i > 0 else -np.inf, db(j - 1) if j > 0 else -np.inf)
