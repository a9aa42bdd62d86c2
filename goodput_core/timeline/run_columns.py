"""A run's pages routed to its writers' columns (docs/large-runs.md, "Many
hosts"): :class:`RunColumns` holds every writer process of a run as
:class:`~goodput_core.timeline.host_columns.Stream` columns.

A store's pages hold runs of one writer's rows (its batches): each run is
routed by slices; a page of interleaved writers by one stable sort of small
integers; a small page (a refresh of a running job: a few rows per writer)
row by row, where numpy calls would cost more than the rows. Each writer
settles on the index of its latest event (the scheduler's events apart for
the lead's rules, with them for the host breakdown), and the checks that make
a run *odd* (:attr:`RunColumns.odd`) are made as rows arrive.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.events import EventRecord
from goodput_core.stores.columns import EventPage
from goodput_core.timeline.host_columns import (
    _CAT_LIST, _CAT_LUT, _CATS, _END, _END_LIST, _FAMILY_NAMES, _RECORDS, _SCHEDULING,
    _SMALL_PAGE, _STEPS, Stream, t_of)

__all__ = ["RunColumns"]


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
        writer_of: Dict[int, Tuple[Stream, int]] = {}  # (per writer code, not per row)
        for i, code in enumerate(page.writer.tolist()):
            w = writer_of.get(code)
            if w is None:
                w = writer_of[code] = self._writer(page, code)
            stream, index_of[i] = w
            groups.setdefault(stream, []).append(i)
        cat_of, end_of, finite = _CAT_LIST, _END_LIST, math.isfinite
        for stream, rows in groups.items():
            cols: Dict[int, Tuple[list, list]] = {}
            records = []
            kinds_seen = set()
            host_best, best = stream._host_best, stream._best
            last_seq = stream._last_seq
            tmax = -math.inf
            for i in rows:
                k, t, q, w = kinds[i], times[i], seqs[i], wts[i]
                key = (w if w == w else (t if finite(t) else 0.0), q)
                if key > host_best:
                    host_best, stream.host_index = key, index_of[i]
                if key > best and k not in _SCHEDULING:
                    best, stream.index = key, index_of[i]
                c = cat_of[2 * k + has[i]] if 0 <= k < 256 else _RECORDS
                if c == _RECORDS:
                    records.append(i)
                    continue
                if not finite(t):
                    self.odd = self.odd or "a time that is not a finite number"
                if q < last_seq[c]:
                    self.odd = self.odd or "a writer's events out of sequence order"
                last_seq[c] = q
                if t > tmax:
                    tmax = t
                kinds_seen.add(k)
                col = cols.get(c)
                if col is None:
                    col = cols[c] = ([], [])
                col[0].append(t)
                col[1].append(steps[i] if c == _STEPS else end_of[k])
            stream._host_best, stream._best = host_best, best
            changed = math.inf
            for c, (ts, vs) in cols.items():  # (as lists: a few rows, no array built)
                if c == _STEPS:
                    changed = min(changed, stream._add_steps(ts, vs))
                else:
                    changed = min(changed, stream.families[_FAMILY_NAMES[c]].add(ts, vs))
            new = [page.record(i) for i in records] if records else records
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
