"""One family of a writer's events as growable sorted columns (docs/large-runs.md,
"Many hosts"): the times, and per row a step number or a start/end flag, kept
in ``(time, arrival)`` order; the last rows also as Python lists, so that a
refresh's per-host reads of a few rows make no numpy call
(:mod:`goodput_core.timeline.host_columns` holds one per family and writer)."""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any, Tuple

import numpy as np

from goodput_core.timeline.intervals import Growable

__all__ = ["RECENT", "TimeColumn"]

RECENT = 32  # a column's last rows kept as Python lists too (at most twice that)


class TimeColumn:
    """Growable sorted columns ``t`` (and ``v``: a step number or an end flag),
    in (time, arrival) order, with its last rows also as Python lists (a
    refresh reads every host's last rows: a numpy call per host costs more
    than the rows)."""

    __slots__ = ("t", "v", "merges", "_at", "_rt", "_rv")

    def __init__(self, vtype):
        self.t = Growable(np.float64)
        self.v = Growable(vtype)
        self.merges = 0  # rows that arrived late and moved others: readers start over
        self._at = -1  # the last rows as lists, from this row (-1: not made yet)
        self._rt: list = []
        self._rv: list = []

    def __len__(self) -> int:
        return self.t.n

    def add(self, t, v) -> float:
        """Appends rows (in arrival order; arrays, or Python lists: a refresh's
        few rows); returns the earliest time whose rows changed position or
        were added (inf: none)."""
        if not len(t):
            return math.inf
        if type(t) is list:
            n = self.t.n
            if len(t) <= 4 and (not n or t[0] >= self.t.item(n - 1)) and all(
                    t[i + 1] >= t[i] for i in range(len(t) - 1)):
                self.t.extend_few(t)
                self.v.extend_few(v)
                if self._at >= 0:
                    self._rt += t
                    self._rv += v
                    if len(self._rt) > 2 * RECENT:
                        del self._rt[:RECENT], self._rv[:RECENT]
                        self._at += RECENT
                return t[0]
            t, v = np.array(t, np.float64), np.array(v, self.v.a.dtype)
        self._at = -1
        old = self.t.a
        if len(t) <= 4:  # (a refresh: a row or two)
            tl = t.tolist()
            in_order = (not len(old) or tl[0] >= old[-1]) and all(
                tl[i + 1] >= tl[i] for i in range(len(tl) - 1))
        else:
            in_order = (not len(old) or t[0] >= old[-1]) and bool((t[1:] >= t[:-1]).all())
        if in_order:
            self.t.extend(t)
            self.v.extend(v)
            return float(t[0])
        # late rows: a stable sort keeps arrival order among equal times
        self.merges += 1
        tt, vv = np.concatenate((old, t)), np.concatenate((self.v.a, v))
        order = np.argsort(tt, kind="stable")
        self.t.replace(tt[order])
        self.v.replace(vv[order])
        return float(t.min())

    @property
    def nbytes(self) -> int:
        return self.t.nbytes + self.v.nbytes

    def _lists_at(self) -> int:
        """The first of the rows held as lists (made from the last rows when
        they are not)."""
        if self._at < 0:
            n = self.t.n
            self._at = max(n - RECENT, 0)
            self._rt = self.t.a[self._at:].tolist()
            self._rv = self.v.a[self._at:].tolist()
        return self._at

    def search(self, x, lo: int, hi: int, values: bool = False) -> int:
        """``lo + numpy.searchsorted(t[lo:hi], x, "left")`` (in ``v`` with
        ``values``: sorted there); in the last rows' lists when it falls there."""
        if hi <= lo:
            return lo
        first = self._lists_at()
        a = hi
        if hi > first:
            a = max(lo, first)
            j = bisect_left(self._rv if values else self._rt, x, a - first, hi - first) + first
            if j > a or a == lo:
                return j
        # (rows before the lists: every one of [a, hi) is at or after x)
        return lo + int(np.searchsorted((self.v if values else self.t).a[lo:a], x, side="left"))

    def lists(self, a: int, b: int) -> Tuple[list, list]:
        """Rows ``[a, b)`` as Python lists ``(t, v)``."""
        first = self._lists_at()
        if a >= first:
            return self._rt[a - first:b - first], self._rv[a - first:b - first]
        return self.t.a[a:b].tolist(), self.v.a[a:b].tolist()

    def row(self, i: int) -> Tuple[float, Any]:
        """Row ``i``'s ``(t, v)`` as Python scalars."""
        first = self._lists_at()
        if i >= first:
            return self._rt[i - first], self._rv[i - first]
        return self.t.item(i), self.v.item(i)
