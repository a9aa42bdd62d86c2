"""A mergeable streaming quantile sketch with a relative-error guarantee.

The monitor publishes step-time quantiles every cycle; a quantile over every
step time of the run costs a sort of the whole history each cycle. This
sketch takes the new values only, in O(new) time, and answers any quantile
in O(buckets): values are counted in logarithmic buckets (bucket ``i``
holds ``(γ^(i-1), γ^i]`` with ``γ = (1 + α) / (1 - α)``) and a bucket is
answered by ``2·γ^i / (γ + 1)``, which is within the relative accuracy
``α`` of every value in it (the scheme of DDSketch, Masson et al., VLDB 2019).

Memory is one count per bucket between the smallest and the largest value:
about ``ln(max / min) / ln(γ)`` (some 1,400 counts for values from 1 ms to
1,000 s at α = 0.5 %), whatever the number of values. Two sketches with the
same ``α`` merge by adding counts: the result is the sketch of both streams.
Values ≤ 0 are counted in a zero bucket and answered as 0.

Example::

    sketch = QuantileSketch()
    sketch.add(np.array([0.101, 0.099, 0.250]))
    sketch.quantile(0.5)   # within 0.5 % of 0.101
"""

from __future__ import annotations

import math
from typing import Iterable, List

import numpy as np

__all__ = ["QuantileSketch", "DEFAULT_ACCURACY"]

#: The default relative accuracy of every quantile (0.5 %).
DEFAULT_ACCURACY = 0.005


class QuantileSketch:
    """Counts of values in logarithmic buckets.

    Args:
      accuracy: the relative accuracy α, 0 < α < 1.

    Raises:
      ValueError: an accuracy outside (0, 1).
    """

    def __init__(self, accuracy: float = DEFAULT_ACCURACY):
        if not 0.0 < float(accuracy) < 1.0:
            raise ValueError(f"accuracy must be within (0, 1), got {accuracy!r}")
        self.accuracy = float(accuracy)
        self._gamma = (1.0 + self.accuracy) / (1.0 - self.accuracy)
        self._log_gamma = math.log(self._gamma)
        self._offset = 0  # bucket index of counts[0]
        self._counts = np.zeros(0, np.int64)
        self._zeros = 0
        self.count = 0

    def add(self, values: Iterable[float]) -> None:
        """Counts ``values`` (NaN ignored; ≤ 0 in the zero bucket)."""
        x = np.asarray(values, np.float64).ravel()
        x = x[~np.isnan(x)]
        if not len(x):
            return
        positive = x[x > 0]
        self._zeros += len(x) - len(positive)
        self.count += len(x)
        if len(positive):
            positive = np.minimum(positive, np.finfo(np.float64).max)
            self._add_indexes(np.ceil(np.log(positive) / self._log_gamma).astype(np.int64))

    def _add_indexes(self, idx: np.ndarray, weights: np.ndarray = None) -> None:
        lo, hi = int(idx.min()), int(idx.max())
        if not len(self._counts):
            self._offset = lo
        new_lo = min(lo, self._offset)
        new_hi = max(hi, self._offset + len(self._counts) - 1)
        if new_lo != self._offset or new_hi >= self._offset + len(self._counts):
            grown = np.zeros(new_hi - new_lo + 1, np.int64)
            start = self._offset - new_lo
            grown[start:start + len(self._counts)] = self._counts
            self._counts, self._offset = grown, new_lo
        self._counts += np.bincount(idx - self._offset, weights=weights,
                                    minlength=len(self._counts)).astype(np.int64)

    def merge(self, other: "QuantileSketch") -> None:
        """Adds ``other``'s counts (same accuracy) to this sketch.

        Raises:
          ValueError: the accuracies differ.
        """
        if other.accuracy != self.accuracy:
            raise ValueError("only sketches of the same accuracy merge")
        self._zeros += other._zeros
        self.count += other.count
        nz = np.flatnonzero(other._counts)
        if len(nz):
            self._add_indexes(nz + other._offset, other._counts[nz])

    def copy(self) -> "QuantileSketch":
        """An independent copy (O(buckets))."""
        out = QuantileSketch(self.accuracy)
        out._offset, out._counts = self._offset, self._counts.copy()
        out._zeros, out.count = self._zeros, self.count
        return out

    def quantile(self, q: float) -> float:
        """The value of rank ``floor(q·(count - 1))`` in sorted order (numpy's
        ``method="lower"``), within the relative accuracy; NaN when empty.

        Raises:
          ValueError: ``q`` outside [0, 1].
        """
        return self.quantiles([q])[0]

    def quantiles(self, qs: Iterable[float]) -> List[float]:
        """:meth:`quantile` of each of ``qs``, in one pass over the buckets."""
        qs = [float(q) for q in qs]
        if not all(0.0 <= q <= 1.0 for q in qs):
            raise ValueError(f"quantiles must be within [0, 1], got {qs}")
        if not self.count:
            return [math.nan] * len(qs)
        cum = np.cumsum(self._counts)
        out = []
        for q in qs:
            rank = math.floor(q * (self.count - 1))
            if rank < self._zeros:
                out.append(0.0)
                continue
            i = int(np.searchsorted(cum, rank - self._zeros, side="right"))
            out.append(2.0 * self._gamma ** (i + self._offset) / (self._gamma + 1.0))
        return out
