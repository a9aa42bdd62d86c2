"""``goodput compact`` on a PostgreSQL store (stores/postgres/admin.py), on a
real server (tests/core/conftest.py's fixtures).

Runs written before chunks existed (a writer with ``chunk_events=0`` writes
that layout: no ``chunks`` table) stay rows until compacted; the truth is
the tables read with SQL (helpers postgres/test_chunks.py's helpers helpers): every chunk is its
run's next events, and reads return what the tables hold.
"""

from __future__ import annotations

import threading

import psycopg

from goodput_core.cli import main
from goodput_core.stores.postgres import PostgresStore
from goodput_core.stores.postgres.admin import compact
from goodput_core.stores.postgres.chunks import CHUNK_EVENTS
from tests.core.stores.postgres.test_store import _events
from tests.core.stores.postgres.test_chunks import (
    _check_chunks, _chunk_rows, _run_rows, _same_reads)
from tests.support.postgres_server import skip_without_postgres

skip_without_postgres()


def _old_layout(url, runs):
    """Writes ``{run: events}`` as a version without chunks did."""
    old = PostgresStore(url, chunk_events=0)
    for events in runs.values():
        old.append(events)
    assert old.flush(30)
    old.close()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('goodput.chunks')").fetchone()[0] is None


def test_compact_packs_the_full_chunks_of_every_old_run(postgres_url):
    """Runs of 14, 3 and 10 events (``_events(run, n)`` is n + 2) in chunks of
    4: 3, 0 and 2 chunks; the rest stays rows; a second compaction packs
    nothing; reads return the tables' events, through chunks."""
    _old_layout(postgres_url, {"a": _events("a", 12), "b": _events("b", 1, pid=7),
                               "c": _events("c", 8, pid=8)})
    store = PostgresStore(postgres_url)
    assert compact(store, size=4) == {"runs": 2, "chunks": 5, "events": 20}
    assert [len(_check_chunks(postgres_url, r, 4)) for r in "abc"] == [3, 0, 2]
    assert compact(store, size=4) == {"runs": 0, "chunks": 0, "events": 0}
    assert len(_chunk_rows(postgres_url, "a")) == 3
    reader = PostgresStore(postgres_url, chunk_events=4)
    for run in "abc":
        _same_reads(reader, run)
    with psycopg.connect(postgres_url) as conn:  # analyzed: the planner has statistics
        assert conn.execute("SELECT count(*) FROM pg_stat_user_tables WHERE relname IN"
                            " ('events', 'chunks') AND last_analyze IS NOT NULL"
                            ).fetchone()[0] == 2
    store.close()
    reader.close()


def test_compact_packs_the_rest_of_a_run_as_a_shorter_chunk(postgres_url):
    """Chunks of 4, tails of at least 3: runs of 14, 3 and 10 events get 3
    chunks (the last 2 events stay rows: fewer than 3), one chunk of 3, and 2
    chunks (2 rows left): 6 chunks, 23 events. Then tails of at least 2 pack
    the two rests of 2."""
    _old_layout(postgres_url, {"a": _events("a", 12), "b": _events("b", 1, pid=7),
                               "c": _events("c", 8, pid=8)})
    store = PostgresStore(postgres_url)
    assert compact(store, size=4, tail=3) == {"runs": 3, "chunks": 6, "events": 23}
    assert [c[2] for c in _check_chunks(postgres_url, "a", 4)] == [4, 4, 4]
    assert [c[2] for c in _check_chunks(postgres_url, "b", 4, tail=3)] == [3]
    assert [c[2] for c in _check_chunks(postgres_url, "c", 4)] == [4, 4]
    assert compact(store, size=4, tail=2) == {"runs": 2, "chunks": 2, "events": 4}
    assert [c[2] for c in _check_chunks(postgres_url, "a", 4, tail=2)] == [4, 4, 4, 2]
    reader = PostgresStore(postgres_url, chunk_events=4)
    for run in "abc":
        _same_reads(reader, run)
    store.close()
    reader.close()


def test_compact_while_a_writer_writes_the_run(postgres_url):
    """A writer that does not pack keeps adding batches of 3 events to a run
    while compactions pack it: the chunks are still the run's prefixes, no
    event is lost or stored twice, and reads return the tables' events."""
    events = _events("busy", 88)  # 90 events
    _old_layout(postgres_url, {"busy": events[:9]})
    store = PostgresStore(postgres_url)
    writer = PostgresStore(postgres_url, chunk_events=0, flush_interval_s=0.01)
    done = threading.Event()

    def write():
        for i in range(9, len(events), 3):
            writer.append(events[i:i + 3])
            writer.flush(30)
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    rounds = 0
    while not done.is_set() or rounds < 2:
        compact(store, size=5)
        rounds += 1
    thread.join()
    compact(store, size=5)
    rows = _run_rows(postgres_url, "busy")
    assert [r[7] for r in rows] == [e.seq for e in events]  # each once, in order
    assert len(_check_chunks(postgres_url, "busy", 5)) == 18
    _same_reads(PostgresStore(postgres_url, chunk_events=5), "busy")
    writer.close()
    store.close()


def test_goodput_compact_packs_an_old_postgresql_run(postgres_url, capsys):
    """The command on a postgresql:// URL: a run of CHUNK_EVENTS + 10 events
    written before chunks existed gets its one full chunk."""
    _old_layout(postgres_url, {"old": _events("old", CHUNK_EVENTS + 8)})
    assert main(["compact", postgres_url]) == 0
    said = capsys.readouterr().err
    assert f"{CHUNK_EVENTS:,} events packed into 1 chunks in 1 runs" in said
    assert ":***@" in said  # the password is not shown
    chunks = _chunk_rows(postgres_url, "old")
    rows = _run_rows(postgres_url, "old")
    assert [(c[0], c[1], c[2]) for c in chunks] == [(rows[0][0], rows[CHUNK_EVENTS - 1][0],
                                                      CHUNK_EVENTS)]
    assert chunks[0][3]["seq"].tolist() == [r[7] for r in rows[:CHUNK_EVENTS]]
