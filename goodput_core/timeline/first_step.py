"""Stragglers before the first step (semantics rule 13, :mod:`.streams`).

Every host of a synchronous job waits for the slowest host's first batch
(in real jobs the first load fills shuffle buffers and can take minutes,
after every restart): the time from an attempt's job start to its first
step gates the job like any step's. A host's blocking time there is the
union of its loads of every kind (before the first step every load blocks,
rule 7), input stalls and blocking loads that ended by its first step
start, clipped to the time from its job start (its first event without one)
to that step start. When another host of the same attempt, with the same
first step, blocked longer, the difference is carved from the lead's time
before its first step as an input stall, where :func:`.free_time.free_time`
puts it (the hosts' times aligned at their first step starts).

Only the events up to a piece's first step are read, once per piece: the
pass costs what the attempts' starts hold, not the run's steps.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, List, Optional, Tuple

from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.free_time import EPS, free_time
from goodput_core.timeline.stragglers import _Blocks, _inside, _stall_events, _union

__all__ = ["first_step_stalls"]

_STEP, _JOB_START = int(Kind.STEP_START), int(Kind.JOB_START)
_STARTS = {int(Kind.INPUT_STALL_START): 0, int(Kind.BLOCKING_LOAD_START): 1,
           int(Kind.DATA_LOADING_START): 2}
_ENDS = {int(Kind.INPUT_STALL_END): 0, int(Kind.BLOCKING_LOAD_END): 1,
         int(Kind.DATA_LOADING_END): 2}

_Before = Tuple[float, float, Any, List[Tuple[float, float]]]


def _before(p) -> Optional[_Before]:
    """``(a, b, step, blocking)``: a piece's job start (else its start), its
    first step start with a step number and that step, its blocking
    intervals clipped to ``[a, b)``; None without a first step after ``a``
    (kept on the piece)."""
    if "before" in p.cache:
        return p.cache["before"]
    p.cache["before"] = out = _read(p)
    return out


def _read(p) -> Optional[_Before]:
    kinds, events, times = p.kinds, p.events, p.times
    i = -1
    while True:
        try:
            i = kinds.index(_STEP, i + 1)
        except ValueError:
            return None
        if events[i][3] is not None:
            break
    b, step = times[i], events[i][3]
    try:  # (a job start after the first step: events before it are no attempt's)
        a = times[kinds.index(_JOB_START)]
    except ValueError:
        a = p.start
    if not b > a:
        return None
    # each end closes its family's latest open start (a start reopens it)
    pending: List[Optional[float]] = [None, None, None]
    spans = []
    for k, t in zip(kinds[:bisect_right(times, b)], times):
        fam = _STARTS.get(k)
        if fam is not None:
            pending[fam] = t
            continue
        fam = _ENDS.get(k)
        if fam is not None and pending[fam] is not None:
            x, pending[fam] = pending[fam], None
            if t > x:
                spans.append((x, t))
    spans.sort()
    return a, b, step, _Blocks(_union(spans)).within(a, b)


def first_step_stalls(lead, others) -> List[EventRecord]:
    """The input stalls carved from ``lead``'s time before its first step
    where a host of ``others`` (pieces of the same attempt of the job) with
    the same first step blocked longer before it (module docstring)."""
    mine = _before(lead)
    if mine is None:
        return []
    a, b, step, own = mine
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
    need = min(worst, b - a) - _inside(own)
    if need <= EPS:
        return []
    return _stall_events(lead, free_time(own, where, a, b, need))
