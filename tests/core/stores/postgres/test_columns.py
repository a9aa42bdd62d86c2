"""PostgresStore.read_columns (binary COPY read as numpy columns) against read(),
on a real PostgreSQL server (tests/core/conftest.py's fixtures)."""

from __future__ import annotations

import math

import numpy as np
import psycopg
import pytest

from goodput_core import Calculator
from goodput_core.events import EventRecord, Kind
from goodput_core.stores.base import Store
from goodput_core.stores.postgres import PostgresStore
from tests.core.stores.postgres.test_store import _events


def _same(page, i, event):
    """Row ``i`` of ``page`` holds what ``event`` holds (the engine's columns)."""
    got = page.record(i)
    assert (got.run, got.kind, got.step, got.extra) == (event.run, event.kind, event.step,
                                                       event.extra)
    for a, b in ((got.time, event.time), (got.write_time, event.write_time)):
        assert (math.isnan(a) and math.isnan(b)) or a == b


def _odd_events(run):
    """Two writers, events without a step, with NaN times, with extras."""
    base = _events(run, 12)
    odd = [
        EventRecord(run, int(Kind.CUSTOM_BADPUT_START), 1003.5, 2,
                    {"custom_badput_event_type": "EVAL"}, 1, "host-b", 9, "att-b", 1, 2000.0),
        EventRecord(run, int(Kind.CUSTOM_BADPUT_END), 1004.0, None,
                    {"custom_badput_event_type": "EVAL"}, 1, "host-b", 9, "att-b", 2, math.nan),
        EventRecord(run, int(Kind.STEP_START), math.nan, 3, None, 1, "host-b", 9, "att-b", 3,
                    2001.0),
    ]
    return base[:6] + odd + base[6:]


def test_columns_hold_what_rows_hold(postgres_url):
    store = PostgresStore(postgres_url)
    events = _odd_events("cols")
    store.append(events[:9])
    assert store.flush(10)
    store.append(events[9:])
    assert store.flush(10)
    rows, cursor = store.read("cols")
    page, page_cursor = store.read_columns("cols")
    assert len(page) == len(rows) == len(events) and page_cursor == cursor
    for i, event in enumerate(rows):
        _same(page, i, event)
    assert sorted(page.process_indices) == [0, 1]
    # paging by limit and cursor gives the same pages as read()
    since, since_rows = None, None
    while True:
        part, since2 = store.read_columns("cols", since=since, limit=5)
        part_rows, since_rows2 = store.read("cols", since=since_rows, limit=5)
        assert since2 == since_rows2 and len(part) == len(part_rows)
        for i, event in enumerate(part_rows):
            _same(part, i, event)
        if not len(part):
            assert since2 == since  # an empty page keeps the cursor
            break
        since, since_rows = since2, since_rows2
    assert len(store.read_columns("no-such-run")[0]) == 0
    assert store.read_columns("cols", limit=0)[1] is None
    store.close()


def test_bad_rows_are_judged_as_read_judges_them(postgres_url):
    """Rows written by something else: bad JSON in extra, an unknown kind. The
    bad payload is dropped and counted as read() does; the engine skips the
    unknown kind and counts it, whichever way it was read."""
    store = PostgresStore(postgres_url)
    store.append(_events("bad", 5))
    assert store.flush(10)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        (run_id,), = conn.execute("SELECT run_id FROM goodput.runs WHERE name = 'bad'")
        (wid,), = conn.execute("SELECT min(writer_id) FROM goodput.events")
        conn.execute("INSERT INTO goodput.events (run_id, writer_id, seq, kind, time, step, extra,"
                     " write_time) VALUES (%s, %s, 0, %s, 1001.5, 1, '{not json', NULL),"
                     " (%s, %s, 0, 999, 1001.6, NULL, NULL, NULL)",
                     (run_id, wid, int(Kind.CUSTOM_BADPUT_START), run_id, wid))
    page, _ = store.read_columns("bad")
    rows, _ = store.read("bad")
    assert store.skipped["bad_extra"] == 2  # once per read
    assert len(page) == len(rows) == 9
    for i, event in enumerate(rows):
        _same(page, i, event)
    results = []
    for reader in ("read_columns", "read"):
        calc = Calculator("bad", _OnlyRead(store) if reader == "read" else store)
        calc.refresh()
        results.append((calc.cumulative().total_seconds, calc.cumulative().goodput,
                        dict(calc.skipped)))
    assert results[0] == results[1]
    # the custom badput start that lost its payload lacks its type; kind 999 is no kind
    assert results[0][2] == {"missing_field": 1, "unknown_kind": 1}
    store.close()


class _OnlyRead(Store):
    """The store seen through read() only (no read_columns)."""

    def __init__(self, store):
        self._store = store

    def append(self, batch):
        self._store.append(batch)

    def read(self, *args, **kwargs):
        return self._store.read(*args, **kwargs)

    def runs(self):
        return self._store.runs()


def test_pages_longer_than_one_copy(postgres_url, monkeypatch):
    """limit None reads the whole run in bounded COPY pages, joined."""
    import goodput_core.stores.postgres.read as pg  # where reads page

    monkeypatch.setattr(pg, "_COLUMN_PAGE", 4)
    store = PostgresStore(postgres_url)
    events = _odd_events("long")
    store.append(events)
    assert store.flush(10)
    page, cursor = store.read_columns("long")
    rows, row_cursor = store.read("long")
    assert len(page) == len(rows) == 17 and cursor == row_cursor
    for i, event in enumerate(rows):
        _same(page, i, event)
    assert np.all(np.diff(np.arange(len(page))) == 1)
    store.close()


def test_a_page_aggregated_out_of_id_order_is_sorted_by_id(postgres_url):
    """PostgreSQL keeps the subquery's order in the aggregates in practice but
    does not promise it: the server's real answer, permuted, reads the same."""
    from goodput_core.stores.postgres import columns as pc

    store = PostgresStore(postgres_url)
    events = _odd_events("perm")
    store.append(events)
    assert store.flush(10)
    want, _ = store.read_columns("perm")

    class Permuting:
        """The real connection; the columns query's answer permuted."""

        def __init__(self, conn):
            self.conn = conn

        def execute(self, query, params=None, **kw):
            cur = self.conn.execute(query, params, **kw)
            if query != store._sql["columns"]:
                return cur
            n, *blobs = cur.fetchone()
            perm = np.random.default_rng(1).permutation(n)
            blobs = [np.frombuffer(b, dtype)[perm].tobytes()
                     for (_, _, dtype), b in zip(pc._COLUMNS, blobs)]
            return _Row((n, *blobs))

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        (run_id,), = conn.execute("SELECT run_id FROM goodput.runs WHERE name = 'perm'")
        got, last = pc.read_page(Permuting(conn), store._sql, "perm", run_id, 0, 1000,
                                 lambda wid: (0, "", 0, ""), store.skipped)
    assert len(got) == len(want) == len(events)
    for i in range(len(want)):
        _same(got, i, want.record(i))


class _Row:
    def __init__(self, row):
        self.row = row

    def fetchone(self):
        return self.row
