"""A large batch of one run written as a packed chunk straight away.

A batch of at least :data:`~goodput_core.stores.sqlite.chunks.PACK_AT_ONCE`
events of one run goes into ``chunks`` in its append's transaction instead of
one row per event (:mod:`goodput_core.stores.sqlite.chunks` has the format):
the run's rows still in ``events`` go into the same chunk, first (a chunk
holds a prefix of its run); the batch takes the next ids, and its last event
stays a row: the table's newest, so SQLite keeps handing out larger ids.

Two entries, one result: :func:`insert_packed` takes the store's insert
tuples (a batch of EventRecords), :func:`insert_columns` an
:class:`~goodput_core.stores.event_batch.EventBatch`'s columns
(:class:`BatchColumns`, no Python object per event). Both store the same
chunk and rows for the same events.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Dict, List, Optional

import numpy as np

from goodput_core.stores.event_batch import EventBatch
from goodput_core.stores.sqlite import ids
from goodput_core.stores.sqlite.chunks import I32, KNOWN_LUT, Raw, from_rows, insert_chunk, \
    run_rows

__all__ = ["BatchColumns", "insert_packed", "insert_columns"]


class BatchColumns:
    """An EventBatch in the store's terms: its run id, each event's writer id,
    and the ``extra`` payloads as the text stored (by row index).

    Args:
      run_id: the batch's run.
      batch: the events.
      writer_ids: process index -> writer id, for every process index in the batch.
      extra: row index -> the stored text of its ``extra`` (ascending indices).
    """

    __slots__ = ("run_id", "writer", "seq", "kind", "time", "step", "has_step", "wt", "extra")

    def __init__(self, run_id: int, batch: Optional[EventBatch], writer_ids: Dict[int, int],
                 extra: Dict[int, str]):
        self.run_id = run_id
        self.extra = extra
        if batch is None:  # filled by kept()
            return
        n = len(batch)
        if len(writer_ids) == 1:
            self.writer = np.full(n, next(iter(writer_ids.values())), np.int64)
        else:
            self.writer = np.empty(n, np.int64)
            for p, w in writer_ids.items():
                self.writer[batch.pidx == p] = w
        self.seq, self.kind, self.time = batch.seq, batch.kind, batch.time
        self.step, self.has_step, self.wt = batch.step, batch.has_step, batch.wt

    def __len__(self) -> int:
        return len(self.seq)

    def kept(self, keep: np.ndarray) -> "BatchColumns":
        """The events where ``keep`` is True."""
        where = np.cumsum(keep) - 1
        out = BatchColumns(self.run_id, None, {}, {int(where[i]): x
                                                   for i, x in self.extra.items() if keep[i]})
        for name in ("writer", "seq", "kind", "time", "step", "has_step", "wt"):
            setattr(out, name, getattr(self, name)[keep])
        return out

    def rows(self) -> List[tuple]:
        """The store's insert tuples (run_id, writer_id, seq, kind, time, step,
        extra, write_time): what the rows of the same EventRecords would be."""
        run_id, get = self.run_id, self.extra.get
        steps = [s if h else None for s, h in zip(self.step.tolist(), self.has_step.tolist())]
        return [(run_id, w, n, k, t, s, get(i), wt) for i, (w, n, k, t, s, wt) in enumerate(zip(
            self.writer.tolist(), self.seq.tolist(), self.kind.tolist(), self.time.tolist(),
            steps, self.wt.tolist()))]

    def head(self, first_id: int) -> Raw:
        """Every event but the last as chunk columns, ids from ``first_id``."""
        m = len(self) - 1
        return Raw({"id": np.arange(first_id, first_id + m, dtype=np.int64),
                    "kind": self.kind[:m].astype(np.uint8), "time": self.time[:m],
                    "step": self.step[:m], "has_step": self.has_step[:m].astype(np.uint8),
                    "writer": self.writer[:m], "seq": self.seq[:m], "wt": self.wt[:m]},
                   {i: x for i, x in self.extra.items() if i < m})

    def fits(self) -> bool:
        """Whether every value fits a chunk (known kind codes, 32-bit writer ids)."""
        kind = self.kind
        return bool(0 <= kind.min() and kind.max() < 256 and KNOWN_LUT[kind.astype(np.intp)].all()
                    and -I32 <= self.writer.min() and self.writer.max() < I32)

    def last_row(self) -> tuple:
        """The last event as the store's insert tuple."""
        i = len(self) - 1
        return (self.run_id, int(self.writer[i]), int(self.seq[i]), int(self.kind[i]),
                float(self.time[i]), int(self.step[i]) if self.has_step[i] else None,
                self.extra.get(i), float(self.wt[i]))


def insert_packed(conn: sqlite3.Connection, rows: List[tuple]) -> bool:
    """Appends a large batch of one run as a chunk, in one transaction.

    ``rows`` are the store's insert tuples (run_id, writer_id, seq, kind, time,
    step, extra, write_time). Returns False, having written nothing, when a
    value does not fit a chunk (the caller inserts rows as usual).
    """
    run_id = rows[0][0]
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = ids.keep_new(conn, rows)  # each (writer, seq) once
        if len(rows) < 2:
            conn.rollback()
            return False  # (almost) all stored before: the few left go in as rows
        top = _top(conn)
        new, odd = from_rows([(top + 1 + i, r[3], r[4], r[5], r[6], r[1], r[2], r[7])
                              for i, r in enumerate(rows[:-1])])
        if odd:  # odd values: not for a chunk
            conn.rollback()
            return False
        _write(conn, run_id, top, new, rows[-1])
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    return True


def insert_columns(conn: sqlite3.Connection, columns: BatchColumns) -> bool:
    """As :func:`insert_packed`, for an EventBatch's columns."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        keep = ids.keep_new_columns(conn, columns.writer, columns.seq)  # each (writer, seq) once
        if keep is not None:
            columns = columns.kept(keep)
        if len(columns) < 2 or not columns.fits():
            conn.rollback()
            return False  # the few left, or odd values: the caller inserts rows
        top = _top(conn)
        _write(conn, columns.run_id, top, columns.head(top + 1), columns.last_row())
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    return True


def _top(conn: sqlite3.Connection) -> int:
    """The largest event id in use (rows and chunks)."""
    top = conn.execute("SELECT max(id) FROM events").fetchone()[0] or 0
    return max(top, conn.execute("SELECT max(last_id) FROM chunks").fetchone()[0] or 0)


def _write(conn: sqlite3.Connection, run_id: int, top: int, new: Raw, last: Any) -> None:
    """The batch's events but its last (``new``, ids from ``top + 1``) as one
    chunk after the run's rows still in ``events``, and its ``last`` event as
    the newest row (inside the caller's transaction)."""
    last_id = top + len(new)
    old = run_rows(conn, run_id, False)  # e.g. the last batch's last event
    odd: list = []
    first_id = top + 1
    if old:
        packed, odd = from_rows(old)
        new = Raw.join([packed, new])
        conn.execute("DELETE FROM events WHERE run_id = ? AND id <= ?", (run_id, old[-1][0]))
        first_id = old[0][0]
    insert_chunk(conn, run_id, first_id, last_id, new, odd)
    conn.execute("INSERT INTO events (id, run_id, writer_id, seq, kind, time, step, extra,"
                 " write_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (last_id + 1,) + tuple(last))
