"""Each host's own figures (host outliers) from the run's columns
(docs/large-runs.md, "Many hosts").

A host of the breakdown is a settled process index: every writer process
that settled on it (:attr:`~goodput_core.timeline.host_columns.Stream.host_index`).
Its figures are those of a calculator over its own events alone
(:func:`goodput_core.queries.host_outliers.breakdown_of`); computing a whole
timeline per host costs the engine's work for every host-step, so:

* a **plain host** (one writer process, one attempt: its job start before
  every other event, at most one job end after every other one, step starts
  with increasing times and consecutive step numbers, stall, blocking-load
  and load starts and ends alternating (the last may be open), heartbeats,
  metrics, metadata; the query time at or after its last event) gets them
  in closed form from its columns: data loading is the union of its
  blocking and load intervals (an open one up to its next step start, its
  job end or the query) inside its lifetime; its lifetime ends at its job
  end, where it stopped (rule 15, its heartbeats) or at the query time; its
  step times are the gaps between its step starts;
* any other host gets a timeline of its own as before, from its columns
  (:class:`EngineHost`): the engine's column path, and rule 13 among its own
  writer processes when it has several (a host restarted under a new pid).

Both give what a per-host calculator gives, to float rounding (checked on
random runs against per-host calculators fed the host's records,
``tests/core/queries/test_host_figures.py``).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, insort
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.events import HEARTBEAT_SECONDS, Kind
from goodput_core.queries.step_stats import StepTimes, compute_step_stats
from goodput_core.queries.windows import window_result
from goodput_core.timeline.buckets import BadputType as B
from goodput_core.timeline.host_columns import FAMILIES, Stream, t_of
from goodput_core.timeline.run_columns import RunColumns
from goodput_core.timeline.ingest import MAX_ABS_TIME, MAX_STEP
from goodput_core.timeline.lead_columns import stream_page
from goodput_core.timeline.liveness import DEFAULT_HEARTBEAT_SECONDS, STALE_INTERVALS
from goodput_core.timeline.spans import Timeline
from goodput_core.queries.many_hosts import ManyHosts

__all__ = ["HOST_LOCAL_BUCKETS", "host_figures", "plain_figures", "EngineHost", "HostFigures"]

#: Buckets that measure time spent by one host on its own (data loading
#: counts overlapped loads too: a slow loader makes the others wait).
HOST_LOCAL_BUCKETS = ("DATA_LOADING", B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME.name,
                      B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME.name, B.TPU_INITIALIZATION.name,
                      B.TRAINING_PREP.name)

_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)
_HEARTBEAT, _METRIC, _METADATA = int(Kind.HEARTBEAT), int(Kind.METRIC), int(Kind.METADATA)
_PLAIN_RECORDS = frozenset({_JOB_START, _JOB_END, _HEARTBEAT, _METRIC, _METADATA})
_PCTS = (50.0, 90.0)
_FEW = 64  # new rows handled one by one (a refresh), not by numpy

#: ``(seconds by bucket, total seconds, step count, median, p90)`` of one host.
HostFigures = Tuple[Dict[str, float], float, int, Optional[float], Optional[float]]


def _percentile(sorted_times, pct: float) -> Optional[float]:
    """``numpy.percentile`` (linear) of sorted values, as SortedTimes computes it."""
    n = len(sorted_times)
    if not n:
        return None
    h = pct / 100.0 * (n - 1)
    lo = int(math.floor(h))
    a = float(sorted_times[lo])
    if lo + 1 >= n or h == lo:
        return a
    b, t = float(sorted_times[lo + 1]), h - lo
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def _interval(e) -> float:
    """A heartbeat's interval (NaN: not said), as the engine reads it."""
    extra = e[4]
    iv = extra.get(HEARTBEAT_SECONDS) if isinstance(extra, dict) else None
    ok = type(iv) is not bool and isinstance(iv, (int, float)) and 0 < iv < MAX_ABS_TIME
    return float(iv) if ok else math.nan


def plain_figures(stream: Stream, now: float) -> Optional[HostFigures]:
    """A plain host's figures (module docstring); None when it is not plain."""
    return PlainHost(stream).figures(now)


class PlainHost:
    """A plain host's figures, kept up to date as its writer's rows grow: the
    union of its blocking and load intervals is summed once for the blocks
    that ended before its families' latest events (later rows cannot reach
    them; a row that arrives before them starts the sum again), and its step
    times are kept sorted (:class:`SortedTimes`)."""

    def __init__(self, stream: Stream):
        self.stream = stream
        self._reset()

    def _reset(self) -> None:
        s = self.stream
        self.merges = s.merges()
        self.version = -1
        self.checked = {name: 0 for name in ("steps",) + tuple(FAMILIES)}
        self.plain = True
        self.frozen = 0.0  # the length of the union blocks that start before ``bound``
        self.bound = -math.inf
        self.cut = {name: 0 for name in FAMILIES}  # each family's first event after them
        self.gaps = array("d")  # its step times, sorted
        self.gap_rows = 0
        self._records: tuple = (-1, None)  # (records seen, what they say)

    def figures(self, now: float) -> Optional[HostFigures]:
        """Its figures at ``now``; None when it is not plain (now)."""
        s = self.stream
        if s.merges() != self.merges or (self.version >= 0 and
                                         s.changed_since(self.version) <= self.bound):
            self._reset()
        self.version = s.version
        if not self.plain or not self._check_rows():
            self.plain = False
            return None
        recs = s.records
        said = self._said(recs)
        if said is None:
            return None
        j, e_end, others = said
        t = s.steps.t.a
        cols = [s.steps] + [s.families[n] for n in FAMILIES]
        firsts = others + [float(c.t.a[0]) for c in cols if len(c)]
        lasts = others + [float(c.t.a[-1]) for c in cols if len(c)]
        if firsts and min(firsts) <= j:
            return None
        last = max(lasts) if lasts else j
        if e_end is not None and last >= e_end:
            return None
        if now < max(last, e_end if e_end is not None else j) or not math.isfinite(j):
            return None
        hi = self._lifetime_end(recs, j, e_end, lasts, now)
        total = hi - j
        loading = min(max(self._loading(t, e_end, hi), 0.0), total)
        n = len(t)
        if n - 1 > self.gap_rows:
            lo = self.gap_rows
            new = t[lo + 1:] - t[lo:-1]
            if len(new) <= _FEW:
                for g in new.tolist():
                    insort(self.gaps, g)
            else:  # (sorted at once)
                merged = np.concatenate((np.frombuffer(self.gaps, np.float64), new))
                merged.sort()
                self.gaps = array("d", merged.tobytes())
            self.gap_rows = n - 1
        seconds = {"DATA_LOADING": loading}
        for name in HOST_LOCAL_BUCKETS[1:]:
            seconds[name] = 0.0
        return (seconds, total, len(self.gaps), _percentile(self.gaps, 50.0),
                _percentile(self.gaps, 90.0))

    def _said(self, recs) -> Optional[tuple]:
        """``(job start, job end or None, the other records' times)`` of its
        records (kept while they are the same), None when they make it not plain."""
        if self._records[0] == len(recs):
            return self._records[1]
        said = None
        if all(e[1] in _PLAIN_RECORDS for e in recs):
            starts = [e for e in recs if e[1] == _JOB_START]
            ends = [e for e in recs if e[1] == _JOB_END]
            if len(starts) == 1 and len(ends) <= 1:
                said = (t_of(starts[0]), t_of(ends[0]) if ends else None,
                        [t_of(e) for e in recs if e[1] not in (_JOB_START, _JOB_END)])
        self._records = (len(recs), said)
        return said

    def _check_rows(self) -> bool:
        """Checks the rows added since the last call: each family's starts and
        ends alternate, step numbers follow each other, step times increase."""
        s = self.stream
        for name in FAMILIES:
            e = s.families[name].v.a
            lo = self.checked[name]
            if len(e) - lo <= _FEW:
                if any(f != (i & 1) for i, f in enumerate(e[lo:].tolist(), lo)):
                    return False
            elif (e[lo:] != (np.arange(lo, len(e)) & 1)).any():
                return False  # a start replaced, an end without its start
            self.checked[name] = len(e)
        t, k = s.steps.t.a, s.steps.v.a
        lo = max(self.checked["steps"] - 1, 0)
        if len(k) and (k[0] < 0 or k[-1] >= MAX_STEP):
            return False
        if len(k) - lo > _FEW:
            if (k[lo + 1:] - k[lo:-1] != 1).any() or not (t[lo + 1:] > t[lo:-1]).all():
                return False
        elif len(k) - lo > 1:
            kk, tt = k[lo:].tolist(), t[lo:].tolist()
            if any(kk[i + 1] - kk[i] != 1 or not tt[i + 1] > tt[i] for i in range(len(kk) - 1)):
                return False
        self.checked["steps"] = len(k)
        return True

    def _lifetime_end(self, recs, j: float, e_end: Optional[float], lasts: List[float],
                      now: float) -> float:
        """Where its lifetime ends (rule 15: a job end, where it stopped, or now)."""
        if e_end is not None:
            return max(e_end, j)
        hi = now
        beats = [(t_of(e), i) for i, e in enumerate(recs) if e[1] == _HEARTBEAT]
        if beats:
            last_hb, at = max(beats)
            iv = _interval(recs[at])
            iv = DEFAULT_HEARTBEAT_SECONDS if math.isnan(iv) else iv
            # signs of life: every event but heartbeats and metadata
            life = [t_of(e) for e in recs if e[1] in (_JOB_START, _METRIC)]
            cols = [self.stream.steps] + [self.stream.families[n] for n in FAMILIES]
            life += [float(c.t.a[-1]) for c in cols if len(c)]
            sign = max(max(life), last_hb)
            if now - sign > STALE_INTERVALS * iv:
                hi = sign
        return max(hi, j)

    def _loading(self, t: np.ndarray, e_end: Optional[float], hi: float) -> float:
        """The length of the union of its blocking and load intervals (an open
        one to its next step start or job end) up to ``hi``; the blocks that
        end before every family's latest event are summed once (and a row that
        arrives before them starts the sum again)."""
        s = self.stream
        xs, ys, lasts, opens = [], [], [], []
        for name in FAMILIES:
            ft = s.families[name].t.a
            if len(ft):
                lasts.append(float(ft[-1]))
            c = self.cut[name]
            m = c + ((len(ft) - c) & ~1)
            xs.append(ft[c:m:2])
            ys.append(ft[c + 1:m:2])
            if m < len(ft):  # an open phase: to the next step start, the job end
                x = float(ft[-1])
                limit = e_end if e_end is not None else math.inf
                nxt = int(np.searchsorted(t, x, side="right"))
                if nxt < len(t):
                    limit = min(limit, float(t[nxt]))
                if limit > x:
                    opens.append((x, limit))
        bx, by = _blocks(xs, ys, opens)
        bound = min(lasts) if lasts else -math.inf
        # blocks no later row can reach: those that end before every family's last event
        k = int(np.searchsorted(by, bound)) if isinstance(by, np.ndarray) else \
            bisect_left(by, bound)  # (blocks are disjoint: their ends increase)
        frozen = self.frozen
        if k:  # (an open phase starts at its family's last event: never before)
            frozen += _length(bx[:k], by[:k])
            edge = float(bx[k]) if k < len(bx) else math.inf
            self.frozen, self.bound = frozen, float(by[k - 1])
            for name, fx in zip(FAMILIES, xs):  # each family's pairs before the edge
                self.cut[name] += 2 * int(np.searchsorted(fx, edge, side="left"))
        rest = 0.0
        for x, y in zip(bx[k:].tolist() if isinstance(bx, np.ndarray) else bx[k:],
                        by[k:].tolist() if isinstance(by, np.ndarray) else by[k:]):
            rest += max(min(y, hi) - x, 0.0)
        return frozen + rest


def _blocks(xs: List[np.ndarray], ys: List[np.ndarray], opens: List[Tuple[float, float]]
            ) -> Tuple[list, list]:
    """The union of the intervals ``(xs, ys)`` (per family, in order) and
    ``opens``, as lists of block starts and ends (in Python when they are few)."""
    n = sum(len(x) for x in xs) + len(opens)
    if n <= _FEW:
        pairs = [p for x, y in zip(xs, ys) for p in zip(x.tolist(), y.tolist())] + opens
        pairs.sort()
        bx: List[float] = []
        by: List[float] = []
        for a, b in pairs:
            if by and a <= by[-1]:
                if b > by[-1]:
                    by[-1] = b
            else:
                bx.append(a)
                by.append(b)
        return bx, by
    x = np.concatenate(xs + [np.asarray([o[0] for o in opens])])
    y = np.concatenate(ys + [np.asarray([o[1] for o in opens])])
    if sum(len(a) > 0 for a in xs) + bool(opens) > 1:
        order = np.lexsort((y, x))
        x, y = x[order], y[order]
    reach = np.maximum.accumulate(y)
    new = np.ones(len(x), bool)
    new[1:] = x[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last_of = np.append(first[1:] - 1, len(x) - 1)
    return x[first], reach[last_of]


def _length(bx, by) -> float:
    """The summed length of blocks (lists, or arrays: numpy's sum)."""
    if isinstance(bx, np.ndarray):
        return float((by - bx).sum())
    return sum(y - x for x, y in zip(bx, by))


class EngineHost:
    """A host's own timeline, from its writers' columns (one writer process: its
    rows; several: rule 13 among them, :class:`~goodput_core.queries.many_hosts.ManyHosts`)."""

    def __init__(self, run: str, streams: List[Stream]):
        self.run = run
        self.keys = [s.key for s in streams]
        self.versions = [s.version for s in streams]
        if len(streams) == 1:
            tl = Timeline()
            tl.add_page(stream_page(run, streams[0]))
        else:
            many = ManyHosts(run)
            sub = many.columns
            for s in streams:
                sub.streams[s.key] = s
            tl = many.timeline()
            self.odd = sub.odd
        self.tl = tl
        self._steps = StepTimes()

    def figures(self, now: float) -> HostFigures:
        tl = self.tl
        tl.update()
        r = window_result(tl, -math.inf, math.inf, [], now)
        seconds = {"DATA_LOADING": r.badput_seconds[B.DATA_LOADING_SYNC] +
                   r.data_loading_async_seconds}
        for name in HOST_LOCAL_BUCKETS[1:]:
            seconds[name] = r.badput_seconds[B[name]]
        stats = compute_step_stats(tl, None, self._steps)
        sorted_times = self._steps.sorted
        return (seconds, r.total_seconds, stats.count, sorted_times.percentile(50.0),
                sorted_times.percentile(90.0))


def host_figures(columns: RunColumns, now: float, cache: Dict[int, Any]
                 ) -> Dict[int, HostFigures]:
    """``{process index: figures}`` of every host of the run (``cache``: the
    engine hosts kept between calls, by index)."""
    by_host: Dict[int, List[Stream]] = {}
    for key, s in columns.streams.items():
        by_host.setdefault(0 if key is None else s.host_index, []).append(s)
    out = {}
    for index, streams in sorted(by_host.items()):
        fig = None
        if len(streams) == 1 and streams[0].key is not None:
            plain = cache.get(("plain", index))
            if plain is None or plain.stream is not streams[0]:
                plain = cache[("plain", index)] = PlainHost(streams[0])
            fig = plain.figures(now)
        if fig is None:
            host = cache.get(index)
            if host is None or host.keys != [s.key for s in streams] or \
                    host.versions != [s.version for s in streams]:
                host = cache[index] = EngineHost(columns.run or "", streams)
            fig = host.figures(now)
        out[index] = fig
    return out
