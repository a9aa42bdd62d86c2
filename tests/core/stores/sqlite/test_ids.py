"""docs/quality.md R18: the embedded store's ids never alias, whatever ``runs
delete``, ``compact`` and writers racing them do; and every delivery is
stored once (R17: a redelivery after a crash repeats nothing).

The attacks of issue 42: a run fully packed into chunks keeps the rows added
after the run holding the newest ids is deleted (D6); a live writer of a
deleted run never writes into another run (D5), and ``runs delete`` refuses
while a process of this host records it; a spilled batch committed by a
process killed before it saved its delivery offset is stored once when the
next process delivers the file again (D9).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core import Recorder
from goodput_core.events import EventRecord, Kind
from goodput_core.record.spill import Outbox
from goodput_core.stores.sqlite import SqliteStore
from goodput_core.stores.sqlite import admin, ids

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _steps(run, first, n, attempt):
    return [EventRecord(run, int(Kind.STEP_START), 1000.0 + i, i, None, 0, "h", 1, attempt,
                        i + 1, 1000.0 + i) for i in range(first, first + n)]


def test_d6_rows_added_after_the_newest_run_is_deleted_are_read_past_the_chunks(tmp_path):
    path = str(tmp_path / "s.sqlite")
    store = SqliteStore(path)
    packed = _steps("packed", 0, 16_384, "w-packed")  # a multiple of the 8,192-event chunk
    for i in range(0, len(packed), 500):  # rows, as a recorder writes them
        store.append(packed[i:i + 500])
    store.append(_steps("newest", 0, 10, "w-newest"))  # holds the newest ids
    admin.compact(path)  # "packed" is all chunks now: no row of it is left
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM events e JOIN runs r USING (run_id)"
                            " WHERE r.name = 'packed'").fetchone()[0] == 0
    admin.delete_run(path, "newest")
    more = _steps("packed", 16_384, 100, "w-packed")
    store = SqliteStore(path)
    store.append(more)
    events, _ = store.read("packed")
    assert len(events) == 16_484 and events[-1].step == 16_483
    assert [e.step for e in store.read("packed", since=store.read("packed", limit=16_384)[1])[0]
            ] == list(range(16_384, 16_484))  # a reader's cursor past the chunks sees them
    assert store.integrity_check()


def test_d6_event_ids_are_not_handed_out_again_after_a_delete(tmp_path):
    path = str(tmp_path / "s.sqlite")
    store = SqliteStore(path)
    store.append(_steps("a", 0, 5, "wa"))
    store.append(_steps("b", 0, 5, "wb"))
    before = store.run_versions()["b"]  # b's largest event id
    admin.delete_run(path, "b")
    store = SqliteStore(path)
    store.append(_steps("b", 0, 5, "wb2"))  # a new run of the same name
    assert store.run_versions()["b"] > before  # not the ids (nor the version) of the old one
    assert store.runs() == ["a", "b"]
    assert len(store.read("a")[0]) == 5


def test_d5_a_live_writer_of_a_deleted_run_never_writes_into_another_run(tmp_path):
    path = str(tmp_path / "s.sqlite")
    a = Recorder("A", path)
    for k in range(20):
        a.record_step_start_time(k, 1000.0 + k)
    assert a.flush(30)
    admin.delete_run(path, "A")  # while A's writer still records (the admin call itself)
    for k in range(20, 40):
        a.record_step_start_time(k, 1000.0 + k)
    assert a.flush(30)  # kept under the deleted run's id, out of sight
    c = Recorder("C", path)
    for k in range(3):
        c.record_step_start_time(k, 5000.0 + k)
    assert c.flush(30)
    for k in range(40, 60):
        a.record_step_start_time(k, 1000.0 + k)
    assert a.flush(30)
    store = SqliteStore(path)
    assert store.runs() == ["C"]
    assert [e.step for e in store.read("C")[0]] == [0, 1, 2]
    assert store.read("A")[0] == []
    a.close()
    c.close()


def test_d5_runs_delete_refuses_while_a_process_of_this_host_records_the_run(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("live", path)
    rec.record_job_start_time()
    assert rec.flush(30)
    env = dict(os.environ)

    def delete():
        return subprocess.run([sys.executable, "-m", "goodput_core.cli", "runs", "delete",
                               "live", "--yes", "--store", path], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=120)

    refused = delete()
    assert refused.returncode == 2 and "being recorded by process" in refused.stderr
    assert "\n" not in refused.stderr.strip()  # one line
    assert SqliteStore(path).runs() == ["live"]
    assert rec.close(30)
    done = delete()
    assert done.returncode == 0, done.stderr
    assert SqliteStore(path).runs() == []


_DIE_AFTER_COMMIT = textwrap.dedent("""
    import os, signal, sys
    from goodput_core.stores import spill_buffer
    from goodput_core import Recorder
    # the instant between the store's commit of a spilled batch and the saved offset
    spill_buffer.SpillFile.save_progress = lambda self: os.kill(os.getpid(), signal.SIGKILL)
    rec = Recorder("adopter", sys.argv[1], flush_interval_s=0.05)
    rec.flush(60)
""")


def test_d9_a_spilled_batch_committed_before_a_crash_is_stored_once(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(tmp_path / "spill"))
    path = str(tmp_path / "s.sqlite")
    url = "sqlite:///" + path.lstrip("/")
    SqliteStore(path).append(_steps("spilled", 0, 1, "w0"))
    outbox = Outbox(url)  # a writer that could not store 10,000 events, then ended
    outbox.put(_steps("spilled", 1, 10_000, "w1"))
    assert outbox.close()[0] == 10_000
    crashed = subprocess.run([sys.executable, "-c", _DIE_AFTER_COMMIT, url], cwd=ROOT,
                             env=dict(os.environ), capture_output=True, timeout=120)
    assert crashed.returncode == -signal.SIGKILL
    assert len(SqliteStore(path).read("spilled")[0]) > 1  # committed before the kill
    rec = Recorder("next", url)  # the next writer delivers the file again
    assert rec.flush(60)
    rec.close()
    events, _ = SqliteStore(path).read("spilled")
    assert [e.step for e in events] == list(range(10_001))
    assert os.listdir(tmp_path / "spill") == []


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(1, 3), st.lists(st.integers(-2, 60), min_size=1,
                                                               max_size=12)),
                        min_size=1, max_size=25))
def test_each_writer_and_sequence_pair_is_delivered_once(batches):
    """Any batches, any order, repeats and gaps: each (writer, seq > 0) pair is
    kept the first time only (the oracle: a set of what was delivered)."""
    conn = sqlite3.connect(":memory:")
    for statement in ids.SCHEMA:
        conn.execute(statement)
    delivered = set()
    for writer, seqs in batches:
        rows = [(1, writer, seq, 3, 1.0, None, None, 1.0) for seq in seqs]
        expected, this_batch = [], set()
        for row in rows:
            key = (writer, row[2])
            if row[2] > 0 and (key in delivered or key in this_batch):
                continue
            if row[2] > 0:
                this_batch.add(key)
            expected.append(row)
        delivered |= this_batch
        assert ids.keep_new(conn, rows) == expected
    for writer in (1, 2, 3):  # a few disjoint ranges per writer, covering what was delivered
        ranges = conn.execute("SELECT lo, hi FROM delivered WHERE writer_id = ? ORDER BY lo",
                              (writer,)).fetchall()
        assert all(b[0] > a[1] + 1 for a, b in zip(ranges, ranges[1:]))
        assert {s for lo, hi in ranges for s in range(lo, hi + 1)} == \
            {s for w, s in delivered if w == writer}


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(1, 3), st.integers(-2, 60)),
                                 min_size=1, max_size=12), min_size=1, max_size=25))
def test_keep_new_on_columns_keeps_the_rows_keep_new_keeps(batches):
    """Any batches of several writers, repeats, gaps and unnumbered events: the
    columns' mask keeps what keep_new keeps (the oracle), and both record the
    same delivered ranges."""
    conns = [sqlite3.connect(":memory:") for _ in range(2)]
    for conn in conns:
        for statement in ids.SCHEMA:
            conn.execute(statement)
    for pairs in batches:
        rows = [(1, writer, seq, 3, 1.0, None, None, 1.0) for writer, seq in pairs]
        kept = ids.keep_new(conns[0], rows)
        mask = ids.keep_new_columns(conns[1], np.array([w for w, _ in pairs], np.int64),
                                    np.array([s for _, s in pairs], np.int64))
        assert (rows if mask is None else [r for r, m in zip(rows, mask) if m]) == kept
    assert conns[0].execute("SELECT * FROM delivered ORDER BY 1, 2").fetchall() == \
        conns[1].execute("SELECT * FROM delivered ORDER BY 1, 2").fetchall()
