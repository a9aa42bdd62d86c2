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
from itertools import compress, repeat
from operator import eq, itemgetter
from typing import Dict, List, Optional, Tuple

from goodput_core.events import EventRecord, Kind

__all__ = ["straggler_stalls"]

_STEP, _STEP_END, _JOB_END = int(Kind.STEP_START), int(Kind.STEP_END), int(Kind.JOB_END)
_BLOCK_START = {int(Kind.INPUT_STALL_START): "stall", int(Kind.BLOCKING_LOAD_START): "bload"}
_BLOCK_END = {int(Kind.INPUT_STALL_END): "stall", int(Kind.BLOCKING_LOAD_END): "bload"}
_BLOCK_KINDS = frozenset(_BLOCK_START) | frozenset(_BLOCK_END)
_EPS = 1e-9  # seconds: below this a straggler's excess is float noise
_STEP_OF = itemgetter(3)


def _of_kind(p, kind: int) -> List[bool]:
    """Which of a piece's events are of ``kind`` (a C-level pass)."""
    return list(map(eq, p.kinds, repeat(kind)))


def _step_spans(p) -> Dict[int, Tuple[float, float]]:
    """``{step: (start, end)}`` of one piece: a step runs to the next step
    start, the last one to its step end or the job end (rule 3; without
    either it has no span yet)."""
    spans = p.cache.get("spans")
    if spans is not None:
        return spans
    is_start, is_end = _of_kind(p, _STEP), _of_kind(p, _STEP_END)
    starts = list(zip(compress(p.times, is_start), map(_STEP_OF, compress(p.events, is_start))))
    if any(k is None for _, k in starts):
        starts = [(t, k) for t, k in starts if k is not None]
    ends = dict(zip(map(_STEP_OF, compress(p.events, is_end)), compress(p.times, is_end)))
    ends.pop(None, None)  # a step end without its step: no step's end
    job_end = next(compress(p.times, _of_kind(p, _JOB_END)), None)
    spans = {}
    for (t, k), nxt in zip(starts, starts[1:] + [None]):
        end = nxt[0] if nxt is not None else ends.get(k, job_end)
        if end is not None and end > t:
            spans[k] = (t, end)
    p.cache["spans"] = spans
    return spans


def _blocking(p) -> List[Tuple[float, float]]:
    """The union of a piece's input stalls and blocking loads, sorted."""
    merged_spans = p.cache.get("blocking")
    if merged_spans is not None:
        return merged_spans
    mine = list(map(_BLOCK_KINDS.__contains__, p.kinds))
    pending: Dict[str, Optional[float]] = {}
    spans = []
    for kind, t in zip(compress(p.kinds, mine), compress(p.times, mine)):
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
    merged: List[List[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    p.cache["blocking"] = merged_spans = [(a, b) for a, b in merged]
    return merged_spans


class _Blocks:
    """A host's merged blocking intervals (disjoint, in time order), with the
    ones that meet a span found by bisection (runs have many steps)."""

    __slots__ = ("spans", "ends")

    def __init__(self, spans: List[Tuple[float, float]]):
        self.spans = spans
        self.ends = [y for _, y in spans]  # sorted too: the intervals are disjoint

    def within(self, a: float, b: float) -> List[Tuple[float, float]]:
        """The intervals that meet ``[a, b)``, clipped to it."""
        out, spans = [], self.spans
        for i in range(bisect.bisect_right(self.ends, a), len(spans)):
            x, y = spans[i]
            if x >= b:
                break
            out.append((max(x, a), min(y, b)))
        return out


def _inside(clipped: List[Tuple[float, float]]) -> float:
    return sum(y - x for x, y in clipped)


def straggler_stalls(lead, others) -> List[EventRecord]:
    """The input stalls carved from ``lead``'s steps where a host of
    ``others`` (pieces of the same attempt of the job) blocked longer."""
    lead_spans = _step_spans(lead)
    if not lead_spans:
        return []
    # step -> (the slowest host's blocking seconds, its blocking intervals moved
    # into the lead's span: where the job most likely waited)
    worst: Dict[int, Tuple[float, List[Tuple[float, float]]]] = {}
    for p in others:
        blocks = _Blocks(_blocking(p))
        if not blocks.spans:
            continue
        for k, (a, b) in _step_spans(p).items():
            if k in lead_spans:
                mine = blocks.within(a, b)
                w = _inside(mine)
                if w > worst.get(k, (0.0, None))[0]:
                    shift = lead_spans[k][0] - a
                    worst[k] = (w, [(x + shift, y + shift) for x, y in mine])
    if not worst:
        return []
    own = _Blocks(_blocking(lead))
    host, pid = lead.key
    run = lead.events[0][0]
    out: List[EventRecord] = []
    for k, (w, where) in sorted(worst.items()):
        a, b = lead_spans[k]
        own_k = own.within(a, b)
        need = min(w, b - a) - _inside(own_k)
        if need <= _EPS:
            continue
        for x, y in _free_time(own_k, where, a, b, need):
            for kind, t in ((Kind.INPUT_STALL_START, x), (Kind.INPUT_STALL_END, y)):
                out.append(EventRecord(run, int(kind), t, None, None,
                                       lead.index, host, pid, "straggler", 0, t))
    return out


def _gaps(blocks: List[Tuple[float, float]], a: float, b: float) -> List[Tuple[float, float]]:
    """``[a, b)`` minus ``blocks``, in time order."""
    gaps, cursor = [], a
    for x, y in sorted((max(x, a), min(y, b)) for x, y in blocks if y > a and x < b) + [(b, b)]:
        if x > cursor:
            gaps.append((cursor, x))
        cursor = max(cursor, y)
    return gaps


def _free_time(own: List[Tuple[float, float]], where: List[Tuple[float, float]], a: float,
               b: float, need: float) -> List[Tuple[float, float]]:
    """Intervals of the lead's span ``[a, b)`` outside its own blocking time,
    totalling ``need``: first where the straggler blocked, then right after
    the lead's own last blocking interval (where it would have computed),
    then from ``a``."""
    free = _gaps(own, a, b)
    first = []
    for x, y in sorted(where):
        first += [(max(x, u), min(y, v)) for u, v in free if min(y, v) > max(x, u)]
    inside = [(x, y) for x, y in own if y > a and x < b]
    anchor = min(max(y for _, y in inside), b) if inside else a
    rest = sorted((max(x, u), min(y, v)) for x, y in _gaps(first, a, b) for u, v in free
                  if min(y, v) > max(x, u))
    ordered = first + [g for g in rest if g[0] >= anchor] + [g for g in rest if g[0] < anchor]
    out = []
    for x, y in ordered:
        take = min(y - x, need)
        if take > 0:
            out.append((x, x + take))
            need -= take
        if need <= _EPS:
            break
    return out
