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
names the file. The read path is :mod:`goodput_core.stores.sqlite.read`, the
write path :mod:`goodput_core.stores.sqlite.write`.

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

import collections
import logging
import os
import random
import sqlite3
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

from goodput_core.stores.sqlite import chunks, ids, ownership
from goodput_core.stores.base import Store, StoreError
from goodput_core.stores.sqlite.fork import Reopen
from goodput_core.stores.sqlite.fork import gated as _gated
from goodput_core.stores.sqlite.fork import register_store, released
from goodput_core.stores.sqlite.read import ReadPath
from goodput_core.stores.sqlite.read import is_busy as _is_busy
from goodput_core.stores.sqlite.write import WritePath, write_transaction as _write_transaction

__all__ = ["SqliteStore", "SCHEMA_VERSION"]

SCHEMA_VERSION = 2

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ids.RUNS,
    "CREATE TABLE IF NOT EXISTS writers (writer_id INTEGER PRIMARY KEY,"
    " process_index INTEGER NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
    " attempt TEXT NOT NULL, UNIQUE (process_index, host, pid, attempt))",
    "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY,"
    " run_id INTEGER NOT NULL, writer_id INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " kind INTEGER NOT NULL, time REAL, step INTEGER, extra TEXT, write_time REAL)",
    "CREATE INDEX IF NOT EXISTS events_run ON events (run_id, id)",
) + chunks.SCHEMA + ids.SCHEMA
_HINT = "set GOODPUT_STORE=sqlite:///path/to/goodput.sqlite to a writable location"
_CORRUPT_HINT = ("the file is damaged or is not a goodput store: move it aside (a new store "
                 "is created there) or point GOODPUT_STORE at another file")

logger = logging.getLogger("goodput")


class _WriterMap(dict):
    """writer_id -> (process_index, host, pid, attempt); loads unknown ids lazily."""

    def __init__(self, conn: sqlite3.Connection):
        super().__init__()
        self._conn = conn

    def __missing__(self, writer_id: int):
        # Another process registered writers we have not seen: load them all at once.
        for row in self._conn.execute(
                "SELECT writer_id, process_index, host, pid, attempt FROM writers"):
            self[row[0]] = row[1:]
        # A dangling id (hand-edited file) reads as unknown metadata, not an error.
        return self.setdefault(writer_id, (0, "", 0, ""))


class _Handle:
    """One thread's connection plus its caches (ids never change once committed)."""

    __slots__ = ("conn", "pid", "thread", "run_ids", "writer_ids", "writers", "appended")

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.pid = os.getpid()
        self.thread = weakref.ref(threading.current_thread())
        self.run_ids: Dict[str, int] = {}
        self.writer_ids: Dict[Tuple[Any, ...], int] = {}
        self.writers = _WriterMap(conn)
        self.appended: collections.Counter = collections.Counter()  # run id -> rows


class SqliteStore(ReadPath, WritePath, Store):
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

    def __init__(self, path: "str | os.PathLike[str]", *, busy_timeout_s: float = 30.0,
                 mode: int = 0o600, readonly: bool = False,
                 chunk_events: Optional[int] = chunks.CHUNK_EVENTS):
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        if path.startswith("//"):  # sqlite:////tmp/x: POSIX keeps a leading "//"; one is meant
            path = "/" + path.lstrip("/")
        self.path = path
        self._mode = mode
        self.url = "sqlite:///" + path.lstrip("/")
        self.busy_timeout_s = float(busy_timeout_s)
        self.readonly = bool(readonly)
        self.chunk_events = None if chunk_events is None else max(1, int(chunk_events))
        #: corrupt rows skipped by this store's reads, per reason
        self.corrupt: collections.Counter = collections.Counter()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: Dict[int, _Handle] = {}  # id(handle) -> handle, this process only
        register_store(self)
        self._check_path()
        self._open()

    @_gated
    def _open(self) -> None:
        """Creates or checks the schema (several processes may race on a fresh file)."""
        try:
            self._retry(self._ensure_schema, self._handle().conn)
        except (sqlite3.Error, StoreError) as exc:
            self._close_all()
            if isinstance(exc, StoreError):
                raise
            raise self._error(exc) from exc

    def _error(self, exc: Any) -> StoreError:
        # "file is not a database", "database disk image is malformed": a plain
        # DatabaseError; where to write instead is the wrong advice for those
        hint = _CORRUPT_HINT if type(exc) is sqlite3.DatabaseError else _HINT
        return StoreError(f"cannot use {self.path!r} as a goodput store ({exc}); {hint}")

    def _check_path(self) -> None:
        parent = os.path.dirname(self.path)
        if self.readonly:
            if not os.path.isfile(self.path) or not os.access(self.path, os.R_OK):
                raise self._error("no readable file there")
            return
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise self._error(exc) from exc
        if os.path.isdir(self.path):
            raise self._error("it is a directory")
        if os.path.exists(self.path) and not os.access(self.path, os.R_OK | os.W_OK):
            raise self._error("the file is not writable")
        if not os.access(parent, os.W_OK | os.X_OK):  # WAL keeps -wal/-shm files beside it
            raise self._error(f"the directory {parent!r} is not writable")
        try:  # created here, with our mode, before SQLite creates it with the umask's
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self._mode))
        except FileExistsError:
            if os.path.islink(self.path) and not os.path.exists(self.path):
                # SQLite would create the link's target with the umask's mode,
                # wherever it points: refused
                raise self._error("it is a symlink to a file that does not exist") from None
        except OSError as exc:
            raise self._error(exc) from exc

    def _handle(self) -> _Handle:
        """This thread's connection, opened on first use in each thread and process."""
        handle = getattr(self._local, "handle", None)
        if handle is not None and handle.pid == os.getpid():
            return handle
        try:
            conn = self._retry(self._connect)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        handle = _Handle(conn)
        with self._lock:
            self._prune_dead_threads()
            self._handles[id(handle)] = handle
        self._local.handle = handle
        return handle

    def _connect(self) -> sqlite3.Connection:
        # check_same_thread=False only so that close() may close the connection
        # of a thread that has ended; a live connection is used by its thread only.
        # timeout=0: a locked file answers "busy" at once and _retry waits
        # outside the fork gate (a wait inside SQLite would hold forks back).
        if self.readonly:
            return self._connect_readonly()
        conn = sqlite3.connect(self.path, timeout=0,
                               isolation_level=None, check_same_thread=False)
        try:
            # Whose file it is, before anything is written to it (WAL mode is
            # written into the file's header).
            ownership.check(conn, self.path, understood=SCHEMA_VERSION)
            # switching a fresh file to WAL takes a brief exclusive lock: may be busy
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    def _prune_dead_threads(self) -> None:
        for key, handle in list(self._handles.items()):
            thread = handle.thread()
            if thread is None or not thread.is_alive():
                del self._handles[key]
                handle.conn.close()

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        # A foreign file or a newer store is refused here, readers included
        # (stores/sqlite/ownership.py); a writer marks the files it creates.
        owned = ownership.check(conn, self.path, understood=SCHEMA_VERSION)
        version = self._schema_version(conn)
        if not self.readonly and (version is None or version < SCHEMA_VERSION
                                  or owned != ownership.OURS):
            # Several processes may create a fresh file at once: the write lock
            # serialises them and IF NOT EXISTS makes it idempotent; a
            # version-1 file gains the chunks table (its rows stay valid).
            with _write_transaction(conn):
                ownership.check(conn, self.path, understood=SCHEMA_VERSION)  # under the lock
                for statement in _SCHEMA:
                    conn.execute(statement)
                if (self._schema_version(conn) or 0) < SCHEMA_VERSION:
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                                 (str(SCHEMA_VERSION),))
                ownership.mark(conn)
            version = self._schema_version(conn)
        if not self.readonly and version == SCHEMA_VERSION and \
                conn.execute("PRAGMA user_version").fetchone()[0] < chunks.FORMAT_VERSION:
            with _write_transaction(conn):  # the marker every read checks (sqlite/chunks.py)
                conn.execute(f"PRAGMA user_version = {chunks.FORMAT_VERSION}")
        if not self.readonly and version == SCHEMA_VERSION and ids.needs_upgrade(conn):
            with _write_transaction(conn):  # additive: ids that cannot alias (sqlite/ids.py)
                ids.upgrade(conn)
        if self.readonly and version in (None, 1):
            return  # not written yet, or by version 1: readable as it is
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path!r} has store schema version {version}, newer than the "
                f"{SCHEMA_VERSION} this goodput version understands: upgrade goodput "
                f"or use another file ({_HINT})")

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> Optional[int]:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            return None
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        # An unreadable version is not ours to interpret: treat it as newer.
        return None if row is None else (
            int(row[0]) if str(row[0]).isdigit() else SCHEMA_VERSION + 1)

    def _retry(self, fn, *args):
        """Calls ``fn(*args)``, retrying with jittered backoff while SQLite is busy.

        Runs inside a gated operation and sleeps outside the fork gate; raises
        :class:`Reopen` when a fork closed this thread's connection meanwhile.
        """
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.001
        while True:
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"{self.path!r} stayed locked by other writers for more than "
                        f"{self.busy_timeout_s:g} s; raise busy_timeout_s or write less "
                        f"often") from exc
            with released() as gate:
                time.sleep(delay * (0.5 + random.random()))
            if gate.reopen:
                raise Reopen()
            delay = min(delay * 2, 0.1)

    def _query(self, sql: str, args: tuple = ()) -> List[tuple]:
        """All rows of one statement on this thread's connection, retried while busy."""
        conn = self._handle().conn
        try:
            return self._retry(lambda: conn.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    @_gated
    def runs(self) -> List[str]:
        """Names of the runs in this store, oldest first."""
        if self.readonly and self._schema_version(self._handle().conn) is None:
            return []  # an empty file: no run yet
        return [r[0] for r in self._query("SELECT name FROM runs ORDER BY run_id")]

    @_gated
    def run_versions(self) -> Dict[str, int]:
        """Each run's version, oldest run first: the largest event id stored for
        it, rows and packed chunks alike (it changes whenever an event is added).
        Two index look-ups per run, whatever the runs' lengths."""
        if self.readonly and self._schema_version(self._handle().conn) is None:
            return {}
        rows = self._query(
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
        return self._query("PRAGMA integrity_check") == [("ok",)]

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
        if self.readonly:
            return False
        try:
            row = self._handle().conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
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
        if getattr(self._local, "handle", None) is not None:
            self.checkpoint()
        handle = getattr(self._local, "handle", None)
        self._local.handle = None
        with self._lock:
            if handle is not None and self._handles.pop(id(handle), None) is handle:
                handle.conn.close()
            self._prune_dead_threads()

    def _close_all(self) -> None:
        """Closes every connection of this process (no operation may be running)."""
        with self._lock:
            for handle in self._handles.values():
                handle.pid = 0  # its thread reopens on next use
                handle.conn.close()
            self._handles = {}

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"
