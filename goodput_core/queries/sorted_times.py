"""The ideal step time of a growing run without sorting every step time each time.

:func:`~goodput_core.queries.step_stats.ideal_step_time` (the mean of the step
times at or below median + 3·MAD) partitions every step time twice per call.
:class:`SortedTimes` keeps the step times sorted between calls in blocks of
at most twice :data:`BLOCK` values (a block that grows past it is cut in
two; one that times leave is kept, however small), each with its count,
sum and largest value, and is told what changed (the times removed and
added).
A cycle's update touches only the blocks the changed values fall in (all of
them at once, in one merge), so its cost is about the number of changed
times times the block size, whatever the run's length; the median and MAD
are found by rank in O(log n) steps over the blocks' counts, and the mean of
the normal prefix is the blocks' sums before the cut plus a part of one block.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

__all__ = ["BLOCK", "SortedTimes", "ideal_of_sorted"]

#: Values per block as cut (a block holds 1 to 2·BLOCK; each changed value
#: costs a block's copy, and the per-block arrays are O(n / BLOCK)).
BLOCK = 256


class SortedTimes:
    """A multiset of step times kept sorted in blocks (see the module doc)."""

    def __init__(self, block: Optional[int] = None) -> None:
        self._block = int(BLOCK if block is None else block)
        self._reset(np.empty(0))
        #: Values copied by the last update (tests count them: no growth with the run).
        self.touched = 0

    def __len__(self) -> int:
        return self._n

    @property
    def sorted(self) -> np.ndarray:
        """Every value, sorted (joined: O(n); for API users and tests)."""
        return np.concatenate(self._blocks) if self._blocks else np.empty(0)

    @classmethod
    def of_sorted(cls, x: np.ndarray) -> "SortedTimes":
        """Holds sorted ``x`` as it is: the blocks are views of it, not copies
        (the caller's array, not to be written while this is in use): the
        ideal step time or a percentile of a run's times once, without a
        second array of the run's length."""
        held = cls()
        held._reset(np.asarray(x, np.float64), copy=False)
        return held

    def reset(self, values: np.ndarray) -> None:
        """Holds ``values`` (any order) and nothing else."""
        self._reset(np.sort(np.asarray(values, np.float64)))
        self.touched = self._n

    def update(self, removed: np.ndarray, added: np.ndarray) -> None:
        """Removes the values ``removed`` and adds ``added``.

        Raises:
          ValueError: a value of ``removed`` is not held (as often).
        """
        removed = np.sort(np.asarray(removed, np.float64))
        added = np.sort(np.asarray(added, np.float64))
        if not len(removed) and not len(added):
            self.touched = 0
            return
        n = self._n
        if (self._blocks and 4 * (len(removed) + len(added)) <= n
                and not np.isnan(removed).any() and not np.isnan(added).any()
                and self._merge(removed, added)):
            return
        # most of it changes, or more equal values removed than two blocks hold (rare)
        self._reset(_replace(self.sorted, removed, added))
        self.touched = self._n

    def ideal(self) -> Optional[float]:
        """The ideal step time (mean at or below median + 3·MAD), None when empty."""
        n = self._n
        if not n:
            return None
        ends = np.cumsum(self._counts)
        at = _Ranks(self._blocks, ends)
        med = at(n // 2) if n % 2 else 0.5 * (at(n // 2 - 1) + at(n // 2))
        split = self._rank_le(med, ends)
        if n % 2:
            mad = _kth(at, split, n, med, n // 2)
        else:
            mad = 0.5 * (_kth(at, split, n, med, n // 2 - 1) + _kth(at, split, n, med, n // 2))
        cut = med + 3.0 * mad
        b = int(np.searchsorted(self._lasts, cut, side="right"))
        if b == len(self._blocks):
            return float(self._sums.sum() / n)
        j = int(np.searchsorted(self._blocks[b], cut, side="right"))
        idx = (int(ends[b - 1]) if b else 0) + j
        if not idx:
            return None
        return float((self._sums[:b].sum() + self._blocks[b][:j].sum()) / idx)

    def percentile(self, pct: float) -> Optional[float]:
        """As ``numpy.percentile`` (linear interpolation) of the values: O(log n)."""
        n = self._n
        if not n:
            return None
        at = _Ranks(self._blocks, np.cumsum(self._counts))
        h = float(pct) / 100.0 * (n - 1)  # (numpy's order of operations)
        lo = int(np.floor(h))
        a = at(lo)
        if lo + 1 >= n or h == lo:
            return a
        b, t = at(lo + 1), h - lo
        # numpy's own interpolation (from the nearer end), for the same last bit
        return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t

    # ------------------------------------------------------------ internals
    def _reset(self, x: np.ndarray, copy: bool = True) -> None:
        """Blocks of ``BLOCK`` values cut from sorted ``x`` (copies: ``x`` is
        freed; views with ``copy`` False)."""
        starts = np.arange(0, len(x), self._block)
        blocks = [x[i:i + self._block] for i in starts.tolist()]
        self._blocks = [b.copy() for b in blocks] if copy else blocks
        self._counts = np.diff(np.append(starts, len(x))).astype(np.int64)
        self._sums = np.add.reduceat(x, starts) if len(x) else np.empty(0)
        self._lasts = x[starts + self._counts - 1] if len(x) else np.empty(0)
        self._n = len(x)

    def _rank_le(self, v: float, ends: np.ndarray) -> int:
        """How many values are ``<= v``."""
        b = int(np.searchsorted(self._lasts, v, side="right"))
        if b == len(self._blocks):
            return self._n
        return (int(ends[b - 1]) if b else 0) + int(np.searchsorted(self._blocks[b], v, "right"))

    def _merge(self, removed: np.ndarray, added: np.ndarray) -> bool:
        """The blocks the values fall in, merged once and cut again; False when
        a removed value is not where it should be (nothing changed then)."""
        m = len(self._blocks)
        # a value goes to the first block whose largest is >= it (or the last);
        # a removed one is in that block or, equal to its largest (equal values
        # across a block boundary), in the next one, which is touched too
        rb = np.minimum(np.searchsorted(self._lasts, removed, side="left"), m - 1)
        ab = np.minimum(np.searchsorted(self._lasts, added, side="left"), m - 1)
        spill = rb[(self._lasts[rb] == removed) & (rb + 1 < m)] + 1
        ub = np.unique(np.concatenate((rb, spill, ab)))
        blocks = self._blocks
        merged = np.concatenate([blocks[b] for b in ub.tolist()])
        gone = np.zeros(len(ub), np.int64)
        if len(removed):
            pos = _positions(merged, removed)
            if pos is None:
                return False
            # each removed value counted against the block it was found in
            # (the next one, for a value equal to its block's largest)
            ends = np.cumsum(self._counts[ub])
            gone = np.bincount(np.searchsorted(ends, pos, side="right"), minlength=len(ub))
            merged = np.delete(merged, pos)
        if len(added):
            merged = np.insert(merged, np.searchsorted(merged, added, side="left"), added)
        sizes = (self._counts[ub] + np.bincount(np.searchsorted(ub, ab), minlength=len(ub))
                 - gone)
        # each touched block becomes 0 (emptied), 1 or, above 2·BLOCK, several pieces
        pieces = np.where(sizes > 2 * self._block, -(-sizes // self._block), (sizes > 0) * 1)
        piece_sizes = _piece_sizes(sizes, pieces)
        starts = np.cumsum(piece_sizes) - piece_sizes
        new_blocks = [merged[s:s + k].copy() for s, k in zip(starts.tolist(), piece_sizes.tolist())]
        self._splice(ub, pieces, new_blocks, piece_sizes,
                     np.add.reduceat(merged, starts) if len(starts) else np.empty(0),
                     merged[starts + piece_sizes - 1] if len(starts) else np.empty(0))
        self._n += len(added) - len(removed)
        self.touched = len(merged)
        return True

    def _splice(self, ub: np.ndarray, pieces: np.ndarray, new_blocks: List[np.ndarray],
                counts: np.ndarray, sums: np.ndarray, lasts: np.ndarray) -> None:
        """Block ``ub[i]`` replaced by the next ``pieces[i]`` of ``new_blocks``."""
        odd = np.flatnonzero(pieces != 1)
        if len(odd) <= 8:  # (a run going on: a block or two split) in place, then those
            k = np.cumsum(pieces) - pieces  # each touched block's first piece
            one = np.flatnonzero(pieces == 1)
            for b, i in zip(ub[one].tolist(), k[one].tolist()):
                self._blocks[b] = new_blocks[i]
            at = k[one]
            self._counts[ub[one]], self._sums[ub[one]], self._lasts[ub[one]] = (
                counts[at], sums[at], lasts[at])
            for j in odd[::-1].tolist():  # from the end: the blocks before keep their place
                b, lo, hi = int(ub[j]), int(k[j]), int(k[j] + pieces[j])
                self._blocks[b:b + 1] = new_blocks[lo:hi]
                self._counts = np.concatenate((self._counts[:b], counts[lo:hi],
                                               self._counts[b + 1:]))
                self._sums = np.concatenate((self._sums[:b], sums[lo:hi], self._sums[b + 1:]))
                self._lasts = np.concatenate((self._lasts[:b], lasts[lo:hi],
                                              self._lasts[b + 1:]))
            return
        reps = np.ones(len(self._blocks), np.int64)
        reps[ub] = pieces
        blocks: List[np.ndarray] = []
        prev, k = 0, 0
        for b, p in zip(ub.tolist(), pieces.tolist()):
            blocks += self._blocks[prev:b]
            blocks += new_blocks[k:k + p]
            prev, k = b + 1, k + p
        blocks += self._blocks[prev:]
        # where each new piece lands among the blocks after the splice
        at = (np.cumsum(reps) - reps)[np.repeat(ub, pieces)] + _within(pieces)
        self._counts, self._sums, self._lasts = (
            _spliced(self._counts, reps, at, counts), _spliced(self._sums, reps, at, sums),
            _spliced(self._lasts, reps, at, lasts))
        self._blocks = blocks


def _piece_sizes(sizes: np.ndarray, pieces: np.ndarray) -> np.ndarray:
    """Each size cut into its number of pieces of nearly equal size."""
    p = np.repeat(pieces, pieces)
    s = np.repeat(sizes, pieces)
    i = _within(pieces)
    return s // p + (i < s % p)


def _within(pieces: np.ndarray) -> np.ndarray:
    """0, 1, ... p - 1 for each ``p`` of ``pieces``, one after the other."""
    total = int(pieces.sum())
    return np.arange(total) - np.repeat(np.cumsum(pieces) - pieces, pieces)


def _spliced(old: np.ndarray, reps: np.ndarray, at: np.ndarray, new: np.ndarray) -> np.ndarray:
    out = np.repeat(old, reps)  # (a replaced block's old value, where it has pieces)
    out[at] = new
    return out


class _Ranks:
    """The value of rank ``i`` (0-based) among sorted blocks: O(log blocks)."""

    def __init__(self, blocks: List[np.ndarray], ends: np.ndarray):
        self._blocks, self._ends = blocks, ends

    def __call__(self, i: int) -> float:
        b = int(np.searchsorted(self._ends, i, side="right"))
        return float(self._blocks[b][i - (int(self._ends[b - 1]) if b else 0)])


def _replace(x: np.ndarray, removed: np.ndarray, added: np.ndarray) -> np.ndarray:
    """Sorted ``x`` less ``removed`` (values of it, sorted) plus ``added`` (sorted).

    Raises:
      ValueError: a value of ``removed`` is not in ``x`` (as often).
    """
    if len(removed):
        pos = _positions(x, removed)
        if pos is None:
            raise ValueError("removed a step time that is not held")
        x = np.delete(x, pos)
    if len(added):
        x = np.insert(x, np.searchsorted(x, added, side="left"), added)
    return x


def _positions(x: np.ndarray, removed: np.ndarray) -> Optional[np.ndarray]:
    """Where the values ``removed`` (sorted) are in sorted ``x`` (the i-th of
    equal values at the i-th place of that value); None if one is not there."""
    first = np.searchsorted(removed, removed, side="left")
    pos = np.searchsorted(x, removed, side="left") + (np.arange(len(removed)) - first)
    if (pos >= len(x)).any():
        return None
    same = x[pos] == removed
    if not (same | (np.isnan(removed) & np.isnan(x[pos]))).all():
        return None
    return pos


def ideal_of_sorted(x: np.ndarray) -> Optional[float]:
    """The ideal step time (mean at or below median + 3·MAD) of sorted times ``x``."""
    n = len(x)
    if not n:
        return None
    med = float(x[n // 2]) if n % 2 else 0.5 * (float(x[n // 2 - 1]) + float(x[n // 2]))
    split = int(np.searchsorted(x, med, side="right"))

    def at(i: int) -> float:
        return float(x[i])

    if n % 2:
        mad = _kth(at, split, n, med, n // 2)
    else:
        mad = 0.5 * (_kth(at, split, n, med, n // 2 - 1) + _kth(at, split, n, med, n // 2))
    idx = int(np.searchsorted(x, med + 3.0 * mad, side="right"))
    return float(x[:idx].mean()) if idx else None


def _kth(at, split: int, n: int, med: float, k: int) -> float:
    """The k-th smallest (0-based) of ``|x - med|`` over sorted ``x`` (``at(i)``
    its i-th value, ``split`` how many are ``<= med``): two ascending runs,
    ``med - x[:split]`` reversed and ``x[split:] - med``."""
    a, b = split, n - split

    def da(i: int) -> float:  # i-th smallest of med - x[:split]
        return med - at(a - 1 - i)

    def db(j: int) -> float:
        return at(split + j) - med

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
