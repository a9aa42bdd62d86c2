"""Reading a PostgreSQL run as numpy columns: what the engine reads.

:meth:`PostgresStore.read` builds one :class:`~goodput_core.events.EventRecord`
per event from rows fetched by the driver (one Python tuple per row): about
200,000 events/s. The engine needs only a few columns, so
:func:`read_page` asks the server for them as a binary ``COPY``, every
field fixed-width (NULLs turned into NaN or a flag by the query), and
reads the stream with one ``numpy.frombuffer``. Only events that carry an
``extra`` payload (a small minority: custom badput, disruptions, metadata,
metrics) are fetched and parsed one by one, by a second query.

The layout of a binary COPY stream (PostgreSQL's documentation, "COPY: Binary
Format"): an 11-byte signature, a 32-bit flags field and a 32-bit header
extension length (then that many bytes), then one tuple after another (a
16-bit field count, then each field as a 32-bit length and its bytes, all
big-endian), then a 16-bit -1.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from goodput_core.stores.base import StoreError
from goodput_core.stores.columns import EventPage

__all__ = ["read_page", "column_statements"]

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
#: One tuple of the COPY below: field count, then (length, value) per field.
_ROW = np.dtype([("n", ">i2"),
                 ("l_kind", ">i4"), ("kind", ">i4"),
                 ("l_time", ">i4"), ("time", ">f8"),
                 ("l_step", ">i4"), ("step", ">i8"),
                 ("l_has_step", ">i4"), ("has_step", "?"),
                 ("l_writer", ">i4"), ("writer", ">i4"),
                 ("l_id", ">i4"), ("id", ">i8"),
                 ("l_wt", ">i4"), ("wt", ">f8"),
                 ("l_has_extra", ">i4"), ("has_extra", "?")])
_LENGTHS = {"l_kind": 4, "l_time": 8, "l_step": 8, "l_has_step": 1, "l_writer": 4, "l_id": 8,
            "l_wt": 8, "l_has_extra": 1}


def column_statements(s: str) -> Dict[str, str]:
    """The two queries of a page (``s``: the quoted schema, as in postgres_sql)."""
    return {
        # Every field fixed-width, none NULL: the stream is an array of _ROW.
        "copy_columns": "COPY (SELECT kind, COALESCE(time, 'NaN'::float8), COALESCE(step, 0),"
                        " step IS NOT NULL, writer_id, id, COALESCE(write_time, 'NaN'::float8),"
                        " extra IS NOT NULL"
                        f" FROM {s}.events WHERE run_id = %s AND id > %s ORDER BY id LIMIT %s)"
                        " TO STDOUT (FORMAT BINARY)",
        "extras": f"SELECT id, extra FROM {s}.events WHERE run_id = %s AND id > %s"
                  " AND id <= %s AND extra IS NOT NULL ORDER BY id",
    }


def _parse(data: bytes) -> Optional[np.ndarray]:
    """The tuples of a binary COPY stream, or None when it is not laid out as
    expected (the caller then reads rows instead)."""
    if not data.startswith(_SIGNATURE) or len(data) < 21:
        return None
    ext = int.from_bytes(data[15:19], "big")
    start, end = 19 + ext, len(data) - 2
    if data[end:] != b"\xff\xff" or (end - start) % _ROW.itemsize:
        return None
    rows = np.frombuffer(data, _ROW, count=(end - start) // _ROW.itemsize, offset=start)
    if len(rows) and not ((rows["n"] == 8).all()
                          and all((rows[k] == n).all() for k, n in _LENGTHS.items())):
        return None
    return rows


def read_page(conn: Any, sql: Dict[str, str], run: str, run_id: int, since: int, limit: int,
              writer_of: Callable[[int], Tuple[int, str, int, str]],
              skipped: Dict[str, int]) -> Tuple[EventPage, int]:
    """Up to ``limit`` events of ``run`` after id ``since``, as columns.

    Returns:
      ``(page, the last id read, or since when none)``.

    Raises:
      StoreError: the server sent a stream not laid out as documented.
    """
    with conn.cursor() as cur:
        with cur.copy(sql["copy_columns"], (run_id, since, limit)) as copy:
            data = b"".join(bytes(block) for block in copy)
    rows = _parse(data)
    if rows is None:
        raise StoreError("the server's binary COPY stream is not laid out as expected")
    if not len(rows):
        return EventPage.empty(run), since
    ids = rows["id"].astype(np.int64)
    extra: Dict[int, Any] = {}
    if rows["has_extra"].any():
        loads = json.loads
        for eid, text in conn.execute(sql["extras"], (run_id, since, int(ids[-1]))).fetchall():
            try:
                payload = loads(text)
            except ValueError:
                skipped["bad_extra"] += 1  # kept without its payload, as read() does
                continue
            i = int(np.searchsorted(ids, eid))
            if i < len(ids) and ids[i] == eid:  # (ids of a run grow in commit order)
                extra[i] = payload
    page = EventPage(run, rows["kind"].astype(np.int64), rows["time"].astype(np.float64),
                     rows["step"].astype(np.int64), rows["has_step"].copy(),
                     rows["wt"].astype(np.float64), extra)
    writers = np.unique(rows["writer"]).tolist()
    page.process_indices = tuple({writer_of(w)[0] for w in writers})
    return page, int(ids[-1])
