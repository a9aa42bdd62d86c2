"""A run written by many writer processes, held as columns per writer
(docs/large-runs.md, "Many hosts").

Rule 13 (:mod:`goodput_core.timeline.streams`) asks of each writer process
its *pieces* (the process cut at its job starts), the blocking time of each
of its steps, and, for the lead's pieces only, every event. A run written by
every host of a large job holds millions of events per host, so this module
keeps them as compact columns per writer, filled from a store's column pages
(:class:`~goodput_core.stores.columns.EventPage` read with ``writers=True``):

* step starts with a step number: time and step (16 bytes each);
* input stalls, blocking loads and loads (the three families a host repeats
  every step): time and a start/end flag (9 bytes each);
* every other event as a record (job starts and ends, disruptions, step
  ends, heartbeats, metrics, metadata, saves...: a few per attempt).

Each family is kept in ``(time, arrival)`` order, which is the per-event
pass's ``(time, seq)`` order as long as every writer's events reach the store
in sequence order. A run where that does not hold, or with a step or
blocking event at the very instant of one of its own writer's job starts
(which attempt it belongs to is then a matter of sequence numbers), or with
a time that is not finite, is *odd*: :attr:`.run_columns.RunColumns.odd` says why, and the
reader keeps the per-event pass for it.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.streams import _t
from goodput_core.timeline.time_column import TimeColumn as _Column

__all__ = ["FAMILIES", "Stream", "Piece", "t_of"]

#: The families kept as columns, by name: (start kind, end kind).
FAMILIES = {"stall": (int(Kind.INPUT_STALL_START), int(Kind.INPUT_STALL_END)),
            "bload": (int(Kind.BLOCKING_LOAD_START), int(Kind.BLOCKING_LOAD_END)),
            "dl": (int(Kind.DATA_LOADING_START), int(Kind.DATA_LOADING_END))}
_FAMILY_NAMES = tuple(FAMILIES)
_STEP, _JOB_START, _JOB_END = int(Kind.STEP_START), int(Kind.JOB_START), int(Kind.JOB_END)
_CLOSING = frozenset({int(Kind.DISRUPTION), int(Kind.JOB_END)})
_SIDE = frozenset({int(Kind.METRIC), int(Kind.METADATA)})
# rows that say a process is there, nothing of its attempt's time (rule 13)
_LIVENESS = _SIDE | {int(Kind.HEARTBEAT)}
_SCHEDULING = (int(Kind.JOB_SUBMITTED), int(Kind.RESOURCES_GRANTED))
_STEPS = len(FAMILIES)  # the columns a page's rows go to: the families,
_RECORDS = _STEPS + 1   # step starts with a step, records
_CATS = _RECORDS + 1
# (kind * 2 + has a step) -> its column; an end of a family: 1 in _END
_CAT_LUT = np.full(512, _RECORDS, np.int64)
_END = np.zeros(256, np.int8)
for _n, (_s, _e) in enumerate(FAMILIES.values()):
    _CAT_LUT[2 * _s: 2 * _s + 2] = _n
    _CAT_LUT[2 * _e: 2 * _e + 2] = _n
    _END[_e] = 1
_CAT_LUT[2 * _STEP + 1] = _STEPS
_CAT_LIST, _END_LIST = _CAT_LUT.tolist(), _END.tolist()
_SMALL_PAGE = 16384  # rows: a page this small is routed row by row


#: When an event happened (the per-event pass's own): its time, else its
#: write time (an Orbax entry without a start), else 0.
t_of = _t


class Stream:
    """The events of one writer process, ``(host, pid)``.

    Attributes:
      key: ``(host, pid)`` (``("", -1 - index)`` for events that carry only an
        index; None for events of an unknown writer).
      order: when it first appeared among the run's writers.
      index: the index it settles on: that of its event with the greatest
        (write time, seq), the first of equals.
      steps: step starts with a step number (``t``, ``v`` = the step).
      families: ``{name: columns}`` of input stalls, blocking loads, loads
        (``v`` = 1 for an end); columns: ``[(name, columns)]``, the steps' first.
      records: every other event, in (time, seq) order (``record_t``: their times).
      version: how many times rows were added (:meth:`changed_since` says
        from which time they changed things).
    """

    def __init__(self, key, order: int):
        self.key, self.order = key, order
        self.index = 0  # (the scheduler's events left out, as the lead's rules do)
        self.host_index = 0  # (with them: a host of the per-host breakdown)
        self._best = (-math.inf, -math.inf)
        self._host_best = (-math.inf, -math.inf)
        self._last_seq = [-math.inf] * _CATS  # per category (families, steps, records)
        self.steps = _Column(np.int64)
        self.families = {name: _Column(np.int8) for name in _FAMILY_NAMES}
        self.columns = [("steps", self.steps)] + list(self.families.items())
        self.records: List[EventRecord] = []
        self.record_t: List[float] = []
        self.arrivals: List[EventRecord] = []  # the records in the order they were added
        # rows of the steps column whose step number is not above the previous row's
        self.descents: List[int] = []
        self._record_keys: List[Tuple[float, int]] = []
        self.version = 0
        self._history: List[Tuple[int, float]] = []  # (version, earliest time it changed)
        self._pieces: Optional[List["Piece"]] = None
        self._cuts: List[float] = []  # the times of its job starts that begin a piece

    @property
    def nbytes(self) -> int:
        return self.steps.nbytes + sum(c.nbytes for c in self.families.values())

    def changed_since(self, version: int) -> float:
        """The earliest time whose rows changed after ``version`` (inf: none;
        -inf: too long ago to say)."""
        if version >= self.version:
            return math.inf
        h = self._history
        if not h or h[0][0] > version + 1:
            return -math.inf
        # (versions increase along the history: a reader one version behind
        # looks at one entry, not at the whole history)
        return min(t for _, t in h[bisect_right(h, (version, math.inf)):])

    def merges(self) -> int:
        """How many times late rows moved rows of its columns."""
        m = 0
        for _, c in self.columns:  # (asked at every refresh of every host: no generator)
            m += c.merges
        return m

    def counts(self) -> Dict[str, int]:
        """Rows per column (``"steps"`` and each family)."""
        out = {"steps": len(self.steps)}
        out.update((n, len(c)) for n, c in self.families.items())
        return out

    def _add_steps(self, t, k) -> float:
        """Appends step rows (arrays, or a few as Python lists) and notes
        where their step numbers descend."""
        n, merges = len(self.steps), self.steps.merges
        changed = self.steps.add(t, k)
        if self.steps.merges != merges:
            n = 0
            self.descents = []
            k = None
        if type(k) is list and len(k) <= 4:  # (appended: the row before and these)
            al = ([self.steps.v.item(n - 1)] if n else []) + k
        else:
            a = self.steps.v.a[max(n - 1, 0):]
            if len(a) > 4:
                self.descents += (np.flatnonzero(a[1:] <= a[:-1]) + max(n - 1, 0) + 1).tolist()
                return changed
            al = a.tolist()
        for i in range(len(al) - 1):
            if al[i + 1] <= al[i]:
                self.descents.append(max(n - 1, 0) + i + 1)
        return changed

    def _add_record(self, e: EventRecord) -> float:
        self.arrivals.append(e)
        if e[1] == _JOB_START:
            self._cuts = None  # (computed again when asked)
        t = t_of(e)
        key = (t, e[9])
        at = bisect_right(self._record_keys, key)
        self._record_keys.insert(at, key)
        self.record_t.insert(at, t)
        self.records.insert(at, e)
        return t

    def cut_times(self) -> List[float]:
        """The times of its job starts that begin a piece (all but the first)."""
        if self._cuts is None:
            self._cuts = [k[0] for k, e in zip(self._record_keys, self.records)
                          if e[1] == _JOB_START][1:]
        return self._cuts

    def _grow_last_piece(self, changed: float, tmax: float, new: List[EventRecord],
                         kinds: Optional[set] = None) -> None:
        """Rows were added: the pieces are computed again, unless every new
        row is at or after the last piece's start and none is a job start
        (then that piece grows in place)."""
        pieces = self._pieces
        if pieces is None:
            return
        last = pieces[-1] if pieces else None
        merges = self.merges()
        if last is None or last.start is None or changed < last.start or \
                (new and any(e[1] == _JOB_START for e in new)) or \
                merges != last.cache.get("merges", merges):
            self._pieces = None
            return
        last.grow(tmax, new, kinds)

    def pieces(self) -> List["Piece"]:
        """Its pieces (:class:`Piece`), its scheduler events left out (cached)."""
        if self._pieces is None:
            self._pieces = _pieces_of(self)
        return self._pieces


class Piece:
    """One attempt of one writer process (rule 13): the rows of its stream
    between two of its job starts (the events before the first one belong to
    the first piece), with what the rules code reads of it (``key``, ``index``,
    ``start``, ``end``, ``kinds``: the kinds it holds, as a set).

    ``start``/``end`` are where it runs (:func:`~goodput_core.timeline.streams._extent`):
    its first and last events, liveness-only rows (heartbeats, metrics,
    metadata) apart, ending at its first disruption or job end after its last
    step start; None for a piece of liveness-only rows or with neither a job
    start nor a step (an observer's). ``tie``: a disruption or job end at the
    very instant of its last step start (their order is then a matter of
    sequence numbers the columns do not keep: the run is odd)."""

    __slots__ = ("stream", "number", "key", "start", "end", "kinds", "lo", "hi",
                 "records", "cache", "tmax", "tie", "_first", "_last", "_steps", "_closing")

    def __init__(self, stream: Stream, number: int, lo: Dict[str, int], hi: Dict[str, int],
                 records: List[EventRecord]):
        self.stream, self.number = stream, number
        self.key = stream.key
        self.lo, self.hi, self.records = lo, hi, records
        self.kinds = {e[1] for e in records}
        self._first, self._last = math.inf, -math.inf  # its rows that are not liveness-only
        self._steps = (math.inf, -math.inf)  # its first and last step starts
        self._closing: List[float] = []  # the times of its disruptions and job ends
        self.tmax = -math.inf
        self._take_records(records)
        self._take_columns(lo)
        self.cache: Dict[str, Any] = {"merges": stream.merges()}

    def _take_records(self, records: List[EventRecord]) -> None:
        for e in records:
            k, t = e[1], t_of(e)
            self.tmax = max(self.tmax, t)
            if k in _LIVENESS:
                continue
            self._first, self._last = min(self._first, t), max(self._last, t)
            if k == _STEP:
                self._steps = (min(self._steps[0], t), max(self._steps[1], t))
            elif k in _CLOSING:
                insort(self._closing, t)

    def _take_columns(self, lo: Dict[str, int]) -> None:
        """Its column rows from ``lo`` (to ``hi``) and its extent after them."""
        s, hi = self.stream, self.hi
        if hi["steps"] > lo["steps"]:
            self.kinds.add(_STEP)
            a = s.steps.t.a
            t0, t1 = float(a[lo["steps"]]), float(a[hi["steps"] - 1])
            self._steps = (min(self._steps[0], t0), max(self._steps[1], t1))
            self._first, self._last = min(self._first, t0), max(self._last, t1)
        for name, (start, end) in FAMILIES.items():
            if hi[name] > lo[name]:
                col = s.families[name]
                ends = col.v.a[lo[name]:hi[name]]
                if ends.any():
                    self.kinds.add(end)
                if not ends.all():
                    self.kinds.add(start)
                t0, t1 = float(col.t.a[lo[name]]), float(col.t.a[hi[name] - 1])
                self._first, self._last = min(self._first, t0), max(self._last, t1)
        self.tmax = max(self.tmax, self._last)
        self._settle_extent()

    def _settle_extent(self) -> None:
        self.tie = False
        if (_JOB_START not in self.kinds and _STEP not in self.kinds) or \
                self._first == math.inf:
            self.start = self.end = None
            return
        self.start, end = self._first, self._last
        closing = self._closing
        if _STEP in self.kinds:
            last_step = self._steps[1]
            i = bisect_left(closing, last_step)
            self.tie = i < len(closing) and closing[i] == last_step
            i = bisect_right(closing, last_step)
            if i < len(closing):
                end = min(end, closing[i])
        elif closing:
            end = min(end, closing[0])
        self.end = end

    @property
    def index(self) -> int:
        """The index its writer settles on (that of its latest event)."""
        return self.stream.index

    def first_step_time(self) -> float:
        """When its first step started (it has one)."""
        return self._steps[0]

    def last_step_time(self) -> float:
        """When its last step started (it has one)."""
        return self._steps[1]

    def job_end(self) -> Optional[float]:
        """When it ended at a job end: the first disruption or job end at or
        after its last step start is a job end (None: a disruption, or neither;
        a tie with the step start makes the run odd: :attr:`tie`)."""
        after = self._steps[1] if _STEP in self.kinds else -math.inf
        for e in self.records:  # (in (time, seq) order)
            if e[1] in _CLOSING and t_of(e) >= after:
                return t_of(e) if e[1] == _JOB_END else None
        return None

    def grow(self, tmax: float, new: List[EventRecord], kinds: Optional[set] = None) -> None:
        """Takes the rows its stream got since (all in this piece, the last;
        ``kinds``: those of its new column rows, when the caller knows them)."""
        s = self.stream
        lo, hi = self.lo, self.hi
        for name, col in s.columns:
            old, n = hi[name], col.t.n
            if n <= old:
                continue
            hi[name] = n
            # (rows appended in time order: a piece's first row stays, its last is new)
            t0 = col.t.item(old) if old == lo[name] else math.inf
            t1 = col.t.item(n - 1)
            self._first, self._last = min(self._first, t0), max(self._last, t1)
            if name == "steps":
                self.kinds.add(_STEP)
                self._steps = (min(self._steps[0], t0), max(self._steps[1], t1))
            elif kinds is None:
                start, end = FAMILIES[name]
                flags = col.v.a[old:n]
                if flags.any():
                    self.kinds.add(end)
                if not flags.all():
                    self.kinds.add(start)
        mine = [e for e in new if e[1] not in _SCHEDULING] if new else new
        if mine:
            self.records = [e for e in self.records] + mine
            self.records.sort(key=lambda e: (t_of(e), e[9]))  # (stable: arrival among equals)
            self.kinds.update(e[1] for e in mine)
            self._take_records(mine)
        if kinds:
            self.kinds.update(kinds)
        self.tmax = max(self.tmax, self._last)
        self._settle_extent()

    def cut(self, until: float) -> Tuple[Optional["Piece"], List[EventRecord]]:
        """Its rows before ``until`` (itself when all are; None when none is)
        and its metrics and metadata from ``until`` on (a lead piece cut at
        its successor's start, as the per-event pass's ``_Piece.cut``)."""
        if self.tmax < until:
            return self, []
        s = self.stream
        hi = {}
        for name in self.hi:
            col = s.steps if name == "steps" else s.families[name]
            hi[name] = self.lo[name] + int(np.searchsorted(
                col.t.a[self.lo[name]:self.hi[name]], until, side="left"))
        j = bisect_left([t_of(e) for e in self.records], until)
        late = [e for e in self.records[j:] if e[1] in _SIDE]
        if not j and all(hi[n] == self.lo[n] for n in hi):
            return None, late
        view = Piece(s, self.number, self.lo, hi, self.records[:j])
        view.cache.update(cut=until)
        return view, late

    def steps_increase(self) -> bool:
        """True when its step numbers increase (in time order)."""
        lo, hi = self.lo["steps"], self.hi["steps"]
        d = self.stream.descents
        i = bisect_right(d, lo)
        return i >= len(d) or d[i] >= hi

    def column(self, name: str) -> Tuple[np.ndarray, np.ndarray]:
        """``(t, v)`` of one of its columns (``"steps"`` or a family), views."""
        col = self.stream.steps if name == "steps" else self.stream.families[name]
        return col.t.a[self.lo[name]:self.hi[name]], col.v.a[self.lo[name]:self.hi[name]]

    def of_kind(self, kind: int) -> List[EventRecord]:
        """Its records of ``kind`` (records only: not steps nor families), in order."""
        return [e for e in self.records if e[1] == kind]


def _pieces_of(stream: Stream) -> List[Piece]:
    """A stream cut at its job starts (the rows before the first belong to the
    first piece); scheduler events are the job's, not a piece's."""
    recs = [(k, e) for k, e in zip(stream._record_keys, stream.records)
            if e[1] not in _SCHEDULING]
    cuts = [i for i, (_, e) in enumerate(recs) if e[1] == _JOB_START][1:]
    names = ("steps",) + _FAMILY_NAMES
    cols = {"steps": stream.steps.t.a}
    cols.update((n, stream.families[n].t.a) for n in _FAMILY_NAMES)
    # (no step or family row sits at a cut's time: RunColumns.odd otherwise)
    at = [recs[i][0][0] for i in cuts]
    bounds = {n: [0] + np.searchsorted(cols[n], at).tolist() + [len(cols[n])] for n in names}
    rec_bounds = [0] + cuts + [len(recs)]
    out = []
    for j in range(len(cuts) + 1):
        lo = {n: bounds[n][j] for n in names}
        hi = {n: bounds[n][j + 1] for n in names}
        records = [e for _, e in recs[rec_bounds[j]:rec_bounds[j + 1]]]
        if records or any(hi[n] > lo[n] for n in names):
            out.append(Piece(stream, j, lo, hi, records))
    return out
