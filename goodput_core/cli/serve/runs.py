"""The dashboard's view of a store: one incremental calculator per run looked
at, kept in a small LRU, and the runs page's rows.

Memory stays bounded: a calculator holds the run's compact numpy tables
(no Python object per event), and at most ``max_runs`` of them are kept;
a run pushed out is read again from the store when next asked for.
Every store read happens under one lock: a store handle is shared by the
server's threads, and readers queue rather than open a connection each.

The runs page's rows are run summaries (:mod:`goodput_core.queries.summaries`),
the same as ``goodput runs --summary``: an ended or stopped run whose version
the store still reports comes from the summary cache; any other is computed,
from its kept calculator where there is one (brought up to date first when
its version moved), so a row is never stale.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from goodput_core.queries.summaries import (STOPPED_AFTER_SECONDS, RunSummary, Summaries,
                                            last_activity, state_of)
from goodput_core.queries import calculator  # by module: a test counts the calculators made

__all__ = ["RunCache", "run_state", "last_activity", "STOPPED_AFTER_SECONDS"]


def run_state(calc: Any, now: float) -> Tuple[str, Optional[float]]:
    """``(state, since)`` of a run: ``not started``, ``running``, ``stopped`` or
    ``ended``, as its summary says it (:func:`goodput_core.queries.summaries.summarize`);
    ``since`` is when the state began where known."""
    return state_of(calc, now)[:2]


class _Entry:
    __slots__ = ("calc", "events", "read_at", "version", "store_version", "views")

    def __init__(self, calc: Any):
        self.calc = calc
        self.events = 0        # events read so far
        self.read_at = -math.inf
        self.version = 0       # bumped when new events arrive (caches key on it)
        self.store_version: Any = None  # the store's run version read up to (at least)
        self.views: Dict[str, Any] = {}  # name -> (key, value): see Api._cached


class RunCache:
    """Calculators of the runs being looked at, refreshed at most every
    ``min_interval`` seconds each, and the runs page's summaries.

    Args:
      store: an open store (read only: nothing here writes).
      max_runs: how many runs' calculators are kept in memory.
      min_interval: a run is read again at most this often (seconds), unless
        the store says it changed.
      names_max_age: the store's list of runs is read again at most this often.
      clock: the time source (tests inject one).
      summary_cache: the run-summary cache (default: the user's, as ``goodput
        runs --summary`` reads it; None: none).
    """

    def __init__(self, store: Any, *, max_runs: int = 16, min_interval: float = 0.5,
                 names_max_age: float = 1.0, clock: Callable[[], float] = time.time,
                 summary_cache: Any = "default"):
        self.store = store
        self.clock = clock
        self.max_runs = max(1, int(max_runs))
        self._min_interval = float(min_interval)
        self._names_max_age = float(names_max_age)
        self._entries: "collections.OrderedDict[str, _Entry]" = collections.OrderedDict()
        self.io = threading.RLock()  # one store reader at a time
        self._names: List[str] = []
        self._names_at = -math.inf
        self._versions: Dict[str, Any] = {}
        self._versions_at = -math.inf
        self._summaries = Summaries(store, summary_cache)

    def names(self, max_age: Optional[float] = None) -> List[str]:
        """The store's run names, oldest first (read at most every ``max_age`` s;
        default ``names_max_age``)."""
        max_age = self._names_max_age if max_age is None else max_age
        with self.io:
            if self.clock() - self._names_at >= max_age:
                self._names = list(self.store.runs())
                self._names_at = self.clock()
            return list(self._names)

    def store_versions(self) -> Dict[str, Any]:
        """Every run's version in the store (``{}``: it has none), read at most every
        ``names_max_age`` s: what the runs page's live stream watches. The runs list
        itself reads them anew at each request (:meth:`summaries`)."""
        with self.io:
            if self.clock() - self._versions_at >= self._names_max_age:
                self._versions = self._summaries.versions()
                self._versions_at = self.clock()
            return self._versions

    def exists(self, run: str) -> bool:
        """True when the store holds an event of ``run`` (one cheap read, never the
        whole list of runs: an address typed wrong must not cost a Cloud Logging scan)."""
        if run in self._entries or run in self._names:
            return True
        with self.io:
            return bool(self.store.read(run, limit=1)[0])

    def get(self, run: str, *, fresh: bool = True, store_version: Any = None) -> _Entry:
        """The run's entry, its calculator brought up to date (see ``min_interval``;
        at once when ``store_version`` is not the version it was last read at)."""
        with self.io:
            entry = self._entries.get(run)
            if entry is None:
                entry = _Entry(calculator.Calculator(run, self.store, clock=self.clock))
                self._keep(run, entry)
            else:
                self._entries.move_to_end(run)
            now = self.clock()
            moved = store_version is not None and store_version != entry.store_version
            if moved or (fresh and now - entry.read_at >= self._min_interval):
                n = entry.calc.refresh()
                entry.read_at = now
                if moved:  # read after the version was: it holds that version at least
                    entry.store_version = store_version
                if n or entry.version == 0:
                    entry.events += n
                    entry.version += 1
            return entry

    def _keep(self, run: str, entry: _Entry) -> None:
        self._entries[run] = entry
        while len(self._entries) > self.max_runs:
            self._entries.popitem(last=False)

    def cached_versions(self) -> Tuple[int, ...]:
        """The versions of the runs kept (read anew where due), for the live stream
        of the runs page: pages and running runs are kept, so their events show."""
        return tuple(self.get(run).version for run in list(self._entries))

    def poll(self, run: str) -> int:
        """Reads the run's new events now; returns the entry's version."""
        return self.get(run).version

    def summaries(self, now: float, deadline: float = math.inf
                  ) -> List[Tuple[str, Optional[RunSummary]]]:
        """``(run, summary)`` of every run, the newest run first; a run whose summary
        was not ready by ``deadline`` (``time.monotonic()``) comes with None.

        Ended and stopped runs the store reports unchanged come from the summary
        cache; a kept run is summarised from its calculator; any other is read
        once, and kept when it is running (its new events then reach the runs
        page live, read incrementally).
        """
        with self.io:
            versions = self._summaries.versions()
        names = list(versions) if versions else self.names()
        hits = self._summaries.cached(names, versions)
        out: List[Tuple[str, Optional[RunSummary]]] = []
        for name in reversed(names):  # the newest first: what users look at
            summary = hits.get(name)
            if summary is None and time.monotonic() <= deadline:
                summary = self._summary(name, now, versions.get(name))
            out.append((name, summary))
        self._summaries.save()
        return out

    def _summary(self, run: str, now: float, version: Any) -> RunSummary:
        """The run's summary from its calculator, kept or read here."""
        with self.io:
            if run in self._entries:
                entry = self.get(run, store_version=version)
            else:  # read once; kept below only if it runs (a big store's list
                # must not push out the runs whose pages are open)
                entry = _Entry(calculator.Calculator(run, self.store, clock=self.clock))
                entry.events, entry.read_at = entry.calc.refresh(), now
                entry.version, entry.store_version = 1, version
            key = (entry.version, math.floor(now))
            hit = entry.views.get("summary")
            if hit is not None and hit[0] == key:
                return hit[1]
            summary = self._summaries.compute(run, now, version, entry.calc, entry.events)
            entry.views["summary"] = (key, summary)
            if summary.state == "running" and run not in self._entries:
                self._keep(run, entry)
            return summary
