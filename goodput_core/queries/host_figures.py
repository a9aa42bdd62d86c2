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
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.events import HEARTBEAT_SECONDS, Kind
from goodput_core.queries.step_stats import StepTimes, compute_step_stats
from goodput_core.queries.windows import window_result
from goodput_core.timeline.buckets import BadputType as B
from goodput_core.timeline.host_columns import FAMILIES, RunColumns, Stream, t_of
from goodput_core.timeline.ingest import MAX_ABS_TIME, MAX_STEP
from goodput_core.timeline.lead_columns import stream_page
from goodput_core.timeline.liveness import DEFAULT_HEARTBEAT_SECONDS, STALE_INTERVALS
from goodput_core.timeline.spans import Timeline

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

#: ``(seconds by bucket, total seconds, step count, median, p90)`` of one host.
HostFigures = Tuple[Dict[str, float], float, int, Optional[float], Optional[float]]


def _percentile(sorted_times: np.ndarray, pct: float) -> Optional[float]:
    """``numpy.percentile`` (linear) of sorted values, as SortedTimes computes it."""
    n = len(sorted_times)
    if not n:
        return None
    h = pct / 100.0 * (n - 1)
    lo = int(np.floor(h))
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
    recs = stream.records
    if any(e[1] not in _PLAIN_RECORDS for e in recs):
        return None
    starts = [e for e in recs if e[1] == _JOB_START]
    ends = [e for e in recs if e[1] == _JOB_END]
    if len(starts) != 1 or len(ends) > 1:
        return None
    j = t_of(starts[0])
    e_end = t_of(ends[0]) if ends else None
    others = [t_of(e) for e in recs if e[1] not in (_JOB_START, _JOB_END)]
    t, k = stream.steps.t.a, stream.steps.v.a
    firsts, lasts = list(others), list(others)
    if len(t):
        firsts.append(float(t[0]))
        lasts.append(float(t[-1]))
    fams = []
    for name in FAMILIES:
        col = stream.families[name]
        ft, fe = col.t.a, col.v.a
        if len(ft):
            if (fe != (np.arange(len(fe)) & 1)).any():
                return None  # a start replaced, an end without its start
            firsts.append(float(ft[0]))
            lasts.append(float(ft[-1]))
        fams.append((ft, fe))
    if firsts and min(firsts) <= j:
        return None
    last = max(lasts) if lasts else j
    if e_end is not None and last >= e_end:
        return None
    if now < max(last, e_end if e_end is not None else j) or not math.isfinite(j):
        return None
    if len(t) and ((k[0] < 0) or (k[-1] >= MAX_STEP) or (len(t) > 1 and (
            (k[1:] - k[:-1] != 1).any() or not (t[1:] > t[:-1]).all()))):
        return None
    # the lifetime's end (rule 15: stopped at the last sign of life)
    if e_end is not None:
        hi = e_end
    else:
        hi = now
        beats = [(t_of(e), i) for i, e in enumerate(recs) if e[1] == _HEARTBEAT]
        if beats:
            last_hb, at = max(beats)
            iv = _interval(recs[at])
            iv = DEFAULT_HEARTBEAT_SECONDS if math.isnan(iv) else iv
            life = [t_of(e) for e in recs if e[1] in (_JOB_START, _METRIC)]
            if len(t):
                life.append(float(t[-1]))
            life += [float(ft[-1]) for ft, _ in fams if len(ft)]
            sign = max(max(life), last_hb)
            if now - sign > STALE_INTERVALS * iv:
                hi = sign
    hi = max(hi, j)
    total = hi - j
    # data loading: the union of every blocking and load interval in the lifetime
    xs, ys = [], []
    for ft, fe in fams:
        m = len(ft) - (len(ft) & 1)
        xs.append(ft[0:m:2])
        ys.append(ft[1:m:2])
        if len(ft) & 1:  # an open phase: to the next step start, the job end
            s = float(ft[-1])
            limit = e_end if e_end is not None else math.inf
            nxt = int(np.searchsorted(t, s, side="right"))
            if nxt < len(t):
                limit = min(limit, float(t[nxt]))
            if limit > s:
                xs.append(np.array([s]))
                ys.append(np.array([limit]))
    x = np.maximum(np.concatenate(xs), j) if xs else np.empty(0)
    y = np.minimum(np.concatenate(ys), hi) if ys else np.empty(0)
    ok = y > x
    x, y = x[ok], y[ok]
    loading = 0.0
    if len(x):
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        reach = np.maximum.accumulate(y)
        new = np.ones(len(x), bool)
        new[1:] = x[1:] > reach[:-1]
        last_of = np.flatnonzero(np.append(new[1:], True))
        loading = float((reach[last_of] - x[new]).sum())
    loading = min(max(loading, 0.0), total)
    gaps = np.sort(t[1:] - t[:-1]) if len(t) > 1 else np.empty(0)
    seconds = {"DATA_LOADING": loading}
    for name in HOST_LOCAL_BUCKETS[1:]:
        seconds[name] = 0.0
    return (seconds, total, len(gaps), _percentile(gaps, 50.0), _percentile(gaps, 90.0))


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
            from goodput_core.queries.many_hosts import ManyHosts

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
        fig = plain_figures(streams[0], now) if len(streams) == 1 and \
            streams[0].key is not None else None
        if fig is None:
            host = cache.get(index)
            if host is None or host.keys != [s.key for s in streams] or \
                    host.versions != [s.version for s in streams]:
                host = cache[index] = EngineHost(columns.run or "", streams)
            fig = host.figures(now)
        out[index] = fig
    return out
