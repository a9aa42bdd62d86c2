"""A page of one run's events as numpy columns: what the engine reads.

:meth:`Store.read_columns` returns an :class:`EventPage` instead of one
:class:`~goodput_core.events.EventRecord` per event, so that reading a large
run builds no Python object per event: the sqlite store fills the columns
straight from its packed chunks, and the engine
(:meth:`goodput_core.timeline.ingest.EventTables.add_page`) routes them to its tables
with array operations. Only the few events with an ``extra`` payload (custom
badput types, disruptions, Orbax entries, metadata, metrics, slice counts)
keep their parsed ``extra`` dicts, by row index.
"""

from __future__ import annotations

import collections
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from goodput_core.events import EventRecord

__all__ = ["EventPage", "joined_rows_of"]


def joined_rows_of(parts: Sequence[Any]) -> Tuple[Dict[int, Any], collections.Counter]:
    """``(extra, corrupt)`` of pages (anything with ``extra``, ``corrupt`` and a
    length) put one after the other: extra keys shifted by the rows before."""
    extra: Dict[int, Any] = {}
    corrupt: collections.Counter = collections.Counter()
    offset = 0
    for p in parts:
        extra.update({offset + i: x for i, x in p.extra.items()})
        corrupt.update(p.corrupt)
        offset += len(p)
    return extra, corrupt


class EventPage:
    """Events of one run as columns, in append order.

    Attributes:
      run: the run name.
      kind: int64 kind codes.
      time: float64 primary times (NaN where none was stored).
      step: int64 step numbers (meaningful where ``has_step``).
      has_step: bool, False where the event has no step.
      write_time: float64 write times (NaN where unknown).
      extra: ``{row index: extra dict}`` for the rows that have one.
      corrupt: ``{reason: count}`` of stored rows the read skipped as corrupt.
      process_indices: the distinct process indices of the writers of these
        events (what tells a multi-host run), where the store knows them.
      writer, seq: per row, the writer's code in ``writer_keys`` (int32) and
        the event's sequence number (int64): only in pages read with
        ``writers=True`` (None otherwise); what a run written by many hosts
        is read with (:mod:`goodput_core.timeline.host_columns`).
      writer_keys: ``{code: (process_index, host, pid, attempt)}`` of the
        codes in ``writer``.
    """

    __slots__ = ("run", "kind", "time", "step", "has_step", "write_time", "extra", "corrupt",
                 "process_indices", "writers", "writer", "seq", "writer_keys")

    def __init__(self, run: str, kind: np.ndarray, time: np.ndarray, step: np.ndarray,
                 has_step: np.ndarray, write_time: np.ndarray,
                 extra: Optional[Dict[int, Dict[str, Any]]] = None,
                 corrupt: Optional[Dict[str, int]] = None):
        self.run = run
        self.kind, self.time, self.step = kind, time, step
        self.has_step, self.write_time = has_step, write_time
        self.extra = extra or {}
        self.corrupt = corrupt or {}
        self.process_indices: tuple = ()
        self.writers: tuple = ()  # distinct (host, pid) of the writers, where known
        self.writer: Optional[np.ndarray] = None
        self.seq: Optional[np.ndarray] = None
        self.writer_keys: Dict[int, Tuple[int, str, int, str]] = {}

    def __len__(self) -> int:
        return len(self.kind)

    def record(self, i: int) -> EventRecord:
        """Row ``i`` as an EventRecord (writer metadata left at defaults unless
        the page carries writers)."""
        step = int(self.step[i]) if self.has_step[i] else None
        if self.writer is None:
            return EventRecord(self.run, int(self.kind[i]), float(self.time[i]), step,
                               self.extra.get(i), write_time=float(self.write_time[i]))
        index, host, pid, attempt = self.writer_keys[int(self.writer[i])]
        return EventRecord(self.run, int(self.kind[i]), float(self.time[i]), step,
                           self.extra.get(i), index, host, pid, attempt, int(self.seq[i]),
                           float(self.write_time[i]))

    @classmethod
    def empty(cls, run: str) -> "EventPage":
        return cls(run, np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64),
                   np.empty(0, bool), np.empty(0))

    @classmethod
    def concat(cls, run: str, pages: Sequence["EventPage"]) -> "EventPage":
        """The pages one after the other, as one page."""
        extra, corrupt = joined_rows_of(pages)

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in pages])

        page = cls(run, cat("kind"), cat("time"), cat("step"), cat("has_step"),
                   cat("write_time"), extra, dict(corrupt))
        page.process_indices = tuple({i for p in pages for i in p.process_indices})
        page.writers = tuple({w for p in pages for w in p.writers})
        rows = [p for p in pages if len(p)]  # (an empty page read with writers may have none)
        if rows and all(p.writer is not None for p in rows):
            # each page's writer codes are its own: coded again over the pages
            codes: dict = {}
            parts = []
            for p in rows:
                top = max(p.writer_keys, default=0)
                lut = np.zeros(top + 1, np.int64)
                for c, key in p.writer_keys.items():
                    lut[c] = codes.setdefault(key, len(codes))
                parts.append(lut[p.writer])
            page.writer = np.concatenate(parts)
            page.seq = np.concatenate([p.seq for p in rows])
            page.writer_keys = {c: key for key, c in codes.items()}
        return page
