"""The embedded store's schema: its tables, its version, and creating or
upgrading it (``SqliteStore`` does when it opens a file; the tables are
described in :mod:`goodput_core.stores.sqlite.store`)."""

from __future__ import annotations

import sqlite3
from typing import Optional

from goodput_core.stores.base import StoreError
from goodput_core.stores.sqlite import chunks, ids, ownership
from goodput_core.stores.sqlite.write import write_transaction

__all__ = ["SCHEMA_VERSION", "HINT", "ensure_schema", "schema_version"]

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

#: Where to write instead, said with every store error about the file.
HINT = "set GOODPUT_STORE=sqlite:///path/to/goodput.sqlite to a writable location"


def schema_version(conn: sqlite3.Connection) -> Optional[int]:
    """The file's schema version (None: no schema yet)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    # An unreadable version is not ours to interpret: treat it as newer.
    return None if row is None else (
        int(row[0]) if str(row[0]).isdigit() else SCHEMA_VERSION + 1)


def ensure_schema(conn: sqlite3.Connection, path: str, readonly: bool) -> None:
    """Creates or upgrades the schema (a writer), or checks it (``readonly``).

    Raises:
      StoreError: a foreign file, or one written by a newer version.
    """
    # A foreign file or a newer store is refused here, readers included
    # (stores/sqlite/ownership.py); a writer marks the files it creates.
    owned = ownership.check(conn, path, understood=SCHEMA_VERSION)
    version = schema_version(conn)
    if not readonly and (version is None or version < SCHEMA_VERSION
                         or owned != ownership.OURS):
        # Several processes may create a fresh file at once: the write lock
        # serialises them and IF NOT EXISTS makes it idempotent; a
        # version-1 file gains the chunks table (its rows stay valid).
        with write_transaction(conn):
            ownership.check(conn, path, understood=SCHEMA_VERSION)  # under the lock
            for statement in _SCHEMA:
                conn.execute(statement)
            if (schema_version(conn) or 0) < SCHEMA_VERSION:
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
            ownership.mark(conn)
        version = schema_version(conn)
    if not readonly and version == SCHEMA_VERSION and \
            conn.execute("PRAGMA user_version").fetchone()[0] < chunks.FORMAT_VERSION:
        with write_transaction(conn):  # the marker every read checks (sqlite/chunks.py)
            conn.execute(f"PRAGMA user_version = {chunks.FORMAT_VERSION}")
    if not readonly and version == SCHEMA_VERSION and ids.needs_upgrade(conn):
        with write_transaction(conn):  # additive: ids that cannot alias (sqlite/ids.py)
            ids.upgrade(conn)
    if readonly and version in (None, 1):
        return  # not written yet, or by version 1: readable as it is
    if version != SCHEMA_VERSION:
        raise StoreError(
            f"{path!r} has store schema version {version}, newer than the "
            f"{SCHEMA_VERSION} this goodput version understands: upgrade goodput "
            f"or use another file ({HINT})")
