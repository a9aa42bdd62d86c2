"""The embedded store's connections: one per thread and process, opened lazily.

A :class:`~goodput_core.stores.sqlite.store.SqliteStore` *has* one
:class:`Connections`, which its reader (:mod:`goodput_core.stores.sqlite.read`)
and writer (:mod:`goodput_core.stores.sqlite.write`) share:

* every thread opens its own connection on first use, in every process (a
  connection of a thread that has ended is closed by the next opening);
* "database is locked/busy" never reaches the caller: :meth:`Connections.retry`
  waits with jittered backoff, outside the fork gate (connections have no busy
  timeout: ``os.fork()`` never waits on another process's lock), and raises
  :class:`~goodput_core.stores.base.StoreError` after ``busy_timeout_s``;
* before a fork every connection is closed (:meth:`Connections.close_all`,
  :mod:`goodput_core.stores.sqlite.fork`): no connection crosses ``os.fork()``;
* a connection checks whose file it opens before anything is written to it
  (:mod:`goodput_core.stores.sqlite.ownership`), and ``readonly`` ones use
  SQLite's ``mode=ro`` (``immutable=1`` where the WAL index cannot be opened).
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
from typing import Any, Dict, List, Tuple
from urllib.parse import quote

from goodput_core.stores.base import StoreError
from goodput_core.stores.sqlite import ownership
from goodput_core.stores.sqlite.fork import Reopen, register_store, released
from goodput_core.stores.sqlite.schema import HINT, SCHEMA_VERSION

__all__ = ["Connections", "is_busy"]

logger = logging.getLogger("goodput")

_CORRUPT_HINT = ("the file is damaged or is not a goodput store: move it aside (a new store "
                 "is created there) or point GOODPUT_STORE at another file")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """True for SQLite's "database is locked/busy" answers (worth a retry)."""
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


class Handle:
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


class Connections:
    """The connections of one store to its file.

    Args:
      path: the database file (absolute).
      busy_timeout_s: how long one operation may wait for other writers.
      mode: permissions of a file this creates.
      readonly: open connections with SQLite's ``mode=ro``.
    """

    def __init__(self, path: str, *, busy_timeout_s: float, mode: int, readonly: bool):
        self.path = path
        self.mode = mode
        self.busy_timeout_s = float(busy_timeout_s)
        self.readonly = bool(readonly)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: Dict[int, Handle] = {}  # id(handle) -> handle, this process only
        register_store(self)  # every connection closes before a fork

    def error(self, exc: Any) -> StoreError:
        """The store error for ``exc`` (a SQLite error or a reason), naming the file."""
        # "file is not a database", "database disk image is malformed": a plain
        # DatabaseError; where to write instead is the wrong advice for those
        hint = _CORRUPT_HINT if type(exc) is sqlite3.DatabaseError else HINT
        return StoreError(f"cannot use {self.path!r} as a goodput store ({exc}); {hint}")

    def check_path(self) -> None:
        """Refuses a path the store cannot use; creates the file with ``mode``."""
        parent = os.path.dirname(self.path)
        if self.readonly:
            if not os.path.isfile(self.path) or not os.access(self.path, os.R_OK):
                raise self.error("no readable file there")
            return
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise self.error(exc) from exc
        if os.path.isdir(self.path):
            raise self.error("it is a directory")
        if os.path.exists(self.path) and not os.access(self.path, os.R_OK | os.W_OK):
            raise self.error("the file is not writable")
        if not os.access(parent, os.W_OK | os.X_OK):  # WAL keeps -wal/-shm files beside it
            raise self.error(f"the directory {parent!r} is not writable")
        try:  # created here, with our mode, before SQLite creates it with the umask's
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.mode))
        except FileExistsError:
            if os.path.islink(self.path) and not os.path.exists(self.path):
                # SQLite would create the link's target with the umask's mode,
                # wherever it points: refused
                raise self.error("it is a symlink to a file that does not exist") from None
        except OSError as exc:
            raise self.error(exc) from exc

    def handle(self) -> Handle:
        """This thread's connection, opened on first use in each thread and process."""
        handle = getattr(self._local, "handle", None)
        if handle is not None and handle.pid == os.getpid():
            return handle
        try:
            conn = self.retry(self._connect)
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        handle = Handle(conn)
        with self._lock:
            self._prune_dead_threads()
            self._handles[id(handle)] = handle
        self._local.handle = handle
        return handle

    def has_handle(self) -> bool:
        """True when this thread has a connection open."""
        return getattr(self._local, "handle", None) is not None

    def _connect(self) -> sqlite3.Connection:
        # check_same_thread=False only so that close() may close the connection
        # of a thread that has ended; a live connection is used by its thread only.
        # timeout=0: a locked file answers "busy" at once and retry() waits
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

    def _connect_readonly(self) -> sqlite3.Connection:
        """``mode=ro``; when the WAL index cannot be opened (no -shm file and a
        directory we may not write, so no writer is attached either),
        ``immutable=1``, which reads the file without any lock or WAL file."""
        uri = "file://" + quote(self.path)  # absolute: an empty authority
        for options in ("?mode=ro", "?mode=ro&immutable=1"):
            conn = sqlite3.connect(uri + options, uri=True, timeout=0,  # see _connect
                                   isolation_level=None, check_same_thread=False)
            try:
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                return conn
            except sqlite3.OperationalError as exc:
                conn.close()
                if is_busy(exc) or "immutable" in options:
                    raise
        raise AssertionError("unreachable")

    def _prune_dead_threads(self) -> None:
        for key, handle in list(self._handles.items()):
            thread = handle.thread()
            if thread is None or not thread.is_alive():
                del self._handles[key]
                handle.conn.close()

    def retry(self, fn, *args):
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
                if not is_busy(exc):
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

    def query(self, sql: str, args: tuple = ()) -> List[tuple]:
        """All rows of one statement on this thread's connection, retried while busy."""
        conn = self.handle().conn
        try:
            return self.retry(lambda: conn.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            raise self.error(exc) from exc

    def close_own(self) -> None:
        """Closes this thread's connection and those of threads that have ended.

        Connections of other live threads are closed when their threads end or
        when the store is garbage collected.
        """
        handle = getattr(self._local, "handle", None)
        self._local.handle = None
        with self._lock:
            if handle is not None and self._handles.pop(id(handle), None) is handle:
                handle.conn.close()
            self._prune_dead_threads()

    def close_all(self) -> None:
        """Closes every connection of this process (no operation may be running)."""
        with self._lock:
            for handle in self._handles.values():
                handle.pid = 0  # its thread reopens on next use
                handle.conn.close()
            self._handles = {}
