"""The PostgreSQL store's reader: events, numpy columns, run names.

A :class:`~goodput_core.stores.postgres.store.PostgresStore` *has* one
:class:`PostgresReader`, which shares with the store's writes only what they
both know of the tables (:class:`Chunking`). Each reading thread has a
connection of its own, kept between reads (the monitor reads every
interval) and reopened once when a server restart broke it; the writers'
connection is the process's shared slot instead
(:mod:`goodput_core.stores.postgres.connect`). Pages are by event id;
:meth:`PostgresReader.read_columns` takes a run's packed chunks first
(:mod:`goodput_core.stores.postgres.chunks`), then its rows.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import psycopg

from goodput_core.events import EventRecord
from goodput_core.stores.base import Cursor, StoreError
from goodput_core.stores.columns import EventPage
from goodput_core.stores.gc_pause import gc_paused
from goodput_core.stores.postgres.chunks import (
    CHUNK_EVENTS, MORE_CHUNKS, NOTHING_AFTER, read_chunk_records, read_chunks)
from goodput_core.stores.postgres.columns import INDEX_WALK, read_page
from goodput_core.stores.postgres.connect import describe

__all__ = ["Chunking", "PostgresReader"]

_PAGE = 10_000
_COLUMN_PAGE = 262_144
_NAN = math.nan
#: Failures of the connection itself: the read is tried once more on a new one.
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError, OSError)


@contextlib.contextmanager
def _in_id_order(conn):
    """A transaction in which the planner walks the ``(run_id, id)`` index.

    A page is "the next N events of the run after id X, by id". Without
    statistics (a table never analyzed: autovacuum analyzes a growing table
    late, and readers may not own it) PostgreSQL guesses a few thousand rows
    and plans a bitmap scan of *every* remaining event of the run followed
    by a sort, once per page: a read of a 10 M-event run sorted 38 times
    what was left of it (on disk: the sort outgrows ``work_mem``). With
    sorts priced out, the index scan, which returns the rows already in id
    order and stops after N, is the only plan left. ``SET LOCAL`` ends with
    the transaction: no session state, fit for a transaction-pooling
    pgbouncer.
    """
    with conn.transaction():
        conn.execute(INDEX_WALK)
        yield


class Chunking:
    """What a store knows of its packed chunks, shared by its reads and writes.

    Args:
      chunk_events: events per packed chunk this writer makes (0: none).
    """

    def __init__(self, chunk_events: int):
        self.chunk_events = chunk_events
        self.has_table = False  # the chunks table is known to exist

    def read_size(self) -> int:
        """The chunk size reads assume (this writer's, else the default)."""
        return self.chunk_events or CHUNK_EVENTS


class PostgresReader:
    """Reads of one PostgreSQL store (see the module docstring).

    Args:
      url: the store's URL, redacted (messages).
      secrets: what messages must not show.
      sql: the store's statements.
      connect: opens a new connection (a :class:`StoreError` when it cannot).
      chunking: what the store knows of its chunks.
    """

    def __init__(self, url: str, secrets: Any, sql: Dict[str, str],
                 connect: Callable[[], "psycopg.Connection"], chunking: Chunking):
        self._url, self._secrets, self._sql, self._connect = url, secrets, sql, connect
        self._chunking = chunking
        self._local = threading.local()
        self._writers: Dict[int, Tuple[int, str, int, str]] = {}
        self._lock = threading.Lock()
        #: Rows skipped by reads, per reason.
        self.skipped: Dict[str, int] = collections.Counter()

    def forget_connections(self) -> None:
        """In a forked child: the parent's reading connections are left alone
        (closing one would end the parent's session)."""
        self._local = threading.local()

    def forget_writers(self) -> None:
        """The tables went away: the writers' metadata is read again."""
        with self._lock:
            self._writers.clear()

    def connection(self) -> "psycopg.Connection":
        """This thread's reading connection (opened on first use in each thread and
        process; writes go through the process's shared slot instead)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid() \
                and not conn.closed:
            return conn
        conn = self._connect()
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            try:
                conn.close()
            except Exception:
                pass

    def query(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``fn(conn)``; a connection broken by a server restart is reopened once."""
        for attempt in (0, 1):
            conn = self.connection()
            try:
                return fn(conn)
            except _TRANSIENT as exc:
                self.drop_connection()
                if attempt:
                    raise StoreError(f"reading {self._url} failed: "
                                     f"{describe(exc, self._secrets)}") from None
            except psycopg.Error as exc:
                raise StoreError(f"reading {self._url} failed: "
                                 f"{describe(exc, self._secrets)}") from None

    def _writer(self, conn, writer_id: int) -> Tuple[int, str, int, str]:
        found = self._writers.get(writer_id)
        if found is None:
            with self._lock:
                for wid, *meta in conn.execute(self._sql["all_writers"]).fetchall():
                    self._writers[wid] = tuple(meta)
            found = self._writers.setdefault(writer_id, (0, "", 0, ""))
        return found

    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        """Events of ``run`` with an id greater than ``since``, in commit order.

        Args:
          run: the run name.
          since: a cursor from an earlier read (the last id read), or None.
          limit: at most this many events (None: all).

        Returns:
          (events, cursor): the id of the last event returned, or ``since``.

        Raises:
          StoreError: the server cannot be reached or refused the query.
        """
        if limit is not None and limit <= 0:
            return [], since
        with gc_paused():  # a million records: repeated collections otherwise
            return self.query(lambda conn: self._select(conn, run, since, limit))

    def read_columns(self, run: str, since: Cursor = None, limit: Optional[int] = None,
                     writers: bool = False) -> Tuple[EventPage, Cursor]:
        """See :meth:`PostgresStore.read_columns
        <goodput_core.stores.postgres.store.PostgresStore.read_columns>`."""
        if limit is not None and limit <= 0:
            return EventPage.empty(run), since
        return self.query(lambda conn: self._select_columns(conn, run, since, limit, writers))

    def _select_columns(self, conn, run: str, since: Cursor, limit: Optional[int],
                        writers: bool = False):
        row = conn.execute(self._sql["run_id"], (run,)).fetchone()
        if row is None:
            return EventPage.empty(run), since
        last = 0 if since is None else int(since)
        pages: List[EventPage] = []
        left = limit
        packed = self.chunks_readable(conn)

        def writer_of(wid: int) -> Tuple[int, str, int, str]:
            return self._writer(conn, wid)

        while True:  # pages of _COLUMN_PAGE, so that the buffers stay bounded
            n = _COLUMN_PAGE if left is None else min(_COLUMN_PAGE, left)
            if packed:  # the packed prefix of the run first, then its rows
                page, last, after = read_chunks(conn, self._sql, run, row[0], last, n,
                                                self._chunking.read_size(),
                                                writer_of, self.skipped, writers)
                packed, done = after == MORE_CHUNKS, after == NOTHING_AFTER
            else:
                with _in_id_order(conn):
                    page, last = read_page(conn, self._sql, run, row[0], last, n,
                                           writer_of, self.skipped, writers)
                done = len(page) < n
            if len(page) or not pages:
                pages.append(page)
            left = None if left is None else left - len(page)
            if done or left == 0:
                break
        page = pages[0] if len(pages) == 1 else EventPage.concat(run, pages)
        return page, (last if len(page) else since)

    def chunks_readable(self, conn) -> bool:
        """Whether the database has the packed chunks' table (asked until it has:
        a database made by an older version gets it from its next writer)."""
        chunking = self._chunking
        if not chunking.has_table:
            chunking.has_table = conn.execute(self._sql["has_meta"],
                                              (self._sql["chunks_table"],)).fetchone()[0]
        return chunking.has_table

    def _select(self, conn, run: str, since: Cursor, limit: Optional[int]):
        row = conn.execute(self._sql["run_id"], (run,)).fetchone()
        if row is None:
            return [], since
        run_id, last = row[0], (0 if since is None else int(since))
        out: List[EventRecord] = []
        loads = json.loads
        writers: Dict[int, Tuple[int, str, int, str]] = {}
        packed = self.chunks_readable(conn)
        while limit is None or len(out) < limit:
            if packed:  # the packed prefix of the run first, then its rows
                n = _COLUMN_PAGE if limit is None else min(_COLUMN_PAGE, limit - len(out))
                records, last, after = read_chunk_records(
                    conn, self._sql, run, run_id, last, n, self._chunking.read_size(),
                    lambda wid: self._writer(conn, wid), self.skipped)
                out.extend(records)
                if after == NOTHING_AFTER:
                    break
                packed = after == MORE_CHUNKS
                continue
            page = _PAGE if limit is None else min(_PAGE, limit - len(out))
            with _in_id_order(conn):
                rows = conn.execute(self._sql["select"], (run_id, last, page),
                                    binary=True).fetchall()
            for kind, t, step, extra, wid, seq, wt, eid in rows:
                try:
                    payload = None if extra is None else loads(extra)
                except ValueError:
                    self.skipped["bad_extra"] += 1
                    payload = None
                meta = writers.get(wid)
                if meta is None:
                    meta = writers[wid] = self._writer(conn, wid)
                out.append(EventRecord(run, kind, _NAN if t is None else t, step, payload,
                                       *meta, seq, _NAN if wt is None else wt))
            if rows:
                last = rows[-1][7]
            if len(rows) < page:
                break
        return out, (last if out else since)

    def runs(self) -> List[str]:
        """Names of the runs in this store, oldest first."""
        return self.query(lambda conn: [r[0] for r in conn.execute(self._sql["runs"])])

    def run_versions(self) -> Dict[str, int]:
        """Each run's version, oldest run first: its largest event id (one index
        look-up per run; run summaries use it to tell a changed run)."""
        return self.query(lambda conn: {name: int(v) for name, v in
                                         conn.execute(self._sql["run_versions"])})
