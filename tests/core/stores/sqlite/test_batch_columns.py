"""An EventBatch (the recorder's writer hands one, goodput_core/stores/event_batch.py)
is stored as exactly the rows its EventRecords are: the same events table,
chunks, delivered ranges, runs and writers, batch after batch (small batches
as rows, large ones packed, redeliveries, several process indices, a kind
code no chunk takes). The EventRecord path is the oracle, kept on purpose.
"""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest

from goodput_core.events import Kind
from goodput_core.stores.event_batch import EventBatch
from goodput_core.stores.sqlite import SqliteStore, ids

IDENT = ("run-a", "host-1", 4242, "att-1")


def _batch(first, n, *, pidx=None, kind=None, extras=None):
    """Tickets ``first .. first + n - 1``: a loop's events, some without a
    step, some with a NaN time, and the given extras (row index -> dict)."""
    k = np.arange(first, first + n, dtype=np.int64)
    kinds = np.where(k % 4 == 0, int(Kind.DATA_LOADING_START), int(Kind.STEP_START)).astype(
        np.uint16)
    if kind is not None:
        kinds[n // 2] = kind
    has = k % 4 != 0
    times = 1000.0 + k / 7
    times[k % 97 == 5] = math.nan
    return EventBatch(IDENT, k, kinds, times, np.where(has, k // 2, 0), has,
                      times + 0.125, np.zeros(n, np.int64) if pidx is None else pidx,
                      extras or {})


def _tables(store):
    conn = sqlite3.connect(store.path)
    try:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in ("runs", "writers", "events", "chunks", "delivered")}
    finally:
        conn.close()


@pytest.mark.parametrize("chunk_events", [64, None])
def test_a_batch_of_columns_stores_the_rows_of_its_event_records(tmp_path, chunk_events):
    by_columns = SqliteStore(str(tmp_path / "columns.sqlite"), chunk_events=chunk_events)
    by_records = SqliteStore(str(tmp_path / "records.sqlite"), chunk_events=chunk_events)
    two = np.zeros(1500, np.int64)
    two[700:] = 3  # a process index set mid-batch
    batches = [
        _batch(1, 10, extras={3: {"custom_badput_event_type": "eval"}}),  # rows
        _batch(11, 2500, extras={0: {"a": [1, {"b": None}], "é": "ü"}, 2499: {"x": 1.5}}),
        _batch(11, 2500),  # delivered again: stored once
        _batch(1200, 2000),  # half delivered
        _batch(3300, 1500, pidx=two),
        _batch(4800, 1200, kind=99),  # a code no chunk takes: rows
        _batch(6000, 3000)[1000:2500],  # a slice, packed after the rows above
    ]
    for batch in batches:
        by_columns.append(batch)
        by_records.append(batch.records())
        assert _tables(by_columns) == _tables(by_records)
    tables = _tables(by_columns)
    assert bool(tables["chunks"]) == bool(chunk_events)  # the packed path was taken
    # writer 1: process index 0, writer 2: process index 3 (tickets 4000..4799)
    assert tables["delivered"] == [(1, 1, 3199), (1, 3300, 3999), (1, 4800, 5999),
                                   (1, 7000, 8499), (2, 4000, 4799)]
    # a chunk counts its events in n, and keeps the odd row (the unknown kind) verbatim
    stored = len(tables["events"]) + sum(c[3] + len(json.loads(c[6] or "[]"))
                                         for c in tables["chunks"])
    assert stored == 10 + 2500 + 0 + 689 + 1500 + 1200 + 1500
    events, _ = by_columns.read("run-a")  # a reader skips the unknown kind, and says so
    assert len(events) == stored - 1 and by_columns.corrupt == {"corrupt_kind": 1}


def test_stored_once_per_writer_and_sequence_number(tmp_path):
    """The delivered ranges, per writer, cover each (writer, seq) once."""
    store = SqliteStore(str(tmp_path / "s.sqlite"))
    store.append(_batch(1, 3000))
    store.append(_batch(2001, 3000))  # 1,000 again
    store.append(_batch(500, 10))  # all again
    events, _ = store.read("run-a")
    assert [e.seq for e in events] == list(range(1, 5001))
    conn = sqlite3.connect(store.path)
    assert conn.execute("SELECT lo, hi FROM delivered").fetchall() == [(1, 5000)]


def test_keep_new_on_columns_keeps_what_keep_new_keeps(tmp_path):
    """Duplicates within a batch, pairs stored before, two writers: the same
    events kept and the same ranges recorded as by the rows' keep_new."""
    conns = [sqlite3.connect(":memory:") for _ in range(2)]
    for conn in conns:
        for statement in ids.SCHEMA:
            conn.execute(statement)
    batches = [([1, 1, 2], [5, 6, 5]), ([2, 1, 1, 2, 2], [5, 7, 8, 0, 9]),
               ([1] * 6, [3, 4, 5, 6, -1, 9])]
    for writers, seqs in batches:
        rows = [(1, w, s, 3, 1.0, None, None, 1.0) for w, s in zip(writers, seqs)]
        kept = ids.keep_new(conns[0], rows)
        mask = ids.keep_new_columns(conns[1], np.array(writers, np.int64),
                                    np.array(seqs, np.int64))
        assert kept == (rows if mask is None else [r for r, m in zip(rows, mask) if m])
    tables = [c.execute("SELECT * FROM delivered ORDER BY 1, 2").fetchall() for c in conns]
    assert tables[0] == tables[1] == [(1, 3, 9), (2, 5, 5), (2, 9, 9)]
