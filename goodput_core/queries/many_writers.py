"""The calculator's many-writers mode (semantics rule 13).

A run written by one process is read incrementally, straight into the
timeline. Once a second writer process shows up, the calculator keeps every
event of the run and rebuilds its timeline from the lead stream
(:func:`goodput_core.timeline.streams.lead_events`) whenever new events
arrive: which stream leads, the disruption it takes from another host and
the stragglers' stalls can all change with a late event, so the rebuild is
not incremental. It costs one pass over the run's events per read with new
events, only for runs recorded by several processes.
"""

from __future__ import annotations

from operator import countOf, itemgetter
from typing import Any, List, Optional, Sequence

from goodput_core.events import EventRecord
from goodput_core.stores.gc_pause import gc_paused

from goodput_core.timeline.spans import Timeline
from goodput_core.timeline.streams import lead_events, writer_key

_META = itemgetter(0, 6, 7, 5)  # run, host, pid, process index
_RUN, _HOST = itemgetter(0), itemgetter(6)

__all__ = ["ManyWriters"]


def _has_writer(e: Any) -> bool:
    """Writer metadata or a process index: events that can tell two writers apart."""
    return bool(e[6]) or e[7] != 0 or e[5] != 0


def _any_writer_field(records: Sequence[Any]) -> bool:
    """False when no record has a host, pid or process index (truthy), which
    is what :meth:`ManyWriters.note_records` looks for: three C-speed passes
    that build no tuple per record (True, to look closer, on odd records)."""
    try:
        return any(map(itemgetter(6), records)) or any(map(itemgetter(7), records)) or \
            any(map(itemgetter(5), records))
    except (TypeError, IndexError, KeyError):
        return True


class ManyWriters:
    """Detects a second writer; then holds the run's events and builds timelines.

    Attributes:
      active: True once the run has events of two writer processes.
      writers: the writer processes ``(host, pid)`` seen so far.
    """

    def __init__(self, run: Optional[str]):
        self.run = run
        self.active = False
        self.writers: set = set()
        self._records: List[Any] = []

    def note_writers(self, writers: Sequence[Any]) -> bool:
        """Notes writer keys (a store page's); True when this made the run
        multi-writer (the caller then re-reads the run from its start)."""
        if self.active or not writers:
            return False
        # ("", 0): events stored without writer metadata (an unknown writer)
        self.writers.update(w for w in writers if w is not None and w != ("", 0))
        if len(self.writers) > 1:
            self.active = True
            return True
        return False

    def note_records(self, records: Sequence[Any], keep: bool) -> bool:
        """As :meth:`note_writers` for EventRecords. ``keep``: hold on to the
        ones with writer metadata (events given to ``Calculator.add`` cannot
        be read again)."""
        if self.active:
            return False
        if not _any_writer_field(records):
            return False
        # one C-speed pass: the distinct (run, host, pid, index) of the batch
        try:
            meta = set(map(_META, records))
        except (TypeError, IndexError, KeyError):  # junk among the events: counted by the engine
            meta = {_META(e) for e in records if isinstance(e, tuple) and len(e) > 7}
        meta = {m for m in meta if m[1] or m[2] or m[3]}
        if self.run is not None:
            meta = {m for m in meta if m[0] == self.run}
        if not meta:
            return False
        if keep:
            self._records.extend(self._with_writer(records))
        return self.note_writers([writer_key(EventRecord("", 0, 0.0, None, None, i, h, p))
                                  for _, h, p, i in meta])

    def _with_writer(self, records: Sequence[Any]) -> Sequence[Any]:
        """The records of this run with writer metadata: all of them, found
        in three C-level passes, when each is an ``EventRecord`` of the run
        with a host (a recorder's records); else picked one by one."""
        try:
            n = len(records)
            if countOf(map(type, records), EventRecord) == n and all(map(_HOST, records)) and (
                    self.run is None or countOf(map(_RUN, records), self.run) == n):
                return records
        except TypeError:  # a sequence without len() or iteration: picked one by one
            pass
        return [e for e in records if isinstance(e, tuple) and len(e) > 7 and _has_writer(e)
                and (self.run is None or e[0] == self.run)]

    def reset(self) -> None:
        """Forgets the held events (the caller re-reads the run from its start)."""
        self._records = []

    def extend(self, records: Sequence[Any]) -> None:
        """Adds events of the run (in multi-writer mode)."""
        self._records.extend(e for e in records if isinstance(e, tuple) and len(e) > 7
                             and (self.run is None or e[0] == self.run))

    def timeline(self) -> Timeline:
        """A new timeline of the lead stream of every event held."""
        tl = Timeline()
        # the pass builds lists, columns and stall records of every event but
        # no cycle: repeated collections over the held events would cost a
        # third of it (1 M events, 2 writers: ~1.5 s -> ~1.1 s)
        with gc_paused():
            tl.add(lead_events(self._records), self.run)
        return tl
