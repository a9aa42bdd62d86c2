"""The sqlite store's packed chunks (schema 2) and its column reads.

Rows of a run are moved into packed chunks by the writers; these tests check
that a reader sees exactly the events that were appended, through any cursor
and page size, before, during and after compactions, that a version-1 file is
read as it is and upgraded by a writer, and that the engine computes the same
numbers from the store's columns as from the events in memory.
"""

from __future__ import annotations

import math
import sqlite3

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core.queries.calculator import Calculator
from goodput_core.events import EventRecord, Kind
from goodput_core.stores.sqlite import SqliteStore


def _key(e):
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in e)


def _events(n, run="r", extra_every=5):
    """Steps with a custom event pair every ``extra_every`` steps (some with extras),
    written by one writer per run (a writer's sequence numbers are its own)."""
    out = []
    attempt = "a-" + run
    for i in range(n):
        t = 1000.0 + i
        out.append(EventRecord(run, int(Kind.STEP_START), t, i, None, 0, "h", 1, attempt,
                               len(out), 5000.0 + i))
        if i % extra_every == 0:
            x = {"custom_badput_event_type": "eval"}
            out.append(EventRecord(run, int(Kind.CUSTOM_BADPUT_START), t + 0.1, None, x, 0, "h",
                                   1, attempt, len(out), math.nan))
            out.append(EventRecord(run, int(Kind.CUSTOM_BADPUT_END), t + 0.2, None, x, 0, "h",
                                   1, attempt, len(out), math.nan))
    return out


def _chunk_count(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12),
       chunk=st.integers(1, 7), limit=st.integers(1, 11), data=st.data())
def test_any_cursor_and_page_size_reads_exactly_what_was_appended(tmp_path_factory, sizes,
                                                                  chunk, limit, data):
    path = tmp_path_factory.mktemp("chunks") / "s.sqlite"
    s = SqliteStore(path, chunk_events=chunk)
    every = {"a": _events(60, "a"), "b": _events(60, "b")}
    written = {"a": [], "b": []}
    pos = {"a": 0, "b": 0}
    for k, n in enumerate(sizes):  # two runs interleaved, so their ids interleave
        run = "ab"[k % 2]
        batch = every[run][pos[run]:pos[run] + n]
        pos[run] += n
        s.append(batch)
        written[run] += batch
    for run in "ab":
        whole, _ = s.read(run)
        assert list(map(_key, whole)) == list(map(_key, written[run]))
        got, cursor = [], None
        while True:  # paged, as export and the calculator read
            page, cursor = s.read(run, since=cursor, limit=limit)
            if not page:
                break
            got += page
        assert list(map(_key, got)) == list(map(_key, written[run]))
        # from any cursor: what a monitor that read part of the run sees next
        cut = data.draw(st.integers(0, len(written[run])))
        head, cursor = s.read(run, limit=cut) if cut else ([], None)
        rest, _ = s.read(run, since=cursor)
        assert list(map(_key, head + rest)) == list(map(_key, written[run]))
    if sum(sizes) > 2 * chunk + 2:
        assert _chunk_count(path) > 0  # the chunks were exercised
    assert s.integrity_check()
    s.close()


def test_a_cursor_taken_before_a_compaction_stays_valid(tmp_path):
    path = tmp_path / "s.sqlite"
    events = _events(40)
    writer = SqliteStore(path, chunk_events=10)
    reader = SqliteStore(path, readonly=True)
    writer.append(events[:5])  # below a chunk: still rows
    first, cursor = reader.read("r")
    assert _chunk_count(path) == 0
    writer.append(events[5:])  # now the rows the cursor points into are packed
    assert _chunk_count(path) > 0
    rest, _ = reader.read("r", since=cursor)
    assert list(map(_key, first + rest)) == list(map(_key, events))


def test_engine_computes_the_same_from_store_columns_as_from_memory(tmp_path):
    events = _events(2000, extra_every=7)  # steps 0-1999 at 1000-2999 s
    events.insert(0, EventRecord("r", int(Kind.JOB_START), 990.0))
    events.append(EventRecord("r", int(Kind.DISRUPTION), 3000.0, None,
                              {"disruption_cause": "preemption"}))
    events.append(EventRecord("r", int(Kind.JOB_START), 3100.0))  # restart from step 1500
    events.append(EventRecord("r", int(Kind.STEP_START), 3101.0, 1500))
    events.append(EventRecord("r", int(Kind.STEP_START), 3102.0, 1501))
    events.append(EventRecord("r", int(Kind.JOB_END), 3103.0))
    s = SqliteStore(tmp_path / "s.sqlite", chunk_events=512)
    for i in range(0, len(events), 300):
        s.append(events[i:i + 300])
    assert _chunk_count(tmp_path / "s.sqlite") > 3
    from_store = Calculator("r", s)
    assert from_store.refresh() == len(events)
    in_memory = Calculator("r")
    in_memory.add(events)
    now = 4000.0
    a, b = from_store.cumulative(now), in_memory.cumulative(now)
    assert a.goodput == b.goodput and a.badput_seconds == b.badput_seconds
    assert a.custom_badput_seconds == b.custom_badput_seconds and a.custom_badput_seconds
    assert (a.disruptions, a.last_step) == (1, 1501)
    assert (a.disruptions, a.max_productive_step) == (b.disruptions, b.max_productive_step)
    assert from_store.skipped == in_memory.skipped
    assert np.array_equal(from_store.step_stats().step_times, in_memory.step_stats().step_times)


def test_a_version_1_file_is_read_as_it_is_and_upgraded_by_a_writer(tmp_path):
    path = tmp_path / "s.sqlite"
    events = _events(30)
    s = SqliteStore(path, chunk_events=10 ** 6)
    s.append(events)
    s.close()
    with sqlite3.connect(path) as conn:  # what version 1 wrote: no chunks table
        conn.execute("DROP TABLE chunks")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()
    reader = SqliteStore(path, readonly=True)
    assert list(map(_key, reader.read("r")[0])) == list(map(_key, events))
    writer = SqliteStore(path, chunk_events=8)
    more = _events(40)[len(events):]
    writer.append(more)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == ("2",)
    assert _chunk_count(path) > 0
    # the reader opened before the upgrade now finds chunks too
    assert list(map(_key, reader.read("r")[0])) == list(map(_key, events + more))


def test_a_damaged_chunk_is_skipped_and_counted_and_the_rest_read(tmp_path, caplog):
    path = tmp_path / "s.sqlite"
    events = _events(40, extra_every=1000)
    s = SqliteStore(path, chunk_events=10)
    for i in range(0, len(events), 5):  # small batches: packed ten at a time
        s.append(events[i:i + 5])
    with sqlite3.connect(path) as conn:
        first = conn.execute("SELECT min(first_id) FROM chunks").fetchone()[0]
        conn.execute("UPDATE chunks SET cols = substr(cols, 1, 7) WHERE first_id = ?", (first,))
    conn.close()
    reader = SqliteStore(path, readonly=True)
    got = reader.read("r")[0]
    assert list(map(_key, got)) == list(map(_key, events[10:]))
    assert reader.corrupt == {"corrupt_chunk": 10}
    assert str(path) in caplog.text


def test_refresh_reads_in_bounded_pages_and_gets_every_event(tmp_path, monkeypatch):
    import goodput_core.queries.run_feed as run_feed

    monkeypatch.setattr(run_feed, "_PAGE", 100)
    events = [EventRecord("r", int(Kind.JOB_START), 990.0)] + _events(1000, extra_every=9)
    s = SqliteStore(tmp_path / "s.sqlite", chunk_events=64)
    s.append(events)
    sizes = []
    real = s.read_columns

    def spy(run, since=None, limit=None):
        page, cursor = real(run, since=since, limit=limit)
        sizes.append((limit, len(page)))
        return page, cursor

    monkeypatch.setattr(s, "read_columns", spy)
    paged = Calculator("r", s)
    assert paged.refresh() == len(events)
    assert all(limit == 100 and n <= 100 for limit, n in sizes) and len(sizes) > 10
    whole = Calculator("r")
    whole.add(events)
    assert paged.cumulative(3000.0).badput_seconds == whole.cumulative(3000.0).badput_seconds
    more = _events(1010)[len(events) - 1:]  # the run goes on (events has a job start)
    s.append(more)
    assert paged.refresh() == len(more) > 0  # only the new events


def test_a_large_batch_is_written_as_a_chunk_and_ids_keep_growing(tmp_path):
    path = tmp_path / "s.sqlite"
    a, b = _events(400, "a", extra_every=1000), _events(10, "b", extra_every=1000)
    s = SqliteStore(path, chunk_events=100)
    s.append(a[:3])
    s.append(b[:2])
    s.append(a[3:253])  # 250 events of one run: packed straight away
    with sqlite3.connect(path) as conn:
        sizes = [r[0] for r in conn.execute("SELECT n FROM chunks ORDER BY first_id")]
        rows = conn.execute("SELECT kind, step FROM events ORDER BY id").fetchall()
        top_row = conn.execute("SELECT max(id) FROM events").fetchone()[0]
        top_chunk = conn.execute("SELECT max(last_id) FROM chunks").fetchone()[0]
    assert sizes == [3 + 249]  # the run's earlier rows first, then the batch less its last
    # b's two rows, then a's last event as a row
    assert rows == [(e.kind, e.step) for e in (b[0], b[1], a[252])]
    assert top_row > top_chunk
    s.append(a[253:254])
    s.append(b[2:])
    assert list(map(_key, s.read("a")[0])) == list(map(_key, a[:254]))
    assert list(map(_key, s.read("b")[0])) == list(map(_key, b))
    assert s.integrity_check()
