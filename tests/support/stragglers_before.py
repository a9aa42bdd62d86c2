"""The stragglers of the per-event lead-stream oracle
(:mod:`tests.support.lead_events_before`): in each step, and (issue 40)
before the first step. Kept only as a test oracle; not imported by the
package."""
from __future__ import annotations

import bisect
import math
from typing import Any, Dict, List, Optional, Tuple

from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.kind_routes import PAIR_FAMILIES

_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)
_STEP, _STEP_END = int(Kind.STEP_START), int(Kind.STEP_END)
_BLOCK_START = {int(Kind.INPUT_STALL_START): "stall", int(Kind.BLOCKING_LOAD_START): "bload"}
_BLOCK_END = {int(Kind.INPUT_STALL_END): "stall", int(Kind.BLOCKING_LOAD_END): "bload"}
# issue 40: start/end pairs before the first step (before it every load blocks,
# rule 7, and the phases that outrank sync loading are left out of it, rule 8)
_PAIRS = {int(k): v for k, v in PAIR_FAMILIES.items() if v[0] != "hang"}
_TYPED = {"custom": "custom_badput_event_type", "wait": "elastic_wait_event_type"}
_EPS = 1e-9  # seconds: below this a straggler's excess is float noise


def _t(e: EventRecord) -> float:
    """When an event happened: its time, else its write time (an Orbax entry
    without a start), else 0."""
    t = e[2]
    if t == t and abs(t) != math.inf:
        return t
    w = e[10]
    return w if w == w else 0.0


def _step_spans(evs: List[EventRecord]) -> Dict[int, Tuple[float, float]]:
    """``{step: (start, end)}`` of one piece: a step runs to the next step
    start, the last one to its step end or the job end (rule 3; without
    either it has no span yet)."""
    starts = [(_t(e), e[3]) for e in evs if e[1] == _STEP and e[3] is not None]
    ends = {e[3]: _t(e) for e in evs if e[1] == _STEP_END and e[3] is not None}
    job_end = [_t(e) for e in evs if e[1] == _JOB_END]
    spans: Dict[int, Tuple[float, float]] = {}
    for (t, k), nxt in zip(starts, starts[1:] + [None]):
        end = nxt[0] if nxt is not None else ends.get(k, job_end[0] if job_end else None)
        if end is not None and end > t:
            spans[k] = (t, end)
    return spans


def _blocking(evs: List[EventRecord]) -> List[Tuple[float, float]]:
    """The union of a piece's input stalls and blocking loads, sorted."""
    pending: Dict[str, Optional[float]] = {}
    spans = []
    for e in evs:
        fam = _BLOCK_START.get(e[1])
        if fam is not None:
            pending[fam] = _t(e)
            continue
        fam = _BLOCK_END.get(e[1])
        if fam is not None and pending.get(fam) is not None:
            a, b = pending.pop(fam), _t(e)
            if b > a:
                spans.append((a, b))
    spans.sort()
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


def _straggler_stalls(lead, others) -> List[EventRecord]:
    lead_spans = _step_spans(lead.events)
    if not lead_spans:
        return []
    # step -> (the slowest host's blocking seconds, its blocking intervals moved
    # into the lead's span: where the job most likely waited)
    worst: Dict[int, Tuple[float, List[Tuple[float, float]]]] = {}
    for p in others:
        blocks = _Blocks(_blocking(p.events))
        if not blocks.spans:
            continue
        for k, (a, b) in _step_spans(p.events).items():
            if k in lead_spans:
                mine = blocks.within(a, b)
                w = _inside(mine)
                if w > worst.get(k, (0.0, None))[0]:
                    shift = lead_spans[k][0] - a
                    worst[k] = (w, [(x + shift, y + shift) for x, y in mine])
    if not worst:
        return []
    own = _Blocks(_blocking(lead.events))
    host, pid = lead.key
    out: List[EventRecord] = []
    for k, (w, where) in sorted(worst.items()):
        a, b = lead_spans[k]
        own_k = own.within(a, b)
        need = min(w, b - a) - _inside(own_k)
        if need <= _EPS:
            continue
        for x, y in _free_time(own_k, where, a, b, need):
            for kind, t in ((Kind.INPUT_STALL_START, x), (Kind.INPUT_STALL_END, y)):
                out.append(EventRecord(lead.events[0][0], int(kind), t, None, None,
                                       lead.index, host, pid, "straggler", 0, t))
    return out


def _first_step(evs: List[EventRecord]) -> Optional[Tuple[float, Any]]:
    """``(time, step)`` of a piece's first step start with a step number."""
    return next(((_t(e), e[3]) for e in evs if e[1] == _STEP and e[3] is not None), None)


def _pairs(evs: List[EventRecord]):
    """issue 40: ``(loads, blocks, phases)``: the start/end intervals of the
    loads of every kind, of the input stalls and blocking loads, and of the
    phases that outrank sync loading (rule 8; custom events paired by
    upper-cased type, elastic waits by type, hangs apart), each sorted."""
    pending: Dict[Any, float] = {}
    loads, blocks, phases = [], [], []
    for e in evs:
        fam = _PAIRS.get(e[1])
        if fam is None:
            continue
        name, is_end = fam
        key: Any = name
        if name in _TYPED:
            v = e[4].get(_TYPED[name]) if isinstance(e[4], dict) else None
            if name == "custom":
                key = (name, v.upper() if isinstance(v, str) else None)
            else:
                key = (name, v if isinstance(v, str) else "unknown")
        if not is_end:
            pending[key] = _t(e)
        elif key in pending:
            x = pending.pop(key)
            if _t(e) > x:
                if name in ("dl", "stall", "bload"):
                    loads.append((x, _t(e)))
                    if name != "dl":
                        blocks.append((x, _t(e)))
                else:
                    phases.append((x, _t(e)))
    return sorted(loads), sorted(blocks), sorted(phases)


def _merged(spans: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    merged: List[List[float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _less(a: List[Tuple[float, float]], b: List[Tuple[float, float]]):
    """Disjoint sorted ``a`` less disjoint sorted ``b``."""
    out = []
    for x, y in a:
        cur = x
        for u, v in b:
            if v <= cur or u >= y:
                continue
            if u > cur:
                out.append((cur, u))
            cur = max(cur, v)
        if cur < y:
            out.append((cur, y))
    return out


def _before_first_step(p):
    """issue 40: ``(a, b, step, blocking, taken)`` of the time from a piece's
    job start (its first event without one) to its first step start ``b``:
    its loads of every kind less its phases that outrank sync loading, and
    all of both, merged and clipped to ``[a, b)``; None without a first step."""
    first = _first_step(p.events)
    if first is None:
        return None
    b, step = first
    a = next((_t(e) for e in p.events if e[1] == _JOB_START), p.start)
    if not b > a:
        return None
    loads, _, phases = _pairs([e for e in p.events if _t(e) <= b])
    loads, phases = _merged(loads), _merged(phases)
    blocking = _Blocks(_less(loads, phases)).within(a, b)
    taken = _Blocks(_merged(loads + phases)).within(a, b)
    return a, b, step, blocking, taken


def _first_step_end(p) -> Optional[float]:
    """Where a piece's first step ends: the next step start after it (None
    when not later), else its step end, else the job end (rule 3)."""
    b, step = _first_step(p.events)
    steps = [e for e in p.events if e[1] == _STEP and e[3] is not None]
    if len(steps) > 1:
        c = _t(steps[1])
        return c if c > b else None
    i = p.events.index(steps[0])
    end = None
    for e in p.events[i + 1:]:
        if e[1] == _STEP_END and e[3] == step:
            end = _t(e)
        elif e[1] == _JOB_END and end is None:
            end = _t(e)
    return end if end is not None and end > b else None


def _first_step_stalls(lead, others, step_stalls) -> List[EventRecord]:
    """issue 40: the input stalls carved from the lead's time before its first
    step (then, what does not fit, from its first step's free time from its
    start) where a host of ``others`` with the same first step blocked longer
    before it (the hosts' time aligned at their first step starts)."""
    mine = _before_first_step(lead)
    if mine is None:
        return []
    a, b, step, own, taken = mine
    worst, where = 0.0, None
    for p in others:
        theirs = _before_first_step(p)
        if theirs is None or theirs[2] != step:
            continue
        w = _inside(theirs[3])
        if w > worst:
            shift = b - theirs[1]
            worst, where = w, [(x + shift, y + shift) for x, y in theirs[3]]
    if where is None:
        return []
    need = worst - _inside(own)
    if need <= _EPS:
        return []
    carved = _free_time(taken, where, a, b, need)
    need -= _inside(carved)
    c = _first_step_end(lead) if need > _EPS else None
    if c is not None:
        _, blocks, phases = _pairs([e for e in lead.events if _t(e) <= c])
        stalls = [(x, y) for x, y in step_stalls if y > b and x < c]
        carved += _take(_gaps(_merged(blocks + phases + stalls), b, c), need)
    host, pid = lead.key
    out: List[EventRecord] = []
    for x, y in carved:
        for kind, t in ((Kind.INPUT_STALL_START, x), (Kind.INPUT_STALL_END, y)):
            out.append(EventRecord(lead.events[0][0], int(kind), t, None, None,
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
    return _take(first + [g for g in rest if g[0] >= anchor] + [g for g in rest if g[0] < anchor],
                 need)


def _take(ordered: List[Tuple[float, float]], need: float) -> List[Tuple[float, float]]:
    """The first ``need`` seconds of the intervals ``ordered``, in that order."""
    out = []
    for x, y in ordered:
        take = min(y - x, need)
        if take > 0:
            out.append((x, x + take))
            need -= take
        if need <= _EPS:
            break
    return out
