"""Reading a PostgreSQL run as numpy columns: what the engine reads.

:meth:`PostgresStore.read` builds one :class:`~goodput_core.events.EventRecord`
per event from rows fetched by the driver (one Python tuple per row): about
200,000 events/s. The engine needs only a few columns, so :func:`read_page`
asks the server for each of them as one ``bytea`` (``string_agg`` of the
values' binary send form, big-endian, NULLs turned into NaN or a flag by the
query) and reads each with one ``numpy.frombuffer``: no Python object per
event, on either side of the driver (a binary ``COPY`` would still hand
Python one block per row). Only events that carry an ``extra`` payload (a
small minority: custom badput, disruptions, metadata, metrics) are fetched
and parsed one by one, by a second query. The same expressions, aggregated
into one ``bytea`` (:data:`PACKED`), are what the writers store in the packed
chunks (:mod:`goodput_core.stores.postgres.chunks`), read back by
:func:`unpack`: a run's chunks cost the server no per-event work at read time.

The aggregate's input order is the page's ``ORDER BY id``, which PostgreSQL
keeps in practice but does not promise; the ids come along, and the page is
sorted by them on this side when they are not increasing.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

from goodput_core.stores.columns import EventPage

__all__ = ["read_page", "page_of", "in_id_order", "unpack", "column_statements", "PACKED",
           "NATIVE", "INDEX_WALK", "ENGINE_BYTES", "PACKED_BYTES", "distinct"]

#: (name, SQL expression, numpy dtype of its send form)
_COLUMNS = (
    ("kind", "int4send(kind)", ">i4"),
    ("time", "float8send(COALESCE(time, 'NaN'::float8))", ">f8"),
    ("step", "int8send(COALESCE(step, 0))", ">i8"),
    ("has_step", "boolsend(step IS NOT NULL)", "?"),
    ("writer", "int4send(writer_id)", ">i4"),
    ("id", "int8send(id)", ">i8"),
    ("wt", "float8send(COALESCE(write_time, 'NaN'::float8))", ">f8"),
    ("has_extra", "boolsend(extra IS NOT NULL)", "?"),
)
#: What a packed chunk holds: the engine's columns and the sequence numbers
#: (so that ``read`` can build whole records from chunks too).
_PACKED_COLUMNS = _COLUMNS + (("seq", "int8send(seq)", ">i8"),)


#: The dtype of each column in a page (native byte order).
NATIVE = {name: np.dtype(dtype).newbyteorder("=") for name, _, dtype in _PACKED_COLUMNS}
NATIVE.update(kind=np.dtype(np.int64))


def _native(a: np.ndarray, name: str) -> np.ndarray:
    """``a`` as the page's own writable native array (no copy when it is one)."""
    dtype = NATIVE[name]
    return a if a.dtype == dtype and a.flags.writeable else a.astype(dtype)


#: One SQL expression aggregating a group of events into one ``bytea``: each
#: column's values one after the other, in :data:`_PACKED_COLUMNS`'s order
#: (what :func:`unpack` reads; the packed chunks' layout). Chunks stored in a
#: database keep it: a change to ``_PACKED_COLUMNS`` needs a new chunks table
#: (old chunks would be misread).
PACKED = " || ".join(f"string_agg({expr}, ''::bytea)" for _, expr, _ in _PACKED_COLUMNS)


#: Run in a page's transaction before its query: the planner then walks the
#: ``(run_id, id)`` index (see ``postgres_read._in_id_order``).
INDEX_WALK = "SET LOCAL enable_sort = off"


def column_statements(s: str) -> Dict[str, str]:
    """The two queries of a page (``s``: the quoted schema, as in postgres/sql.py)."""
    def columns(names) -> str:
        aggs = ", ".join(f"string_agg({expr}, ''::bytea)" for _, expr, _ in names)
        return (f"SELECT count(*), {aggs} FROM (SELECT * FROM {s}.events"
                " WHERE run_id = %s AND id > %s ORDER BY id LIMIT %s) AS page")

    return {
        "columns": columns(_COLUMNS),
        # with the sequence numbers too (pages read with their writers)
        "columns_seq": columns(_PACKED_COLUMNS),
        "extras": f"SELECT id, extra FROM {s}.events WHERE run_id = %s AND id > %s"
                  " AND id <= %s AND extra IS NOT NULL ORDER BY id",
    }


def read_page(conn: Any, sql: Dict[str, str], run: str, run_id: int, since: int, limit: int,
              writer_of: Callable[[int], Tuple[int, str, int, str]],
              skipped: Dict[str, int], with_writers: bool = False) -> Tuple[EventPage, int]:
    """Up to ``limit`` events of ``run`` after id ``since``, as columns, from rows
    (``with_writers``: each row's writer and sequence number too).

    Returns:
      ``(page, the last id read, or since when none)``.
    """
    names = _PACKED_COLUMNS if with_writers else _COLUMNS
    n, *blobs = conn.execute(sql["columns_seq" if with_writers else "columns"],
                             (run_id, since, limit), binary=True).fetchone()
    if not n:
        return EventPage.empty(run), since
    col = {name: np.frombuffer(blob, dtype) for (name, _, dtype), blob in zip(names, blobs)}
    return page_of(conn, sql, run, run_id, since, col, writer_of, skipped,
                   with_writers=with_writers)


#: Bytes per event of the engine's columns: a packed chunk's first ``n`` times
#: this many bytes (what ``read_columns`` asks of a chunk: not the sequence numbers).
ENGINE_BYTES = sum(np.dtype(dtype).itemsize for _, _, dtype in _COLUMNS)
#: Bytes per event of a whole packed chunk.
PACKED_BYTES = sum(np.dtype(dtype).itemsize for _, _, dtype in _PACKED_COLUMNS)


def unpack(n: int, blob: bytes) -> Dict[str, np.ndarray]:
    """The columns of ``n`` events packed one after the other in ``blob``
    (:data:`PACKED`'s layout, whole or its first ``n * ENGINE_BYTES`` bytes),
    as views of it."""
    col, offset = {}, 0
    for name, _, dtype in _COLUMNS if len(blob) == n * ENGINE_BYTES else _PACKED_COLUMNS:
        col[name] = np.frombuffer(blob, dtype, count=n, offset=offset)
        offset += n * col[name].itemsize
    if offset != len(blob):
        raise ValueError(f"a packed chunk of {n} events holds {len(blob)} bytes, not {offset}")
    return col


def distinct(values: np.ndarray) -> List[int]:
    """The distinct values of ``values`` (a run's pages mostly have one writer:
    checked first, in one pass)."""
    if len(values) and (values == values[0]).all():
        return [int(values[0])]
    return np.unique(values).tolist()


def in_id_order(col: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The columns ``col`` with their rows sorted by ``col["id"]`` (as they are
    when the ids already increase: see the module docstring)."""
    ids = col["id"]
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():
        order = np.argsort(ids, kind="stable")
        col = {name: a[order] for name, a in col.items()}
    return col


def page_of(conn: Any, sql: Dict[str, str], run: str, run_id: int, since: int,
            col: Dict[str, np.ndarray], writer_of: Callable[[int], Tuple[int, str, int, str]],
            skipped: Dict[str, int],
            extras: Optional[Iterable[Tuple[int, str]]] = None,
            with_writers: bool = False) -> Tuple[EventPage, int]:
    """The page of the columns ``col`` (big-endian, as sent; events after id
    ``since``): ordered by id, with the extras of the rows that have one
    parsed (``extras``: their ``(id, text)``, at least those of the page;
    None: fetched here), and its writers (``with_writers``: per row, with the
    sequence numbers, which ``col`` then holds).

    Returns:
      ``(page, the last id in it)``.
    """
    col = in_id_order(col)
    ids = _native(col["id"], "id")
    extra: Dict[int, Any] = {}
    if col["has_extra"].any():
        loads = json.loads
        if extras is None:
            extras = conn.execute(sql["extras"], (run_id, since, int(ids[-1]))).fetchall()
        extras = list(extras)
        where = np.searchsorted(ids, np.array([eid for eid, _ in extras], np.int64)).tolist()
        for i, (eid, text) in zip(where, extras):
            if i >= len(ids) or ids[i] != eid:  # not in this page
                continue
            try:
                extra[i] = loads(text)
            except ValueError:
                skipped["bad_extra"] += 1  # kept without its payload, as read() does
    page = EventPage(run, *(_native(col[name], name) for name in
                            ("kind", "time", "step", "has_step", "wt")), extra)
    codes = distinct(col["writer"])
    writers = [writer_of(w) for w in codes]
    page.process_indices = tuple({w[0] for w in writers})
    page.writers = tuple({tuple(w[1:3]) for w in writers})
    if with_writers:
        page.writer = col["writer"].astype(np.int32)
        page.seq = _native(col["seq"], "seq")
        page.writer_keys = dict(zip(codes, writers))
    return page, int(ids[-1])
