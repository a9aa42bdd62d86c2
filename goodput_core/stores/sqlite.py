"""The embedded SQLite store: the default, offline, multi-process event store.

Opened by ``sqlite:///abs/path.sqlite`` or a bare path (see
:mod:`goodput_core.stores`); the default location is ``$GOODPUT_STORE`` or
``$XDG_DATA_HOME/goodput/goodput.sqlite`` (``~/.local/share/goodput/...``).

Schema (version :data:`SCHEMA_VERSION`, kept in ``meta``; a file written by a
newer version is refused with :class:`StoreError`)::

    meta    (key TEXT PRIMARY KEY, value TEXT)          -- 'schema_version'
    runs    (run_id INTEGER PRIMARY KEY, name TEXT UNIQUE)
    writers (writer_id INTEGER PRIMARY KEY, process_index, host, pid, attempt,
             UNIQUE (process_index, host, pid, attempt))
    events  (id INTEGER PRIMARY KEY,        -- the read cursor
             run_id, writer_id, seq, kind INTEGER, time REAL, step INTEGER,
             extra TEXT,                    -- JSON of EventRecord.extra, or NULL
             write_time REAL)
    INDEX events_run ON events (run_id, id)

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
  see :mod:`goodput_core.stores.sqlite_fork`), then all connections are
  closed and every thread of parent and child reopens its own on next use.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import random
import sqlite3
import threading
import time
import weakref
from operator import itemgetter
from typing import Any, Dict, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord
from goodput_core.stores.base import Cursor, Store, StoreError
from goodput_core.stores.sqlite_fork import Reopen
from goodput_core.stores.sqlite_fork import gated as _gated
from goodput_core.stores.sqlite_fork import register_store, released
from goodput_core.stores.sqlite_json import dumps as _dumps

__all__ = ["SqliteStore", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS runs (run_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    "CREATE TABLE IF NOT EXISTS writers (writer_id INTEGER PRIMARY KEY,"
    " process_index INTEGER NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
    " attempt TEXT NOT NULL, UNIQUE (process_index, host, pid, attempt))",
    "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY,"
    " run_id INTEGER NOT NULL, writer_id INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " kind INTEGER NOT NULL, time REAL, step INTEGER, extra TEXT, write_time REAL)",
    "CREATE INDEX IF NOT EXISTS events_run ON events (run_id, id)",
)
_INSERT = ("INSERT INTO events (run_id, writer_id, seq, kind, time, step, extra, write_time)"
           " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
_SELECT = ("SELECT kind, time, step, extra, writer_id, seq, write_time, id FROM events"
           " WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?")
_FETCH = 10_000  # rows per fetchmany: bounds the transient row tuples while reading
_HINT = "set GOODPUT_STORE=sqlite:///path/to/goodput.sqlite to a writable location"

_writer_key = itemgetter(5, 6, 7, 8)  # (process_index, host, pid, attempt)
_NAN = math.nan
_new = tuple.__new__


@contextlib.contextmanager
def _write_transaction(conn: sqlite3.Connection):
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


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11; else the message
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (+ extended codes)
    return "locked" in str(exc) or "busy" in str(exc)


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

    __slots__ = ("conn", "pid", "thread", "run_ids", "writer_ids", "writers")

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.pid = os.getpid()
        self.thread = weakref.ref(threading.current_thread())
        self.run_ids: Dict[str, int] = {}
        self.writer_ids: Dict[Tuple[Any, ...], int] = {}
        self.writers = _WriterMap(conn)


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

    Raises:
      StoreError: the path cannot be created, opened or written, is not a
        SQLite file, or was written by a newer version of this package.
    """

    def __init__(self, path: "str | os.PathLike[str]", *, busy_timeout_s: float = 30.0,
                 mode: int = 0o600):
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        self.path = path
        self._mode = mode
        self.url = "sqlite:///" + path.lstrip("/")
        self.busy_timeout_s = float(busy_timeout_s)
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

    def _error(self, exc: BaseException) -> StoreError:
        return StoreError(f"cannot use {self.path!r} as a goodput store ({exc}); {_HINT}")

    def _check_path(self) -> None:
        parent = os.path.dirname(self.path)
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
            pass
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
        conn = sqlite3.connect(self.path, timeout=0,
                               isolation_level=None, check_same_thread=False)
        try:  # switching a fresh file to WAL takes a brief exclusive lock: may be busy
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
        version = self._schema_version(conn)
        if version is None or version < SCHEMA_VERSION:
            # Several processes may create a fresh file at once: the write lock
            # serialises them and IF NOT EXISTS / OR IGNORE make it idempotent.
            with _write_transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
            version = self._schema_version(conn)
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

    @_gated
    def append(self, batch: Sequence[EventRecord]) -> None:
        """Appends events in one transaction (all or none), in the given order.

        Args:
          batch: EventRecords (any run, any writer metadata).

        Raises:
          StoreError: the file cannot be written, or stayed locked too long.
        """
        if not isinstance(batch, (list, tuple)):
            batch = list(batch)  # iterated twice when a run or writer is new
        if not batch:
            return
        h = self._handle()
        try:
            try:
                rows = self._rows(h, batch)
            except KeyError:  # a run or writer this connection has not seen yet
                self._retry(self._register, h, batch)
                rows = self._rows(h, batch)
            self._retry(self._insert, h.conn, rows)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    @staticmethod
    def _rows(h: _Handle, batch: Sequence[EventRecord]) -> List[tuple]:
        # Built outside the write lock; plain tuples keep executemany on its fast path.
        run_ids, writer_ids, dumps, wkey = h.run_ids, h.writer_ids, _dumps, _writer_key
        return [(run_ids[e[0]], writer_ids[wkey(e)], e[9], e[1], e[2], e[3],
                 None if e[4] is None else dumps(e[4]), e[10]) for e in batch]

    @staticmethod
    def _register(h: _Handle, batch: Sequence[EventRecord]) -> None:
        """Creates the batch's unknown runs and writers and caches their ids."""
        # dict.fromkeys: unique in first-seen order, so runs() lists runs as they came.
        runs = [r for r in dict.fromkeys(e[0] for e in batch) if r not in h.run_ids]
        writers = [w for w in dict.fromkeys(map(_writer_key, batch)) if w not in h.writer_ids]
        conn = h.conn
        with _write_transaction(conn):
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
        with _write_transaction(conn):
            conn.executemany(_INSERT, rows)

    @_gated
    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        """Returns events of ``run`` with an id greater than ``since``, in append order.

        Args:
          run: the run name.
          since: a cursor from an earlier read (the last id read), or None.
          limit: at most this many events (None: all).

        Returns:
          (events, cursor): ``cursor`` is the id of the last event returned, or
          ``since`` unchanged when there is nothing new.
        """
        if limit is not None and limit <= 0:
            return [], since
        h = self._handle()
        run_id = h.run_ids.get(run)
        if run_id is None:
            found = self._query("SELECT run_id FROM runs WHERE name = ?", (run,))
            if not found:
                return [], since
            run_id = h.run_ids[run] = found[0][0]
        args = (run_id, 0 if since is None else int(since),
                -1 if limit is None else int(limit))
        try:
            events, last = self._retry(self._select, h, run, args)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        return events, (since if last is None else last)

    @staticmethod
    def _select(h: _Handle, run: str, args: tuple) -> Tuple[List[EventRecord], Optional[int]]:
        out: List[EventRecord] = []
        last = None
        cur = h.conn.execute(_SELECT, args)
        writers, loads, nan, new, ER = h.writers, json.loads, _NAN, _new, EventRecord
        # EventRecords are tuple subclasses, which the cyclic GC never untracks:
        # building a million of them would trigger repeated full collections
        # (about half the read time). They cannot form cycles, so collection is
        # paused while they are built and the previous state restored after.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            while True:
                rows = cur.fetchmany(_FETCH)
                if not rows:
                    break
                last = rows[-1][7]
                # tuple.__new__ on a tuple in field order: no Python-level __new__ call.
                out += [new(ER, (run, k, nan if t is None else t, s,
                                 None if x is None else loads(x), pi, host, pid, att, q,
                                 nan if wt is None else wt))
                        for k, t, s, x, w, q, wt, _ in rows
                        for pi, host, pid, att in [writers[w]]]
        finally:
            if gc_was_enabled:
                gc.enable()
            cur.close()
        return out, last

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
        return [r[0] for r in self._query("SELECT name FROM runs ORDER BY run_id")]

    @_gated
    def integrity_check(self) -> bool:
        """Runs SQLite's full integrity check.

        Returns:
          True when ``PRAGMA integrity_check`` answers exactly ``ok``.
        """
        return self._query("PRAGMA integrity_check") == [("ok",)]

    @_gated
    def close(self) -> None:
        """Closes this thread's connection (and those of threads that have ended).

        Connections of other live threads are closed when their threads end or
        when the store is garbage collected.
        """
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
