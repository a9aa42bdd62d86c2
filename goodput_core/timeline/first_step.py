"""Stragglers before the first step (semantics rule 13, :mod:`.streams`).

Every host of a synchronous job waits for the slowest host's first batch
(in real jobs the first load fills shuffle buffers and can take minutes,
after every restart): the time from an attempt's job start to its first
step gates the job like any step's.

A host's blocking time there is what its own timeline counts as
``DATA_LOADING_SYNC`` there: its loads of every kind (before the first step
every load blocks, rule 7), input stalls and blocking loads that ended by
its first step start, less its own phases that outrank sync loading (rule
8: accelerator init, preparation, compile, checkpoint saves and restores,
custom events, elastic waits and re-initialisations, recorded as start/end
pairs) inside them, clipped to the time from its job start (its first
event without one) to that step start. When another host of the same
attempt, with the same first step, blocked longer, the difference is the
job's: carved from the lead's free time before its first step (where none
of those is recorded: first where the slow host blocked, the hosts' times
aligned at their first step starts, then after the lead's last recorded
phase, then from the job start), and what does not fit there from the free
time of its first step (from its start: the lead waited for the others at
the first step's collective).

Only the events up to a piece's first step (the lead's: to the end of its
first step) are read, once per piece: the pass costs what the attempts'
starts hold, not the run's steps.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, List, Optional, Sequence, Tuple

from goodput_core.events import CUSTOM_BADPUT_EVENT_TYPE, ELASTIC_WAIT_EVENT_TYPE, EventRecord, Kind
from goodput_core.timeline.free_time import EPS, fill, free_time
from goodput_core.timeline.kind_routes import PAIR_FAMILIES
from goodput_core.timeline.stragglers import _Blocks, _inside, _stall_events, _union

__all__ = ["first_step_stalls", "first_step_carve"]

_STEP, _STEP_END = int(Kind.STEP_START), int(Kind.STEP_END)
_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)
_LOADS = frozenset({"dl", "stall", "bload"})
_BLOCKS = frozenset({"stall", "bload"})  # what blocks inside a step (rules 7, 16)
# the start/end families that outrank sync loading (rule 8); hangs apart
_FAMILIES = {int(k): v for k, v in PAIR_FAMILIES.items() if v[0] != "hang"}
_TYPE_FIELD = {"custom": CUSTOM_BADPUT_EVENT_TYPE, "wait": ELASTIC_WAIT_EVENT_TYPE}

Interval = Tuple[float, float]
_Before = Tuple[float, float, Any, List[Interval], List[Interval]]


def _family(name: str, e: EventRecord) -> Any:
    """A pairing family: custom events pair by upper-cased type, elastic waits
    by type (as the timeline pairs them)."""
    field = _TYPE_FIELD.get(name)
    if field is None:
        return name
    extra = e[4]
    value = extra.get(field) if isinstance(extra, dict) else None
    if name == "custom":
        return name, value.upper() if isinstance(value, str) else None
    return name, value if isinstance(value, str) else "unknown"


def _paired(events: Sequence[EventRecord], times: Sequence[float], kinds: Sequence[int]
            ) -> Tuple[List[Interval], List[Interval], List[Interval]]:
    """``(loads, blocks, phases)``: the intervals of the start/end pairs among
    the events, each end closing its family's latest open start (a start
    reopens it; an end with none open is ignored), each list sorted; blocks
    are the input stalls and blocking loads among the loads."""
    pending: dict = {}
    loads, blocks, phases = [], [], []
    for e, t, k in zip(events, times, kinds):
        fam = _FAMILIES.get(k)
        if fam is None:
            continue
        name, is_end = fam
        key = _family(name, e)
        if not is_end:
            pending[key] = t
            continue
        x = pending.pop(key, None)
        if x is not None and t > x:
            if name in _LOADS:
                loads.append((x, t))
                if name in _BLOCKS:
                    blocks.append((x, t))
            else:
                phases.append((x, t))
    return sorted(loads), sorted(blocks), sorted(phases)


def _minus(a: List[Interval], b: List[Interval]) -> List[Interval]:
    """Disjoint sorted intervals ``a`` less disjoint sorted intervals ``b``."""
    out, j = [], 0
    for x, y in a:
        while j < len(b) and b[j][1] <= x:
            j += 1
        k, cur = j, x
        while k < len(b) and b[k][0] < y:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < y:
            out.append((cur, y))
    return out


def _first(p) -> Optional[int]:
    """The position of a piece's first step start with a step number."""
    kinds, events = p.kinds, p.events
    i = -1
    while True:
        try:
            i = kinds.index(_STEP, i + 1)
        except ValueError:
            return None
        if events[i][3] is not None:
            return i


def _before(p) -> Optional[_Before]:
    """``(a, b, step, blocking, taken)``: a piece's job start ``a`` (else its
    start) and first step start ``b``, that step, its blocking intervals in
    ``[a, b)`` (loads less higher phases) and every load and phase there;
    None without a first step after ``a`` (kept on the piece)."""
    if "before" not in p.cache:
        p.cache["before"] = _read(p)
    return p.cache["before"]


def _read(p) -> Optional[_Before]:
    i = _first(p)
    if i is None:
        return None
    times = p.times
    b, step = times[i], p.events[i][3]
    try:  # (a job start after the first step: events before it are no attempt's)
        a = times[p.kinds.index(_JOB_START)]
    except ValueError:
        a = p.start
    if not b > a:
        return None
    n = bisect_right(times, b)
    loads, _, phases = _paired(p.events[:n], times[:n], p.kinds[:n])
    loads, phases = _union(loads), _union(phases)
    blocking = _Blocks(_minus(loads, phases)).within(a, b)
    taken = _Blocks(_union(sorted(loads + phases))).within(a, b)
    return a, b, step, blocking, taken


def _first_span_end(p, i: int) -> Optional[float]:
    """Where the lead's first step (at position ``i``) ends: at the next step
    start after it, else at its step end or the job end (rule 3)."""
    kinds, events, times = p.kinds, p.events, p.times
    b, step = times[i], events[i][3]
    j = i
    while True:
        try:
            j = kinds.index(_STEP, j + 1)
        except ValueError:
            break
        if events[j][3] is not None:
            return times[j] if times[j] > b else None
    end = None
    for k, e, t in zip(kinds[i + 1:], events[i + 1:], times[i + 1:]):
        if k == _STEP_END and e[3] == step:
            end = t
        elif k == _JOB_END and end is None:
            end = t
    return end if end is not None and end > b else None


def first_step_stalls(lead, others, step_stalls: Sequence[Interval] = ()) -> List[EventRecord]:
    """The input stalls carved from ``lead``'s time before (and, what does not
    fit there, in) its first step where a host of ``others`` (pieces of the
    same attempt of the job) with the same first step blocked longer before
    it (module docstring). ``step_stalls``: the straggler stalls already
    carved from the lead's steps (not carved again)."""
    carved = first_step_carve(lead, others, step_stalls)
    return _stall_events(lead, carved) if carved else []


def first_step_carve(lead, others, step_stalls: Sequence[Interval] = ()) -> List[Interval]:
    """:func:`first_step_stalls` as intervals, in order. A piece is read
    through ``kinds``, ``events``, ``times`` (in time order), ``start`` and
    ``cache`` (its events up to its second step start suffice)."""
    mine = _before(lead)
    if mine is None:
        return []
    a, b, step, own, taken = mine
    worst, where = 0.0, None
    for p in others:
        theirs = _before(p)
        if theirs is None or theirs[2] != step:
            continue
        w = _inside(theirs[3])
        if w > worst:
            shift = b - theirs[1]
            worst, where = w, [(x + shift, y + shift) for x, y in theirs[3]]
    if where is None:
        return []
    need = worst - _inside(own)
    if need <= EPS:
        return []
    carved = free_time(taken, where, a, b, need)
    need -= _inside(carved)
    if need > EPS:
        carved += _in_first_step(lead, step_stalls, need)
    return carved


def _in_first_step(lead, step_stalls: Sequence[Interval], need: float) -> List[Interval]:
    """Up to ``need`` seconds of the lead's first step span where nothing is
    recorded (no stall or blocking load, phase or carved stall), from its start."""
    i = _first(lead)
    c = _first_span_end(lead, i)
    if c is None:
        return []
    b = lead.times[i]
    n = bisect_right(lead.times, c)
    _, blocks, phases = _paired(lead.events[:n], lead.times[:n], lead.kinds[:n])
    taken = _union(sorted(blocks + phases + [s for s in step_stalls if s[1] > b and s[0] < c]))
    return fill(taken, b, c, need)
