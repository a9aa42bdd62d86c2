"""Stragglers by arrays: per step, the slowest host's blocking time carved
from the lead's step (semantics rule 13; :mod:`.stragglers` says the rule).

The per-event pass (:mod:`.stragglers`) reads pieces made of records; this
module reads a piece's columns (:class:`StepBlocking`: its step spans and
the union of its blocking intervals, numpy arrays) and computes the same
carved intervals with the same float operations: a step's blocking seconds
are the clipped lengths added left to right (by columns up to ``_MEETS``
intervals, one by one beyond, as that pass does), the slowest host is the
first of equals in the order given, and the carve is
:func:`.free_time.free_time_by_columns` where the lead and the slowest host
blocked at most once in the step, :func:`.free_time.free_time` elsewhere.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.timeline.free_time import EPS, carved_per_row, free_time
from goodput_core.timeline.stragglers import _MEETS

__all__ = ["StepBlocking", "SmallBlocking", "carve", "carve_small", "union_of_pairs",
           "union_sorted"]

_E = np.empty(0)


def union_of_pairs(families: Sequence[Tuple[np.ndarray, np.ndarray]]
                   ) -> Tuple[np.ndarray, np.ndarray]:
    """The union of the blocking intervals of start/end families, each
    ``(times, is_end)`` in (time, seq) order: within a family, an end closes
    an interval exactly when the family's previous event is a start (rule 7's
    pairing); empty intervals are dropped."""
    a_all, b_all = [], []
    for t, e in families:
        if len(t) < 2:
            continue
        closes = np.flatnonzero((e[1:] == 1) & (e[:-1] == 0)) + 1
        a, b = t[closes - 1], t[closes]
        keep = b > a
        if not keep.all():
            a, b = a[keep], b[keep]
        if len(a):
            a_all.append(a)
            b_all.append(b)
    if not a_all:
        return _E, _E
    if len(a_all) == 1:  # one family's pairs are in (start, end) order already
        a, b = a_all[0], b_all[0]
    else:
        a, b = np.concatenate(a_all), np.concatenate(b_all)
        order = np.lexsort((b, a))
        a, b = a[order], b[order]
    return union_sorted(a, b)


def union_sorted(a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The union of intervals sorted by (start, end): one starts a new merged
    interval where it begins after every earlier one ended; a merged interval
    ends at its members' latest end (the per-event pass's ``_union``)."""
    if not len(a):
        return _E, _E
    reach = np.maximum.accumulate(b)
    new = np.ones(len(a), bool)
    new[1:] = a[1:] > reach[:-1]
    if new.all():
        return a, reach
    last = np.flatnonzero(np.append(new[1:], True))
    return a[new], reach[last]


class StepBlocking:
    """One piece's step spans and blocking intervals.

    Args:
      steps: the step numbers of its spans (rule 3: a step runs to the next
        step start where that is later; the last one to its step end or job
        end), in time order; ``a``, ``b``: their starts and ends.
      xs, ys: the union of its blocking intervals, sorted and disjoint.
    """

    __slots__ = ("steps", "a", "b", "xs", "ys", "_lookup")

    def __init__(self, steps: np.ndarray, a: np.ndarray, b: np.ndarray, xs: np.ndarray,
                 ys: np.ndarray):
        self.steps, self.a, self.b, self.xs, self.ys = steps, a, b, xs, ys
        self._lookup = None

    @classmethod
    def of(cls, t: np.ndarray, k: np.ndarray, step_ends: dict, job_end: Optional[float],
           xs: np.ndarray, ys: np.ndarray) -> "StepBlocking":
        """From a piece's step starts (``t``, ``k``: time order), its step ends
        (``{step: time}``, the last of each) and first job end."""
        later = t[:-1] < t[1:]
        a, b, kept = t[:-1][later], t[1:][later], k[:-1][later]
        if len(k):
            end = step_ends.get(int(k[-1]), job_end)
            if end is not None and end > t[-1]:
                a, b = np.append(a, t[-1]), np.append(b, end)
                kept = np.append(kept, k[-1])
        return cls(kept, a, b, xs, ys)

    def lookup(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(sorted distinct steps, the row of each one's last span)``."""
        if self._lookup is None:
            s = self.steps
            if len(s) < 2 or (s[1:] > s[:-1]).all():
                self._lookup = (s, np.arange(len(s)))
            else:
                rev = s[::-1]
                uniq, first_in_rev = np.unique(rev, return_index=True)
                self._lookup = (uniq, len(s) - 1 - first_in_rev)
        return self._lookup

    def consecutive(self) -> bool:
        """True when its spans' steps are consecutive numbers, each once."""
        s = self.steps
        uniq, _ = self.lookup()
        return len(uniq) == len(s) and (not len(s) or int(s[-1]) - int(s[0]) == len(s) - 1)

    def rows_of(self, steps: np.ndarray) -> np.ndarray:
        """The row of each of ``steps``' last span (-1: none)."""
        if self.consecutive():  # (the common case: a row is a step's offset)
            if not len(self.steps):
                return np.full(len(steps), -1)
            pos = steps - self.steps[0]
            return np.where((pos >= 0) & (pos < len(self.steps)), pos, -1)
        uniq, rows = self.lookup()
        i = np.searchsorted(uniq, steps)
        ok = (i < len(uniq)) & (uniq[np.minimum(i, len(uniq) - 1)] == steps) if len(uniq) else \
            np.zeros(len(steps), bool)
        return np.where(ok, rows[np.minimum(i, max(len(uniq) - 1, 0))], -1)

    def within(self, a: float, b: float) -> List[Tuple[float, float]]:
        """Its blocking intervals meeting ``[a, b)``, clipped to it."""
        out = []
        xs, ys = self.xs, self.ys
        for i in range(int(np.searchsorted(ys, a, side="right")), len(xs)):
            x, y = float(xs[i]), float(ys[i])
            if x >= b:
                break
            out.append((max(x, a), min(y, b)))
        return out

    def meeting(self, a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """For spans ``[a, b)``: the first blocking interval that meets each, and how many do."""
        first = np.searchsorted(self.ys, a, side="right")
        return first, np.searchsorted(self.xs, b, side="left") - first

    def seconds(self, rows: np.ndarray) -> np.ndarray:
        """Blocking seconds inside each span of ``rows`` (clipped lengths added
        left to right from 0)."""
        return self.measured(rows)[0]

    def measured(self, rows: np.ndarray):
        """``(seconds, first, meets)`` of the spans of ``rows``: as
        :meth:`seconds`, with :meth:`meeting`'s columns."""
        a, b = self.a[rows], self.b[rows]
        first, meets = self.meeting(a, b)
        w = np.zeros(len(rows))
        xs, ys = self.xs, self.ys
        for j in range(min(int(meets.max(initial=0)), _MEETS)):
            on = meets > j
            i = first[on] + j
            w[on] += np.minimum(ys[i], b[on]) - np.maximum(xs[i], a[on])
        for j in np.flatnonzero(meets > _MEETS).tolist():
            w[j] = _inside(self.within(float(a[j]), float(b[j])))
        return w, first, meets

    def clipped(self, a: np.ndarray, b: np.ndarray, met=None):
        """For spans ``[a, b)``: how many blocking intervals meet each, and the
        first of them clipped to it (the span's start twice where none does);
        ``met``: their :meth:`meeting` when known."""
        first, meets = self.meeting(a, b) if met is None else met
        if not len(self.xs):
            return meets, a.copy(), a.copy()
        i = np.minimum(first, len(self.xs) - 1)
        some = meets > 0
        return (meets, np.where(some, np.maximum(self.xs[i], a), a),
                np.where(some, np.minimum(self.ys[i], b), a))


def _inside(clipped: List[Tuple[float, float]]) -> float:
    return sum(y - x for x, y in clipped)


def carve(lead: StepBlocking, others: Sequence[Callable[[], StepBlocking]]
          ) -> Tuple[np.ndarray, np.ndarray]:
    """The input stalls carved from ``lead``'s steps where one of ``others``
    (the other pieces of its attempt, in the rules' order, each made when
    its turn comes: only the slowest host's numbers are kept) blocked longer
    in its own step of the same number: ``(starts, ends)``, in step order."""
    if not len(lead.steps):
        return _E, _E
    _, lead_rows = lead.lookup()
    n_rows = len(lead.a)
    worst_w = np.zeros(n_rows)
    worst_p = np.full(n_rows, -1)
    # the slowest host's span and first blocking interval in it, per lead row
    win = {name: np.zeros(n_rows) for name in ("pa", "pb", "x", "y")}
    win_meets = np.zeros(n_rows, np.int64)
    for n, make in enumerate(others):
        p = make()
        if not len(p.xs) or not len(p.steps):
            continue
        p_steps, p_rows = p.lookup()
        pos = lead.rows_of(p_steps)
        common = pos >= 0
        if not common.any():
            continue
        if not common.all():
            pos, p_rows = pos[common], p_rows[common]
        w, first, meets = p.measured(p_rows)
        slower = w > worst_w[pos]
        if not slower.any():
            continue
        if not slower.all():
            pos, p_rows, w = pos[slower], p_rows[slower], w[slower]
            first, meets = first[slower], meets[slower]
        worst_w[pos] = w
        worst_p[pos] = n
        pa, pb = p.a[p_rows], p.b[p_rows]
        meets, x, y = p.clipped(pa, pb, (first, meets))
        win["pa"][pos], win["pb"][pos], win["x"][pos], win["y"][pos] = pa, pb, x, y
        win_meets[pos] = meets
    rows = lead_rows[worst_p[lead_rows] >= 0]  # in step order
    if not len(rows):
        return _E, _E
    carved = _by_columns(lead, rows, worst_w, win, win_meets)
    made: dict = {}
    xs: List[float] = []
    ys: List[float] = []
    for j in range(len(rows)):
        free = carved[j]
        if free is None:
            row = int(rows[j])
            a, b = float(lead.a[row]), float(lead.b[row])
            own_k = lead.within(a, b)
            need = min(float(worst_w[row]), b - a) - _inside(own_k)
            if need <= EPS:
                continue
            n = int(worst_p[row])
            p = made.get(n)
            if p is None:  # the slowest host's intervals in this step: made again
                p = made[n] = others[n]()
            pa, pb = float(win["pa"][row]), float(win["pb"][row])
            shift = a - pa
            where = [(x + shift, y + shift) for x, y in p.within(pa, pb)]
            free = free_time(own_k, where, a, b, need)
        for x, y in free:
            xs.append(x)
            ys.append(y)
    return np.asarray(xs, np.float64), np.asarray(ys, np.float64)


def _by_columns(lead: StepBlocking, rows: np.ndarray, worst_w: np.ndarray, win: dict,
                win_meets: np.ndarray) -> List[Optional[list]]:
    """The carve of each step where the lead blocked at most once and the
    slowest host exactly once, by columns; None for the others."""
    a, b = lead.a[rows], lead.b[rows]
    own_meets, ox, oy = lead.clipped(a, b)
    need = np.minimum(worst_w[rows], b - a) - np.where(own_meets == 1, oy - ox, 0.0)
    shift = a - win["pa"][rows]
    wx, wy = win["x"][rows] + shift, win["y"][rows] + shift
    fits = (own_meets <= 1) & (win_meets[rows] == 1)
    fits &= wy > wx  # a shifted interval that rounding emptied: one by one
    return carved_per_row(a, b, own_meets, ox, oy, wx, wy, need, fits)


class SmallBlocking:
    """:class:`StepBlocking` of a few steps as Python lists (the tail a refresh
    carves again: numpy calls cost more than the rows there): ``spans``
    ``{step: (start, end)}`` (the last span of each step), ``xs``/``ys`` the
    union of its blocking intervals."""

    __slots__ = ("spans", "xs", "ys")

    def __init__(self, t: List[float], k: List[int], step_ends: dict, job_end: Optional[float],
                 families: Sequence[Tuple[List[float], List[int]]]):
        spans = {}
        for i in range(len(t) - 1):
            if t[i] < t[i + 1]:
                spans[k[i]] = (t[i], t[i + 1])
        if t:
            end = step_ends.get(k[-1], job_end)
            if end is not None and end > t[-1]:
                spans[k[-1]] = (t[-1], end)
        self.spans = spans
        pairs = []
        for ft, fe in families:
            for i in range(1, len(ft)):
                if fe[i] == 1 and fe[i - 1] == 0 and ft[i] > ft[i - 1]:
                    pairs.append((ft[i - 1], ft[i]))
        pairs.sort()
        xs: List[float] = []
        ys: List[float] = []
        for a, b in pairs:  # the union: a new interval where one begins after all ended
            if ys and a <= ys[-1]:
                if b > ys[-1]:
                    ys[-1] = b
            else:
                xs.append(a)
                ys.append(b)
        self.xs, self.ys = xs, ys

    def within(self, a: float, b: float) -> List[Tuple[float, float]]:
        """Its blocking intervals meeting ``[a, b)``, clipped to it."""
        out = []
        xs, ys = self.xs, self.ys
        for i in range(bisect_right(ys, a), len(xs)):
            if xs[i] >= b:
                break
            out.append((max(xs[i], a), min(ys[i], b)))
        return out


def carve_small(lead: SmallBlocking, others: Sequence[SmallBlocking]
                ) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`carve` of a few steps, step by step in Python (the per-step path
    of the per-event pass: the same sums and :func:`.free_time.free_time`)."""
    worst: dict = {}
    spans = lead.spans
    for n, p in enumerate(others):
        if not p.xs:
            continue
        for k, (pa, pb) in p.spans.items():
            if k in spans:
                w = _inside(p.within(pa, pb))
                if w > worst.get(k, _NONE)[0]:
                    worst[k] = (w, n, pa, pb)
    xs: List[float] = []
    ys: List[float] = []
    for k in sorted(worst):
        w, n, pa, pb = worst[k]
        a, b = spans[k]
        own_k = lead.within(a, b)
        need = min(w, b - a) - _inside(own_k)
        if need <= EPS:
            continue
        shift = a - pa
        where = [(x + shift, y + shift) for x, y in others[n].within(pa, pb)]
        for x, y in free_time(own_k, where, a, b, need):
            xs.append(x)
            ys.append(y)
    return np.asarray(xs, np.float64), np.asarray(ys, np.float64)


_NONE = (0.0, -1, 0.0, 0.0)
