"""What a read of packed chunks costs the server: the blocks it touches scale
with the chunks asked for, not with the rest of the run.

A read asks for the next few chunks after its cursor. Asked in one statement
(``... WHERE last_id > cursor ORDER BY last_id LIMIT k``), the planner may,
on a ``chunks`` table not yet analyzed, scan and sort the run's rest and
compute (detoast) the blob of *every* later chunk before the ``LIMIT``: each
page of a read then read the whole rest of the run, quadratic in the run.
The store asks for the keys first, then the chunks by key.

Measured on a real server (tests/core/conftest.py's fixture): the statements
the reader really issues are recorded (a wrapper around its connection),
then replayed under ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)``; the shared
blocks they touch (the chunks' TOAST pages included: the blob is stored
out of line, uncompressed) are summed. A read of the run's first chunk must
touch about as many blocks as a read of its last one. The old one-statement
query, replayed the same way, is checked to fail that bound, so the measure
itself is shown to see the difference.
"""

from __future__ import annotations

import os

import psycopg
import pytest

from goodput_core.stores.postgres import PostgresStore
from goodput_core.stores.postgres.chunks import pack
from goodput_core.stores.postgres.columns import ENGINE_BYTES
from tests.core.stores.postgres.test_store import _events
from tests.support.postgres_server import skip_without_postgres

skip_without_postgres()

_SIZE = 128  # events per chunk: a blob of 128 * 65 bytes, out of line (a TOAST page or more)
_CHUNKS = 40  # chunks of the run read
_OTHER_RUNS = 100  # a fleet's chunks beside it: the table's size is what sways the planner
_KEYS = 4  # chunks per read, as a 262,144-event page asks for 65,536-event chunks
#: The statement the store used before it asked for keys first (commit da1210c).
_ONE_STATEMENT = ('SELECT n, substring(cols, 1, n * %s), extra_ids, extras FROM'
                  ' "goodput".chunks WHERE run_id = %s AND last_id > %s'
                  ' ORDER BY last_id LIMIT %s')


class _Recording:
    """A reader's connection that records the statements run on it."""

    def __init__(self, conn):
        self._conn = conn
        self.statements = []

    def execute(self, query, params=None, **kwargs):
        self.statements.append((query, params))
        return self._conn.execute(query, params, **kwargs)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _blocks(url, statements):
    """Shared blocks (hit or read) that executing ``statements`` touches, replayed
    in one transaction under EXPLAIN ANALYZE (a ``SET LOCAL`` among them too)."""
    total = 0
    with psycopg.connect(url) as conn, conn.transaction():
        for query, params in statements:
            if not query.lstrip().upper().startswith("SELECT"):
                conn.execute(query, params)
                continue
            (plan,), = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query,
                                    params).fetchone()
            top = plan["Plan"]
            total += top["Shared Hit Blocks"] + top["Shared Read Blocks"]
    return total


def _chunk_statements(statements):
    return [(q, p) for q, p in statements if ".chunks" in q or q.startswith("SET")]


@pytest.fixture
def packed_run(postgres_url):
    """A run of _CHUNKS chunks of _SIZE events (and a few rows after them) beside
    the chunks of _OTHER_RUNS runs (copies of its own: only their number matters
    to the planner), the ``chunks`` table never analyzed; returns (url, run id,
    the run's chunks' last ids)."""
    writer = PostgresStore(postgres_url, chunk_events=0)
    writer.append(_events("long", _CHUNKS * _SIZE + 3))
    assert writer.flush(30)
    writer.close()
    with psycopg.connect(postgres_url) as conn:
        (run_id,), = conn.execute("SELECT run_id FROM goodput.runs WHERE name = 'long'")
        conn.execute(writer._sql["create_chunks"])
        conn.execute("ALTER TABLE goodput.chunks SET (autovacuum_enabled = false)")
        with conn.transaction():
            for _ in range(_CHUNKS):
                assert pack(conn, writer._sql, run_id, _SIZE) == 1
        lasts = [k for k, in conn.execute("SELECT last_id FROM goodput.chunks ORDER BY 1")]
        conn.execute("INSERT INTO goodput.chunks SELECT r, last_id, first_id, n, cols,"
                     " extra_ids, extras FROM goodput.chunks, generate_series(%s::int,"
                     " %s::int) AS r", (run_id + 1, run_id + _OTHER_RUNS))
        toast_pages = conn.execute(
            "SELECT pg_relation_size(reltoastrelid) / current_setting('block_size')::int"
            " FROM pg_class WHERE oid = 'goodput.chunks'::regclass").fetchone()[0]
        analyzed = conn.execute("SELECT last_analyze, last_autoanalyze FROM"
                                " pg_stat_user_tables WHERE relid = 'goodput.chunks'::regclass"
                                ).fetchone()
    assert len(lasts) == _CHUNKS and analyzed == (None, None)
    assert toast_pages >= _CHUNKS * _OTHER_RUNS  # the blobs are out of line: a read of one costs pages
    return postgres_url, run_id, lasts


def _read_statements(url, read, **kwargs):
    """The chunk statements a fresh reader issues for ``read(store)``."""
    store = PostgresStore(url, chunk_events=_SIZE)  # asks for limit / _SIZE chunks
    reader = store._reader  # the store's reader part: its connection of this thread
    conn = _Recording(reader.connection())
    reader._local.conn, reader._local.pid = conn, os.getpid()
    got = read(store, **kwargs)
    store.close()
    return got, _chunk_statements(conn.statements)


@pytest.mark.parametrize("how", ["read_columns", "read"])
def test_reading_a_chunk_touches_the_blocks_of_that_chunk_not_of_the_runs_rest(packed_run, how):
    """read_columns and read of the first 4 chunks of a 40-chunk run touch about
    as many blocks as the same read of its last 4: the cost scales with the
    keys asked, not with what follows them."""
    url, _, lasts = packed_run
    n = _KEYS * _SIZE

    def some_chunks(store, since):
        return getattr(store, how)("long", since=since, limit=n)

    (first, cursor), at_start = _read_statements(url, some_chunks, since=None)
    assert len(first) == n and cursor == lasts[_KEYS - 1]
    (last, cursor), at_end = _read_statements(url, some_chunks, since=lasts[-_KEYS - 1])
    assert len(last) == n and cursor == lasts[-1]
    start, end = _blocks(url, at_start), _blocks(url, at_end)
    # the 36 later blobs are at least 36 TOAST pages: reading them would show
    assert start <= end + _CHUNKS // 4, (start, end, at_start)


def test_the_measure_sees_the_old_one_statement_query_read_the_rest(packed_run):
    """The same measure on the statement the store used before: on this table
    the planner scans and sorts the run's rest, and its read of the first 4
    chunks detoasts the blob of every later one (a block or more per chunk of
    the run), so the bound above fails on it."""
    url, run_id, lasts = packed_run
    start = _blocks(url, [(_ONE_STATEMENT, (ENGINE_BYTES, run_id, 0, _KEYS))])
    end = _blocks(url, [(_ONE_STATEMENT, (ENGINE_BYTES, run_id, lasts[-_KEYS - 1], _KEYS))])
    assert start >= end + _CHUNKS - _KEYS, (start, end)
