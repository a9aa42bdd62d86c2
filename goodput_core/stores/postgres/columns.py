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
and parsed one by one, by a second query.

The aggregate's input order is the page's ``ORDER BY id``, which PostgreSQL
keeps in practice but does not promise; the ids come along, and the page is
sorted by them on this side when they are not increasing.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Tuple

import numpy as np

from goodput_core.stores.columns import EventPage

__all__ = ["read_page", "column_statements"]

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


def column_statements(s: str) -> Dict[str, str]:
    """The two queries of a page (``s``: the quoted schema, as in postgres/sql.py)."""
    aggs = ", ".join(f"string_agg({expr}, ''::bytea)" for _, expr, _ in _COLUMNS)
    return {
        "columns": f"SELECT count(*), {aggs} FROM (SELECT * FROM {s}.events"
                   " WHERE run_id = %s AND id > %s ORDER BY id LIMIT %s) AS page",
        "extras": f"SELECT id, extra FROM {s}.events WHERE run_id = %s AND id > %s"
                  " AND id <= %s AND extra IS NOT NULL ORDER BY id",
    }


def read_page(conn: Any, sql: Dict[str, str], run: str, run_id: int, since: int, limit: int,
              writer_of: Callable[[int], Tuple[int, str, int, str]],
              skipped: Dict[str, int]) -> Tuple[EventPage, int]:
    """Up to ``limit`` events of ``run`` after id ``since``, as columns.

    Returns:
      ``(page, the last id read, or since when none)``.
    """
    n, *blobs = conn.execute(sql["columns"], (run_id, since, limit), binary=True).fetchone()
    if not n:
        return EventPage.empty(run), since
    col = {name: np.frombuffer(blob, dtype) for (name, _, dtype), blob in zip(_COLUMNS, blobs)}
    ids = col["id"].astype(np.int64)
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # see the module docstring
        order = np.argsort(ids, kind="stable")
        col = {name: a[order] for name, a in col.items()}
        ids = ids[order]
    extra: Dict[int, Any] = {}
    if col["has_extra"].any():
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
    page = EventPage(run, col["kind"].astype(np.int64), col["time"].astype(np.float64),
                     col["step"].astype(np.int64), col["has_step"].copy(),
                     col["wt"].astype(np.float64), extra)
    writers = [writer_of(w) for w in np.unique(col["writer"]).tolist()]
    page.process_indices = tuple({w[0] for w in writers})
    page.writers = tuple({tuple(w[1:3]) for w in writers})
    return page, int(ids[-1])
