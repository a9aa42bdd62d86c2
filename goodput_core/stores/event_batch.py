"""A batch of one writer's events as columns: what the recorder's writer hands a store.

The recorder's writer thread reads its journal in bulk
(:mod:`goodput_core.record.slot_columns`) and hands the store an
:class:`EventBatch`: numpy columns (ticket, kind, time, step, write time,
process index) and the writer's identity once, instead of one
:class:`~goodput_core.events.EventRecord` per event. A store that declares
``appends_columns = True`` (the sqlite store) packs the columns straight into
its own; every other store is handed :meth:`EventBatch.records`, the same
events as EventRecords (built once, on demand), as before.

An EventBatch is also a read-only sequence of EventRecords (``len``, index,
iteration), so code that only iterates a batch (the spill file, a store's
``append``) takes either. This module imports no numpy: the columns come
made (``import goodput_core`` stays light).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord

__all__ = ["EventBatch"]

_new = tuple.__new__


class EventBatch(Sequence):
    """Events of one writer (run, host, pid, attempt), in order, as columns.

    Args:
      identity: (run, host, pid, attempt) of every event.
      seq: sequence numbers (int64; the journal's tickets).
      kind: kind codes (integers).
      time: event times (float64; NaN where none).
      step: steps (int64; 0 where ``has_step`` is False).
      has_step: whether each event has a step (bool).
      wt: write times (float64).
      pidx: process indices (int64).
      extra: the ``extra`` dict of the events that have one, by row index.
    """

    __slots__ = ("identity", "seq", "kind", "time", "step", "has_step", "wt", "pidx",
                 "extra", "_records")

    def __init__(self, identity: Tuple[str, str, int, str], seq: Any, kind: Any, time: Any,
                 step: Any, has_step: Any, wt: Any, pidx: Any,
                 extra: Optional[Dict[int, dict]] = None):
        self.identity = identity
        self.seq, self.kind, self.time, self.step = seq, kind, time, step
        self.has_step, self.wt, self.pidx = has_step, wt, pidx
        self.extra: Dict[int, dict] = extra or {}
        self._records: Optional[List[EventRecord]] = None

    @property
    def run(self) -> str:
        return self.identity[0]

    def __len__(self) -> int:
        return len(self.seq)

    def __iter__(self) -> Iterator[EventRecord]:
        return iter(self.records())

    def __getitem__(self, index: Any) -> Any:
        """An EventRecord for an int; an EventBatch (views of the columns) for a slice."""
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return self.records()[index]
            extra = {i - start: x for i, x in self.extra.items() if start <= i < stop}
            return EventBatch(self.identity, *(c[start:stop] for c in self.columns()), extra)
        return self.records()[index]

    def columns(self) -> Tuple[Any, ...]:
        """(seq, kind, time, step, has_step, wt, pidx), in the constructor's order."""
        return self.seq, self.kind, self.time, self.step, self.has_step, self.wt, self.pidx

    def writer_keys(self) -> List[Tuple[int, str, int, str]]:
        """The distinct (process_index, host, pid, attempt) of the batch, first seen first."""
        _, host, pid, attempt = self.identity
        pidx = self.pidx
        if not len(pidx):
            return []
        first = int(pidx[0])
        found = [first] if (pidx == first).all() else dict.fromkeys(pidx.tolist())
        return [(p, host, pid, attempt) for p in found]

    def records(self) -> List[EventRecord]:
        """The events as EventRecords (built once, then kept)."""
        if self._records is None:
            run, host, pid, attempt = self.identity
            get = self.extra.get
            steps = [s if h else None
                     for s, h in zip(self.step.tolist(), self.has_step.tolist())]
            self._records = [
                _new(EventRecord, (run, k, t, s, get(i), p, host, pid, attempt, n, w))
                for i, (n, k, t, s, w, p) in enumerate(zip(
                    self.seq.tolist(), self.kind.tolist(), self.time.tolist(), steps,
                    self.wt.tolist(), self.pidx.tolist()))]
        return self._records

    def __repr__(self) -> str:
        return f"EventBatch({self.run!r}, {len(self)} events)"
