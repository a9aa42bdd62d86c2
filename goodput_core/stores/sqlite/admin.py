"""Keeping an embedded store: a consistent backup, compaction, deleting and
renaming runs (what ``goodput backup``, ``compact`` and ``runs delete|rename`` do).

Each operation opens the file with a connection of its own and a busy
timeout: writers running meanwhile are never blocked for long (a backup is
one read transaction, which WAL lets writers run beside); deleting or
renaming a run is one write transaction.

A run that a live process is still writing should not be deleted (``goodput
runs delete`` refuses when a writer on this host still records it): its
writer keeps the run's id and goes on adding rows under it, an id no other
run ever takes (:mod:`goodput_core.stores.sqlite.ids`), so they never show
up in another run.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Tuple

from goodput_core.files import temporary_beside
from goodput_core.stores.base import StoreError
from goodput_core.stores.sqlite import ids, ownership
from goodput_core.stores.sqlite.chunks import has_chunks
from goodput_core.stores.sqlite.schema import SCHEMA_VERSION
from goodput_core.stores.sqlite import chunks

__all__ = ["backup", "compact", "delete_run", "rename_run"]

_BUSY_MS = 30_000


def _connect(path: str) -> sqlite3.Connection:
    """A connection to a goodput store (a foreign or newer file is refused:
    :mod:`goodput_core.stores.sqlite.ownership`)."""
    if not os.path.isfile(path):
        raise StoreError(f"no goodput store at {path!r}")
    conn = sqlite3.connect(path, isolation_level=None, timeout=_BUSY_MS / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
        _check(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _check(conn: sqlite3.Connection, path: str) -> str:
    try:
        return ownership.check(conn, path, understood=SCHEMA_VERSION)
    except sqlite3.Error as exc:  # not a database at all
        raise StoreError(f"cannot use {path!r} as a goodput store ({exc})") from exc


def _mark_if_unmarked(conn: sqlite3.Connection, path: str) -> None:
    """Checks again (inside a write transaction: under the lock) and marks a
    store written before the marker existed."""
    if _check(conn, path) == ownership.UNMARKED:
        ownership.mark(conn)


def backup(path: str, dest: str) -> int:
    """Copies the store at ``path`` to ``dest`` as one self-contained file.

    SQLite's online backup reads one consistent snapshot (every transaction
    committed before it started, none after) while writers go on. ``dest``
    is written under a temporary name beside it (0600) and renamed when
    complete; it is a plain rollback-journal database (no ``-wal`` beside it).

    Returns:
      The number of runs in the copy.
    """
    from urllib.parse import quote

    if not os.path.isfile(path):
        raise StoreError(f"no goodput store at {path!r}")
    source = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True,
                             timeout=_BUSY_MS / 1000)
    try:
        _check(source, path)
        with temporary_beside(dest) as tmp:
            target = sqlite3.connect(tmp, isolation_level=None)
            try:
                source.backup(target)  # all pages in one step: one snapshot
                target.execute("PRAGMA journal_mode=DELETE").fetchall()
                has_runs = target.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone()
                runs = target.execute("SELECT count(*) FROM runs").fetchone()[0] \
                    if has_runs else 0
            finally:
                target.close()
    finally:
        source.close()
    return runs


def compact(path: str) -> Tuple[int, int]:
    """Packs every run's full chunks, folds the log in and rebuilds the file.

    Returns:
      (bytes before, bytes after), the ``-wal`` file included.
    """
    before = _size(path)
    conn = _connect(path)
    try:
        _mark_if_unmarked(conn, path)
        if has_chunks(conn):
            for (run_id,) in conn.execute("SELECT run_id FROM runs").fetchall():
                chunks.compact(conn, run_id, max_chunks=1 << 30)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot compact {path!r}: {exc}") from exc
    finally:
        conn.close()
    return before, _size(path)


def _size(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _run_id(conn: sqlite3.Connection, run: str) -> int:
    row = conn.execute("SELECT run_id FROM runs WHERE name = ?", (run,)).fetchone()
    if row is None:
        raise StoreError(f"no run named {run!r} in the store")
    return row[0]


def count_events(path: str, run: str) -> int:
    """How many events ``run`` holds (rows and packed chunks)."""
    conn = _connect(path)
    try:
        run_id = _run_id(conn, run)
        n = conn.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0]
        if has_chunks(conn):
            n += conn.execute("SELECT coalesce(sum(n), 0) FROM chunks WHERE run_id = ?",
                              (run_id,)).fetchone()[0]
        return n
    finally:
        conn.close()


def delete_run(path: str, run: str) -> int:
    """Deletes ``run`` and all its events in one transaction; returns how many.

    Neither its run id nor its events' ids are handed out again
    (:mod:`goodput_core.stores.sqlite.ids`)."""
    conn = _connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _mark_if_unmarked(conn, path)
            run_id = _run_id(conn, run)
            if ids.needs_upgrade(conn):  # a file no writer of this version opened yet
                ids.upgrade(conn)
            floor = ids.id_floor(conn)
            n = conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,)).rowcount
            if has_chunks(conn):
                n += conn.execute("SELECT coalesce(sum(n), 0) FROM chunks WHERE run_id = ?",
                                  (run_id,)).fetchone()[0]
                conn.execute("DELETE FROM chunks WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            ids.keep_ids_growing(conn, floor)
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
        return n
    except sqlite3.Error as exc:
        raise StoreError(f"cannot delete {run!r} from {path!r}: {exc}") from exc
    finally:
        conn.close()


def rename_run(path: str, old: str, new: str) -> None:
    """Renames a run (its events keep their run id); ``new`` must be free."""
    conn = _connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _mark_if_unmarked(conn, path)
            run_id = _run_id(conn, old)
            if conn.execute("SELECT 1 FROM runs WHERE name = ?", (new,)).fetchone():
                raise StoreError(f"a run named {new!r} exists already")
            conn.execute("UPDATE runs SET name = ? WHERE run_id = ?", (new, run_id))
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
    except sqlite3.Error as exc:
        raise StoreError(f"cannot rename {old!r} in {path!r}: {exc}") from exc
    finally:
        conn.close()
