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
a time that is not finite, is *odd*: :attr:`RunColumns.odd` says why, and the
reader keeps the per-event pass for it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.events import EventRecord, Kind
from goodput_core.stores.columns import EventPage
from goodput_core.timeline.intervals import Growable

__all__ = ["FAMILIES", "Stream", "RunColumns", "Piece", "t_of"]

#: The families kept as columns, by name: (start kind, end kind).
FAMILIES = {"stall": (int(Kind.INPUT_STALL_START), int(Kind.INPUT_STALL_END)),
            "bload": (int(Kind.BLOCKING_LOAD_START), int(Kind.BLOCKING_LOAD_END)),
            "dl": (int(Kind.DATA_LOADING_START), int(Kind.DATA_LOADING_END))}
_FAMILY_NAMES = tuple(FAMILIES)
_STEP, _JOB_START = int(Kind.STEP_START), int(Kind.JOB_START)
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


def t_of(e: EventRecord) -> float:
    """When an event happened (the per-event pass's ``_t``): its time, else
    its write time (an Orbax entry without a start), else 0."""
    t = e[2]
    if t == t and abs(t) != math.inf:
        return t
    w = e[10]
    return w if w == w else 0.0


class _Column:
    """Growable sorted columns ``t`` (and ``v``: a step number or an end flag),
    in (time, arrival) order."""

    __slots__ = ("t", "v", "merges")

    def __init__(self, vtype):
        self.t = Growable(np.float64)
        self.v = Growable(vtype)
        self.merges = 0  # rows that arrived late and moved others: readers start over

    def __len__(self) -> int:
        return self.t.n

    def add(self, t: np.ndarray, v: np.ndarray) -> float:
        """Appends rows (in arrival order); returns the earliest time whose
        rows changed position or were added (inf: none)."""
        if not len(t):
            return math.inf
        old = self.t.a
        if len(t) <= 4:  # (a refresh: a row or two)
            tl = t.tolist()
            in_order = (not len(old) or tl[0] >= old[-1]) and all(
                tl[i + 1] >= tl[i] for i in range(len(tl) - 1))
        else:
            in_order = (not len(old) or t[0] >= old[-1]) and bool((t[1:] >= t[:-1]).all())
        if in_order:
            self.t.extend(t)
            self.v.extend(v)
            return float(t[0])
        # late rows: a stable sort keeps arrival order among equal times
        self.merges += 1
        tt, vv = np.concatenate((old, t)), np.concatenate((self.v.a, v))
        order = np.argsort(tt, kind="stable")
        self.t.replace(tt[order])
        self.v.replace(vv[order])
        return float(t.min())

    @property
    def nbytes(self) -> int:
        return self.t.nbytes + self.v.nbytes


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
        (``v`` = 1 for an end).
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
        return min(t for v, t in h if v > version)

    def merges(self) -> int:
        """How many times late rows moved rows of its columns."""
        return self.steps.merges + sum(c.merges for c in self.families.values())

    def counts(self) -> Dict[str, int]:
        """Rows per column (``"steps"`` and each family)."""
        out = {"steps": len(self.steps)}
        out.update((n, len(c)) for n, c in self.families.items())
        return out

    def _add_steps(self, t: np.ndarray, k: np.ndarray) -> float:
        n, merges = len(self.steps), self.steps.merges
        changed = self.steps.add(t, k)
        if self.steps.merges != merges:
            n = 0
            self.descents = []
        a = self.steps.v.a[max(n - 1, 0):]
        if len(a) <= 4:
            al = a.tolist()
            self.descents += [max(n - 1, 0) + i + 1 for i in range(len(al) - 1)
                              if al[i + 1] <= al[i]]
        else:
            self.descents += (np.flatnonzero(a[1:] <= a[:-1]) + max(n - 1, 0) + 1).tolist()
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
        if last is None or changed < last.start or any(e[1] == _JOB_START for e in new) \
                or self.merges() != last.cache.get("merges", self.merges()):
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
    ``start``, ``end``, ``kinds``: the kinds it holds, as a set)."""

    __slots__ = ("stream", "number", "key", "start", "end", "kinds", "lo", "hi",
                 "records", "cache")

    def __init__(self, stream: Stream, number: int, lo: Dict[str, int], hi: Dict[str, int],
                 records: List[EventRecord]):
        self.stream, self.number = stream, number
        self.key = stream.key
        self.lo, self.hi, self.records = lo, hi, records
        times = [t_of(e) for e in records]
        kinds = {e[1] for e in records}
        if hi["steps"] > lo["steps"]:
            kinds.add(_STEP)
            a = stream.steps.t.a
            times += [float(a[lo["steps"]]), float(a[hi["steps"] - 1])]
        for name, (s, e) in FAMILIES.items():
            if hi[name] > lo[name]:
                col = stream.families[name]
                ends = col.v.a[lo[name]:hi[name]]
                if ends.any():
                    kinds.add(e)
                if not ends.all():
                    kinds.add(s)
                times += [float(col.t.a[lo[name]]), float(col.t.a[hi[name] - 1])]
        self.kinds = kinds
        self.start = min(times)
        self.end = max(times)
        self.cache: Dict[str, Any] = {"merges": stream.merges()}

    @property
    def index(self) -> int:
        """The index its writer settles on (that of its latest event)."""
        return self.stream.index

    def grow(self, tmax: float, new: List[EventRecord], kinds: Optional[set] = None) -> None:
        """Takes the rows its stream got since (all in this piece, the last;
        ``kinds``: those of its new column rows, when the caller knows them)."""
        s = self.stream
        for name, n in s.counts().items():
            if n > self.hi[name]:
                old, self.hi[name] = self.hi[name], n
                if kinds is not None:
                    continue
                if name == "steps":
                    self.kinds.add(_STEP)
                else:
                    start, end = FAMILIES[name]
                    flags = s.families[name].v.a[old:n]
                    if flags.any():
                        self.kinds.add(end)
                    if not flags.all():
                        self.kinds.add(start)
        if kinds:
            self.kinds.update(kinds)
        mine = [e for e in new if e[1] not in _SCHEDULING]
        if mine:
            self.records = [e for e in self.records] + mine
            self.records.sort(key=lambda e: (t_of(e), e[9]))  # (stable: arrival among equals)
            self.kinds.update(e[1] for e in mine)
        self.end = max(self.end, tmax)

    def identity(self) -> tuple:
        """What the rules read of it (equal identities: the same structure)."""
        return (self.key, self.number, self.index, self.start, self.end, _STEP in self.kinds)

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


def _codes(writer: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(writer, return_inverse=True)``, by counting where the
    codes are small (a store's writer ids)."""
    top = int(writer.max())
    if writer.min() < 0 or top > 4 * len(writer) + 65536:
        return np.unique(writer, return_inverse=True)
    codes = np.flatnonzero(np.bincount(writer, minlength=top + 1))
    lut = np.empty(top + 1, np.int64)
    lut[codes] = np.arange(len(codes))
    return codes, lut[writer]


class RunColumns:
    """Every writer process of one run, as :class:`Stream` columns.

    Attributes:
      streams: ``{key: Stream}`` in order of first appearance (key None: the
        events of an unknown writer, kept apart as the job's).
      odd: why the run must be read event by event (None: it need not).
      events: how many events were added.
    """

    def __init__(self, run: Optional[str]):
        self.run = run
        self.streams: Dict[Any, Stream] = {}
        self.odd: Optional[str] = None
        self.events = 0
        self._codes: Dict[int, Tuple[Any, int]] = {}  # writer code -> (stream key, index)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.streams.values())

    def _stream(self, key) -> Stream:
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = Stream(key, len(self.streams))
        return s

    def add_page(self, page: EventPage) -> None:
        """Adds a page read with its writers (``EventPage.writer``). A store's
        pages hold runs of one writer's rows (its batches): each run is routed
        by slices; a page of interleaved writers, by one stable sort of small
        integers (writer, column)."""
        n = len(page)
        if not n:
            return
        self.events += n
        if n <= _SMALL_PAGE:  # (a refresh of a running job: a few rows per writer)
            self._add_small(page)
            return
        w = page.writer
        cat = _CAT_LUT[page.kind * 2 + page.has_step]
        change = np.flatnonzero(w[1:] != w[:-1]) + 1
        if len(change) < n // 256:  # runs of one writer
            edges = [0] + change.tolist() + [n]
            for a, b in zip(edges, edges[1:]):
                stream, index = self._writer(page, int(w[a]))
                self._add_rows(stream, page, slice(a, b), cat[a:b], index)
            return
        codes, inverse = _codes(w)
        streams: List[Stream] = []
        sid_of_code, index_of_code = [], []
        for c in codes.tolist():
            stream, index = self._writer(page, c)
            if stream not in streams:
                streams.append(stream)
            sid_of_code.append(streams.index(stream))
            index_of_code.append(index)
        sid = np.asarray(sid_of_code, np.int64)[inverse]
        index_of = np.asarray(index_of_code, np.int64)[inverse]
        order = np.argsort(sid.astype(np.int16 if len(streams) < 32768 else np.int32),
                           kind="stable")
        bounds = [0] + np.cumsum(np.bincount(sid, minlength=len(streams))).tolist()
        for j, stream in enumerate(streams):
            rows = order[bounds[j]:bounds[j + 1]]
            self._add_rows(stream, page, rows, cat[rows], index_of[rows])

    def _add_small(self, page: EventPage) -> None:
        """:meth:`add_page` of a small page, row by row (numpy calls cost more
        than the rows at a few rows per writer)."""
        kinds, times, seqs = page.kind.tolist(), page.time.tolist(), page.seq.tolist()
        steps, has, wts = page.step.tolist(), page.has_step.tolist(), page.write_time.tolist()
        groups: Dict[Stream, List[int]] = {}
        index_of: Dict[int, int] = {}
        for i, code in enumerate(page.writer.tolist()):
            stream, index_of[i] = self._writer(page, code)
            groups.setdefault(stream, []).append(i)
        cat_of, end_of = _CAT_LIST, _END_LIST
        for stream, rows in groups.items():
            cols: Dict[int, Tuple[list, list]] = {}
            records = []
            kinds_seen = set()
            host_best, best = stream._host_best, stream._best
            last_seq = stream._last_seq
            tmax = -math.inf
            for i in rows:
                k, t, q, w = kinds[i], times[i], seqs[i], wts[i]
                key = (w if w == w else (t if math.isfinite(t) else 0.0), q)
                if key > host_best:
                    host_best, stream.host_index = key, index_of[i]
                if key > best and k not in _SCHEDULING:
                    best, stream.index = key, index_of[i]
                c = cat_of[2 * k + has[i]] if 0 <= k < 256 else _RECORDS
                if c == _RECORDS:
                    records.append(i)
                    continue
                if not math.isfinite(t):
                    self.odd = self.odd or "a time that is not a finite number"
                if q < last_seq[c]:
                    self.odd = self.odd or "a writer's events out of sequence order"
                last_seq[c] = q
                tmax = max(tmax, t)
                kinds_seen.add(k)
                col = cols.get(c)
                if col is None:
                    col = cols[c] = ([], [])
                col[0].append(t)
                col[1].append(steps[i] if c == _STEPS else end_of[k])
            stream._host_best, stream._best = host_best, best
            changed = math.inf
            for c, (ts, vs) in cols.items():
                t_a = np.array(ts, np.float64)
                if c == _STEPS:
                    changed = min(changed, stream._add_steps(t_a, np.array(vs, np.int64)))
                else:
                    column = stream.families[_FAMILY_NAMES[c]]
                    changed = min(changed, column.add(t_a, np.array(vs, np.int8)))
            new = [page.record(i) for i in records]
            for e in new:
                changed = min(changed, stream._add_record(e))
                tmax = max(tmax, t_of(e))
            self._after_add(stream, changed, tmax, new, kinds_seen)

    def _after_add(self, stream: Stream, changed: float, tmax: float,
                   new: List[EventRecord], kinds: Optional[set] = None) -> None:
        """A stream's version, change history and pieces after rows were added
        (the last piece grown in place when they all belong to it)."""
        stream.version += 1
        stream._history.append((stream.version, changed))
        if len(stream._history) > 256:  # (readers that lag further read it all again)
            del stream._history[:128]
        stream._grow_last_piece(changed, tmax, new, kinds)
        if self.odd is None and (new or stream._cuts is None or stream._cuts):
            self._check_cuts(stream)

    def _writer(self, page: EventPage, code: int) -> Tuple[Stream, int]:
        """The stream and process index of a page's writer code."""
        index, host, pid = page.writer_keys[code][:3]
        key = (host, pid) if (host or pid) else (("", -1 - int(index)) if index else None)
        return self._stream(key), int(index)

    def _add_rows(self, stream: Stream, page: EventPage, rows, cat: np.ndarray, index) -> None:
        """Appends one writer's rows of a page (``rows``: a slice or page row
        numbers, in arrival order; ``cat``: their columns; ``index``: their
        process index, one or per row)."""
        t, seq = page.time[rows], page.seq[rows]
        self._settle(stream, page, rows, t, seq, cat, index)
        changed, tmax = math.inf, -math.inf
        new: List[EventRecord] = []
        counts = np.bincount(cat, minlength=_CATS)
        for c in np.flatnonzero(counts).tolist():
            sel = slice(None) if counts[c] == len(cat) else np.flatnonzero(cat == c)
            ts = t[sel]
            if c == _RECORDS:  # (kept in (time, seq) order whatever they arrive in)
                at = np.arange(len(cat))[sel] if isinstance(rows, slice) else rows[sel]
                if isinstance(rows, slice):
                    at = at + rows.start
                for i in at.tolist():
                    e = page.record(i)
                    new.append(e)
                    changed = min(changed, stream._add_record(e))
                    tmax = max(tmax, t_of(e))
                continue
            tmax = max(tmax, float(ts.max()))
            ss = seq[sel]
            if ss[0] < stream._last_seq[c] or (ss[1:] < ss[:-1]).any():
                self.odd = self.odd or "a writer's events out of sequence order"
            stream._last_seq[c] = int(ss[-1])
            if not np.isfinite(ts).all():
                self.odd = self.odd or "a time that is not a finite number"
            if c == _STEPS:
                changed = min(changed, stream._add_steps(ts, page.step[rows][sel]))
            else:
                col = stream.families[_FAMILY_NAMES[c]]
                changed = min(changed, col.add(ts, _END[page.kind[rows][sel]]))
        self._after_add(stream, changed, tmax, new)

    @staticmethod
    def _settle(stream: Stream, page: EventPage, rows, t: np.ndarray, seq: np.ndarray,
                cat: np.ndarray, index) -> None:
        """The index the stream settles on, with these rows: that of its event
        with the greatest (write time, or time, seq), the first of equals;
        once with the scheduler's events (a host) and once without (the lead)."""
        wt = page.write_time[rows]
        key = wt if not np.isnan(wt).any() else \
            np.where(np.isnan(wt), np.where(np.isfinite(t), t, 0.0), wt)
        top = float(key.max())
        if top < stream._host_best[0] and top < stream._best[0]:
            return  # (write times grow: the common case is the other one)
        keep = None  # the rows that are not the scheduler's
        if (cat == _RECORDS).any():
            rec = np.flatnonzero(cat == _RECORDS)
            is_sched = np.isin(page.kind[rows][rec], _SCHEDULING)
            if is_sched.any():
                keep = np.ones(len(cat), bool)
                keep[rec[is_sched]] = False
        for mask, best_attr, index_attr in ((None, "_host_best", "host_index"),
                                            (keep, "_best", "index")):
            k = key if mask is None else np.where(mask, key, -np.inf)
            hi = float(k.max())
            if hi == -np.inf:
                continue
            cand = np.flatnonzero(k == hi)
            q = seq[cand]
            best = (hi, int(q.max()))
            if best > getattr(stream, best_attr):
                first = int(cand[q == q.max()].min())  # (arrival order: the first of equals)
                setattr(stream, best_attr, best)
                setattr(stream, index_attr, int(index if np.ndim(index) == 0 else index[first]))

    def _check_cuts(self, stream: Stream) -> None:
        """A step or family row at the instant of one of its stream's job
        starts makes the run odd (module docstring)."""
        starts = stream.cut_times()
        if not starts:
            return
        at = np.asarray(starts)
        for col in [stream.steps] + list(stream.families.values()):
            a = col.t.a
            if len(a):
                i = np.searchsorted(a, at)
                if ((i < len(a)) & (a[np.minimum(i, len(a) - 1)] == at)).any():
                    self.odd = "an event at the instant of its own writer's job start"
                    return

    def versions(self) -> Dict[Any, int]:
        """``{key: version}`` of every stream (what a reader saw)."""
        return {k: s.version for k, s in self.streams.items()}

    def writers(self) -> List[Stream]:
        """The known writers' streams (not the unknown writer's), in order."""
        return [s for k, s in self.streams.items() if k is not None]
