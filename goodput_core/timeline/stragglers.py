"""Stragglers of a many-writers run (semantics rule 13, :mod:`.streams`).

In each step ``k`` of the lead stream, the blocking time (input stalls and
blocking loads) of the slowest host in its own step ``k`` is the job's: when
another host blocked longer, the difference is carved from the lead's step
``k`` span as an input stall, in the span's unblocked time right after the
lead's own blocking time (where it would have computed).

The functions take pieces (:class:`goodput_core.timeline.streams` pieces):
objects with ``events`` in time order, their ``times`` and ``kinds``
columns, ``key`` (host, pid) and ``index``. A piece's step spans and
blocking intervals are kept on it (``cache``): a piece that is another
host's for several lead pieces is read once.
"""

from __future__ import annotations

import bisect
import sys
from itertools import compress, repeat
from operator import countOf, eq, itemgetter, lt
from typing import Dict, List, Optional, Tuple

import numpy as np

from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.free_time import EPS, carved_per_row, free_time

__all__ = ["straggler_stalls"]

_STEP, _STEP_END, _JOB_END = int(Kind.STEP_START), int(Kind.STEP_END), int(Kind.JOB_END)
_BLOCK_START = {int(Kind.INPUT_STALL_START): "stall", int(Kind.BLOCKING_LOAD_START): "bload"}
_BLOCK_END = {int(Kind.INPUT_STALL_END): "stall", int(Kind.BLOCKING_LOAD_END): "bload"}
_BLOCK_KINDS = frozenset(_BLOCK_START) | frozenset(_BLOCK_END)
_STALLS, _STALL_ENDS = int(Kind.INPUT_STALL_START), int(Kind.INPUT_STALL_END)
_STALL_PAIR = [_STALLS, _STALL_ENDS]
# blocking intervals in one step summed by columns (more: one by one): the
# sum's plain float additions, left to right, until Python 3.12, whose sum()
# compensates its rounding (then only a single interval, whose sum is exact)
_MEETS = 8 if sys.version_info < (3, 12) else 1
_LOADS, _LOAD_ENDS = int(Kind.BLOCKING_LOAD_START), int(Kind.BLOCKING_LOAD_END)
_STEP_OF = itemgetter(3)


def _of_kind(p, kind: int) -> List[bool]:
    """Which of a piece's events are of ``kind`` (a C-level pass)."""
    return list(map(eq, p.kinds, repeat(kind)))


class _Spans:
    """A piece's step spans (rule 3) as columns: ``at`` maps a step to its
    row (the dict the per-step code kept: steps in order of first span,
    a repeated step's last span), ``a``/``b`` its start and end (lists of
    the times themselves; ``arrays()`` as numpy). No tuple per step."""

    __slots__ = ("at", "a", "b", "_arrays")

    def __init__(self, steps: list, a: list, b: list):
        self.at = dict(zip(steps, range(len(steps))))
        self.a, self.b, self._arrays = a, b, None

    def __getitem__(self, k) -> Tuple[float, float]:
        row = self.at[k]
        return self.a[row], self.b[row]

    def arrays(self) -> Tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.asarray(self.a, dtype=float), np.asarray(self.b, dtype=float))
        return self._arrays


def _step_spans(p) -> _Spans:
    """One piece's steps: a step runs to the next step start, the last one to
    its step end or the job end (rule 3; without either it has no span yet)."""
    spans = p.cache.get("spans")
    if spans is not None:
        return spans
    is_start, is_end = _of_kind(p, _STEP), _of_kind(p, _STEP_END)
    times = list(compress(p.times, is_start))
    steps = list(map(_STEP_OF, compress(p.events, is_start)))
    if None in steps:
        known = [k is not None for k in steps]
        times, steps = list(compress(times, known)), list(compress(steps, known))
    ends = dict(zip(map(_STEP_OF, compress(p.events, is_end)), compress(p.times, is_end)))
    ends.pop(None, None)  # a step end without its step: no step's end
    job_end = next(compress(p.times, _of_kind(p, _JOB_END)), None)
    # a step runs to the next one's start: kept where that is later
    later = list(map(lt, times, times[1:]))
    a, b = list(compress(times, later)), list(compress(times[1:], later))
    kept = list(compress(steps, later))
    if steps:
        t, k = times[-1], steps[-1]
        end = ends.get(k, job_end)
        if end is not None and end > t:
            kept.append(k)
            a.append(t)
            b.append(end)
    spans = p.cache["spans"] = _Spans(kept, a, b)
    return spans


def _floats(p) -> bool:
    """True when every time of the piece is a Python float: then numpy's
    float64 columns compute exactly what the per-event code computed."""
    ok = p.cache.get("floats")
    if ok is None:
        ok = p.cache["floats"] = countOf(map(type, p.times), float) == len(p.times)
    return ok


def _blocking(p) -> List[Tuple[float, float]]:
    """The union of a piece's input stalls and blocking loads, sorted."""
    merged = p.cache.get("blocking")
    if merged is None:
        mine = list(map(_BLOCK_KINDS.__contains__, p.kinds))
        kinds, times = list(compress(p.kinds, mine)), list(compress(p.times, mine))
        merged = p.cache["blocking"] = _paired_by_columns(kinds, times) if _floats(p) \
            else _union(_paired(kinds, times))
    return merged


def _paired(kinds: List[int], times: List[float]) -> List[Tuple[float, float]]:
    """The blocking intervals: each end closes its family's latest open
    start (a start reopens it; an end with none open is ignored)."""
    pending: Dict[str, Optional[float]] = {}
    spans = []
    for kind, t in zip(kinds, times):
        fam = _BLOCK_START.get(kind)
        if fam is not None:
            pending[fam] = t
            continue
        fam = _BLOCK_END[kind]
        if pending.get(fam) is not None:
            a = pending.pop(fam)
            if t > a:
                spans.append((a, t))
    spans.sort()
    return spans


def _paired_by_columns(kinds: List[int], times: List[float]) -> List[Tuple[float, float]]:
    """:func:`_paired` over numpy columns: within one family, an end closes
    an interval exactly when the family's previous event is a start."""
    k, t = np.asarray(kinds), np.asarray(times, dtype=float)
    a_all, b_all = [], []
    for starts, ends in ((_STALLS, _STALL_ENDS), (_LOADS, _LOAD_ENDS)):
        fam = np.isin(k, (starts, ends))
        fk, ft = k[fam], t[fam]
        closes = np.flatnonzero((fk[1:] == ends) & (fk[:-1] == starts)) + 1
        a, b = ft[closes - 1], ft[closes]
        keep = b > a
        a_all.append(a[keep])
        b_all.append(b[keep])
    a, b = np.concatenate(a_all), np.concatenate(b_all)
    order = np.lexsort((b, a))
    return _union_by_columns(a[order], b[order])


def _union_by_columns(a: np.ndarray, b: np.ndarray) -> List[Tuple[float, float]]:
    """:func:`_union` of sorted intervals: one starts a new merged interval
    where it begins after every earlier one ended; a merged interval ends at
    its members' latest end (the running maximum: earlier ones ended before)."""
    if not len(a):
        return []
    reach = np.maximum.accumulate(b)
    new = np.ones(len(a), dtype=bool)
    new[1:] = a[1:] > reach[:-1]
    last = np.flatnonzero(np.append(new[1:], True))
    return list(zip(a[new].tolist(), reach[last].tolist()))


def _union(spans: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """Sorted intervals merged where they meet."""
    merged: List[List[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


class _Blocks:
    """A host's merged blocking intervals (disjoint, in time order), with the
    ones that meet a span found by bisection (runs have many steps)."""

    __slots__ = ("spans", "ends", "columns")

    def __init__(self, spans: List[Tuple[float, float]]):
        self.spans = spans
        self.ends = [y for _, y in spans]  # sorted too: the intervals are disjoint
        self.columns = None  # (starts, ends) as numpy arrays, once asked for

    def within(self, a: float, b: float) -> List[Tuple[float, float]]:
        """The intervals that meet ``[a, b)``, clipped to it."""
        out, spans = [], self.spans
        for i in range(bisect.bisect_right(self.ends, a), len(spans)):
            x, y = spans[i]
            if x >= b:
                break
            out.append((max(x, a), min(y, b)))
        return out

    def _arrays(self):
        if self.columns is None:
            self.columns = (np.fromiter(map(itemgetter(0), self.spans), dtype=float,
                                        count=len(self.spans)), np.asarray(self.ends, dtype=float))
        return self.columns

    def _meeting(self, a: np.ndarray, b: np.ndarray):
        """For spans ``[a, b)``: the first interval that meets each (the one
        ``within`` starts from) and how many do."""
        xs, ys = self._arrays()
        first = np.searchsorted(ys, a, side="right")  # bisect_right(ends, a)
        return first, np.searchsorted(xs, b, side="left") - first  # and then x < b

    def clipped_columns(self, a: np.ndarray, b: np.ndarray):
        """For spans ``[a, b)`` (columns): how many intervals meet each, and
        the first of them clipped to it (``within(a, b)[0]``; the span
        itself where none meets)."""
        xs, ys = self._arrays()
        first, meets = self._meeting(a, b)
        if not len(xs):
            return meets, a.copy(), a.copy()
        i = np.minimum(first, len(xs) - 1)
        some = meets > 0
        return (meets, np.where(some, np.maximum(xs[i], a), a),
                np.where(some, np.minimum(ys[i], b), a))

    def seconds_within(self, spans: _Spans, rows: List[int], by_columns: bool) -> List[float]:
        """``_inside(self.within(a, b))`` for each span of ``rows``: by numpy columns
        (``by_columns``), adding the clipped lengths in the same order as
        the sum does (``0 + d1 + d2 ...``), for spans met by at most
        ``_MEETS`` intervals; one by one for the others."""
        if not by_columns:
            return [_inside(self.within(spans.a[r], spans.b[r])) for r in rows]
        starts, ends = spans.arrays()
        at = np.asarray(rows, dtype=np.intp)
        a, b = starts[at], ends[at]
        xs, ys = self._arrays()
        first, meets = self._meeting(a, b)
        w = np.zeros(len(rows))
        for j in range(min(int(meets.max(initial=0)), _MEETS)):
            on = meets > j
            i = first[on] + j
            w[on] += np.minimum(ys[i], b[on]) - np.maximum(xs[i], a[on])
        out = w.tolist()
        for j in np.flatnonzero(meets > _MEETS).tolist():
            out[j] = _inside(self.within(spans.a[rows[j]], spans.b[rows[j]]))
        return out


def _blocks(p) -> _Blocks:
    blocks = p.cache.get("blocks")
    if blocks is None:
        blocks = p.cache["blocks"] = _Blocks(_blocking(p))
    return blocks


def _inside(clipped: List[Tuple[float, float]]) -> float:
    return sum(y - x for x, y in clipped)


def straggler_stalls(lead, others) -> List[EventRecord]:
    """The input stalls carved from ``lead``'s steps where a host of
    ``others`` (pieces of the same attempt of the job) blocked longer."""
    lead_spans = _step_spans(lead)
    if not lead_spans.at:
        return []
    # per row of the lead's spans: the slowest host's blocking seconds in its
    # own step and which host (the first of equals); hosts in turn, by columns
    worst_w = np.zeros(len(lead_spans.a))
    worst_p = np.full(len(lead_spans.a), -1)
    for n, p in enumerate(others):
        blocks = _blocks(p)
        if not blocks.spans:
            continue
        spans = _step_spans(p)
        steps = list(filter(lead_spans.at.__contains__, spans.at))
        if not steps:
            continue
        w = np.asarray(blocks.seconds_within(spans, list(map(spans.at.__getitem__, steps)),
                                             _floats(p)), dtype=float)
        pos = np.fromiter(map(lead_spans.at.__getitem__, steps), dtype=np.intp, count=len(steps))
        slower = w > worst_w[pos]
        worst_w[pos[slower]] = w[slower]
        worst_p[pos[slower]] = n
    slowed = (worst_p >= 0).tolist()
    worst = {k: row for k, row in lead_spans.at.items() if slowed[row]}
    if not worst:
        return []
    steps = sorted(worst)
    carved = _carved_by_columns(lead, others, steps, [worst[k] for k in steps], worst_w, worst_p)
    worst_w_of, worst_p_of = worst_w.tolist(), worst_p.tolist()
    own = _blocks(lead)
    carved_all: List[Tuple[float, float]] = []
    for j, k in enumerate(steps):
        free = carved[j] if carved is not None else None
        if free is None:
            row = worst[k]
            a, b = lead_spans[k]
            own_k = own.within(a, b)
            need = min(worst_w_of[row], b - a) - _inside(own_k)
            if need <= EPS:
                continue
            # the slowest host's blocking intervals moved into the lead's span:
            # where the job most likely waited
            p = others[worst_p_of[row]]
            pa, pb = _step_spans(p)[k]
            shift = a - pa
            where = [(x + shift, y + shift) for x, y in _blocks(p).within(pa, pb)]
            free = free_time(own_k, where, a, b, need)
        carved_all += free
    return _stall_events(lead, carved_all)


def _stall_events(lead, carved: List[Tuple[float, float]]) -> List[EventRecord]:
    """An input stall start and end for each carved interval, in order, as
    the lead's (built in one C-level pass: one per stalled step of a run)."""
    times: List[float] = [0.0] * (2 * len(carved))
    times[0::2] = map(itemgetter(0), carved)
    times[1::2] = map(itemgetter(1), carved)
    host, pid = lead.key
    fields = zip(repeat(lead.events[0][0]), _STALL_PAIR * len(carved), times, repeat(None),
                 repeat(None), repeat(lead.index), repeat(host), repeat(pid),
                 repeat("straggler"), repeat(0), times)
    return list(map(tuple.__new__, repeat(EventRecord), fields))


def _carved_by_columns(lead, others, steps: list, rows: List[int], worst_w: np.ndarray,
                       worst_p: np.ndarray) -> Optional[List[Optional[list]]]:
    """The stalls to carve in each of the lead's ``steps`` (sorted; ``rows``:
    their rows in the lead's spans), by numpy columns, for the steps
    where the lead blocked at most once and the slowest host exactly once
    (:func:`.free_time.free_time_by_columns`); None for the others (one by
    one), or None for all when a time is not a float."""
    if not _floats(lead) or not all(_floats(p) for p in others):
        return None
    starts, ends = _step_spans(lead).arrays()
    pos = np.asarray(rows, dtype=np.intp)
    a, b = starts[pos], ends[pos]
    own_meets, ox, oy = _blocks(lead).clipped_columns(a, b)
    need = np.minimum(worst_w[pos], b - a) - np.where(own_meets == 1, oy - ox, 0.0)
    winner = worst_p[pos]
    wx, wy, fits = np.empty(len(steps)), np.empty(len(steps)), own_meets <= 1
    for n in np.unique(winner).tolist():
        mine = np.flatnonzero(winner == n)
        p_spans = _step_spans(others[n])
        p_starts, p_ends = p_spans.arrays()
        p_rows = np.fromiter((p_spans.at[steps[j]] for j in mine.tolist()), dtype=np.intp,
                             count=len(mine))
        pa, pb = p_starts[p_rows], p_ends[p_rows]
        meets, x, y = _blocks(others[n]).clipped_columns(pa, pb)
        shift = a[mine] - pa
        wx[mine], wy[mine] = x + shift, y + shift
        fits[mine] &= meets == 1
    fits &= wy > wx  # a shifted interval that rounding emptied: one by one
    return carved_per_row(a, b, own_meets, ox, oy, wx, wy, need, fits)
