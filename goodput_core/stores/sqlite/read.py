"""The embedded store's reader: events as records or numpy columns, corrupt
rows skipped and counted.

A :class:`~goodput_core.stores.sqlite.store.SqliteStore` *has* one
:class:`Reader`, on the store's :class:`~goodput_core.stores.sqlite.connections.Connections`.
"""

from __future__ import annotations

import collections
import logging
import sqlite3
import threading
from typing import Any, List, Optional, Tuple

import numpy as np

from goodput_core.events import EventRecord
from goodput_core.stores.base import Cursor
from goodput_core.stores.columns import EventPage
from goodput_core.stores.gc_pause import gc_paused
from goodput_core.stores.sqlite import chunks
from goodput_core.stores.sqlite.connections import Connections
from goodput_core.stores.sqlite.schema import schema_version

__all__ = ["Reader"]

logger = logging.getLogger("goodput")


def _distinct(w: np.ndarray) -> np.ndarray:
    """The distinct writer ids of a page (small integers: counted, not sorted)."""
    if not len(w):
        return w
    if w.min() >= 0 and w.max() < 4 * len(w) + 65536:
        return np.flatnonzero(np.bincount(w))
    return np.unique(w)


class Reader:
    """Reading events (records or columns) of one store.

    Args:
      conns: the store's connections.
      url: the store's URL (warnings name it).
    """

    def __init__(self, conns: Connections, url: str):
        self._conns = conns
        self._url = url
        self._lock = threading.Lock()
        #: corrupt rows skipped by this store's reads, per reason
        self.corrupt: collections.Counter = collections.Counter()

    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        """See :meth:`SqliteStore.read <goodput_core.stores.sqlite.store.SqliteStore.read>`."""
        if limit is not None and limit <= 0:
            return [], since
        h = self._conns.handle()
        raw, cursor = self._read_raw(h, run, since, limit, False)
        if raw is None:
            return [], since
        with gc_paused():  # a million records: repeated collections otherwise
            return raw.records(run, h.writers), cursor

    def read_columns(self, run: str, since: Cursor = None, limit: Optional[int] = None,
                     writers: bool = False) -> Tuple[EventPage, Cursor]:
        """See :meth:`SqliteStore.read_columns
        <goodput_core.stores.sqlite.store.SqliteStore.read_columns>`."""
        if limit is not None and limit <= 0:
            return EventPage.empty(run), since
        h = self._conns.handle()
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
        conns = self._conns
        run_id = h.run_ids.get(run)
        if run_id is None:
            if conns.readonly and schema_version(h.conn) is None:
                return None, since  # an empty file: no run yet
            found = conns.query("SELECT run_id FROM runs WHERE name = ?", (run,))
            if not found:
                return None, since
            run_id = h.run_ids[run] = found[0][0]
        try:
            raw, last = conns.retry(chunks.read_raw, h.conn, run_id,
                                    0 if since is None else int(since),
                                    -1 if limit is None else int(limit), engine_only)
        except sqlite3.Error as exc:
            raise conns.error(exc) from exc
        if raw.corrupt:
            self._count_corrupt(raw.corrupt)
        return raw, (since if last is None else last)

    def _count_corrupt(self, found: collections.Counter) -> None:
        with self._lock:
            new = [r for r in found if r not in self.corrupt]
            self.corrupt.update(found)
        for reason in new:  # once per reason and store: a warning, not a flood
            logger.warning("goodput: skipping corrupt rows in %s (%s; more may follow)",
                           self._url, reason.replace("corrupt_", "bad ").replace("_", " "))
