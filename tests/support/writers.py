"""Hand-built events of several writer processes of one run (semantics rule
13): ``Writer(index, host, pid)`` records events with writer metadata, in
seconds from 0, for tests that derive the job's figures by hand."""

from __future__ import annotations

import itertools
import os
from typing import Iterable, List, Optional

from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator

RUN = "w"


class Writer:
    """The events of one writer process (``host``, ``pid``) recording under
    ``index``; ``skew`` seconds added to every time it stamps (its clock)."""

    def __init__(self, index: int, host: str, pid: int = 1, skew: float = 0.0):
        self.index, self.host, self.pid, self.skew = index, host, pid, skew
        self.events: List[EventRecord] = []
        self._seq = itertools.count(1)

    def ev(self, kind: Kind, t: float, step: Optional[int] = None, extra=None,
           index: Optional[int] = None) -> "Writer":
        """Records ``kind`` at ``t`` (under ``index``, default the writer's)."""
        t = t + self.skew
        self.events.append(EventRecord(RUN, int(kind), t, step, extra,
                                       self.index if index is None else index, self.host,
                                       self.pid, "a", next(self._seq), t))
        return self

    def pair(self, start: Kind, end: Kind, a: float, b: float) -> "Writer":
        return self.ev(start, a).ev(end, b)

    def steps(self, first: int, times: Iterable[float], load: float = 0.0,
              load_at: float = 0.5, kinds=(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END)
              ) -> "Writer":
        """Step ``first + i`` started at ``times[i]``, each with a blocking
        load of ``load`` s ``load_at`` s in (none when 0)."""
        for i, t in enumerate(times):
            self.ev(Kind.STEP_START, t, first + i)
            if load:
                self.pair(*kinds, t + load_at, t + load_at + load)
        return self

    def disruption(self, t: float, cause: str = "sigterm") -> "Writer":
        return self.ev(Kind.DISRUPTION, t, extra={"disruption_cause": cause})

    def heartbeat(self, t: float, seconds: float = 1.0) -> "Writer":
        return self.ev(Kind.HEARTBEAT, t, extra={"heartbeat_seconds": seconds})


#: Where :func:`job` reads the events from: None, records given to the
#: calculator (the per-event pass); a directory, a SQLite store there read by
#: columns per writer (docs/large-runs.md, "Many hosts"). Set by the
#: ``read_path`` fixture (tests/core/conftest.py) for the tests run both ways.
STORE_DIR: Optional[str] = None


def job(*writers: Writer, heartbeats: bool = True) -> Calculator:
    """A calculator holding every writer's events (heartbeats left out when
    ``heartbeats`` is False: the same run with them turned off)."""
    return calculator_of(*([e for e in w.events if heartbeats or e.kind != int(Kind.HEARTBEAT)]
                           for w in writers))


def calculator_of(*batches: List[EventRecord]) -> Calculator:
    """A calculator of ``batches`` of events, given to it in order
    (:data:`STORE_DIR` None) or appended in order to a fresh SQLite store
    it reads (one batch per writer: as a recorder writes its events)."""
    if STORE_DIR is None:
        calc = Calculator(RUN)
        for batch in batches:
            calc.add(batch)
        return calc
    from goodput_core.stores.sqlite import SqliteStore

    store = SqliteStore(os.path.join(STORE_DIR, f"{next(_STORES)}.sqlite"))
    for batch in batches:
        store.append(batch)
    calc = Calculator(RUN, store)
    calc.refresh()
    return calc


_STORES = itertools.count()
