"""Packed column chunks of the PostgreSQL store (stores/postgres/chunks.py), on
real servers (tests/core/conftest.py's fixtures; pgbouncer started here).

The truth each test checks against is the tables themselves, read with plain
SQL: a chunk must hold exactly the run's next events in id order, chunks must
be contiguous prefixes, ``read()`` (chunks, then rows) must return what the
tables hold and ``read_columns`` the same events, for every cursor and limit.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap

import psycopg

from goodput_core.events import EventRecord
from goodput_core.stores.postgres import PostgresStore
from goodput_core.stores.postgres.chunks import pack
from goodput_core.stores.postgres.columns import unpack
from tests.core.stores.postgres.test_columns import _odd_events, _same
from tests.core.stores.postgres.test_store import _events
from tests.support.pgbouncer_server import Pgbouncer, skip_without_pgbouncer
from tests.support.postgres_server import PostgresServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _chunk_rows(url, run):
    """[(first_id, last_id, n, unpacked columns, {id: extra text})] of ``run``, in order."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.first_id, c.last_id, c.n, c.cols, c.extra_ids, c.extras"
            " FROM goodput.chunks c JOIN goodput.runs r USING (run_id) WHERE r.name = %s"
            " ORDER BY c.last_id", (run,), binary=True).fetchall()
    return [(f, la, n, unpack(n, cols), dict(zip(ids or [], texts or [])))
            for f, la, n, cols, ids, texts in rows]


def _run_rows(url, run):
    """The run's rows as stored:
    [(id, kind, time, step, writer_id, write_time, extra, seq)]."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT e.id, e.kind, e.time, e.step, e.writer_id, e.write_time, e.extra, e.seq"
            " FROM goodput.events e JOIN goodput.runs r USING (run_id) WHERE r.name = %s"
            " ORDER BY e.id", (run,)).fetchall()


def _sql_records(url, run):
    """[(id, what read() must return for that row)], from the tables by SQL: NaN
    for no time, None for no step or a payload that is not JSON."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT e.id, e.kind, e.time, e.step, e.extra, w.process_index, w.host, w.pid,"
            " w.attempt, e.seq, e.write_time FROM goodput.events e JOIN goodput.runs r"
            " USING (run_id) JOIN goodput.writers w USING (writer_id) WHERE r.name = %s"
            " ORDER BY e.id", (run,)).fetchall()
    out = []
    for eid, kind, t, step, extra, pi, host, pid, att, seq, wt in rows:
        try:
            payload = None if extra is None else json.loads(extra)
        except ValueError:
            payload = None
        out.append((eid, EventRecord(run, kind, math.nan if t is None else t, step, payload,
                                     pi, host, pid, att, seq, math.nan if wt is None else wt)))
    return out


def _comparable(record):
    """A record with NaN made comparable (NaN != NaN)."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in record)


def _check_chunks(url, run, size, tail=None, tails=None):
    """Every chunk of ``run`` holds exactly its next ``size`` rows (columns and
    extras), the last one ``tail`` rows when given (the rest of a run that
    ended), or any one between ``tails`` and ``size`` (the rests of several
    writers' job ends); chunks are contiguous from the run's first event.
    Returns them."""
    rows = _run_rows(url, run)
    chunks = _chunk_rows(url, run)
    at = 0
    for i, (first, last, n, col, extras) in enumerate(chunks):
        if tails is not None:
            assert tails <= n <= size
        else:
            assert n == (tail if tail is not None and i == len(chunks) - 1 else size)
        mine = rows[at:at + n]
        assert len(mine) == n and (first, last) == (mine[0][0], mine[-1][0])
        assert col["id"].tolist() == [r[0] for r in mine]
        assert col["kind"].tolist() == [r[1] for r in mine]
        assert col["writer"].tolist() == [r[4] for r in mine]
        assert col["has_step"].tolist() == [r[3] is not None for r in mine]
        assert col["step"].tolist() == [0 if r[3] is None else r[3] for r in mine]
        for got, want in zip(col["time"].tolist() + col["wt"].tolist(),
                             [r[2] for r in mine] + [r[5] for r in mine]):
            assert (math.isnan(got) and (want is None or math.isnan(want))) or got == want
        assert col["has_extra"].tolist() == [r[6] is not None for r in mine]
        assert col["seq"].tolist() == [r[7] for r in mine]
        assert extras == {r[0]: r[6] for r in mine if r[6] is not None}
        at += n
    return chunks


def _same_reads(store, run):
    """For every cursor and limit: read(since, limit) returns the rows the
    tables hold (by SQL), and read_columns(since, limit) the same events."""
    truth = _sql_records(store._conninfo, run)
    for at, since in enumerate([None] + [eid for eid, _ in truth]):
        for limit in (None, 1, 2, 3, 4, 5, 6, 7, 11, 1000):
            want, want_cursor = store.read(run, since=since, limit=limit)
            expected = truth[at:] if limit is None else truth[at:at + limit]
            assert [_comparable(e) for e in want] == [_comparable(r) for _, r in expected]
            assert want_cursor == (expected[-1][0] if expected else since)
            page, cursor = store.read_columns(run, since=since, limit=limit)
            assert (len(page), cursor) == (len(want), want_cursor), (since, limit)
            for i, event in enumerate(want):
                _same(page, i, event)


def test_chunks_are_the_runs_prefixes_and_read_as_its_rows(postgres_url):
    """Batches of 3 into chunks of 5: a batch packs at most one chunk, once 5
    events after the last chunk are stored. 17 events in 6 batches: after
    batch 2 (6 events) chunk 1-5, batch 4 (12) chunk 6-10, batch 5 (15) chunk
    11-15; 16-17 stay rows only. Each batch also holds 2 events of another
    run, between them: the run's ids are not consecutive."""
    store = PostgresStore(postgres_url, chunk_events=5)
    events = _odd_events("packed")
    other = _events("other", 10, pid=7)
    made = []
    for b, i in enumerate(range(0, len(events), 3)):
        mine, theirs = events[i:i + 3], other[2 * b:2 * b + 2]
        store.append([e for pair in zip(mine, theirs + mine[2:]) for e in pair])
        assert store.flush(10)
        made.append(len(_chunk_rows(postgres_url, "packed")))
    assert made == [0, 1, 1, 2, 3, 3]
    chunks = _check_chunks(postgres_url, "packed", 5)
    ids = [r[0] for r in _run_rows(postgres_url, "packed")]
    assert [(c[0], c[1]) for c in chunks] == [(ids[0], ids[4]), (ids[5], ids[9]),
                                              (ids[10], ids[14])]
    assert len(chunks[0][4]) + len(chunks[1][4]) + len(chunks[2][4]) == 2  # the EVAL extras
    _same_reads(store, "packed")
    assert len(_check_chunks(postgres_url, "other", 5)) == 2
    _same_reads(store, "other")
    page, _ = store.read_columns("packed")
    assert sorted(page.process_indices) == [0, 1]
    store.close()


def test_a_payload_that_is_not_json_is_judged_in_a_chunk_as_in_a_row(postgres_url):
    """A row changed by hand to hold an ``extra`` that is not JSON before it is
    packed: read() keeps the event without its payload and counts it, from
    the chunk as from the row; so does read_columns."""
    store = PostgresStore(postgres_url, chunk_events=3)
    events = _odd_events("badx")  # events[6] carries {"custom_badput_event_type": ...}
    store.append(events[:7])  # packs events 0-2
    assert store.flush(10)
    bad_id = _run_rows(postgres_url, "badx")[6][0]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE goodput.events SET extra = '{not json' WHERE id = %s", (bad_id,))
    for e in events[7:9]:  # packs events 3-5, then 6-8
        store.append([e])
        assert store.flush(10)
    chunks = _chunk_rows(postgres_url, "badx")
    assert len(chunks) == 3 and chunks[2][4][bad_id] == "{not json"
    reader = PostgresStore(postgres_url)
    records, _ = reader.read("badx", limit=9)
    assert records[6].extra is None and records[6].kind == events[6].kind
    assert reader.skipped["bad_extra"] == 1
    page, _ = reader.read_columns("badx", limit=9)
    assert 6 not in page.extra and reader.skipped["bad_extra"] == 2
    _same_reads(reader, "badx")
    for s in (store, reader):
        s.close()


def test_a_database_without_chunks_is_read_then_packed_by_its_next_writer(postgres_url):
    """A database written by a version without chunks (chunk_events=0 writes
    that layout: no chunks table) reads as before; a reader opened then
    notices the table once a newer writer adds it; the newer writer packs
    the old events one chunk per batch."""
    old = PostgresStore(postgres_url, chunk_events=0)
    events = _events("old", 14)  # 16 events
    for i in range(0, 12, 4):
        old.append(events[i:i + 4])
        assert old.flush(10)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT to_regclass('goodput.chunks')").fetchone()[0] is None
    reader = PostgresStore(postgres_url, chunk_events=0)
    _same_reads(reader, "old")
    new = PostgresStore(postgres_url, chunk_events=4)
    made = []
    for e in events[12:]:  # one event per batch: 13, 14, 15, 16 events stored
        new.append([e])
        assert new.flush(10)
        made.append(len(_chunk_rows(postgres_url, "old")))
    assert made == [1, 2, 3, 4]  # the 12 old events caught up one chunk per batch
    _check_chunks(postgres_url, "old", 4)
    _same_reads(reader, "old")
    assert reader._chunking.has_table  # it read through the chunks
    for s in (old, reader, new):
        s.close()


def test_a_batch_with_the_runs_job_end_packs_its_tail(postgres_url):
    """Chunks of 5, tails of at least 3: a run of 14 events (the last its job
    end) in batches of 3 gets chunks 1-5 and 6-10 as it goes, then, with its
    job end, 11-14 as a chunk of 4. A run whose job end leaves 2 events after
    its last chunk keeps them as rows."""
    store = PostgresStore(postgres_url, chunk_events=5, tail_events=3)
    events = _events("ends", 12)  # 14 events, the last a job end
    short = _events("short", 10, pid=9)  # 12: chunks 1-5 and 6-10, then 2 left
    made = []
    for i in range(0, len(events), 3):
        store.append(events[i:i + 3] + short[i:i + 3])
        assert store.flush(10)
        made.append(len(_chunk_rows(postgres_url, "ends")))
    assert made == [0, 1, 1, 2, 3]
    assert [c[2] for c in _check_chunks(postgres_url, "ends", 5, tail=4)] == [5, 5, 4]
    assert [c[2] for c in _check_chunks(postgres_url, "short", 5)] == [5, 5]
    for run in ("ends", "short"):
        _same_reads(store, run)
    store.close()


def test_pack_is_idempotent(postgres_url):
    """Packing again what is packed writes nothing: the next chunk is taken
    after the last one, and a chunk written twice conflicts on its key."""
    store = PostgresStore(postgres_url, chunk_events=0)
    store.append(_events("idem", 10))  # 12 events, no chunk
    assert store.flush(10)
    with psycopg.connect(postgres_url) as conn:
        (run_id,), = conn.execute("SELECT run_id FROM goodput.runs WHERE name = 'idem'")
        conn.execute(store._sql["create_chunks"])
        with conn.transaction():
            assert pack(conn, store._sql, run_id, 5) == 1
            assert pack(conn, store._sql, run_id, 5) == 1
            assert pack(conn, store._sql, run_id, 5) == 0  # 2 events left
        with conn.transaction():
            again = conn.execute(store._sql["pack"], {"run": run_id, "after": 0, "n": 5,
                                                      "least": 5})
            assert again.fetchone() is None  # the same first chunk: ON CONFLICT DO NOTHING
    _check_chunks(postgres_url, "idem", 5)
    assert len(_chunk_rows(postgres_url, "idem")) == 2
    store.close()


def test_a_writer_not_allowed_to_pack_stores_its_events(postgres_server, postgres_url, caplog):
    """A role that may write events but not chunks: its batches commit without
    chunks (one warning), and reads are whole."""
    owner = PostgresStore(postgres_url)  # creates the tables, chunks included
    owner.close()
    db = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE limited LOGIN PASSWORD 'limited-pw'")
        conn.execute("GRANT USAGE ON SCHEMA goodput TO limited")
        conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA goodput TO limited")
        conn.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA goodput TO limited")
        conn.execute("REVOKE INSERT ON goodput.chunks FROM limited")
    writer = PostgresStore(postgres_server.url(db, user="limited", password="limited-pw"),
                           chunk_events=3)
    with caplog.at_level(logging.WARNING, logger="goodput"):
        events = _events("limited", 8)
        for i in range(0, len(events), 2):
            writer.append(events[i:i + 2])
            assert writer.flush(10)
    assert sum("does not pack chunks" in r.getMessage() for r in caplog.records) == 1
    assert writer.stats()["rejected"] == 0
    assert len(_run_rows(postgres_url, "limited")) == len(events) and not _chunk_rows(postgres_url, "limited")
    _same_reads(writer, "limited")
    writer.close()


def test_a_role_that_may_not_add_the_table_reads_quietly_and_writes_rows(postgres_server, postgres_url,
                                                                         caplog):
    """An old database (no chunks table) and a role that may use the tables but
    not create one: opening it to read says nothing; its first batch says once
    that it does not pack; its events are stored and read whole."""
    old = PostgresStore(postgres_url, chunk_events=0)
    events = _events("rows", 6)
    old.append(events[:4])
    assert old.flush(10)
    old.close()
    db = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE nocreate LOGIN PASSWORD 'nocreate-pw'")
        conn.execute("GRANT USAGE ON SCHEMA goodput TO nocreate")
        conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA goodput TO nocreate")
        conn.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA goodput TO nocreate")
    with caplog.at_level(logging.WARNING, logger="goodput"):
        store = PostgresStore(postgres_server.url(db, user="nocreate", password="nocreate-pw"),
                              chunk_events=2)
        _same_reads(store, "rows")
        assert not [r for r in caplog.records if "pack" in r.getMessage()]
        for i in (4, 6):
            store.append(events[i:i + 2])
            assert store.flush(10)
    assert sum("does not pack chunks" in r.getMessage() for r in caplog.records) == 1
    assert len(_run_rows(postgres_url, "rows")) == len(events)
    _same_reads(store, "rows")
    store.close()


def test_a_pack_cut_by_statement_timeout_leaves_the_batch_stored(postgres_url):
    """A DBA's statement_timeout cancels a pack (here a trigger makes the chunk
    insert outlast it): the batch is stored once all the same, not retried
    forever, and reads are whole; packing goes on once packs fit again."""
    store = PostgresStore(postgres_url, chunk_events=4)  # creates the tables
    db = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION goodput.slow() RETURNS trigger LANGUAGE plpgsql AS"
                     " $$ BEGIN PERFORM pg_sleep(5); RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER slow BEFORE INSERT ON goodput.chunks"
                     " FOR EACH ROW EXECUTE FUNCTION goodput.slow()")
        conn.execute(f'ALTER DATABASE "{db}" SET statement_timeout = 1000')
    events = _events("cut", 6)  # 8 events
    store.append(events[:5])  # a chunk is due: its insert is canceled
    assert store.flush(30)
    assert len(_run_rows(postgres_url, "cut")) == 5 and not _chunk_rows(postgres_url, "cut")
    assert store.stats()["rejected"] == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER slow ON goodput.chunks")
    store.append(events[5:])
    assert store.flush(30)
    assert len(_check_chunks(postgres_url, "cut", 4)) == 1  # packing went on
    _same_reads(store, "cut")
    store.close()


#: One writer process: N events of its own (pid = its index) into run "shared",
#: in batches of 7, packing chunks of 16 (and its rest at its job end, if at
#: least argv[4] events).
_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from goodput_core.stores.postgres import PostgresStore
    from tests.core.stores.postgres.test_store import _events
    url, index, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tail = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
    store = PostgresStore(url, chunk_events=16, tail_events=tail, flush_interval_s=0.01)
    events = _events("shared", n - 2, pid=1000 + index)
    sys.stdin.readline()
    for i in range(0, len(events), 7):
        store.append(events[i:i + 7])
        assert store.flush(60)
    store.close()
    print("done", flush=True)
""")


def test_packing_with_concurrent_writers_through_pgbouncer(tmp_path):
    """4 writer processes pack one run through pgbouncer in transaction mode
    (2 server sessions for all) while a reader reads it incrementally as the
    monitor does: every event stored once and read once, in id order, and the
    chunks are exactly the run's prefixes."""
    skip_without_pgbouncer()  # `make test` installs it; an error in CI
    writers, n = 4, 300
    srv = PostgresServer()
    srv.start()
    bouncer = Pgbouncer(srv, pool_size=2)
    try:
        srv.create_database("packed")
        bouncer.start()
        url = bouncer.url("packed")
        reader = PostgresStore(url, chunk_events=16)
        code = _WRITER.format(root=ROOT)
        children = [subprocess.Popen(
            [sys.executable, "-c", code, url, str(i), str(n)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / f"c{i}")))
            for i in range(writers)]
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        pages, cursor = [], None
        while any(c.poll() is None for c in children):
            page, cursor = reader.read_columns("shared", since=cursor, limit=50)
            pages.append(page)
        assert [c.stdout.readline().strip() for c in children] == ["done"] * writers
        assert [c.wait(timeout=60) for c in children] == [0] * writers
        while True:
            page, cursor = reader.read_columns("shared", since=cursor, limit=50)
            pages.append(page)
            if not len(page):
                break
        rows, _ = reader.read("shared")
        assert [_comparable(e) for e in rows] == \
            [_comparable(r) for _, r in _sql_records(srv.url("packed"), "shared")]
        assert len(rows) == writers * n
        assert len({(e.pid, e.seq) for e in rows}) == writers * n
        seen = [p.record(i) for p in pages for i in range(len(p))]
        assert len(seen) == len(rows)
        for i, event in enumerate(rows):  # read once each, in id order
            assert (seen[i].kind, seen[i].step) == (event.kind, event.step)
            assert seen[i].time == event.time
        chunks = _check_chunks(srv.url("packed"), "shared", 16)
        # A batch (7 events) makes one chunk when 16 wait: fewer than 16 are left over.
        assert 0 <= writers * n - 16 * len(chunks) < 16
        _same_reads_limits(reader, "shared")
        reader.close()
    finally:
        bouncer.stop()
        srv.stop()
        srv.remove()


def _same_reads_limits(store, run):
    """read_columns == read over the whole run in pages of a few sizes."""
    for limit in (16, 50, 100):
        a, b, ca, cb = [], [], None, None
        while True:
            page, ca = store.read_columns(run, since=ca, limit=limit)
            part, cb = store.read(run, since=cb, limit=limit)
            assert (len(page), ca) == (len(part), cb)
            for i, event in enumerate(part):
                _same(page, i, event)
            if not len(page):
                break
