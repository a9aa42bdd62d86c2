"""The dashboard's view of a store: one incremental calculator per run, kept
in a small LRU, and the few facts the runs page needs (state, last activity).

Memory stays bounded: a calculator holds the run's compact numpy tables
(no Python object per event), and at most ``max_runs`` of them are kept;
a run pushed out is read again from the store when next asked for.
Every store read happens under one lock: a store handle is shared by the
server's threads, and readers queue rather than open a connection each.
"""

from __future__ import annotations

import collections
import math
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["RunCache", "run_state", "last_activity", "STOPPED_AFTER_SECONDS"]

#: A run whose last event is older than this reads as stopped: three heartbeat
#: intervals (``GOODPUT_HEARTBEAT_SECONDS``, 10 s by default), as liveness is
#: defined for stopped runs.
STOPPED_AFTER_SECONDS = 3 * float(os.environ.get("GOODPUT_HEARTBEAT_SECONDS") or 10)
# A run outside the calculator cache (more runs than max_runs) is summarised at
# most this often (an ended run far less often: it rarely changes): the runs page
# of a big store must not reread every run each time.
_COLD_SUMMARY_SECONDS = 15.0
_COLD_ENDED_SUMMARY_SECONDS = 300.0


def last_activity(calc: Any) -> Optional[float]:
    """The time of the run's latest event of any kind (None before any)."""
    tl = calc.timeline
    latest = -math.inf
    for table in tl.tables.tables.values():
        if len(table):
            t = table["t"]
            latest = max(latest, float(t[-1]))  # tables are kept sorted by time
    for hang in tl.tables.hangs:
        latest = max(latest, float(hang.get("detected") or -math.inf))
    return latest if math.isfinite(latest) else None


def run_state(calc: Any, now: float) -> Tuple[str, Optional[float]]:
    """``(state, since)`` of a run: ``not started`` (no job start yet), ``running``,
    ``stopped`` (its last attempt ended by a recorded disruption, or no sign of
    life for :data:`STOPPED_AFTER_SECONDS`) or ``ended`` (a job end closes the
    last attempt). ``since`` is when the state began where known.

    The one place the dashboard decides liveness: where the calculator tells
    a run's state (``Calculator.state``), that is used; this module's own rule
    serves engines without it.
    """
    tl = calc.timeline
    att = tl.attempts
    if not len(att):
        return "not started", None
    told = getattr(calc, "state", None)
    if callable(told):
        st = told(now)
        if st.state == "stopped":
            return "stopped", st.stopped_at
        if st.state == "ended":
            return "ended", float(att.end[-1])
        return str(st.state), float(att.start[-1])
    if not np.isnan(att.end[-1]):
        return "ended", float(att.end[-1])
    last = last_activity(calc)
    disruptions = tl.tables["disruption"]
    if len(disruptions) and float(disruptions["t"][-1]) >= float(att.start[-1]) \
            and last is not None and float(disruptions["t"][-1]) >= last:
        return "stopped", float(disruptions["t"][-1])
    if last is not None and now - last > STOPPED_AFTER_SECONDS:
        return "stopped", last
    return "running", float(att.start[-1])


class _Entry:
    __slots__ = ("calc", "events", "read_at", "version", "views")

    def __init__(self, calc: Any):
        self.calc = calc
        self.events = 0        # events read so far
        self.read_at = -math.inf
        self.version = 0       # bumped when new events arrive (caches key on it)
        self.views: Dict[str, Any] = {}  # name -> (key, value): see Api._cached


class RunCache:
    """Calculators of the runs being looked at, refreshed at most every
    ``min_interval`` seconds each.

    Args:
      store: an open store (read only: nothing here writes).
      max_runs: how many runs' calculators are kept in memory.
      min_interval: a run is read again at most this often (seconds).
      names_max_age: the store's list of runs is read again at most this often.
      clock: the time source (tests inject one).
    """

    def __init__(self, store: Any, *, max_runs: int = 16, min_interval: float = 0.5,
                 names_max_age: float = 1.0, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock
        self.max_runs = max(1, int(max_runs))
        self._min_interval = float(min_interval)
        self._names_max_age = float(names_max_age)
        self._entries: "collections.OrderedDict[str, _Entry]" = collections.OrderedDict()
        self.io = threading.RLock()  # one store reader at a time
        self._names: List[str] = []
        self._names_at = -math.inf
        self._summaries: Dict[str, Tuple[int, float, Dict[str, Any]]] = {}

    def names(self, max_age: Optional[float] = None) -> List[str]:
        """The store's run names, oldest first (read at most every ``max_age`` s;
        default ``names_max_age``)."""
        max_age = self._names_max_age if max_age is None else max_age
        with self.io:
            if self.clock() - self._names_at >= max_age:
                self._names = list(self.store.runs())
                self._names_at = self.clock()
            return list(self._names)

    def exists(self, run: str) -> bool:
        """True when the store holds an event of ``run`` (one cheap read, never the
        whole list of runs: an address typed wrong must not cost a Cloud Logging scan)."""
        if run in self._entries or run in self._names:
            return True
        with self.io:
            return bool(self.store.read(run, limit=1)[0])

    def get(self, run: str, *, fresh: bool = True) -> _Entry:
        """The run's entry, its calculator brought up to date (see ``min_interval``)."""
        from goodput_core.queries.calculator import Calculator

        with self.io:
            entry = self._entries.get(run)
            if entry is None:
                entry = _Entry(Calculator(run, self.store, clock=self.clock))
                self._keep(run, entry)
            else:
                self._entries.move_to_end(run)
            now = self.clock()
            if fresh and now - entry.read_at >= self._min_interval:
                n = entry.calc.refresh()
                entry.read_at = now
                if n or entry.version == 0:
                    entry.events += n
                    entry.version += 1
            return entry

    def _keep(self, run: str, entry: _Entry) -> None:
        self._entries[run] = entry
        while len(self._entries) > self.max_runs:
            self._entries.popitem(last=False)

    def _scratch(self, run: str) -> _Entry:
        """A calculator of ``run`` read once and not kept (the runs list of a big
        store must not push out the runs whose pages are open)."""
        from goodput_core.queries.calculator import Calculator

        with self.io:
            entry = _Entry(Calculator(run, self.store, clock=self.clock))
            entry.events = entry.calc.refresh()
            entry.read_at, entry.version = self.clock(), 1
            return entry

    def cached_versions(self) -> Tuple[int, ...]:
        """The versions of the runs kept (read anew where due), for the live stream
        of the runs page: pages and running runs are kept, so their events show."""
        return tuple(self.get(run).version for run in list(self._entries))

    def poll(self, run: str) -> int:
        """Reads the run's new events now; returns the entry's version."""
        return self.get(run).version

    def cached_summary(self, run: str) -> Optional[Dict[str, Any]]:
        """The run's last summary row, however old (None: never summarised)."""
        cached = self._summaries.get(run)
        return None if cached is None else cached[2]

    def summary(self, run: str, now: Optional[float] = None) -> Dict[str, Any]:
        """The runs page's row for ``run`` (cached until new events or 1 s passes)."""
        from goodput_core.cli.serve.views import series
        from goodput_core.queries.run_groups import group_of

        now = self.clock() if now is None else now
        cached = self._summaries.get(run)
        if cached and run not in self._entries:
            ttl = _COLD_ENDED_SUMMARY_SECONDS if cached[2]["state"] == "ended" \
                else _COLD_SUMMARY_SECONDS
            if now - cached[1] < ttl:
                return cached[2]  # a run no page is open on: not read again for a while
        kept = run in self._entries
        entry = self.get(run) if kept else self._scratch(run)
        if kept and cached and cached[0] == entry.version and now - cached[1] < 1.0:
            return cached[2]
        calc = entry.calc
        state, since = run_state(calc, now)
        if state == "running" and not kept:
            with self.io:  # watched from now on: its new events reach the runs page live
                self._keep(run, entry)
        result = calc.cumulative(now)
        spark = series(calc, now, points=24)
        row = {"run": run, "group": group_of(calc), "state": state, "state_since": since,
               "goodput_percent": result.goodput if result.total_seconds > 0 else None,
               "total_seconds": result.total_seconds, "last_activity": last_activity(calc),
               "events": entry.events,
               "sparkline": [[t, g] for t, g in zip(spark["times"], spark["goodput_percent"])]}
        self._summaries[run] = (entry.version, now, row)
        if len(self._summaries) > 4096:  # bounded: rows of runs long gone are dropped
            self._summaries.pop(next(iter(self._summaries)))
        return row
