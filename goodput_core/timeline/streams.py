"""Many writers, one job: the lead stream of a run (semantics rule 13).

A run is often recorded by several processes at once (every host with its
process index, or several recorders on one run name). Mixing their events
into one timeline invents restarts (each host's step 0 "re-records" the
others'), so the job-level figures come from one **lead stream**:

- A **stream** is the events of one writer process, ``(host, pid)``. Its
  index is the one it settles on: the index of its latest event (a JAX host
  records its job start before it knows its index, under the default 0).
- A stream is cut into **pieces** at its job starts (one piece per attempt of
  that process). A piece runs from its first to its last event, liveness-only
  rows (heartbeats, metrics, metadata) apart: they never place a piece, and
  a piece of nothing else, or with neither a job start nor a step (a process
  that only observed: its disruptions are borrowed as any other host's, its
  tail may end an attempt, below), leads nothing. A piece that recorded a disruption
  or a job end after its last step start ends there (what it records later
  is its process shutting down). Pieces whose lifetimes overlap belong to
  one **attempt of the job** (the hosts run together); a gap between them is
  a restart.
- In each attempt of the job the lead is the lowest index present; among
  concurrent pieces of that index (several recorders, no index given), the
  earliest to start that recorded steps (with the JAX adapter's default,
  only process 0 records steps, but every process records its job start
  and end, all under index 0), else the earliest to start. Sequential
  pieces of the lead index (a host restarted while others ran on) all
  lead, one after the other; so does a piece of that index whose first
  step comes after the current lead's last (a restart overlapping the old
  process's shutdown). A lead piece's events from the next lead piece's
  start on are not the job's (its metrics and metadata excepted).
- A disruption recorded by any process of an attempt is the job's, counted
  once: when the lead piece recorded none, the earliest of the others' is
  added to it (before its job end, if any).
- **An observer's tail** (:mod:`.observer_tail`): when an attempt's last
  lead piece ended at a job end, an observer of the lead's index whose first
  job end after it comes before the next attempt starts, with a custom badput
  start from the lead's job end on, gives the job its custom badput events
  from there to its job end and that job end (the MaxText exit watcher's
  ``SHUTDOWN``): the attempt ends at the observer's job end.
- **Stragglers:** in each step ``k`` of the lead, the blocking time (input
  stalls and blocking loads) of the slowest host in its own step ``k`` is the
  job's: when another host blocked longer, the difference is carved from the
  lead's step ``k`` span as an input stall (in the span's unblocked time,
  right after the lead's own blocking time, where it would have computed).
  The time from the job start to the first step gates the job the same way
  (:mod:`.first_step`).

A run written by one process (every reference log: no writer metadata) is
returned as it is; events without writer metadata beside other writers'
(imported, or written by the reference into the same log) are kept as the
job's.

A calculator reading a multi-writer run calls :func:`lead_events` on every
event of the run at each read with new events, so it reads the events by
columns (C-level ``map``/``compress`` passes and numpy sorts), not in a
Python loop per event; the stragglers are :mod:`.stragglers`' and
:mod:`.free_time`'s.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from itertools import compress, repeat
from operator import countOf, eq, itemgetter, not_
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.first_step import first_step_stalls
from goodput_core.timeline.observer_tail import observer_tail
from goodput_core.timeline.stragglers import straggler_stalls

__all__ = ["writer_key", "writers_of", "lead_events", "stream_indices"]

_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)
_STEP = int(Kind.STEP_START)
_DISRUPTION = int(Kind.DISRUPTION)
_STALL_END = int(Kind.INPUT_STALL_END)
_SCHEDULING = {int(Kind.JOB_SUBMITTED), int(Kind.RESOURCES_GRANTED)}
# Model metrics and run metadata are no part of the partition: every host's
# reach the run (``record_on_all_hosts=True`` points, a config only one host records).
_SIDE = {int(Kind.METRIC), int(Kind.METADATA)}
# rows that say a process is there, nothing of its attempt's time: they never
# place a piece (a heartbeat stamped now beside explicit past times)
_LIVENESS = frozenset(_SIDE | {int(Kind.HEARTBEAT)})
# C-level column readers: the rebuild reads every event of the run, so each
# pass below is a map/compress over a column, not Python per event
_KIND, _TIME, _WRITE_TIME = itemgetter(1), itemgetter(2), itemgetter(10)
_WRITE_SEQ = itemgetter(10, 9)


def writer_key(e: EventRecord) -> Optional[Tuple[str, int]]:
    """The writer process of an event: ``(host, pid)``; for an event without
    writer metadata (built by hand, imported with its index only), its index;
    None for an event of an unknown writer (no metadata, index 0: the
    reference's logs)."""
    return _key_of(e[6], e[7], e[5])


def _key_of(host, pid, index) -> Optional[Tuple[str, int]]:
    if host or pid:
        return host, pid
    return ("", -1 - int(index)) if index else None


def writers_of(events: Sequence[EventRecord]) -> set:
    """The distinct known writer processes of ``events``."""
    return {k for k in map(writer_key, events) if k is not None}


def _t(e: EventRecord) -> float:
    """When an event happened: its time, else its write time (an Orbax entry
    without a start), else 0."""
    t = e[2]
    if t == t and abs(t) != math.inf:
        return t
    w = e[10]
    return w if w == w else 0.0


class _Piece:
    """One attempt of one writer process: its events in time order, with
    their times (``_t``) and kinds as columns, and the straggler module's
    per-piece results (``cache``). ``start``/``end``: where it runs (module
    docstring; None for a piece of liveness-only rows)."""

    __slots__ = ("key", "index", "events", "times", "kinds", "start", "end", "cache")

    def __init__(self, key, index: int, events: List[EventRecord], times: List[float],
                 kinds: List[int]):
        self.key, self.index, self.events, self.times, self.kinds = key, index, events, times, kinds
        self.start, self.end = _extent(times, kinds)
        self.cache: Dict[str, Any] = {}

    def of_kind(self, kind: int) -> List[EventRecord]:
        """This piece's events of ``kind``, in time order."""
        return list(compress(self.events, map(eq, self.kinds, repeat(kind))))

    def first_step_time(self) -> float:
        """When its first step started (it has one)."""
        return self.times[self.kinds.index(_STEP)]

    def last_step_time(self) -> float:
        """When its last step started (it has one)."""
        return self.times[len(self.kinds) - 1 - self.kinds[::-1].index(_STEP)]

    def job_end(self) -> Optional[float]:
        """When it ended at a job end: the first disruption or job end at or
        after its last step start is a job end (None: a disruption, or neither)."""
        kinds = self.kinds
        after = len(kinds) - 1 - kinds[::-1].index(_STEP) if _STEP in kinds else 0
        for k, t in zip(kinds[after:], self.times[after:]):
            if k == _DISRUPTION:
                return None
            if k == _JOB_END:
                return t
        return None

    def cut(self, until: float) -> Tuple[Optional["_Piece"], List[EventRecord]]:
        """Its events before ``until`` (itself when all are; None when none
        is) and its metrics and metadata from ``until`` on."""
        j = bisect_left(self.times, until)
        if j == len(self.times):
            return self, []
        late = list(compress(self.events[j:], map(_SIDE.__contains__, self.kinds[j:])))
        if not j:
            return None, late
        return _Piece(self.key, self.index, self.events[:j], self.times[:j], self.kinds[:j]), late


def _extent(times: List[float], kinds: List[int]) -> Tuple[Optional[float], Optional[float]]:
    """A piece's start and end (times in order): its first and last events,
    liveness-only rows apart; it ends at the first disruption or job end at
    or after its last step start (None, None: only liveness rows, or neither
    a job start nor a step)."""
    n = len(kinds)
    if _JOB_START not in kinds and _STEP not in kinds:
        return None, None  # an observer's rows (a disruption): no attempt of its own
    if _LIVENESS.isdisjoint(kinds):
        first, last = 0, n - 1
    else:
        timed = list(map(_LIVENESS.__contains__, kinds))
        if all(timed):
            return None, None
        first, last = timed.index(False), n - 1 - timed[::-1].index(False)
    after = n - 1 - kinds[::-1].index(_STEP) if _STEP in kinds else first
    for closing in (_DISRUPTION, _JOB_END):
        try:
            last = min(last, kinds.index(closing, after))
        except ValueError:
            pass
    return times[first], times[last]


def _streams(events: Sequence[EventRecord]) -> Dict[Any, List[EventRecord]]:
    """The events of each writer (in arrival order), writers in order of
    first appearance: one stable sort of the writers' codes, not an append
    per event."""
    try:
        # the columns, zipped into (host, pid, index) tuples that zip reuses
        # once looked up: no tuple kept per event
        columns = [list(map(itemgetter(i), events)) for i in (6, 7, 5)]
        code_of_raw: Dict[Any, int] = {}
        codes: Dict[Any, int] = {}
        for r in dict.fromkeys(zip(*columns)):  # distinct, in order of first appearance
            code_of_raw[r] = codes.setdefault(_key_of(*r), len(codes))
    except (TypeError, ValueError, IndexError):  # junk among the events: one by one
        out: Dict[Any, List[EventRecord]] = {}
        for e in events:
            out.setdefault(writer_key(e), []).append(e)
        return out
    if len(codes) == 1:
        return {next(iter(codes)): list(events)}
    code = np.fromiter(map(code_of_raw.__getitem__, zip(*columns)), dtype=np.intp,
                       count=len(events))
    grouped = list(map(events.__getitem__, np.argsort(code, kind="stable").tolist()))
    bounds = np.cumsum(np.bincount(code, minlength=len(codes))).tolist()
    return {k: grouped[lo:hi] for k, lo, hi in zip(codes, [0] + bounds, bounds)}


def _settled(evs: List[EventRecord]) -> int:
    """The index a stream settles on: that of its latest recorded event."""
    writes = list(map(_WRITE_TIME, evs))
    if all(map(eq, writes, writes)):  # no NaN write time: its own column is the key
        return int(max(evs, key=_WRITE_SEQ)[5])
    last = max(evs, key=lambda e: (e[10] if e[10] == e[10] else _t(e), e[9]))
    return int(last[5])


def stream_indices(events: Sequence[EventRecord]) -> Dict[Any, int]:
    """``{(host, pid): settled index}`` of the writer processes of ``events``
    (``None``: the events of an unknown writer, index 0)."""
    return {k: (0 if k is None else _settled(v)) for k, v in _streams(events).items()}


def _pieces(key, evs: List[EventRecord]) -> List[_Piece]:
    """A stream in time order, cut at its job starts (the events before the
    first job start belong to the first piece)."""
    columns = _by_columns(evs)
    if columns is not None:
        index, evs, times, kinds = columns
    else:  # a time that is not a finite float, a NaN write time, a seq not an int
        index = _settled(evs)
        evs = sorted(evs, key=lambda e: (_t(e), e[9]))
        times = list(map(_t, evs))
        kinds = list(map(_KIND, evs))
    starts = list(compress(range(len(evs)), map(eq, kinds, repeat(_JOB_START))))
    cuts = [0] + starts[1:] + [len(evs)]
    return [_Piece(key, index, evs[a:b], times[a:b], kinds[a:b]) for a, b in zip(cuts, cuts[1:])]


def _by_columns(evs: List[EventRecord]):
    """``(settled index, events sorted by (time, seq) (stable), their times,
    their kinds)`` by numpy columns, when every time is a finite float, every
    write time a float (no NaN) and every seq an int; else None.

    The settled index is that of the first event with the greatest
    ``(write time, seq)`` (what ``max`` picks); a stream already in order
    is not sorted again."""
    n = len(evs)
    times, seqs, writes = (list(map(itemgetter(i), evs)) for i in (2, 9, 10))
    if countOf(map(type, times), float) < n or countOf(map(type, writes), float) < n or \
            countOf(map(type, seqs), int) < n:
        return None
    try:
        s = np.asarray(seqs, dtype=np.int64)
    except OverflowError:
        return None
    t, w = np.asarray(times, dtype=float), np.asarray(writes, dtype=float)
    if not np.isfinite(t).all() or np.isnan(w).any():
        return None
    latest = np.flatnonzero(w == w.max())
    index = int(evs[int(latest[s[latest].argmax()])][5])
    if not np.all((t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (s[1:] >= s[:-1]))):
        order = np.lexsort((s, t)).tolist()
        evs, times = list(map(evs.__getitem__, order)), list(map(times.__getitem__, order))
    return index, evs, times, list(map(_KIND, evs))


def _piece_order(p: _Piece):
    """Pieces in order of start, index and writer (liveness-only ones last)."""
    return (p.start is None, 0 if p.start is None else p.start, p.index, repr(p.key))


def _job_attempts(pieces: List[_Piece]) -> List[List[_Piece]]:
    """Pieces grouped by overlapping lifetimes, in time order."""
    groups: List[List[_Piece]] = []
    end = -math.inf
    for p in sorted(pieces, key=lambda p: (p.start, p.index)):
        if not groups or p.start > end:
            groups.append([])
            end = p.end
        groups[-1].append(p)
        end = max(end, p.end)
    return groups


def _lead_chain(group: List[_Piece]) -> List[_Piece]:
    """The lead pieces of one attempt of the job (module docstring)."""
    low = min(p.index for p in group)
    chain: List[_Piece] = []
    for p in group:  # in start order
        if p.index != low:
            continue
        if not chain or p.start >= chain[-1].end:
            chain.append(p)
        elif _STEP not in chain[-1].kinds and _STEP in p.kinds:
            # two writers under one index at once: the one that records the
            # training leads (only process 0 writes, but every process
            # recorded its job start and end around the adapter)
            chain[-1] = p
        elif _STEP in p.kinds and p.first_step_time() > chain[-1].last_step_time():
            # the new process trains after the old one stopped: a restart
            # while the old process shuts down (it leads up to the new start)
            if p.start > chain[-1].start:
                chain.append(p)
            else:
                chain[-1] = p
    return chain


def _without_scheduling(streams: Dict[Any, List[EventRecord]], out: List[EventRecord]) -> None:
    """Moves the scheduler's times (whoever recorded them: often a separate
    process, the launcher or `goodput` importing the scheduler's log) from
    ``streams`` to ``out``: they are the job's."""
    for key in list(streams):
        evs = streams[key]
        kinds = list(map(_KIND, evs))
        if _SCHEDULING.isdisjoint(kinds):
            continue
        scheduling = list(map(_SCHEDULING.__contains__, kinds))
        out += compress(evs, scheduling)
        streams[key] = list(compress(evs, map(not_, scheduling)))
        if not streams[key]:
            del streams[key]


def lead_events(events: Sequence[EventRecord]) -> List[EventRecord]:
    """The events the job-level figures are computed from (module docstring).

    Args:
      events: every event of one run (EventRecords with writer metadata).

    Returns:
      The lead stream's events, plus the disruptions and straggler stalls it
      takes from the other streams and every stream's metrics and metadata;
      ``events`` itself when one process wrote.
    """
    streams = _streams(events)
    # events of an unknown writer (no metadata beside known writers' events:
    # imported, or written by the reference) are the job's: kept as they are
    out: List[EventRecord] = streams.pop(None, [])
    _without_scheduling(streams, out)
    if len(streams) <= 1:
        return list(events)
    # in order of start, index and writer, not of arrival (a heartbeat
    # that brought a writer's first row earlier must not change a tie)
    pieces = sorted((p for key, evs in streams.items() for p in _pieces(key, evs)),
                    key=_piece_order)
    leads: List[_Piece] = []
    others_of: List[List[_Piece]] = []
    next_starts: List[Optional[float]] = []  # the next attempt's start, at each attempt's last lead
    groups = _job_attempts([p for p in pieces if p.start is not None])
    for g, group in enumerate(groups):
        chain = _lead_chain(group)
        others = [p for p in group if not any(p is c for c in chain)]
        leads += chain
        others_of += [others] * len(chain)
        next_starts += [None] * (len(chain) - 1)
        next_starts.append(groups[g + 1][0].start if g + 1 < len(groups) else math.inf)
    observers = [(p.index, p.times, p.events) for p in pieces
                 if p.start is None and _JOB_END in p.kinds]
    # each lead piece up to the next one's start: what a process records
    # after its successor started (shutting down, heartbeats stamped now
    # beside explicit past times) is not the job's
    untils = [p.start for p in leads[1:]] + [math.inf]
    cut: List[Optional[_Piece]] = []
    for lead, others, until, next_start in zip(leads, others_of, untils, next_starts):
        kept, late = lead.cut(until)
        cut.append(kept)
        if kept is not None:
            stalls = []
            if others:
                stalls = straggler_stalls(kept, others)
                times = list(map(_TIME, stalls))
                stalls = first_step_stalls(kept, others, list(zip(times[0::2], times[1::2]))) \
                    + stalls
            out.extend(_in_time_order(kept, stalls))
            if observers and next_start is not None:  # an attempt's last lead: its tail
                out.extend(observer_tail(kept.job_end(), kept.index, observers, next_start))
        out.extend(late)
    # a host's disruption may come after the lead's last event (the lead's
    # host was still waiting in a collective): each lead piece borrows from
    # every other writer up to the next lead piece's start
    lead_ids = {id(p) for p in leads}
    followers = [p for p in pieces if id(p) not in lead_ids]
    foreign = sorted((e for p in followers for e in p.of_kind(_DISRUPTION)), key=_t)
    for lead, until in zip(cut, untils):
        if lead is not None:
            out.extend(_borrowed_disruption(lead, foreign, until))
    for p in followers:
        out.extend(compress(p.events, map(_SIDE.__contains__, p.kinds)))
    return out


def _in_time_order(lead: _Piece, stalls: List[EventRecord]) -> List[EventRecord]:
    """The lead's events (in time order) with the straggler stalls put among
    them: the engine breaks ties in time by arrival, and a stall's end must
    come before an event at the same instant, its start after one.

    The order of one sort of every event by ``(time, -1 stall end / 0 lead
    event / 1 stall start, position)``, without sorting the lead's events
    again: the stalls are sorted and slotted in by bisection on the lead's
    times (numpy columns when every time is a float)."""
    events = lead.events
    if not stalls:
        return events
    times = lead.times
    stall_times = list(map(_t, stalls))
    if countOf(map(type, times), float) < len(times) or \
            countOf(map(type, stall_times), float) < len(stall_times):
        return _slotted_one_by_one(events, times, stalls, stall_times)
    m = len(stalls)
    t = np.asarray(stall_times, dtype=float)
    side = np.where(np.asarray(list(map(_KIND, stalls))) == _STALL_END, -1, 1)
    order = np.lexsort((np.arange(m), side, t))
    lead_times = np.asarray(times, dtype=float)
    at = np.where(side[order] < 0, np.searchsorted(lead_times, t[order], side="left"),
                  np.searchsorted(lead_times, t[order], side="right"))
    slots = at + np.arange(m)
    perm = np.empty(len(events) + m, dtype=np.intp)
    is_stall = np.zeros(len(perm), dtype=bool)
    is_stall[slots] = True
    perm[slots] = len(events) + order
    perm[~is_stall] = np.arange(len(events))
    return list(map((events + stalls).__getitem__, perm.tolist()))


def _slotted_one_by_one(events: List[EventRecord], times: List[float],
                        stalls: List[EventRecord], stall_times: List[float]
                        ) -> List[EventRecord]:
    """:func:`_in_time_order` with :mod:`bisect`, for times that are not all floats."""
    keyed = sorted((t, -1 if e[1] == _STALL_END else 1, i)
                   for i, (t, e) in enumerate(zip(stall_times, stalls)))
    out, done = [], 0
    for t, side, i in keyed:
        at = (bisect_left if side < 0 else bisect_right)(times, t, done)
        out += events[done:at]
        out.append(stalls[i])
        done = at
    out += events[done:]
    return out


def _borrowed_disruption(lead: _Piece, foreign: List[EventRecord], until: float
                         ) -> List[EventRecord]:
    """The earliest disruption another process recorded during ``lead`` (up to
    ``until``), when ``lead`` recorded none itself (one per restart). It keeps
    its writer: which host saw the failure (incidents)."""
    if _DISRUPTION in lead.kinds:
        return []
    ends = list(compress(lead.times, map(eq, lead.kinds, repeat(_JOB_END))))
    stop = min([until] + ends)
    return [e for e in foreign if lead.start <= _t(e) < stop][:1]
