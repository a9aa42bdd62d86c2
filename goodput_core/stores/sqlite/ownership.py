"""Which SQLite files are goodput stores: the marker, and what is refused.

goodput writes only to stores it created. Every store carries SQLite's
application id :data:`APPLICATION_ID` in its header (``PRAGMA
application_id``, the field SQLite reserves for the application that owns a
file). :func:`check` is the one place that decides, on every open (readers,
writers, ``backup``, ``compact``, ``runs delete|rename``):

* **empty** (no table yet, no foreign marker): ours to create; writers
  create the tables and the marker in one transaction;
* **ours** (our marker): accepted, unless newer than this code understands;
* **ours from before the marker** (goodput versions that did not write one:
  no marker, a ``meta`` table with a numeric ``schema_version``, and no
  table but those versions' own, :data:`LEGACY_TABLES`): accepted, and the
  first writer adds the marker (:func:`mark`);
* **foreign** (another application id, or no marker and any other table):
  refused with :class:`StoreError` by every command and by the recorder,
  whose events then spill; nothing is created, vacuumed or deleted in it;
* **newer** (``meta.schema_version`` above the version this code writes, or
  a ``PRAGMA user_version`` above the packed-chunk format it reads):
  refused likewise, readers included: a newer format may mean rows this
  code would misread.
"""

from __future__ import annotations

import sqlite3
from typing import Optional

from goodput_core.stores.base import StoreError
from goodput_core.stores.sqlite.chunks import FORMAT_VERSION

__all__ = ["APPLICATION_ID", "LEGACY_TABLES", "EMPTY", "OURS", "UNMARKED", "check", "mark"]

#: ``PRAGMA application_id`` of a goodput store: ASCII "GdPt".
APPLICATION_ID = 0x47645074
#: The tables of the goodput versions that wrote no marker (fixed: later
#: versions mark every store they create or upgrade).
LEGACY_TABLES = frozenset({"meta", "runs", "writers", "events", "chunks",
                           # what a writer of the durable-ids change added (ids.py)
                           "delivered", "sqlite_sequence"})
EMPTY, OURS, UNMARKED = "empty", "ours", "unmarked"
_HINT = "point --store or GOODPUT_STORE at another file"


def _tables(conn: sqlite3.Connection) -> "set[str]":
    return {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%'"
        " ESCAPE '\\'")}


def _schema_version(conn: sqlite3.Connection, tables: "set[str]") -> Optional[str]:
    if "meta" not in tables:
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:  # a meta table of another shape: not ours
        return None
    return None if row is None else str(row[0])


def check(conn: sqlite3.Connection, path: str, *, understood: int) -> str:
    """Whose file ``conn`` opened: :data:`EMPTY`, :data:`OURS` or
    :data:`UNMARKED` (ours, from before the marker).

    Args:
      path: the file, for messages.
      understood: the newest ``meta.schema_version`` this code knows.

    Raises:
      StoreError: a foreign file, or one newer than this code understands.
      sqlite3.Error: as SQLite raised it (not a database, busy...).
    """
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    user_version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = _tables(conn)
    version = _schema_version(conn, tables)
    if app_id not in (0, APPLICATION_ID):
        raise StoreError(f"{path!r} is not a goodput store (it belongs to another application: "
                         f"SQLite application id {app_id:#x}); goodput writes only to stores "
                         f"it created: {_HINT}")
    if app_id == 0 and tables and not (
            tables <= LEGACY_TABLES and version is not None and version.isdigit()):
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"{path!r} is not a goodput store (no goodput marker; it holds "
                         f"other tables: {shown}); goodput writes only to stores it "
                         f"created: {_HINT}")
    newer = version is not None and (not version.isdigit() or int(version) > understood)
    if newer or user_version > FORMAT_VERSION:
        raise StoreError(
            f"{path!r} was written by a newer goodput (store schema version {version}, "
            f"format {user_version}; this version understands {understood} and "
            f"{FORMAT_VERSION}): upgrade goodput, or {_HINT}")
    if not tables:
        return EMPTY
    return OURS if app_id == APPLICATION_ID else UNMARKED


def mark(conn: sqlite3.Connection) -> None:
    """Writes the goodput marker (inside the caller's write transaction)."""
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
