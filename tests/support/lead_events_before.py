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
  else leads nothing;
- a piece that recorded a disruption or a job end after its last step start
  ends there (what it records later is its process shutting down);
- two pieces of the lead index that overlap, both with steps, the later's
  first step after the earlier's last: the later one takes over the lead at
  its start (a restart overlapping the old process's shutdown);
- a lead piece's events from the next lead piece's start on are not the
  job's (its metrics and metadata excepted);
- blocking time before an attempt's first step gates the job like a step's
  (:func:`_first_step_stalls`)."""
from __future__ import annotations

import bisect
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.kind_routes import PAIR_FAMILIES

__all__ = ["writer_key", "writers_of", "lead_events", "stream_indices"]

_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)
_STEP, _STEP_END = int(Kind.STEP_START), int(Kind.STEP_END)
_DISRUPTION = int(Kind.DISRUPTION)
_BLOCK_START = {int(Kind.INPUT_STALL_START): "stall", int(Kind.BLOCKING_LOAD_START): "bload"}
_BLOCK_END = {int(Kind.INPUT_STALL_END): "stall", int(Kind.BLOCKING_LOAD_END): "bload"}
_STALL_END = int(Kind.INPUT_STALL_END)
_SCHEDULING = {int(Kind.JOB_SUBMITTED), int(Kind.RESOURCES_GRANTED)}
# Model metrics and run metadata are no part of the partition: every host's
# reach the run (``record_on_all_hosts=True`` points, a config only one host records).
_SIDE = {int(Kind.METRIC), int(Kind.METADATA)}
# issue 40: rows that say a process is there, nothing of the attempt's time
_LIVENESS = _SIDE | {int(Kind.HEARTBEAT)}
_CLOSING = {_DISRUPTION, _JOB_END}
# issue 40: start/end pairs before the first step (before it every load blocks,
# rule 7, and the phases that outrank sync loading are left out of it, rule 8)
_PAIRS = {int(k): v for k, v in PAIR_FAMILIES.items() if v[0] != "hang"}
_TYPED = {"custom": "custom_badput_event_type", "wait": "elastic_wait_event_type"}
_EPS = 1e-9  # seconds: below this a straggler's excess is float noise


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


def _t(e: EventRecord) -> float:
    """When an event happened: its time, else its write time (an Orbax entry
    without a start), else 0."""
    t = e[2]
    if t == t and abs(t) != math.inf:
        return t
    w = e[10]
    return w if w == w else 0.0


class _Piece:
    """One attempt of one writer process: its events in time order; its
    start and end (None: liveness-only rows, issue 40)."""

    __slots__ = ("key", "index", "events", "start", "end")

    def __init__(self, key, index: int, events: List[EventRecord]):
        self.key, self.index, self.events = key, index, events
        timed = [e for e in events if e[1] not in _LIVENESS]
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
    for group in _job_attempts([p for p in pieces if p.start is not None]):
        chain = _lead_chain(group)
        others = [p for p in group if not any(p is c for c in chain)]
        leads += chain
        others_of += [others] * len(chain)
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


# ------------------------------------------------------------------ stragglers
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


def _straggler_stalls(lead: _Piece, others: List[_Piece]) -> List[EventRecord]:
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


def _before_first_step(p: _Piece):
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


def _first_step_end(p: _Piece) -> Optional[float]:
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


def _first_step_stalls(lead: _Piece, others: List[_Piece], step_stalls) -> List[EventRecord]:
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
        for x, y in _gaps(_merged(blocks + phases + stalls), b, c):
            take = min(y - x, need)
            if take > 0:
                carved.append((x, x + take))
                need -= take
            if need <= _EPS:
                break
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
