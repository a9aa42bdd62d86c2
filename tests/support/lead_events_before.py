"""The lead-stream pass as it was before it read events by columns (main at
cedba5f, goodput_core/timeline/streams.py), amended only where issue 40
changed rule 13 (items 4 and 5): the oracle of
tests/core/timeline/test_lead_events_columns.py, which checks that the
column-wise pass returns the same events in the same order. Kept only as a
test oracle (no independent reference of rule 13 with stragglers is cheap to
write; each clause is also pinned by hand-derived figures in
tests/core/timeline/test_rule13_clauses.py); not imported by the package.

The amendments (docs/semantics.md, rule 13), each marked "issue 40" below:

- liveness-only rows (heartbeats, metrics, metadata) never place a piece:
  its start and end are those of its other events, and a piece of nothing
  else, or with neither a job start nor a step (an observer's disruption),
  leads nothing;
- a piece that recorded a disruption or a job end after its last step start
  ends there (what it records later is its process shutting down);
- two pieces of the lead index that overlap, both with steps, the later's
  first step after the earlier's last: the later one takes over the lead at
  its start (a restart overlapping the old process's shutdown);
- a lead piece's events from the next lead piece's start on are not the
  job's (its metrics and metadata excepted);
- blocking time before an attempt's first step gates the job like a step's
  (:func:`_first_step_stalls`);
- marked "tail" (issues 40 and 46): an observer's tail: after an attempt's
  last lead piece ended at a job end, an observer of the lead's index whose
  first job end after it comes before the next attempt's start, with a
  custom badput start from the lead's job end on before it, gives the job
  its custom badput events from the lead's job end to its job end and that
  job end (of several, the latest job end; the first in order among equals)."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord, Kind
from tests.support.stragglers_before import _first_step_stalls, _straggler_stalls, _t

__all__ = ["writer_key", "writers_of", "lead_events", "stream_indices"]

_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)
_STEP, _STEP_END = int(Kind.STEP_START), int(Kind.STEP_END)
_DISRUPTION = int(Kind.DISRUPTION)
_CUSTOM_START, _CUSTOM_END = int(Kind.CUSTOM_BADPUT_START), int(Kind.CUSTOM_BADPUT_END)
_STALL_END = int(Kind.INPUT_STALL_END)
_SCHEDULING = {int(Kind.JOB_SUBMITTED), int(Kind.RESOURCES_GRANTED)}
# Model metrics and run metadata are no part of the partition: every host's
# reach the run (``record_on_all_hosts=True`` points, a config only one host records).
_SIDE = {int(Kind.METRIC), int(Kind.METADATA)}
# issue 40: rows that say a process is there, nothing of the attempt's time
_LIVENESS = _SIDE | {int(Kind.HEARTBEAT)}
_CLOSING = {_DISRUPTION, _JOB_END}


def writer_key(e: EventRecord) -> Optional[Tuple[str, int]]:
    """The writer process of an event: ``(host, pid)``; for an event without
    writer metadata (built by hand, imported with its index only), its index;
    None for an event of an unknown writer (no metadata, index 0: the
    reference's logs)."""
    host, pid = e[6], e[7]
    if host or pid:
        return host, pid
    return ("", -1 - int(e[5])) if e[5] else None


def writers_of(events: Sequence[EventRecord]) -> set:
    """The distinct known writer processes of ``events``."""
    return {k for k in map(writer_key, events) if k is not None}


class _Piece:
    """One attempt of one writer process: its events in time order; its
    start and end (None: liveness-only rows, issue 40)."""

    __slots__ = ("key", "index", "events", "start", "end")

    def __init__(self, key, index: int, events: List[EventRecord]):
        self.key, self.index, self.events = key, index, events
        timed = [e for e in events if e[1] not in _LIVENESS]
        if not any(e[1] in (_JOB_START, _STEP) for e in events):
            timed = []  # issue 40: an observer's rows (a disruption): no attempt of its own
        self.start = _t(timed[0]) if timed else None
        self.end = _end(timed) if timed else None


def _end(timed: List[EventRecord]) -> float:
    """issue 40: the first disruption or job end at or after the last step
    start, else the last event."""
    steps = [i for i, e in enumerate(timed) if e[1] == _STEP]
    for e in timed[steps[-1] if steps else 0:]:
        if e[1] in _CLOSING:
            return _t(e)
    return max(_t(e) for e in timed)


def _streams(events: Sequence[EventRecord]) -> Dict[Any, List[EventRecord]]:
    out: Dict[Any, List[EventRecord]] = {}
    for e in events:
        out.setdefault(writer_key(e), []).append(e)
    return out


def _settled(evs: List[EventRecord]) -> int:
    """The index a stream settles on: that of its latest recorded event."""
    last = max(evs, key=lambda e: (e[10] if e[10] == e[10] else _t(e), e[9]))
    return int(last[5])


def stream_indices(events: Sequence[EventRecord]) -> Dict[Any, int]:
    """``{(host, pid): settled index}`` of the writer processes of ``events``
    (``None``: the events of an unknown writer, index 0)."""
    return {k: (0 if k is None else _settled(v)) for k, v in _streams(events).items()}


def _pieces(key, evs: List[EventRecord]) -> List[_Piece]:
    index = _settled(evs)
    evs = sorted(evs, key=lambda e: (_t(e), e[9]))
    out, cur, has_start = [], [], False
    for e in evs:
        if e[1] == _JOB_START:
            if has_start:
                out.append(_Piece(key, index, cur))
                cur = []
            has_start = True
        cur.append(e)
    if cur:
        out.append(_Piece(key, index, cur))
    return out


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
        elif not _has_steps(chain[-1]) and _has_steps(p):
            # two writers under one index at once: the one that records the
            # training leads (only process 0 writes, but every process
            # recorded its job start and end around the adapter)
            chain[-1] = p
        elif _has_steps(p) and _step_times(p)[0] > _step_times(chain[-1])[-1]:
            # issue 40: the new process trains after the old one stopped
            if p.start > chain[-1].start:
                chain.append(p)
            else:
                chain[-1] = p
    return chain


def _has_steps(p: _Piece) -> bool:
    return any(e[1] == _STEP for e in p.events)


def _step_times(p: _Piece) -> List[float]:
    return [_t(e) for e in p.events if e[1] == _STEP]


def _cut(p: _Piece, until: float) -> Tuple[Optional[_Piece], List[EventRecord]]:
    """issue 40: ``p``'s events before ``until`` (None: none), and the
    metrics and metadata from ``until`` on."""
    kept = [e for e in p.events if _t(e) < until]
    late = [e for e in p.events if _t(e) >= until and e[1] in _SIDE]
    if len(kept) == len(p.events):
        return p, []
    return (_Piece(p.key, p.index, kept) if kept else None), late


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
    # imported, or written by the reference) are the job's: kept as they are;
    # so are the scheduler's times, whoever recorded them (often a separate
    # process: the launcher, `goodput` importing the scheduler's log)
    out: List[EventRecord] = streams.pop(None, [])
    for key in list(streams):
        evs = streams[key]
        if any(e[1] in _SCHEDULING for e in evs):
            out += [e for e in evs if e[1] in _SCHEDULING]
            streams[key] = [e for e in evs if e[1] not in _SCHEDULING]
            if not streams[key]:
                del streams[key]
    if len(streams) <= 1:
        return list(events)
    # in order of start, index and writer, not of arrival (issue 40: a heartbeat
    # that brought a writer's first row earlier must not change a tie)
    pieces = sorted((p for key, evs in streams.items() for p in _pieces(key, evs)),
                    key=_piece_order)
    leads: List[_Piece] = []
    others_of: List[List[_Piece]] = []
    last_of: Dict[int, float] = {}  # tail: an attempt's last lead -> the next attempt's start
    groups = _job_attempts([p for p in pieces if p.start is not None])
    for g, group in enumerate(groups):
        chain = _lead_chain(group)
        others = [p for p in group if not any(p is c for c in chain)]
        leads += chain
        others_of += [others] * len(chain)
        last_of[len(leads) - 1] = groups[g + 1][0].start if g + 1 < len(groups) else math.inf
    observers = [p for p in pieces if p.start is None and any(e[1] == _JOB_END for e in p.events)]
    # issue 40: each lead piece up to the next one's start
    cut = []
    for i, (lead, others) in enumerate(zip(leads, others_of)):
        until = leads[i + 1].start if i + 1 < len(leads) else math.inf
        kept, late = _cut(lead, until)
        cut.append(kept)
        if kept is not None:
            stalls = []
            if others:
                stalls = _straggler_stalls(kept, others)
                pairs = list(zip([e[2] for e in stalls[0::2]], [e[2] for e in stalls[1::2]]))
                stalls = _first_step_stalls(kept, others, pairs) + stalls
            out.extend(_in_time_order(kept.events, stalls))
            if i in last_of:
                out.extend(_tail(kept, observers, last_of[i]))
        out.extend(late)
    # a host's disruption may come after the lead's last event (the lead's
    # host was still waiting in a collective): each lead piece borrows from
    # every other writer up to the next lead piece's start
    lead_ids = {id(p) for p in leads}
    foreign = sorted((e for p in pieces if id(p) not in lead_ids for e in p.events
                      if e[1] == _DISRUPTION), key=_t)
    for i, lead in enumerate(cut):
        until = leads[i + 1].start if i + 1 < len(leads) else math.inf
        if lead is not None:
            out.extend(_borrowed_disruption(lead, foreign, until))
    out.extend(e for p in pieces if id(p) not in lead_ids for e in p.events if e[1] in _SIDE)
    return out


def _in_time_order(events: List[EventRecord], stalls: List[EventRecord]) -> List[EventRecord]:
    """``events`` (in time order) with the straggler stalls put among them: the
    engine breaks ties in time by arrival, and a stall's end must come before
    an interval that starts at the same instant, its start after one that ends."""
    if not stalls:
        return events
    keyed = [(_t(e), 0, i, e) for i, e in enumerate(events)]
    keyed += [(_t(e), -1 if e[1] == _STALL_END else 1, i, e) for i, e in enumerate(stalls)]
    keyed.sort(key=lambda x: x[:3])
    return [x[3] for x in keyed]


def _borrowed_disruption(lead: _Piece, foreign: List[EventRecord], until: float
                         ) -> List[EventRecord]:
    """The earliest disruption another process recorded during ``lead`` (up to
    ``until``), when ``lead`` recorded none itself (one per restart). It keeps
    its writer: which host saw the failure (incidents)."""
    if any(e[1] == _DISRUPTION for e in lead.events):
        return []
    ends = [_t(e) for e in lead.events if e[1] == _JOB_END]
    stop = min([until] + ends)
    return [e for e in foreign if lead.start <= _t(e) < stop][:1]


def _tail(lead: _Piece, observers: List[_Piece], next_start: float) -> List[EventRecord]:
    """tail (issues 40 and 46): the observer's tail of an attempt whose last
    lead piece is ``lead`` (module docstring)."""
    steps = [i for i, e in enumerate(lead.events) if e[1] == _STEP]
    closing = [e for e in lead.events[steps[-1] if steps else 0:] if e[1] in _CLOSING]
    if not closing or closing[0][1] != _JOB_END:
        return []
    end = _t(closing[0])
    best: List[EventRecord] = []
    best_end = -math.inf
    for p in observers:
        if p.index != lead.index:
            continue
        ends = [e for e in p.events if e[1] == _JOB_END and _t(e) > end]
        if not ends or not best_end < _t(ends[0]) < next_start:
            continue
        x, until = ends[0], _t(ends[0])
        if not any(e[1] == _CUSTOM_START and end <= _t(e) < until for e in p.events):
            continue
        best = [e for e in p.events
                if e is x or (e[1] in (_CUSTOM_START, _CUSTOM_END) and end <= _t(e) <= until)]
        best_end = until
    return best
