"""Packed column chunks of the PostgreSQL store: what makes a large run quick to read.

Reading a run from rows costs the server an index walk and an aggregate over
every event at every read (about 0.5 s per million events on a 2-core
machine, most of a cold ``goodput report``). So the writers also keep each
run's settled events packed, :data:`CHUNK_EVENTS` at a time, in a table of
their own::

    chunks (run_id INTEGER, last_id BIGINT,   -- PRIMARY KEY (run_id, last_id)
            first_id BIGINT, n INTEGER,       -- ids of its first and last event, count
            cols BYTEA,                       -- the engine's columns and seq, packed
                                              -- (postgres_columns.PACKED; stored
                                              --  uncompressed: STORAGE EXTERNAL)
            extra_ids BIGINT[], extras TEXT[])  -- the events' extra texts, by id

A chunk is a copy, not a move: ``events`` keeps every row, so the
``(writer, seq)`` check that stores a resent batch once, readers of older
versions and a database no writer packs go on exactly as before. It costs
about 50 bytes per event beside the row's ~135.

**Packing** runs in the writer's batch transaction, after its insert, while
it holds the run's advisory lock (writers of a run take turns on it), so no
other batch of the run is half-written: every id of the run up to its
largest is committed or in this transaction. The next chunk is the
:data:`CHUNK_EVENTS` events of the run after the last chunk's ``last_id``,
taken by the ``(run_id, id)`` index in id order; it is written only when
that many exist (``HAVING count(*) >= n``), or, in a batch holding the run's
job end or a compaction, when at least :data:`TAIL_EVENTS` are left (the
run's rest: a shorter chunk). Chunks are therefore contiguous,
non-overlapping prefixes of their run, never change, and are written at most
once (the primary key, ``ON CONFLICT DO NOTHING``): packing is idempotent
and needs no state outside the transaction (fit for a transaction-pooling
pgbouncer). It rolls back with its batch. At most :data:`CHUNKS_PER_BATCH`
chunk per batch: a run written before chunks existed catches up one chunk per
batch, so no batch holds the run's lock much longer than its insert. A
writer not allowed to write ``chunks`` logs it once and stops packing; a
pack the server cancels (``statement_timeout``) is left to a later batch.

**Reading** takes the keys of the chunks after the cursor with the run's
largest id (one statement), then those chunks one by one (the packed bytes
sent as they are stored), then the rows after the last chunk, as before,
unless the chunks reached the run's largest id. Rows are never deleted, so a chunk written between the two queries
hides nothing: the rows after the last chunk seen are still rows.
"""

from __future__ import annotations

import json
from itertools import repeat
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

from goodput_core.events import EventRecord
from goodput_core.stores.columns import EventPage
from goodput_core.stores.postgres.columns import (
    ENGINE_BYTES, INDEX_WALK, NATIVE, PACKED, PACKED_BYTES, distinct, in_id_order, page_of,
    unpack)

__all__ = ["CHUNK_EVENTS", "CHUNKS_PER_BATCH", "TAIL_EVENTS", "MORE_CHUNKS", "ROWS_AFTER",
           "NOTHING_AFTER", "chunk_statements", "pack", "read_chunks",
           "read_chunk_records"]

CHUNK_EVENTS = 65_536  # 3.3 MB packed; 4 make one 262,144-event page of the engine
CHUNKS_PER_BATCH = 1
#: A run's events after its last full chunk are packed as a shorter chunk when
#: the run ends (a batch holds its job end) or is compacted, if at least this
#: many: a run shorter than a chunk (most of a fleet's) is then read from one
#: chunk too. Fewer stay rows: cheap to read, and a job of many hosts, each
#: ending, makes no crowd of tiny chunks.
TAIL_EVENTS = 4_096


_WITH_EXTRA = "array_agg({}) FILTER (WHERE extra IS NOT NULL)"


def chunk_statements(s: str) -> Dict[str, str]:
    """The statements of the packed chunks (``s``: the quoted schema)."""
    return {
        "create_chunks": f"CREATE TABLE IF NOT EXISTS {s}.chunks (run_id INTEGER NOT NULL,"
                         " last_id BIGINT NOT NULL, first_id BIGINT NOT NULL,"
                         " n INTEGER NOT NULL, cols BYTEA NOT NULL, extra_ids BIGINT[],"
                         " extras TEXT[], PRIMARY KEY (run_id, last_id));"
                         # already dense: compressing would only slow reads
                         f" ALTER TABLE {s}.chunks ALTER COLUMN cols SET STORAGE EXTERNAL;",
        "chunks_table": f"{s}.chunks",
        "chunk_due": f"SELECT coalesce((SELECT max(last_id) FROM {s}.chunks"
                     " WHERE run_id = %(run)s), 0), coalesce((SELECT max(id) FROM"
                     f" {s}.events WHERE run_id = %(run)s), 0)",
        "pack": f"INSERT INTO {s}.chunks (run_id, last_id, first_id, n, cols, extra_ids,"
                f" extras) SELECT %(run)s, max(id), min(id), count(*), {PACKED},"
                f" {_WITH_EXTRA.format('id')}, {_WITH_EXTRA.format('extra')} FROM"
                f" (SELECT * FROM {s}.events WHERE run_id = %(run)s AND id > %(after)s"
                " ORDER BY id LIMIT %(n)s) AS page HAVING count(*) >= %(least)s"
                " ON CONFLICT DO NOTHING RETURNING last_id",
        # Which chunks come next, then those chunks by their key: in one statement
        # the planner may scan, filter and sort the run's rest (a table not yet
        # analyzed), computing the blob of every later chunk before the LIMIT:
        # each page then read all of the rest (8 s instead of 1 s at 10 M events).
        # With the run's largest id, on every row and on a row of its own when no
        # chunk follows (a run read to its end needs no query of its rows).
        "chunk_keys": f"SELECT (SELECT max(id) FROM {s}.events WHERE run_id = %(run)s),"
                      " c.last_id, c.n FROM (SELECT) AS one LEFT JOIN LATERAL (SELECT"
                      f" last_id, n FROM {s}.chunks WHERE run_id = %(run)s AND"
                      " last_id > %(since)s ORDER BY last_id LIMIT %(k)s) AS c ON true",
        # The first n * %s bytes of each: uncompressed (STORAGE EXTERNAL), the
        # server reads and sends only those (read_columns needs no seq).
        "chunks": f"SELECT last_id, substring(cols, 1, n * %s), extra_ids, extras FROM"
                  f" {s}.chunks WHERE run_id = %s AND last_id = ANY(%s)",
    }


def pack(conn: Any, sql: Dict[str, str], run_id: int, size: int, tail: int = 0) -> int:
    """Packs the run's next chunk of ``size`` events, if that many are settled;
    with ``tail``, else the rest of the run as a shorter chunk, if at least
    ``tail`` events (a run that ended: :data:`TAIL_EVENTS`).

    Runs inside a transaction that holds the run's lock (see the module
    docstring). Returns the number of chunks written.
    """
    least = min(tail, size) if tail > 0 else size
    after, top = conn.execute(sql["chunk_due"], {"run": run_id}).fetchone()
    if top - after < least:  # ids are unique: fewer ids than that, fewer events
        return 0
    # The index walk, not a sort of the run's unpacked rest (see postgres_read).
    conn.execute(INDEX_WALK)
    made = 0
    while made < CHUNKS_PER_BATCH:
        row = conn.execute(sql["pack"], {"run": run_id, "after": after, "n": size,
                                         "least": least}, binary=True).fetchone()
        if row is None:
            break
        after, made = row[0], made + 1
    return made


#: What may follow a read of chunks (:func:`read_chunks`): more chunks, rows
#: only (the chunks ran out), or nothing (the run's last event was read).
MORE_CHUNKS, ROWS_AFTER, NOTHING_AFTER = "chunks", "rows", "nothing"


def _chunk_columns(conn: Any, sql: Dict[str, str], run_id: int, since: int, limit: int,
                   chunk_events: int, event_bytes: int
                   ) -> Tuple[Optional[Dict[str, np.ndarray]], list, str]:
    """Up to ``limit`` events after id ``since`` from the run's chunks, as
    native columns in id order (the engine's, and the sequence numbers when
    ``event_bytes`` is ``PACKED_BYTES``), with the ``(id, extra text)`` of the
    chunks read (None, no event: past the last chunk), and what may follow.

    Asks for as many chunks as ``limit`` events fill at ``chunk_events`` each
    (a cursor inside a chunk, or a shorter chunk, leaves the result short: the
    caller reads on). The same statement tells the run's largest id: a run read
    to its end needs no query of its rows.
    """
    wanted = max(1, -(-limit // chunk_events))
    found = conn.execute(sql["chunk_keys"], {"run": run_id, "since": since, "k": wanted}
                         ).fetchall()
    top = found[0][0]
    keys = [(k, n) for _, k, n in found if k is not None]
    total = sum(n for _, n in keys)
    offsets, at = {}, 0
    for last_id, n in keys:
        offsets[last_id] = (at, n)
        at += n
    col: Dict[str, np.ndarray] = {}
    extras: list = []
    got = set()
    if keys:
        # One statement; its rows taken one at a time and copied into the
        # page's own native arrays at once: one chunk's bytes (3.2 MB) are
        # held beside the driver's result at a time, not the whole page's.
        cur = conn.execute(sql["chunks"], (event_bytes, run_id, list(offsets)), binary=True)
        for row in cur:
            off, n = offsets[row[0]]
            part = unpack(n, row[1])
            if not col:
                col = {name: np.empty(total, NATIVE[name]) for name in part}
            for name, values in part.items():
                col[name][off:off + n] = values
            if row[2]:
                extras.extend(zip(row[2], row[3]))
            got.add(row[0])
            del row, part
        cur.close()  # the driver's result goes now
    at = 0
    for last_id, n in keys:  # the chunks read from the first: a prefix of the run
        if last_id not in got:  # deleted by hand since its key was read
            break
        at += n
    out: Optional[Dict[str, np.ndarray]] = None
    if at:
        out = in_id_order({name: a[:at] for name, a in col.items()})
        ids = out["id"]
        start = int(np.searchsorted(ids, since, side="right")) if ids[0] <= since else 0
        if start or len(ids) - start > limit:
            out = {name: a[start:start + limit] for name, a in out.items()}
    last = int(out["id"][-1]) if out is not None and len(out["id"]) else since
    if top is None or top <= last:
        after = NOTHING_AFTER
    elif at < total:  # a chunk gone: its events are still rows
        after = ROWS_AFTER
    elif len(keys) == wanted or (at and last < ids[-1]):  # the limit cut a chunk
        after = MORE_CHUNKS
    else:
        after = ROWS_AFTER
    return (out if last != since else None), extras, after


def read_chunks(conn: Any, sql: Dict[str, str], run: str, run_id: int, since: int,
                limit: int, chunk_events: int,
                writer_of: Callable[[int], Tuple[int, str, int, str]],
                skipped: Dict[str, int], with_writers: bool = False
                ) -> Tuple[EventPage, int, str]:
    """Up to ``limit`` events of ``run`` after id ``since`` from its packed
    chunks, as a page (fewer when the cursor is inside a chunk; ``with_writers``:
    each row's writer and sequence number too).

    Returns:
      ``(page, the last id read or since, what may follow)``: ``MORE_CHUNKS``,
      ``ROWS_AFTER`` or ``NOTHING_AFTER``.
    """
    col, extras, after = _chunk_columns(conn, sql, run_id, since, limit, chunk_events,
                                        PACKED_BYTES if with_writers else ENGINE_BYTES)
    if col is None:
        return EventPage.empty(run), since, after
    return (*page_of(conn, sql, run, run_id, since, col, writer_of, skipped, extras,
                     with_writers), after)


def read_chunk_records(conn: Any, sql: Dict[str, str], run: str, run_id: int, since: int,
                       limit: int, chunk_events: int,
                       writer_of: Callable[[int], Tuple[int, str, int, str]],
                       skipped: Dict[str, int]) -> Tuple[List[EventRecord], int, str]:
    """As :func:`read_chunks`, but the events as records, as ``read`` builds
    them from rows (no time: NaN; no step: None; an ``extra`` that is not
    JSON: None, counted in ``skipped["bad_extra"]``). Built column by column
    (``map`` over lists: no Python loop per event), about 3 times quicker
    than one record per loop step.

    Returns:
      ``(records, the last id read or since, what may follow)``.
    """
    col, extras, after = _chunk_columns(conn, sql, run_id, since, limit, chunk_events,
                                        PACKED_BYTES)
    if col is None:
        return [], since, after
    ids = col["id"]
    n = len(ids)
    payloads: List[Any] = [None] * n
    if extras:
        text_of = dict(extras)
        loads = json.loads
        for i in np.flatnonzero(col["has_extra"]).tolist():
            text = text_of.get(int(ids[i]))
            try:
                payloads[i] = None if text is None else loads(text)
            except ValueError:
                skipped["bad_extra"] += 1
    steps = col["step"].astype(object)
    steps[~col["has_step"]] = None
    out = list(map(EventRecord, repeat(run, n), col["kind"].tolist(), col["time"].tolist(),
                   steps.tolist(), payloads, *_writer_columns(col["writer"], writer_of),
                   col["seq"].tolist(), col["wt"].tolist()))
    return out, int(ids[-1]), after


def _writer_columns(writers: np.ndarray, writer_of: Callable[[int], Tuple[int, str, int, str]]
                    ) -> List[Iterable[Any]]:
    """The process index, host, pid and attempt of each event, as four
    iterables, from its writer id (one look-up per distinct writer)."""
    ids = distinct(writers)
    if len(ids) == 1:
        return [repeat(v, len(writers)) for v in writer_of(ids[0])]
    where = np.searchsorted(np.array(ids, dtype=writers.dtype), writers)
    metas = [writer_of(w) for w in ids]
    out = []
    for field in range(4):
        values = np.empty(len(metas), dtype=object)
        values[:] = [m[field] for m in metas]
        out.append(values[where].tolist())
    return out
