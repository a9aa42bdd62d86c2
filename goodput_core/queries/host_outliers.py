"""Host outliers: which host slows everyone down (docs/insights.md).

In synchronous training every host waits for the slowest, so the job-level
buckets cannot say which host it is. With per-host recording (each process
writes its events with its process index), each host's events make a
timeline of their own; this module compares the *host-local* time of the
hosts: data loading (blocking and overlapped, input stalls included),
checkpoint save and restore blocking time, accelerator init and training
preparation, and the step-time statistics per host.

A host is an **outlier** when its host-local badput exceeds the median
host's by more than ``ratio`` (2x) *and* by more than ``min_share`` (1 %) of
the median host's total time; the bucket with the largest excess over the
median host names the cause.

:class:`HostTracker` keeps one incremental calculator per process index,
each made by the factory it is given (the run's calculator gives its own
class: this module reads downward and never imports the calculator). It costs nothing on single-host runs: the run's calculator shows it the
events it reads (:meth:`HostTracker.observe`, one set of process indices per
batch), and only once a second process index appears does the tracker read
the store itself (from the beginning, then incrementally with its own
cursor) and build per-host calculators.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from operator import itemgetter
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np

from goodput_core.queries.host_figures import HOST_LOCAL_BUCKETS, HostFigures, host_figures
from goodput_core.timeline.buckets import BadputType as B
from goodput_core.timeline.streams import stream_indices, writer_key

__all__ = ["HOST_LOCAL_BUCKETS", "HostStats", "HostBreakdown", "HostTracker", "breakdown_of",
           "breakdown_of_stats"]


@dataclasses.dataclass(frozen=True)
class HostStats:
    """One host's host-local time.

    Attributes:
      process_index: the host's process index.
      seconds: ``{bucket: seconds}`` over :data:`HOST_LOCAL_BUCKETS`.
      host_local_seconds: their sum.
      total_seconds: the host's own total time.
      steps: step times measured on this host.
      median_step_seconds, p90_step_seconds: None without step times.
    """

    process_index: int
    seconds: Dict[str, float]
    host_local_seconds: float
    total_seconds: float
    steps: int
    median_step_seconds: Optional[float]
    p90_step_seconds: Optional[float]


@dataclasses.dataclass(frozen=True)
class HostBreakdown:
    """Per-host host-local time and the outliers among the hosts.

    Attributes:
      hosts: every host, by process index.
      median: the median host's value per bucket and ``host_local_seconds``.
      outliers: ``[(process_index, bucket, excess seconds), ...]``, largest first.
    """

    hosts: List[HostStats]
    median: Dict[str, float]
    outliers: List[tuple]

    def top(self, n: int = 10) -> List[HostStats]:
        """The ``n`` hosts with the most host-local time (what monitors publish)."""
        return sorted(self.hosts, key=lambda h: -h.host_local_seconds)[:n]


def _host_stats(index: int, calc: Any, now: float) -> HostStats:
    r = calc.cumulative(now=now)
    seconds = {"DATA_LOADING": r.badput_seconds[B.DATA_LOADING_SYNC] + r.data_loading_async_seconds}
    for name in HOST_LOCAL_BUCKETS[1:]:
        seconds[name] = r.badput_seconds[B[name]]
    # (from the host's step times kept sorted: not all of them each monitor cycle)
    median, p90 = calc.step_time_percentiles((50, 90))
    return HostStats(index, seconds, float(sum(seconds.values())), r.total_seconds,
                     calc.step_stats().count, median, p90)


def _stats_of(index: int, fig: HostFigures) -> HostStats:
    seconds, total, steps, median, p90 = fig
    return HostStats(index, seconds, float(sum(seconds.values())), total, steps, median, p90)


def breakdown_of(calculators: Dict[int, Any], now: float, *, ratio: float = 2.0,
                 min_share: float = 0.01) -> HostBreakdown:
    """The breakdown of per-host calculators (``{process_index: Calculator}``)."""
    return breakdown_of_stats([_host_stats(i, c, now) for i, c in sorted(calculators.items())],
                              ratio=ratio, min_share=min_share)


def breakdown_of_stats(hosts: List[HostStats], *, ratio: float = 2.0,
                       min_share: float = 0.01) -> HostBreakdown:
    """The breakdown of the hosts' figures (by process index)."""
    if not hosts:
        return HostBreakdown([], {}, [])
    median = {name: float(np.median([h.seconds[name] for h in hosts]))
              for name in HOST_LOCAL_BUCKETS}
    median["host_local_seconds"] = float(np.median([h.host_local_seconds for h in hosts]))
    median["total_seconds"] = float(np.median([h.total_seconds for h in hosts]))
    outliers = []
    if len(hosts) >= 3:  # with two hosts there is no majority to compare against
        floor = min_share * median["total_seconds"]
        for h in hosts:
            excess = h.host_local_seconds - median["host_local_seconds"]
            if h.host_local_seconds > ratio * median["host_local_seconds"] and excess > floor:
                bucket = max(HOST_LOCAL_BUCKETS, key=lambda n: h.seconds[n] - median[n])
                outliers.append((h.process_index, bucket, excess))
    outliers.sort(key=lambda o: -o[2])
    return HostBreakdown(hosts, median, outliers)


def _has_index(ev: Any) -> bool:
    try:
        int(ev[5])
        return True
    except (TypeError, ValueError, IndexError):
        return False


class HostTracker:
    """Per-host incremental calculators for one run.

    Args:
      run: the run name.
      store: an open store to read with :meth:`refresh` (None: use :meth:`add`).
      new_calculator: makes an empty calculator for one host's events (e.g.
        ``functools.partial(Calculator, run)``).
      clock: the query time source.
    """

    def __init__(self, run: str, store: Any = None, *, new_calculator: Callable[[], Any],
                 clock: Any = None):
        self._new_calculator = new_calculator
        self.run = run
        self._store = store
        self._cursor = None
        self._clock = clock
        self._hosts: Dict[int, Any] = {}
        self._lock = threading.Lock()
        self._seen: set = set()
        self._records: List[Any] = []  # every event read (multi-host runs only)
        self._settled: Dict[Any, int] = {}  # (host, pid) -> settled process index
        self.multi_host = store is None  # fed by add(): always per host
        self._columns: Any = None  # the run's columns, when the calculator holds them
        self._engine_hosts: Dict[int, Any] = {}

    def add(self, events: Iterable[Any]) -> None:
        """Routes EventRecords to their host's calculator.

        A host is a writer process's settled index (semantics rule 13): the
        events a process recorded before it knew its index (a JAX host's job
        start, under the default 0) are that host's. When a process settles on
        a new index after its events were routed, every host is rebuilt.
        """
        events = [ev for ev in events if _has_index(ev)]
        with self._lock:
            self._records.extend(events)
            settled = stream_indices(self._records)
            moved = any(settled.get(k) != i for k, i in self._settled.items())
            self._settled = settled
            if moved:
                self._hosts = {}
                events = self._records
            groups: Dict[int, list] = {}
            for ev in events:
                groups.setdefault(settled[writer_key(ev)], []).append(ev)
            for index, evs in groups.items():
                calc = self._hosts.get(index)
                if calc is None:
                    calc = self._hosts[index] = self._new_calculator()
                calc.add(evs)

    def observe(self, events: Sequence[Any]) -> None:
        """Notes the process indices of events the run's calculator read."""
        if self.multi_host or not events:
            return
        try:
            self._seen.update(map(itemgetter(5), events))
        except (TypeError, IndexError):
            return
        if len(self._seen) > 1:
            self.multi_host = True  # the next refresh reads the run from the start

    def observe_indices(self, indices) -> None:
        """As :meth:`observe`, given the process indices of the events read
        (a store's column read has no records)."""
        if not self.multi_host:
            self._seen.update(indices)
            self.multi_host = len(self._seen) > 1

    def use_columns(self, columns: Any) -> None:
        """Takes each host's figures from the run's columns
        (:class:`~goodput_core.timeline.host_columns.RunColumns`, which the
        run's calculator keeps up to date) instead of reading the store; None:
        read the store again (from its start, on the next refresh)."""
        with self._lock:
            self._columns = columns
            self._engine_hosts = {}
            self._cursor, self._records, self._hosts, self._settled = None, [], {}, {}

    def refresh(self) -> int:
        """Reads what the store got since the last refresh (multi-host runs
        only); returns how many events."""
        if self._store is None or not self.multi_host or self._columns is not None:
            return 0
        events, self._cursor = self._store.read(self.run, since=self._cursor)
        self.add(events)
        return len(events)

    def breakdown(self, now: Optional[float] = None, **kwargs: Any) -> HostBreakdown:
        """The breakdown at ``now`` (see :func:`breakdown_of`)."""
        if now is None:
            now = (self._clock or time.time)()
        if not math.isfinite(float(now)):
            raise ValueError(f"now must be finite, got {now!r}")
        with self._lock:
            columns = self._columns
            if columns is not None:
                if not self.multi_host:
                    return breakdown_of_stats([], **kwargs)
                figures = host_figures(columns, float(now), self._engine_hosts)
                return breakdown_of_stats([_stats_of(i, f) for i, f in figures.items()],
                                          **kwargs)
            hosts = dict(self._hosts)
        return breakdown_of(hosts, float(now), **kwargs)
