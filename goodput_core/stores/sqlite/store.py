"""The embedded SQLite store: the default, offline, multi-process event store.

Opened by ``sqlite:///abs/path.sqlite`` or a bare path (see
:mod:`goodput_core.stores`); the default location is ``$GOODPUT_STORE`` or
``$XDG_DATA_HOME/goodput/goodput.sqlite`` (``~/.local/share/goodput/...``).

Schema (version :data:`SCHEMA_VERSION`, kept in ``meta``; a file written by a
newer version, or one that is not a goodput store, is refused with
:class:`StoreError` (:mod:`goodput_core.stores.sqlite.ownership`: the marker
in SQLite's ``application_id``); a version-1 file is upgraded by the first
writer that opens it, and read as it is by readers)::

    meta    (key TEXT PRIMARY KEY, value TEXT)          -- 'schema_version'
    runs    (run_id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE)
    writers (writer_id INTEGER PRIMARY KEY, process_index, host, pid, attempt,
             UNIQUE (process_index, host, pid, attempt))
    events  (id INTEGER PRIMARY KEY,        -- the read cursor
             run_id, writer_id, seq, kind INTEGER, time REAL, step INTEGER,
             extra TEXT,                    -- JSON of EventRecord.extra, or NULL
             write_time REAL)
    INDEX events_run ON events (run_id, id)
    chunks  -- (version 2) older events of a run packed as columns, see
            -- goodput_core.stores.sqlite.chunks: writers move every full
            -- chunk of rows there, readers read both in one snapshot
    delivered (writer_id, lo, hi)  -- the sequence numbers each writer has
            -- stored: a batch delivered again is stored once (sqlite/ids.py)

Opened with ``readonly=True`` (what the read-only commands do) the file is
opened with SQLite's ``mode=ro``: a store the user may read but not write
(owned by someone else, a read-only mount) can be read. Rows that are
corrupt (a hand-edited or damaged file) are skipped, counted in
:attr:`SqliteStore.corrupt` and reported once per reason as a warning that
names the file.

The store *has* its parts: its connections
(:mod:`goodput_core.stores.sqlite.connections`: one per thread and process,
the retries, the fork gate), a reader (:mod:`goodput_core.stores.sqlite.read`)
and a writer (:mod:`goodput_core.stores.sqlite.write`) on them, and the schema
it creates or checks when it opens a file (:mod:`goodput_core.stores.sqlite.schema`).

A NaN ``time`` or ``write_time`` is stored as NULL (SQLite has no NaN) and read
back as ``float('nan')``. ``extra`` is strict JSON: non-finite floats in it are
stored as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (the proto3
JSON spelling Cloud Logging uses), so readers see a string where a number was
expected and skip it; numpy scalars are stored via ``.item()``, other objects
via ``str()``. Nothing is unpickled or evaluated when reading.

Concurrency guarantees:

* Any number of processes, each with any number of threads, may append and
  read at once. WAL mode (readers never block the writer), ``synchronous=NORMAL``
  (a committed batch survives a killed process; a power loss may drop the last).
* Every append is one ``BEGIN IMMEDIATE`` transaction: all or nothing, never
  interleaved with another writer's batch. Ids grow in commit order, so a
  reader's cursor (the last id it saw) never skips a later commit.
* "database is locked/busy" never reaches the caller: a retry loop with
  jittered backoff waits for other writers. SQLite's own busy handler is off
  (connections have no busy timeout) so that the waiting happens in Python,
  outside the fork gate: ``os.fork()`` never waits on another process's lock.
  After ``busy_timeout_s`` of failure an operation raises :class:`StoreError`.
* One connection per thread and per process, opened lazily. No connection
  crosses ``os.fork()``: a fork waits for the SQLite calls in flight (never
  for one waiting on another process's lock: those wait outside the gate,
  see :mod:`goodput_core.stores.sqlite.fork`), then all connections are
  closed and every thread of parent and child reopens its own on next use.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Dict, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord
from goodput_core.stores.base import Cursor, Store, StoreError
from goodput_core.stores.columns import EventPage
from goodput_core.stores.sqlite import chunks
from goodput_core.stores.sqlite.connections import Connections
from goodput_core.stores.sqlite.fork import gated as _gated
from goodput_core.stores.sqlite.read import Reader
from goodput_core.stores.sqlite.schema import SCHEMA_VERSION, ensure_schema, schema_version
from goodput_core.stores.sqlite.write import Writer

__all__ = ["SqliteStore", "SCHEMA_VERSION"]


class SqliteStore(Store):
    """Events in one SQLite file, shared by threads and processes.

    Args:
      path: the database file; parent directories are created. ``~`` is expanded
        and a relative path is made absolute once, here.
      busy_timeout_s: how long one operation may wait for other writers before
        it gives up with :class:`StoreError`.
      mode: permissions of a file this creates (default 0600: run configs
        and host names are nobody else's business; SQLite gives its -wal and
        -shm files the same). An existing file keeps its own.
      readonly: open an existing file for reading only (SQLite ``mode=ro``);
        :meth:`append` then raises :class:`StoreError`.
      chunk_events: events per packed chunk (see the module docstring);
        None: never pack (rows only, as version 1 wrote them).

    Raises:
      StoreError: the path cannot be created, opened or written (read, when
        ``readonly``), is not a SQLite file, or was written by a newer
        version of this package.
    """

    #: ``read_columns`` takes ``writers=True`` (each row's writer and sequence number)
    columns_with_writers = True
    #: ``append`` takes an :class:`~goodput_core.stores.event_batch.EventBatch` as columns
    appends_columns = True

    def __init__(self, path: "str | os.PathLike[str]", *, busy_timeout_s: float = 30.0,
                 mode: int = 0o600, readonly: bool = False,
                 chunk_events: Optional[int] = chunks.CHUNK_EVENTS):
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        if path.startswith("//"):  # sqlite:////tmp/x: POSIX keeps a leading "//"; one is meant
            path = "/" + path.lstrip("/")
        self.url = "sqlite:///" + path.lstrip("/")
        self._connections = Connections(path, busy_timeout_s=busy_timeout_s, mode=mode,
                                        readonly=readonly)
        self._reader = Reader(self._connections, self.url)
        self._writer = Writer(self._connections,
                              None if chunk_events is None else max(1, int(chunk_events)))
        #: corrupt rows skipped by this store's reads, per reason
        self.corrupt = self._reader.corrupt
        self._connections.check_path()
        self._open()

    @property
    def path(self) -> str:
        """The database file (absolute)."""
        return self._connections.path

    @property
    def readonly(self) -> bool:
        return self._connections.readonly

    @property
    def busy_timeout_s(self) -> float:
        return self._connections.busy_timeout_s

    @property
    def chunk_events(self) -> Optional[int]:
        return self._writer.chunk_events

    @_gated
    def _open(self) -> None:
        """Creates or checks the schema (several processes may race on a fresh file)."""
        conns = self._connections
        try:
            conns.retry(ensure_schema, conns.handle().conn, conns.path, conns.readonly)
        except (sqlite3.Error, StoreError) as exc:
            conns.close_all()
            if isinstance(exc, StoreError):
                raise
            raise conns.error(exc) from exc

    @_gated
    def append(self, batch: Sequence[EventRecord]) -> None:
        """Appends events in one transaction (all or none), in the given order.

        Args:
          batch: EventRecords (any run, any writer metadata), or an
            :class:`~goodput_core.stores.event_batch.EventBatch` (one writer's
            events as columns: packed without an object per event; the same
            rows are stored either way).

        Raises:
          StoreError: the file cannot be written, or stayed locked too long.
        """
        self._writer.append(batch)

    @_gated
    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        """:meth:`Store.read <goodput_core.stores.base.Store.read>`: the events of
        ``run`` with an id greater than ``since``, in append order; the cursor
        is the id of the last event returned, or ``since`` unchanged when there
        is nothing new."""
        return self._reader.read(run, since, limit)

    @_gated
    def read_columns(self, run: str, since: Cursor = None, limit: Optional[int] = None,
                     writers: bool = False) -> Tuple[EventPage, Cursor]:
        """As :meth:`read`, but the events as numpy columns (no Python object
        per event): what the engine reads (:meth:`EventTables.add_page`).
        ``writers``: each row's writer and sequence number too
        (``EventPage.writer``, ``seq``, ``writer_keys``)."""
        return self._reader.read_columns(run, since, limit, writers)

    @_gated
    def runs(self) -> List[str]:
        """Names of the runs in this store, oldest first."""
        conns = self._connections
        if conns.readonly and schema_version(conns.handle().conn) is None:
            return []  # an empty file: no run yet
        return [r[0] for r in conns.query("SELECT name FROM runs ORDER BY run_id")]

    @_gated
    def run_versions(self) -> Dict[str, int]:
        """Each run's version, oldest run first: the largest event id stored for
        it, rows and packed chunks alike (it changes whenever an event is added).
        Two index look-ups per run, whatever the runs' lengths."""
        conns = self._connections
        if conns.readonly and schema_version(conns.handle().conn) is None:
            return {}
        rows = conns.query(
            "SELECT r.name, max(coalesce((SELECT max(id) FROM events e WHERE e.run_id = r.run_id),"
            " 0), coalesce((SELECT max(last_id) FROM chunks c WHERE c.run_id = r.run_id), 0))"
            " FROM runs r ORDER BY r.run_id")
        return {name: int(v) for name, v in rows}

    @_gated
    def integrity_check(self) -> bool:
        """Runs SQLite's full integrity check.

        Returns:
          True when ``PRAGMA integrity_check`` answers exactly ``ok``.
        """
        return self._connections.query("PRAGMA integrity_check") == [("ok",)]

    @_gated
    def checkpoint(self) -> bool:
        """Folds the write-ahead log into the file (``PRAGMA wal_checkpoint(TRUNCATE)``).

        Afterwards the file alone holds every committed event: a ``cp`` of it
        reads every run. Never waits: while another connection reads or
        writes, SQLite answers busy and nothing changes (the next clean close
        or exit checkpoints).

        Returns:
          True when the whole log was folded in.
        """
        conns = self._connections
        if conns.readonly:
            return False
        try:
            row = conns.handle().conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except (sqlite3.Error, StoreError):
            return False
        return bool(row) and row[0] == 0

    @_gated
    def close(self) -> None:
        """Checkpoints the log into the file (:meth:`checkpoint`), then closes
        this thread's connection (and those of threads that have ended).

        Connections of other live threads are closed when their threads end or
        when the store is garbage collected.
        """
        if self._connections.has_handle():
            self.checkpoint()
        self._connections.close_own()

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"
