"""Hand-built events of several writer processes of one run (semantics rule
13): ``Writer(index, host, pid)`` records events with writer metadata, in
seconds from 0, for tests that derive the job's figures by hand."""

from __future__ import annotations

import itertools
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


def job(*writers: Writer, heartbeats: bool = True) -> Calculator:
    """A calculator holding every writer's events (heartbeats left out when
    ``heartbeats`` is False: the same run with them turned off)."""
    calc = Calculator(RUN)
    for w in writers:
        calc.add([e for e in w.events if heartbeats or e.kind != int(Kind.HEARTBEAT)])
    return calc
