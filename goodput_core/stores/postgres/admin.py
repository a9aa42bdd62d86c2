"""``goodput compact`` for the PostgreSQL store: pack every run's settled events.

Writers pack a run's events into chunks as they write it
(:mod:`goodput_core.stores.postgres.chunks`), one chunk per batch at most. A
run that nobody writes to any more keeps what was not packed: a run written
before chunks existed, or by a writer that did not pack (``chunk_events=0``,
a role not allowed to write ``chunks``), stays rows for good, and is read
from rows (about five times slower). :func:`compact` packs every full chunk
of every run, as the embedded store's ``goodput compact`` does, then has the
server analyze the two tables (the planner's statistics for the reads).

Safe while writers run: each chunk is one transaction holding its run's
advisory lock, the one the writers of the run take turns on, so the chunk
takes only committed events and no writer waits longer than one pack
(about 40 ms per 65,536 events); packing is idempotent, so a compaction
interrupted, or run twice at once, leaves the same chunks.
"""

from __future__ import annotations

from typing import Any, Dict

from goodput_core.stores.base import StoreError
from goodput_core.stores.postgres.chunks import CHUNK_EVENTS, TAIL_EVENTS, pack

__all__ = ["compact"]


def compact(store: Any, size: int = CHUNK_EVENTS, tail: int = TAIL_EVENTS) -> Dict[str, int]:
    """Packs the events of every run of ``store`` (a
    :class:`~goodput_core.stores.postgres.PostgresStore`) not packed yet: full
    chunks of ``size`` events, then the rest as a shorter chunk if at least
    ``tail`` events (0: full chunks only).

    Returns:
      ``{"runs": runs that got a chunk, "chunks": chunks it wrote, "events": events
      packed into chunks meanwhile}`` (writers packing at the same time included).

    Raises:
      StoreError: the server cannot be reached, or the role may not create or
        write the ``chunks`` table (the reason in the message).
    """
    if store._packing_refused:  # the schema check could not add the table
        raise StoreError(store._packing_refused.replace("this writer does not pack chunks",
                                                        "cannot pack chunks", 1))
    sql, lock = store._sql, store._lock_ns

    def work(conn) -> Dict[str, int]:
        done = {"runs": 0, "chunks": 0, "events": 0}
        reader = store._reader  # the store's reader part (stores/postgres/read.py)
        if not reader.chunks_readable(conn):
            with conn.transaction():
                conn.execute(sql["create_chunks"])
            store._chunking.has_table = True
        before = _packed_events(conn, sql)
        names = [n for n, in conn.execute(sql["runs"])]
        for _, run_id in sorted(conn.execute(sql["run_ids"], (names,)).fetchall(),
                                key=lambda r: r[1]):
            made = 0
            while True:  # one chunk per transaction: writers of the run wait one pack
                with conn.transaction():
                    conn.execute(sql["lock_run"], (lock, run_id))
                    n = pack(conn, sql, run_id, size, tail)
                if not n:
                    break
                made += n
            if made:
                done["runs"] += 1
                done["chunks"] += made
        done["events"] = _packed_events(conn, sql) - before
        # The planner's statistics (a role that owns neither table gets a
        # server WARNING and nothing else).
        conn.execute(f"ANALYZE {sql['chunks_table']}, {sql['events_table']}")
        return done

    return store._reader.query(work)  # a refusal or a lost server: StoreError, said in one line


def _packed_events(conn: Any, sql: Dict[str, str]) -> int:
    return int(conn.execute(f"SELECT coalesce(sum(n), 0) FROM {sql['chunks_table']}"
                            ).fetchone()[0])
