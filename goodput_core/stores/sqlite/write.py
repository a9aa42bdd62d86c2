"""The embedded store's writer: appending a batch in one transaction,
registering new runs and writers, and packing full chunks after a write.

A :class:`~goodput_core.stores.sqlite.store.SqliteStore` *has* one
:class:`Writer`, on the store's :class:`~goodput_core.stores.sqlite.connections.Connections`.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from operator import itemgetter
from typing import Any, Callable, Iterable, List, Optional, Sequence

from goodput_core.events import EventRecord
from goodput_core.stores.sqlite import chunks, ids, packed
from goodput_core.stores.base import StoreError
from goodput_core.stores.event_batch import EventBatch
from goodput_core.stores.sqlite.fork import Reopen
from goodput_core.stores.strict_json import dumps as _dumps

__all__ = ["Writer", "write_transaction"]

_INSERT = ("INSERT INTO events (run_id, writer_id, seq, kind, time, step, extra, write_time)"
           " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
_COMPACT_PER_APPEND = 16  # chunks one append may compact (bounds its extra time)
_writer_key = itemgetter(5, 6, 7, 8)  # (process_index, host, pid, attempt)
logger = logging.getLogger("goodput")


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection):
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error.

    IMMEDIATE takes the write lock up front: a deferred transaction that later
    upgrades to a write can fail with "busy" without SQLite's busy handler ever
    waiting, which is the classic source of "database is locked" under WAL.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise


class Writer:
    """Appending events: one transaction per batch, then packing full chunks.

    Args:
      conns: the store's :class:`~goodput_core.stores.sqlite.connections.Connections`.
      chunk_events: events per packed chunk (None: never pack).
    """

    def __init__(self, conns: Any, chunk_events: Optional[int]):
        self._conns = conns
        self.chunk_events = chunk_events

    def append(self, batch: Sequence[EventRecord]) -> None:
        """See :meth:`SqliteStore.append <goodput_core.stores.sqlite.store.SqliteStore.append>`."""
        conns = self._conns
        if conns.readonly:
            raise StoreError(f"{conns.path!r} was opened read-only: cannot append")
        if isinstance(batch, EventBatch):  # one writer's events as columns
            if len(batch):
                self._write(batch, self._columns, lambda b: ([b.run], b.writer_keys()))
            return
        if not isinstance(batch, (list, tuple)):
            batch = list(batch)  # iterated twice when a run or writer is new
        if batch:
            self._write(batch, self._rows, lambda b: (dict.fromkeys(e[0] for e in b),
                                                      dict.fromkeys(map(_writer_key, b))))

    def _write(self, batch: Any, build: Callable[[Any, Any], Any],
               keys: Callable[[Any], tuple]) -> None:
        """One batch in one transaction: ``build(handle, batch)`` gives its rows
        (or an EventBatch's :class:`~goodput_core.stores.sqlite.packed.BatchColumns`;
        a KeyError: its runs and writers, ``keys(batch)``, are registered first);
        packed as a chunk when large and of one run, else inserted as rows (the
        same rows either way), then full chunks compacted."""
        conns = self._conns
        h = conns.handle()
        retry = conns.retry
        try:
            try:
                built = build(h, batch)
            except KeyError:  # a run or writer this connection has not seen yet
                retry(self._register, h, *keys(batch))
                built = build(h, batch)
            if isinstance(built, packed.BatchColumns):
                if self._packs(len(built)) and retry(packed.insert_columns, h.conn, built):
                    return
                rows = built.rows()
            else:
                rows = built
                if self._packable(rows) and retry(packed.insert_packed, h.conn, rows):
                    return
            retry(self._insert, h.conn, rows)
        except sqlite3.Error as exc:
            raise conns.error(exc) from exc
        self._maybe_compact(h, rows)

    def _packs(self, n: int) -> bool:
        """A batch of one run this large is written as a chunk straight away."""
        return self.chunk_events is not None and n >= max(min(self.chunk_events,
                                                              chunks.PACK_AT_ONCE), 2)

    def _packable(self, rows: List[tuple]) -> bool:
        """A batch written as a chunk straight away: large, and of one run."""
        return (self._packs(len(rows))
                and rows[0][0] == rows[-1][0]
                and len(set(map(itemgetter(0), rows))) == 1)

    def _maybe_compact(self, h: Any, rows: List[tuple]) -> None:
        """Packs full chunks of the runs this batch wrote to (sqlite/chunks.py).

        Counted per connection: once a run got another chunk's worth of rows
        here, look. The batch is committed already: a failure here (another
        process holds the lock too long) is logged, never raised, and the
        rows stay readable as they are."""
        if self.chunk_events is None:
            return
        appended = h.appended
        appended.update(map(itemgetter(0), rows))
        for run_id in [r for r, n in appended.items() if n >= self.chunk_events]:
            appended[run_id] = 0
            try:
                self._conns.retry(chunks.compact, h.conn, run_id, _COMPACT_PER_APPEND,
                                  self.chunk_events)
            except (sqlite3.Error, StoreError, Reopen) as exc:
                # Reopen too: a fork closed the connection while this waited; the
                # batch must not be appended again, packing waits for the next one
                logger.debug("goodput: compacting %s deferred (%r)", self._conns.path, exc)

    @staticmethod
    def _rows(h: Any, batch: Sequence[EventRecord]) -> List[tuple]:
        # Built outside the write lock; plain tuples keep executemany on its fast path.
        run_ids, writer_ids, dumps, wkey = h.run_ids, h.writer_ids, _dumps, _writer_key
        return [(run_ids[e[0]], writer_ids[wkey(e)], e[9], e[1], e[2], e[3],
                 None if e[4] is None else dumps(e[4]), e[10]) for e in batch]

    @staticmethod
    def _columns(h: Any, batch: EventBatch) -> "packed.BatchColumns":
        """The batch in the store's terms (run id, writer ids, extra text), built
        outside the write lock."""
        writer_ids = h.writer_ids
        writers = {key[0]: writer_ids[key] for key in batch.writer_keys()}
        return packed.BatchColumns(h.run_ids[batch.run], batch, writers,
                                   {i: _dumps(x) for i, x in sorted(batch.extra.items())})

    @staticmethod
    def _register(h: Any, runs: Iterable[str], writers: Iterable[tuple]) -> None:
        """Creates the unknown ones of a batch's runs and writers (each once, in
        first-seen order: runs() lists runs as they came) and caches their ids."""
        runs = [r for r in runs if r not in h.run_ids]
        writers = [w for w in writers if w not in h.writer_ids]
        conn = h.conn
        with write_transaction(conn):
            conn.executemany("INSERT OR IGNORE INTO runs (name) VALUES (?)",
                             [(r,) for r in runs])
            conn.executemany("INSERT OR IGNORE INTO writers (process_index, host, pid, "
                             "attempt) VALUES (?, ?, ?, ?)", writers)
            new_runs = {r: conn.execute("SELECT run_id FROM runs WHERE name = ?",
                                        (r,)).fetchone()[0] for r in runs}
            new_writers = {w: conn.execute(
                "SELECT writer_id FROM writers WHERE process_index = ? AND host = ? "
                "AND pid = ? AND attempt = ?", w).fetchone()[0] for w in writers}
        # Cached only once committed: a rolled-back id could be reused by others.
        h.run_ids.update(new_runs)
        h.writer_ids.update(new_writers)

    @staticmethod
    def _insert(conn: sqlite3.Connection, rows: List[tuple]) -> None:
        with write_transaction(conn):
            conn.executemany(_INSERT, ids.keep_new(conn, rows))
