"""Goodput queries over a run's events: cumulative, windows, rolling windows,
exclusions and step-time statistics.

API summary::

    from goodput_core.queries.calculator import Calculator

    calc = Calculator("run-1", "sqlite:///goodput.sqlite")  # reads the store
    calc.refresh()                      # reads only the events new since last time
    n, cursor = calc.pull(store, cursor)  # or read any store yourself, in pages
    calc = Calculator()                 # or feed events yourself:
    calc.add(events)                    #   EventRecords (any order, duplicates ok)
    calc.add_payloads(dicts)            #   reference-format payloads

    r = calc.cumulative()               # GoodputResult over the whole lifetime
    r = calc.cumulative(exclude=[(a, b), ...])   # minus the union of intervals
    r = calc.window(a, b)               # any window [a, b] (also with exclude=)
    rs = calc.rolling([60, 3600])       # windows ending now, from one timeline
    s = calc.step_stats()               # StepStats: step times, ideal, deviations
    calc.spans(a, b)                    # [(start, end, label), ...] for pictures
    calc.skipped                        # {reason: count} of unusable inputs
    calc.slice_efficiency(a, b)         # SliceEfficiency(stepping, available, ...)
    calc.slice_counts()                 # SliceCounts(times, active, available, total)
    calc.metrics("loss")                # MetricSeries(steps, times, values)
    new, cursor = calc.metrics_since(cursor)     # points new since the last call, by name
    calc.metadata()                     # run metadata, latest value per key
    calc.program_goodput()              # ProgramGoodput(mfu, ...) or None
    calc.state()                        # RunState: running / stopped at T (cause) / ended
    calc.hangs()                        # [Hang(step, start, end, seconds, stack), ...]
    calc.checkpoint_advice()            # CheckpointAdvice (Young/Daly) or its reason
    calc.hosts()                        # HostBreakdown: per-host host-local time, outliers

    r.goodput, r.productive_seconds, r.total_seconds, r.idle_seconds,
    r.excluded_seconds, r.badput_seconds[BadputType.X], r.badput_percent,
    r.custom_badput_seconds["EVAL"], r.data_loading_async_seconds,
    r.disruptions, r.max_productive_step, r.last_step, r.skipped, r.window

Times are POSIX seconds (or datetimes; naive = local time). ``now`` defaults to the
injected ``clock``. Queries never raise on bad data (bad events are skipped
and counted); they raise ``ValueError`` only for impossible arguments (a
window that ends before it starts, NaN bounds, a negative rolling size).
Semantics: ``docs/semantics.md`` in the repository (every rule, with a
worked example and its test); the spans: :mod:`goodput_core.timeline.spans`.
The calculator is thread-safe (one lock around updates and queries). Its
queries beyond runtime goodput (slice efficiency, metadata, metrics, program
goodput, insights) are in :mod:`goodput_core.queries.beyond_goodput`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.events import SkipReason, from_payload
from goodput_core.queries.arguments import Interval, exclusion_intervals, time_arg
from goodput_core.queries.beyond_goodput import BeyondGoodputMixin
from goodput_core.queries.diagnostics import MetricSeries
from goodput_core.queries.elastic import SliceCounts, SliceEfficiency
from goodput_core.queries.host_outliers import HostTracker
from goodput_core.queries.many_writers import ManyWriters
from goodput_core.queries.program_goodput import ProgramGoodput
from goodput_core.queries.results import GoodputResult, build_result, empty_result
from goodput_core.queries.scheduling import SCHEDULING, SchedulingWaits, scheduling_waits
from goodput_core.queries.step_stats import StepStats, StepTimes, compute_step_stats
from goodput_core.record.hooks import flush_before_read
from goodput_core.timeline.buckets import CUSTOM_BASE, IDLE, PRODUCTIVE, BadputType
from goodput_core.timeline.payload_columns import payload_page
from goodput_core.timeline.segments import CLOSE_JOB_END, CLOSE_STEP_END, NO_RESTART
from goodput_core.timeline.liveness import RunState, lifetime_end, timeline_state
from goodput_core.timeline.intervals import paint
from goodput_core.timeline.spans import Timeline

__all__ = ["Calculator", "GoodputResult", "MetricSeries", "ProgramGoodput", "SliceCounts",
           "SliceEfficiency", "StepStats"]

_PAGE = 262_144  # events per store read in refresh()
logger = logging.getLogger("goodput")


def _default_url() -> str:
    from goodput_core.stores import default_store_url

    return default_store_url()


class Calculator(BeyondGoodputMixin):
    """Incremental goodput calculator for one run.

    Args:
      run: the run name. Required with ``store``; with :meth:`add`, events
        of other runs are skipped (None: accept every event).
      store: a store URL, path or open Store to read with :meth:`refresh`;
        None with a run: the default store, the one ``Recorder(run)`` writes
        to (``$GOODPUT_STORE`` or the embedded file), opened at the first
        :meth:`refresh`.
      clock: returns the current POSIX time (``now`` of queries).
      ideal_step_time: a configured ideal step time in seconds (optional).
      liveness: False keeps rule 1 for every run: an open attempt runs to
        the query time, never stopped (the compatibility layer's setting).

    Raises:
      ValueError: a store without a run name, or a bad ideal step time.
      StoreError: the store cannot be opened.
    """

    def __init__(self, run: Optional[str] = None, store: Any = None, *,
                 clock: Callable[[], float] = time.time,
                 ideal_step_time: Optional[float] = None, liveness: bool = True):
        if store is not None and not run:
            raise ValueError("a run name is needed to read a store")
        if ideal_step_time is not None and not (
                isinstance(ideal_step_time, (int, float)) and ideal_step_time > 0):
            raise ValueError(f"ideal_step_time must be a positive number, got {ideal_step_time!r}")
        self.run = run
        self._store = None
        if store is not None:
            from goodput_core.stores import open_store

            self._store = open_store(store)
        self._cursor = None
        self._warned: set = set()  # refresh()'s one-time warnings
        self._clock = clock
        self._ideal = None if ideal_step_time is None else float(ideal_step_time)
        self._liveness = bool(liveness)
        self._tl = Timeline()
        self._tl.liveness = self._liveness
        self._lock = threading.RLock()
        self._host_tracker = HostTracker(run or "", self._store, clock=clock)
        # Several writer processes on one run: job figures from the lead stream
        self._many = ManyWriters(run)

    # --------------------------------------------------------------- input
    def add(self, events: Iterable[Any]) -> int:
        """Adds events (EventRecords); returns how many were stored.

        Events of several writer processes (``host``, ``pid``) make the job
        figures come from the lead stream (``docs/semantics.md``, many writers).
        """
        events = events if isinstance(events, list) else list(events)
        with self._lock:
            many = self._many
            if many.active:
                many.extend(events)
                self._tl = self._lead_timeline(many)
                return len(events)
            stored = self._tl.add(events, self.run)
            if many.note_records(events, keep=True):
                self._tl = self._lead_timeline(many)
            return stored

    def add_payloads(self, payloads: Iterable[Any]) -> int:
        """Adds reference-format payload dicts; unparsable ones are counted."""
        payloads = payloads if isinstance(payloads, list) else list(payloads)
        columns = payload_page(payloads, self.run)
        if columns is not None:  # a large batch: read column-wise, shape by shape
            page, skipped = columns
            with self._lock:
                self._tl.tables.skipped.update(skipped)
                return self._tl.add_page(page)
        records = []
        with self._lock:
            for payload in payloads:
                parsed = from_payload(payload, run=self.run)
                if isinstance(parsed, SkipReason):
                    self._tl.tables.skipped[parsed.value] += 1
                else:
                    records.append(parsed)
            return self._tl.add(records, self.run)

    def refresh(self) -> int:
        """Reads the events appended to the store since the last refresh.

        Events recorded for this run in this process by a :class:`Recorder`
        writing to the same store are stored first (read-your-writes; a
        bounded wait, none when nothing is pending).

        Returns:
          The number of events read (0 without a store).
        """
        if self._store is None and not self._open_default_store():
            return 0
        flush_before_read(self.run, self._store)
        with self._lock:
            first = self._cursor is None
            n, self._cursor = self.pull(self._store, self._cursor)
        if first and not n:  # a typo in the run or the store path reads as 0 % otherwise
            self._warn_once("no-run", "goodput: no events of run %r in %s yet (goodput runs "
                            "--store %s lists the runs there)", self.run,
                            getattr(self._store, "url", self._store),
                            getattr(self._store, "url", self._store))
        return n

    def _open_default_store(self) -> bool:
        """The store a ``Recorder(run)`` given no store writes to, for a
        Calculator given a run and no store; False (warned once) while there
        is none to read."""
        from goodput_core.stores import StoreError, open_store

        url = _default_url()
        if self.run:
            try:
                self._store = open_store(url, create=False)
            except StoreError as exc:
                self._warn_once("no-store", "goodput: Calculator(%r) reads the default store, "
                                "where a Recorder given no store writes (%s): %s", self.run,
                                url, exc)
                return False
            self._host_tracker = HostTracker(self.run, self._store, clock=self._clock)
            return True
        self._warn_once("no-store", "goodput: a Calculator without a run reads no store: "
                        "pass run and store= (a Recorder given no store writes to %s)", url)
        return False

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)

    def pull(self, store: Any, cursor: Any = None) -> Tuple[int, Any]:
        """Adds this run's events appended to ``store`` after ``cursor``.

        Read in pages, so that memory does not grow with the run beyond the
        engine's compact tables; as numpy columns where the store has them
        (``read_columns``: no Python object per event).

        Returns:
          ``(events read, cursor)``: pass the cursor to the next pull.
        """
        read_columns = getattr(store, "read_columns", None)
        total = 0
        many = self._many
        with self._lock:
            while True:
                if many.active:  # several writers: every event, with its writer
                    page, cursor = store.read(self.run, since=cursor, limit=_PAGE)
                    many.extend(page)
                    self._host_tracker.observe(page)
                elif read_columns is not None:
                    page, cursor = read_columns(self.run, since=cursor, limit=_PAGE)
                    self._tl.add_page(page)  # also counts the corrupt rows skipped
                    self._host_tracker.observe_indices(page.process_indices)
                    if many.note_writers(page.writers):
                        cursor, total = None, 0  # a second writer: read again, as records
                        continue
                else:
                    page, cursor = store.read(self.run, since=cursor, limit=_PAGE)
                    if page:
                        self._tl.add(page, self.run)
                        self._host_tracker.observe(page)
                        if many.note_records(page, keep=False):
                            cursor, total = None, 0
                            continue
                total += len(page)
                if len(page) < _PAGE:
                    if many.active and total:
                        self._tl = self._lead_timeline(many)
                    return total, cursor

    def _lead_timeline(self, many: Any) -> Timeline:
        """The job timeline of a run written by several processes (rule 13),
        with this calculator's liveness setting (rule 15)."""
        tl = many.timeline()
        tl.liveness = self._liveness
        return tl

    # ------------------------------------------------------------- queries
    @property
    def timeline(self) -> Timeline:
        """The underlying timeline, brought up to date."""
        with self._lock:
            self._tl.update()
            return self._tl

    @property
    def skipped(self) -> Dict[str, int]:
        """Unusable inputs so far, by reason."""
        with self._lock:
            self._tl.update()
            return self._tl.skipped()

    def lifetime(self, now: Any = None) -> Optional[Tuple[float, float]]:
        """(first job start, last job end or now), or None before a job start."""
        with self._lock:
            self._tl.update()
            att = self._tl.attempts
            if not len(att):
                return None
            t = self._now(now)
            return _lifetime(self._tl, t)

    def cumulative(self, now: Any = None, exclude: Optional[Sequence[Interval]] = None
                   ) -> GoodputResult:
        """Goodput over the whole lifetime (minus the union of ``exclude``)."""
        return self.window(-math.inf, math.inf, now=now, exclude=exclude)

    def window(self, start: Any, end: Any, now: Any = None,
               exclude: Optional[Sequence[Interval]] = None) -> GoodputResult:
        """Goodput over ``[start, end]`` clipped to the lifetime.

        Args:
          start, end: the window (POSIX seconds or datetimes; +-inf allowed).
          now: the query time (default: the clock).
          exclude: intervals to remove from every span and from total time.

        Raises:
          ValueError: NaN bounds, ``end < start``, or such an exclusion.
        """
        a, b = time_arg(start, "start"), time_arg(end, "end")
        if b < a:
            raise ValueError(f"window ends before it starts: [{a}, {b}]")
        excl = exclusion_intervals(exclude)
        with self._lock:
            t = self._now(now)
            tl = self._tl
            tl.update()
            if not len(tl.attempts):
                return empty_result(t, tl.skipped(), tl.tables.elastic_seen)
            life = _lifetime(tl, t)
            wa, wb = max(a, life[0]), max(min(b, life[1]), max(a, life[0]))
            waits = scheduling_waits(tl.tables, tl.attempts.start, t)
            if not waits:
                return build_result(tl, a, b, excl, life, t, _step_summary(tl, wa, wb))
            # waits for resources leave the partition like idle time (lifecycle)
            sched = waits.inside(*life)
            r = build_result(tl, a, b, excl + sched, life, t, _step_summary(tl, wa, wb))
            idle_s, idle_e = tl.attempts.idle()
            minus = (np.concatenate([idle_s, [x for x, _ in excl]]),
                     np.concatenate([idle_e, [y for _, y in excl]]))
            secs = min(waits.seconds(wa, wb, minus), r.excluded_seconds)
            return dataclasses.replace(r, excluded_seconds=r.excluded_seconds - secs,
                                       scheduling_seconds=secs)

    def scheduling(self, now: Any = None) -> SchedulingWaits:
        """The run's waits for resources (empty without scheduling events)."""
        with self._lock:
            self._tl.update()
            return scheduling_waits(self._tl.tables, self._tl.attempts.start, self._now(now))

    def rolling(self, seconds: Iterable[float], now: Any = None,
                exclude: Optional[Sequence[Interval]] = None) -> List[GoodputResult]:
        """Windows of the given lengths ending at ``now``, in the given order."""
        sizes = [float(s) for s in seconds]
        if any(not (s >= 0) for s in sizes):
            raise ValueError(f"rolling window sizes must be >= 0, got {sizes}")
        with self._lock:
            t = self._now(now)
            return [self.window(t - s, t, now=t, exclude=exclude) for s in sizes]

    def spans(self, start: Any = -math.inf, end: Any = math.inf, now: Any = None
              ) -> List[Tuple[float, float, str]]:
        """The attributed spans of ``[start, end]`` clipped to the lifetime, in
        time order (for timeline pictures).

        Returns:
          ``(start, end, label)`` tuples; labels are ``PRODUCTIVE``, ``IDLE``,
          ``SCHEDULING`` (a wait for resources after a requeue), a BadputType
          name, or ``CUSTOM_BADPUT_EVENTS:<TYPE>``.
        """
        s, e, c, names = self._labelled(start, end, now)
        return [(x, y, _label(code, names)) for x, y, code in zip(s.tolist(), e.tolist(),
                                                                  c.tolist())]

    def span_arrays(self, start: Any = -math.inf, end: Any = math.inf, now: Any = None
                    ) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        """As :meth:`spans`, as ``{label: (starts, ends)}`` numpy arrays in time
        order (no Python object per span: pictures of long runs)."""
        s, e, c, names = self._labelled(start, end, now)
        out = {}
        for code in np.unique(c).tolist():
            sel = c == code
            out[_label(code, names)] = (s[sel], e[sel])
        return out

    def _labelled(self, start: Any, end: Any, now: Any):
        """``(starts, ends, codes, custom names)`` of the spans of ``[start, end]``."""
        a, b = time_arg(start, "start"), time_arg(end, "end")
        if b < a:
            raise ValueError(f"window ends before it starts: [{a}, {b}]")
        life = self.lifetime(now)
        with self._lock:
            if life is None:
                return np.empty(0), np.empty(0), np.empty(0, np.int64), []
            lo, hi = max(a, life[0]), min(b, life[1])
            s, e, c = self._tl.labelled(lo, hi)
            waits = scheduling_waits(self._tl.tables, self._tl.attempts.start, self._now(now))
            if waits:  # waits for resources are their own lane, under idle time
                idle = c == IDLE
                ws = np.array([x for x, _ in waits.inside(lo, hi)], np.float64)
                we = np.array([y for _, y in waits.inside(lo, hi)], np.float64)
                s, e, c = paint([(s[idle], e[idle], IDLE), (ws, we, SCHEDULING), (s, e, c)], lo)
            return s, e, c, list(self._tl.tables.names["custom"])

    def state(self, now: Any = None) -> RunState:
        """Running, stopped (where and why) or ended, and the time from the last
        sign of life to each restart (semantics.md rule 15,
        :mod:`goodput_core.timeline.liveness`)."""
        with self._lock:
            t = self._now(now)
            self._tl.update()
            return timeline_state(self._tl, t)

    def step_stats(self, ideal_step_time: Optional[float] = None) -> StepStats:
        """Step times, ideal step time and deviations (semantics.md rule 12).

        Args:
          ideal_step_time: overrides the configured ideal step time.
        """
        with self._lock:
            self._tl.update()
            ideal = ideal_step_time if ideal_step_time is not None else self._ideal
            # one computation per timeline version: a monitor cycle asks twice
            # (deviations, checkpoint advice), and nothing new may have arrived
            key = (id(self._tl), self._tl.version, ideal)
            cached = getattr(self, "_step_cache", None)
            if cached is None or cached[0] != key:
                if getattr(self, "_step_times", None) is None:
                    self._step_times = StepTimes()  # incremental: only what may still change
                cached = self._step_cache = (key, compute_step_stats(self._tl, ideal,
                                                                     self._step_times))
            return cached[1]

    def _now(self, now: Any) -> float:
        return time_arg(self._clock() if now is None else now, "now")


def _lifetime(tl: Timeline, now: float) -> Tuple[float, float]:
    """(first job start, or the first grant before it; last job end or now)."""
    att = tl.attempts
    lo = float(att.start[0])
    held = scheduling_waits(tl.tables, att.start, now).held_start
    if held is not None:
        lo = min(lo, held)
    return lo, max(lifetime_end(tl, now), lo)  # where a stopped run stopped (rule 15)


def _label(code: int, custom_names: List[str]) -> str:
    if code == PRODUCTIVE:
        return "PRODUCTIVE"
    if code == IDLE:
        return "IDLE"
    if code == SCHEDULING:
        return "SCHEDULING"
    if code >= CUSTOM_BASE:
        return f"CUSTOM_BADPUT_EVENTS:{custom_names[code - CUSTOM_BASE]}"
    return BadputType(code).name


def _step_summary(tl: Timeline, a: float, b: float) -> Dict[str, int]:
    """Restarts in ``[a, b]``, the last step started by ``b`` and the largest
    kept step by ``b`` (with hindsight: progress later redone is not kept)."""
    seg = tl.segments
    st = tl.tables["step_start"]
    t, s = st["t"], st["step"]
    restarts = tl.stepless_restarts[1]  # rule 2: disrupted attempts without steps
    out = {"disruptions": int(((restarts >= a) & (restarts <= b)).sum()),
           "max_productive_step": 0, "last_step": 0}
    if not len(seg):
        return out
    i0, i1 = seg["i0"], seg["i1"]
    t0 = t[i0]
    out["disruptions"] += int((seg["restart"] & (t0 >= a) & (t0 <= b)).sum())
    sel = t0 <= b
    if not sel.any():
        return out
    i0, i1, next_r = i0[sel], i1[sel], seg["next_r"][sel]
    close, kind = seg["close"][sel], seg["close_kind"][sel]
    j = np.clip(np.searchsorted(t, b, side="right") - 1, i0, i1)
    out["last_step"] = int(s[j[-1]])
    # a step ends (completes) with its step end or the job end, not a crash
    done = ((kind == CLOSE_STEP_END) | (kind == CLOSE_JOB_END)) & (close <= b) & (j == i1)
    completed = np.where(done, s[i1], np.where(j > i0, s[j] - 1, -1))
    kept = np.where(next_r != NO_RESTART, np.minimum(completed, next_r - 1), completed)
    kept = kept[kept >= s[i0]]
    out["max_productive_step"] = int(kept.max()) if len(kept) else 0
    return out
