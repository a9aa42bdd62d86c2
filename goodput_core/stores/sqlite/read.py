"""The read path of the sqlite store: events as records or numpy columns,
read-only connections, and corrupt rows skipped and counted.

A mixin of :class:`goodput_core.stores.sqlite.SqliteStore` (kept apart so
each module stays small): it uses the store's ``_handle``, ``_retry``,
``_query``, ``_error`` and ``_schema_version``.
"""

from __future__ import annotations

import collections
import logging
import sqlite3
from typing import Any, List, Optional, Tuple
from urllib.parse import quote

import numpy as np

from goodput_core.events import EventRecord
from goodput_core.stores.sqlite import chunks
from goodput_core.stores.base import Cursor
from goodput_core.stores.columns import EventPage
from goodput_core.stores.gc_pause import gc_paused
from goodput_core.stores.sqlite.fork import gated as _gated

__all__ = ["ReadPath", "is_busy"]

logger = logging.getLogger("goodput")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """True for SQLite's "database is locked/busy" answers (worth a retry)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11; else the message
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (+ extended codes)
    return "locked" in str(exc) or "busy" in str(exc)


def _distinct(w: np.ndarray) -> np.ndarray:
    """The distinct writer ids of a page (small integers: counted, not sorted)."""
    if not len(w):
        return w
    if w.min() >= 0 and w.max() < 4 * len(w) + 65536:
        return np.flatnonzero(np.bincount(w))
    return np.unique(w)


class ReadPath:
    """Reading events (records or columns) and read-only connections."""

    #: ``read_columns`` takes ``writers=True`` (each row's writer and sequence number)
    columns_with_writers = True

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
        raw, cursor = self._read_raw(h, run, since, limit, False)
        if raw is None:
            return [], since
        with gc_paused():  # a million records: repeated collections otherwise
            return raw.records(run, h.writers), cursor

    @_gated
    def read_columns(self, run: str, since: Cursor = None, limit: Optional[int] = None,
                     writers: bool = False) -> Tuple[EventPage, Cursor]:
        """As :meth:`read`, but the events as numpy columns (no Python object
        per event): what the engine reads (:meth:`EventTables.add_page`).
        ``writers``: each row's writer and sequence number too
        (``EventPage.writer``, ``seq``, ``writer_keys``)."""
        if limit is not None and limit <= 0:
            return EventPage.empty(run), since
        h = self._handle()
        raw, cursor = self._read_raw(h, run, since, limit,
                                     chunks.WRITER_COLUMNS if writers else True)
        if raw is None:
            return EventPage.empty(run), cursor
        page = raw.page(run, with_writers=writers)
        w = page.writer if writers else raw.writer
        distinct = w[:1] if len(w) and (w == w[0]).all() else _distinct(w)
        keys = {x: h.writers[x] for x in distinct.tolist()}
        page.process_indices = tuple({k[0] for k in keys.values()})
        page.writers = tuple({k[1:3] for k in keys.values()})
        if writers:
            page.writer_keys = keys
        return page, cursor

    def _read_raw(self, h, run: str, since: Cursor, limit: Optional[int],
                  engine_only: Any):
        """``(Raw or None for an unknown run, cursor)``; counts corrupt rows."""
        run_id = h.run_ids.get(run)
        if run_id is None:
            if self.readonly and self._schema_version(h.conn) is None:
                return None, since  # an empty file: no run yet
            found = self._query("SELECT run_id FROM runs WHERE name = ?", (run,))
            if not found:
                return None, since
            run_id = h.run_ids[run] = found[0][0]
        try:
            raw, last = self._retry(chunks.read_raw, h.conn, run_id,
                                    0 if since is None else int(since),
                                    -1 if limit is None else int(limit), engine_only)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        if raw.corrupt:
            self._count_corrupt(raw.corrupt)
        return raw, (since if last is None else last)

    def _count_corrupt(self, found: collections.Counter) -> None:
        with self._lock:
            new = [r for r in found if r not in self.corrupt]
            self.corrupt.update(found)
        for reason in new:  # once per reason and store: a warning, not a flood
            logger.warning("goodput: skipping corrupt rows in %s (%s; more may follow)",
                           self.url, reason.replace("corrupt_", "bad ").replace("_", " "))
