"""Vectorised interval arithmetic for the timeline (numpy, no Python loops
on the hot paths).

* :class:`Growable`: a 1-D array with amortised append and truncation.
* :class:`IntervalList`: sorted, disjoint half-open intervals of one
  category with cumulative lengths, so the measure of the category inside
  any window is two binary searches plus clipping of the two edge pieces.
* :func:`union`, :func:`complement`, :func:`split_by_regions`,
  :func:`paint`: the set operations the timeline is built from.

All intervals are half-open ``[start, end)`` in POSIX seconds.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["Growable", "IntervalList", "union", "complement", "split_by_regions", "paint"]

_GROWTH = 1.25  # small growth factor: long-running monitors hold these for days
_EMPTY = np.empty(0)
_SPLIT_BLOCK = 1 << 19  # intervals classified at once by split_by_regions


class Growable:
    """A 1-D numpy array that grows in place (amortised O(1) per element)."""

    __slots__ = ("_buf", "n")

    def __init__(self, dtype, capacity: int = 16):
        self._buf = np.empty(max(int(capacity), 1), dtype=dtype)
        self.n = 0

    @property
    def a(self) -> np.ndarray:
        """The live elements (a view: do not keep it across appends)."""
        return self._buf[: self.n]

    def __len__(self) -> int:
        return self.n

    def item(self, i: int):
        """Element ``i`` (0 <= i < n) as a Python scalar."""
        return self._buf.item(i)

    def _reserve(self, need: int) -> None:
        if need > len(self._buf):
            cap = max(need, int(len(self._buf) * _GROWTH) + 16)
            buf = np.empty(cap, dtype=self._buf.dtype)
            buf[: self.n] = self._buf[: self.n]
            self._buf = buf

    def extend(self, values) -> None:
        """Appends ``values`` (array-like)."""
        values = np.asarray(values, dtype=self._buf.dtype)
        k = values.size
        if k:
            self._reserve(self.n + k)
            self._buf[self.n: self.n + k] = values
            self.n += k

    def extend_few(self, values: list) -> None:
        """Appends a few Python scalars (a refresh's rows: no array built)."""
        n = self.n
        if n + len(values) > len(self._buf):
            self._reserve(n + len(values))
        buf = self._buf
        for i, x in enumerate(values, n):
            buf[i] = x
        self.n = n + len(values)

    def append(self, value) -> None:
        self._reserve(self.n + 1)
        self._buf[self.n] = value
        self.n += 1

    def truncate(self, n: int) -> None:
        """Keeps the first ``n`` elements."""
        self.n = max(0, min(int(n), self.n))

    def replace(self, values) -> None:
        """Replaces the content by ``values``."""
        self.n = 0
        self.extend(values)

    def adopt(self, values: np.ndarray) -> None:
        """Replaces the content by ``values``, a 1-D array of this dtype that
        the caller will not use again: held as it is, not copied."""
        if values.dtype != self._buf.dtype or values.ndim != 1 or not len(values):
            self.replace(values)
            return
        self._buf = np.ascontiguousarray(values)
        self.n = len(values)

    @property
    def nbytes(self) -> int:
        """Bytes allocated (capacity included)."""
        return self._buf.nbytes


class IntervalList:
    """Sorted disjoint intervals of one category, with cumulative lengths.

    ``cum[i]`` is the total length of the intervals before interval ``i``
    (``cum`` has one more element than there are intervals).
    """

    __slots__ = ("starts", "ends", "cum")

    def __init__(self):
        self.starts = Growable(np.float64)
        self.ends = Growable(np.float64)
        self.cum = Growable(np.float64)
        self.cum.append(0.0)

    def __len__(self) -> int:
        return self.starts.n

    @property
    def total(self) -> float:
        return float(self.cum.a[-1])

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + self.ends.nbytes + self.cum.nbytes

    def clear(self) -> None:
        self.starts.truncate(0)
        self.ends.truncate(0)
        self.cum.truncate(1)

    def truncate_at(self, t: float) -> None:
        """Drops everything at or after ``t`` (an interval across ``t`` is cut)."""
        n = len(self)
        if not n:
            return
        k = int(np.searchsorted(self.starts.a, t, side="left"))
        self.starts.truncate(k)
        self.ends.truncate(k)
        self.cum.truncate(k + 1)
        if k and self.ends.a[k - 1] > t:
            self.ends.a[k - 1] = t
            self.cum.a[k] = self.cum.a[k - 1] + (t - self.starts.a[k - 1])

    def extend(self, starts: np.ndarray, ends: np.ndarray, owned: bool = False) -> None:
        """Appends sorted disjoint non-empty intervals that start at or after
        the current end; an interval touching the last one is merged into it
        (so repeated incremental updates do not fragment the list).

        ``owned``: the arrays are temporaries of the caller, which it does not
        use again: an empty list holds them as they are (no copies).
        """
        if not len(starts):
            return
        starts = np.asarray(starts, np.float64)
        ends = np.asarray(ends, np.float64)
        n = len(self)
        if owned and not n:
            self._adopt(starts, ends)
            return
        if n and starts[0] <= self.ends.a[n - 1]:
            self.ends.a[n - 1] = max(self.ends.a[n - 1], ends[0])
            self.cum.truncate(n)
            self.cum.append(self.cum.a[n - 1] + (self.ends.a[n - 1] - self.starts.a[n - 1]))
            starts, ends = starts[1:], ends[1:]
            if not len(starts):
                return
        base = self.cum.a[-1]
        self.starts.extend(starts)
        self.ends.extend(ends)
        self.cum.extend(base + np.cumsum(ends - starts))

    def _adopt(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """:meth:`extend` of an empty list by temporaries: no copies; the
        lengths are summed in place into the new cumulative column."""
        base = self.cum.a[-1]
        cum = np.empty(len(starts) + 1)
        cum[0] = base
        lengths = cum[1:]
        np.subtract(ends, starts, out=lengths)
        np.cumsum(lengths, out=lengths)  # the same sums as extend's, in place
        lengths += base
        self.starts.adopt(starts)
        self.ends.adopt(ends)
        self.cum.adopt(cum)

    def cum_at(self, ts) -> np.ndarray:
        """Measure of this category in ``(-inf, t)`` for each ``t`` of ``ts``."""
        ts = np.asarray(ts, np.float64)
        n = len(self)
        if not n:
            return np.zeros(ts.shape)
        s, e, cum = self.starts.a, self.ends.a, self.cum.a
        j = np.searchsorted(s, ts, side="right") - 1
        jj = np.maximum(j, 0)
        part = np.clip(ts - s[jj], 0.0, e[jj] - s[jj])
        return np.where(j >= 0, cum[jj] + part, 0.0)

    def locate(self, values) -> np.ndarray:
        """Inverse of :meth:`cum_at`: the earliest ``t`` with ``cum_at(t) == v``."""
        values = np.asarray(values, np.float64)
        n = len(self)
        if not n:
            return np.full(values.shape, np.nan)
        s, cum = self.starts.a, self.cum.a
        # interval j holds the values (cum[j], cum[j+1]]
        j = np.clip(np.searchsorted(cum[1:], values, side="left"), 0, n - 1)
        return s[j] + np.maximum(values - cum[j], 0.0)

    def pieces(self, a: float, b: float) -> Tuple[np.ndarray, np.ndarray]:
        """The intervals clipped to ``[a, b)`` (empty ones dropped)."""
        s, e = self.starts.a, self.ends.a
        lo = int(np.searchsorted(e, a, side="right"))
        hi = int(np.searchsorted(s, b, side="left"))
        ps = np.maximum(s[lo:hi], a)
        pe = np.minimum(e[lo:hi], b)
        keep = pe > ps
        return ps[keep], pe[keep]


def union(starts, ends) -> Tuple[np.ndarray, np.ndarray]:
    """Merges intervals into sorted disjoint ones (empty intervals dropped)."""
    s = np.asarray(starts, np.float64)
    e = np.asarray(ends, np.float64)
    return _union(s, e, owned=s is not starts, e_owned=e is not ends)


def _union(s: np.ndarray, e: np.ndarray, owned: bool, e_owned: bool = False
           ) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`union`; ``owned``: ``s`` is a temporary the result may be;
    ``e_owned``: so is ``e`` (then it is overwritten)."""
    given = not owned  # the caller's array: never returned as it is
    keep = e > s
    if not keep.all():
        s, e, given, e_owned = s[keep], e[keep], False, True
    del keep
    if not len(s):
        return _EMPTY, _EMPTY
    if not _nondecreasing(s):  # a stable sort of sorted starts changes nothing: skipped
        order = np.argsort(s, kind="stable")
        s, e, given, e_owned = s[order], e[order], False, True
        del order
    # in place when it may: at millions of loads each copy is tens of MiB
    reach = np.maximum.accumulate(e, out=e if e_owned else None)
    new = np.empty(len(s), bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    if new.all():  # already disjoint (loads inside steps, pieces of a paint)
        return (s.copy() if given else s), reach
    # masks rather than index arrays: the same elements, an eighth of the memory
    last = np.empty(len(s), bool)
    last[:-1] = new[1:]
    last[-1] = True
    return s[new], reach[last]


def _nondecreasing(a: np.ndarray) -> bool:
    return bool((a[1:] >= a[:-1]).all()) if len(a) > 1 else True


def complement(a: float, b: float, starts, ends) -> Tuple[np.ndarray, np.ndarray]:
    """``[a, b)`` minus the union of the given intervals, as sorted pieces."""
    us, ue = union(np.clip(starts, a, b), np.clip(ends, a, b))
    cs = np.concatenate(([a], ue))
    ce = np.concatenate((us, [b]))
    keep = ce > cs
    return cs[keep], ce[keep]


def split_by_regions(s, e, rs, re, owned: bool = False):
    """Splits intervals into their parts inside and outside sorted disjoint regions.

    Args:
      s, e: interval starts and ends (any order; overlaps allowed).
      rs, re: sorted disjoint regions.
      owned: ``s`` and ``e`` are float arrays the caller will not use again:
        the inside parts are gathered into them (no arrays of their length).

    Returns:
      (inside_starts, inside_ends, outside_starts, outside_ends): sorted
      pieces (the union of the inside and of the outside parts).
    """
    s = np.asarray(s, np.float64)
    e = np.asarray(e, np.float64)
    if not len(rs):
        os_, oe = union(s, e)
        return _EMPTY, _EMPTY, os_, oe
    out_s, out_e, mixed_s, mixed_e = [], [], [], []
    # Each interval is classified on its own: in blocks, so that the
    # temporaries stay small on runs of millions of loads. The inside parts
    # (most loads: those of the steps) go straight to their place in one
    # array each, not through a list of parts joined afterwards: the given
    # ones when owned (a block's inside parts are copied out before they are
    # written, never past the block: nothing unread is overwritten).
    owned = owned and s.dtype == e.dtype == np.float64 and s.flags.writeable and \
        e.flags.writeable
    buf_s, buf_e = (s, e) if owned else (np.empty(len(s)), np.empty(len(s)))
    k_in = 0
    for lo in range(0, len(s), _SPLIT_BLOCK):
        bs, be = s[lo:lo + _SPLIT_BLOCK], e[lo:lo + _SPLIT_BLOCK]
        keep = be > bs
        if not keep.all():
            bs, be = bs[keep], be[keep]
        k = np.searchsorted(rs, bs, side="right") - 1
        kk = np.maximum(k, 0)
        rek = re[kk]
        inside = (k >= 0) & (be <= rek)
        # wholly outside: starts after region k ends (or before the first) and
        # ends before the next region starts
        nxt = np.minimum(k + 1, len(rs) - 1)
        next_start = np.where(k + 1 < len(rs), rs[nxt], np.inf)
        outside = ((k < 0) | (bs >= rek)) & (be <= next_start)
        mixed = ~(inside | outside)
        out_s.append(bs[outside])
        out_e.append(be[outside])
        mixed_s.append(bs[mixed])
        mixed_e.append(be[mixed])
        m = int(np.count_nonzero(inside))  # (last: this may write over bs and be)
        buf_s[k_in:k_in + m] = bs[inside]
        buf_e[k_in:k_in + m] = be[inside]
        k_in += m
    ms, me = _union(_joined(mixed_s), _joined(mixed_e), owned=True, e_owned=True)
    in_s, in_e = [buf_s[:k_in]], [buf_e[:k_in]]
    del buf_s, buf_e
    for a, b in zip(ms.tolist(), me.tolist()):  # rare: loads across a step region edge
        lo = int(np.searchsorted(re, a, side="right"))
        hi = int(np.searchsorted(rs, b, side="left"))
        cs, ce = np.maximum(rs[lo:hi], a), np.minimum(re[lo:hi], b)
        in_s.append(cs)
        in_e.append(ce)
        gs, ge = complement(a, b, cs, ce)
        out_s.append(gs)
        out_e.append(ge)
    is_, ie = _union(_joined(in_s), _joined(in_e), owned=True, e_owned=True)
    os_, oe = _union(_joined(out_s), _joined(out_e), owned=True, e_owned=True)
    return is_, ie, os_, oe


def _joined(parts: List[np.ndarray]) -> np.ndarray:
    """The parts one after the other (one part: itself, no copy; the parts
    here are temporaries of their caller, and the list is emptied: each
    part is freed as soon as it is joined)."""
    if len(parts) < 2:
        out = parts[0] if parts else _EMPTY
    else:
        out = np.concatenate(parts)
    parts.clear()
    return out


def paint(levels: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]], lo: float):
    """Resolves overlapping labelled intervals by priority.

    Args:
      levels: ``(starts, ends, codes)`` per priority level, highest first.
        Inside one level, where intervals of different codes overlap, the
        smallest code wins.
      lo: nothing before ``lo`` is painted.

    Returns:
      (starts, ends, codes): sorted disjoint pieces; instants covered by no
      interval are left out.
    """
    lv: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for s, e, c in levels:
        s = np.maximum(np.asarray(s, np.float64), lo)
        e = np.asarray(e, np.float64)
        keep = e > s
        if keep.any():
            lv.append((s[keep], e[keep], np.broadcast_to(c, keep.shape)[keep]))
    if not lv:
        return _EMPTY, _EMPTY, np.empty(0, np.int64)
    pts = np.unique(np.concatenate([x for s, e, _ in lv for x in (s, e)]))
    m = len(pts) - 1
    label = np.full(m, -1, np.int64)
    for s, e, codes in lv:
        for code in np.unique(codes):
            sel = codes == code
            i = np.searchsorted(pts, s[sel])
            j = np.searchsorted(pts, e[sel])
            depth = np.cumsum(np.bincount(i, minlength=m + 1) - np.bincount(j, minlength=m + 1))
            label[(depth[:m] > 0) & (label < 0)] = code
    # Merge runs of equal labels into pieces.
    change = np.empty(m, bool)
    change[0] = True
    change[1:] = label[1:] != label[:-1]
    first = np.flatnonzero(change)
    last = np.append(first[1:], m)
    codes = label[first]
    keep = codes >= 0
    return pts[first][keep], pts[last][keep], codes[keep]
