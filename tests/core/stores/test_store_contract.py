"""Tests of the store contract (every backend) and of the SQLite store's specifics."""

from __future__ import annotations

import gc
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core.events import EventRecord, Kind
from goodput_core.stores import StoreError, open_store
from goodput_core.stores.sqlite import connections as sqlite_connections
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.sqlite.store import SCHEMA_VERSION, SqliteStore
from tests.support.children import wait_child


def ev(run="run-a", i=0, kind=Kind.STEP_START, **kw):
    """An event with distinct, finite values everywhere (so == compares it fully)."""
    fields = dict(time=1000.0 + i, step=i, extra=None, process_index=1, host="host-1",
                  pid=4242, attempt="att-1", seq=i, write_time=2000.0 + i)
    fields.update(kw)
    return EventRecord(run, int(kind), **fields)


@pytest.fixture(params=["memory", "sqlite", "sqlite-chunked"])
def store(request, tmp_path):
    # sqlite-chunked: every 2 rows of a run are packed into a chunk (stores/sqlite/chunks.py)
    s = MemoryStore("t") if request.param == "memory" else SqliteStore(
        tmp_path / "s.sqlite", chunk_events=2 if request.param == "sqlite-chunked" else 8192)
    yield s
    s.close()


# ----------------------------------------------------------------- contract


def test_append_then_read_returns_events_in_order(store):
    batch = [ev(i=i) for i in range(5)]
    store.append(batch[:2])
    store.append(batch[2:])
    events, _ = store.read("run-a")
    assert events == batch
    assert all(type(e) is EventRecord for e in events)


def test_cursor_returns_only_new_events(store):
    store.append([ev(i=0), ev(i=1)])
    first, cursor = store.read("run-a")
    assert len(first) == 2
    nothing, same = store.read("run-a", since=cursor)
    assert nothing == [] and same == cursor
    store.append([ev(i=2)])
    new, cursor2 = store.read("run-a", since=cursor)
    assert new == [ev(i=2)]
    assert store.read("run-a", since=cursor2)[0] == []


def test_limit_pages_through_all_events(store):
    batch = [ev(i=i) for i in range(7)]
    store.append(batch)
    assert store.read("run-a", limit=0)[0] == []
    got, cursor = [], None
    while True:
        page, cursor = store.read("run-a", since=cursor, limit=3)
        if not page:
            break
        assert len(page) <= 3
        got += page
    assert got == batch


def test_runs_are_isolated_and_listed_oldest_first(store):
    store.append([ev("zeta", 0), ev("alpha", 1), ev("zeta", 2)])
    store.append([ev("mid", 3)])
    assert store.runs() == ["zeta", "alpha", "mid"]
    assert [e.seq for e in store.read("zeta")[0]] == [0, 2]
    assert store.read("alpha")[0] == [ev("alpha", 1)]
    assert store.read("mid")[0] == [ev("mid", 3)]


def test_nan_time_and_write_time_round_trip(store):
    store.append([ev(i=0, kind=Kind.CHECKPOINT_STATS, time=math.nan, step=None,
                     write_time=math.nan, extra={"event_type": "save"})])
    (got,), _ = store.read("run-a")
    assert math.isnan(got.time) and math.isnan(got.write_time)
    assert got.step is None and got.extra == {"event_type": "save"}


def test_extra_dict_round_trip(store):
    extra = {"custom_badput_event_type": "eval", "n": 3, "f": 0.25, "flag": True,
             "none": None, "nested": {"a": [1, 2.5, "x"]}, "quote": 'a"b\\c'}
    store.append([ev(i=0, kind=Kind.CUSTOM_BADPUT_START, extra=extra, step=None)])
    (got,), _ = store.read("run-a")
    assert got.extra == extra


def test_writer_metadata_round_trip(store):
    a = ev(i=0, process_index=0, host="h0", pid=1, attempt="x", seq=10, write_time=5.5)
    b = ev(i=1, process_index=7, host="h7", pid=99, attempt="y", seq=11, write_time=6.5)
    store.append([a, b, a._replace(seq=12)])
    assert store.read("run-a")[0] == [a, b, a._replace(seq=12)]


def test_reading_an_empty_or_unknown_run(store):
    assert store.read("nobody")[0] == []  # the cursor is opaque: only passed back
    store.append([])
    assert store.runs() == []
    events, cursor = store.read("nobody")
    store.append([ev("nobody", 0)])
    assert store.read("nobody", since=cursor)[0] == [ev("nobody", 0)]


_json_leaf = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
              | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
_int64 = st.integers(-2**63, 2**63 - 1)
_records = st.builds(
    EventRecord, run=st.sampled_from(["r1", "r\"2'", "\u00e9\u65e5"]),
    kind=st.sampled_from([int(k) for k in Kind]), time=st.floats(width=64),
    step=st.none() | _int64,
    extra=st.none() | st.dictionaries(st.text(max_size=6), _json, max_size=4),
    process_index=_int64, host=st.text(max_size=6), pid=_int64, attempt=st.text(max_size=6),
    seq=_int64, write_time=st.floats(width=64))


def _comparable(e):
    return tuple("nan" if isinstance(v, float) and v != v else v for v in e)


def _stored_once(events):
    """What a store keeps of ``events``: each (writer, sequence) pair once, its
    first delivery (sequence numbers from 1; 0 and below are not checked)."""
    seen, out = set(), []
    for e in events:
        key = (e.process_index, e.host, e.pid, e.attempt, e.seq)
        if e.seq > 0 and key in seen:
            continue
        seen.add(key)
        out.append(e)
    return out


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(_records, min_size=1, max_size=5), min_size=1, max_size=3))
def test_sqlite_round_trips_any_valid_record(batches):
    with tempfile.TemporaryDirectory() as tmp:
        s = SqliteStore(os.path.join(tmp, "s.sqlite"))
        for batch in batches:
            s.append(batch)
        every = _stored_once([e for batch in batches for e in batch])
        for run in dict.fromkeys(e.run for e in every):
            got = s.read(run)[0]
            assert list(map(_comparable, got)) == [_comparable(e) for e in every if e.run == run]
        s.close()


# ----------------------------------------------------------- sqlite specifics


def test_schema_version_wal_and_tables_recorded(tmp_path):
    path = tmp_path / "s.sqlite"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() \
        == (str(SCHEMA_VERSION),)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"meta", "runs", "writers", "events", "events_run", "chunks"} <= tables
    conn.close()


def test_newer_schema_version_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                     (str(SCHEMA_VERSION + 1),))
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore(path)


def test_unusable_paths_raise_store_error(tmp_path):
    regular = tmp_path / "file"
    regular.write_text("not a directory")
    with pytest.raises(StoreError, match="GOODPUT_STORE"):
        SqliteStore(regular / "sub" / "s.sqlite")
    with pytest.raises(StoreError, match="directory"):
        SqliteStore(tmp_path)
    with pytest.raises(StoreError):
        SqliteStore(regular)  # exists, but is not a database
    with pytest.raises(StoreError):
        open_store("sqlite://")


def test_reopen_keeps_data_and_open_store_url(tmp_path):
    path = tmp_path / "deep" / "er" / "s.sqlite"
    with SqliteStore(path) as s:
        s.append([ev(i=0), ev("run-b", 1)])
    s2 = open_store(f"sqlite:///{path}")
    assert isinstance(s2, SqliteStore) and s2.url == f"sqlite:///{str(path).lstrip('/')}"
    assert s2.read("run-a")[0] == [ev(i=0)] and s2.runs() == ["run-a", "run-b"]
    s2.append([ev(i=2)])
    assert [e.seq for e in s2.read("run-a")[0]] == [0, 2]
    assert s2.integrity_check() is True
    s2.close()


def test_extra_is_strict_json_with_non_finite_floats_as_strings(tmp_path):
    import numpy as np
    s = SqliteStore(tmp_path / "s.sqlite")
    extra = {"a": math.nan, "b": [math.inf, -math.inf], "np": np.float32(1.5),
             "npnan": np.float64("nan"), "c": {"d": np.int64(3)}}
    s.append([ev(i=0, extra=extra)])
    raw = sqlite3.connect(tmp_path / "s.sqlite").execute("SELECT extra FROM events").fetchone()[0]

    def refuse(token):
        raise AssertionError(f"not strict JSON: {token}")

    assert json.loads(raw, parse_constant=refuse) == {
        "a": "NaN", "b": ["Infinity", "-Infinity"], "np": 1.5, "npnan": "NaN",
        "c": {"d": 3}}
    assert s.read("run-a")[0][0].extra["a"] == "NaN"
    s.close()


def test_append_is_all_or_nothing(tmp_path):
    s = SqliteStore(tmp_path / "s.sqlite")
    s.append([ev(i=0)])
    with pytest.raises(OverflowError):
        s.append([ev(i=1), ev(i=2, step=2**70)])  # unstorable integer, second in batch
    assert s.read("run-a")[0] == [ev(i=0)]
    s.append([ev(i=3)])
    assert [e.seq for e in s.read("run-a")[0]] == [0, 3]
    s.close()


def test_read_restores_the_garbage_collector_state(tmp_path):
    s = SqliteStore(tmp_path / "s.sqlite")
    s.append([ev(i=i) for i in range(3)])
    assert gc.isenabled()
    s.read("run-a")
    assert gc.isenabled()
    gc.disable()
    try:
        s.read("run-a")
        assert not gc.isenabled()
    finally:
        gc.enable()
    s.close()


def test_retry_backs_off_on_busy_and_gives_up_after_the_timeout(tmp_path, monkeypatch):
    class FakeTime:
        now = 0.0
        sleeps = []

        def monotonic(self):
            return self.now

        def sleep(self, seconds):
            self.sleeps.append(seconds)
            self.now += seconds

    fake = FakeTime()
    monkeypatch.setattr(sqlite_connections, "time", fake)
    s = SqliteStore(tmp_path / "s.sqlite", busy_timeout_s=1.0)
    calls = []

    def busy_twice():
        calls.append(1)
        if len(calls) <= 2:
            raise sqlite3.OperationalError("database is locked")
        return "done"

    assert s._connections.retry(busy_twice) == "done" and len(fake.sleeps) == 2

    def always_busy():
        raise sqlite3.OperationalError("database is busy")

    with pytest.raises(StoreError, match="locked"):
        s._connections.retry(always_busy)
    assert fake.now >= 1.0

    def broken():
        raise sqlite3.OperationalError("no such table: nope")

    with pytest.raises(sqlite3.OperationalError):
        s._connections.retry(broken)
    s.close()


def test_one_store_shared_by_threads(tmp_path):
    s = SqliteStore(tmp_path / "s.sqlite")
    errors = []

    def work(t):
        try:
            for b in range(20):
                s.append([ev(i=b * 5 + k, attempt=f"t{t}") for k in range(5)])
            s.read("run-a")
            s.close()  # this thread's connection only
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    events = s.read("run-a")[0]
    assert len(events) == 400
    assert len({(e.attempt, e.seq) for e in events}) == 400
    assert s.integrity_check()
    s.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_use_after_fork_in_child(tmp_path):
    s = SqliteStore(tmp_path / "s.sqlite")
    s.append([ev(i=0)])
    # A connection owned by another (finished) thread is inherited too.
    t = threading.Thread(target=lambda: s.append([ev(i=1, attempt="thread")]))
    t.start()
    t.join()
    pid = os.fork()
    if pid == 0:  # child: must open its own connection, never touch the parent's
        code = 1
        try:
            s.append([ev(i=2, pid=os.getpid(), attempt="child")])
            ok = [e.attempt for e in s.read("run-a")[0]] == ["att-1", "thread", "child"]
            code = 0 if ok and s.integrity_check() else 2
        finally:
            os._exit(code)
    assert wait_child(pid, what="child using the store after fork") == 0
    s.append([ev(i=3)])  # the parent's connection still works
    events = s.read("run-a")[0]
    assert [e.seq for e in events] == [0, 1, 2, 3]
    assert events[2].pid == pid
    assert s.integrity_check()
    s.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("chunk_events", [8192, 4])
def test_fork_while_another_thread_writes(tmp_path, chunk_events):
    s = SqliteStore(tmp_path / "s.sqlite", chunk_events=chunk_events)
    started, stop, written = threading.Event(), threading.Event(), [0]

    def writer():
        while not stop.is_set():
            s.append([ev(i=written[0], attempt="writer")])
            written[0] += 1
            started.set()

    thread = threading.Thread(target=writer)
    thread.start()
    started.wait()
    children = []
    with warnings.catch_warnings():  # Python >= 3.12 warns about fork with threads
        warnings.simplefilter("ignore", DeprecationWarning)
        for k in range(3):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    s.append([ev(i=k, pid=os.getpid(), attempt="child")])
                    code = 0 if s.integrity_check() else 2
                finally:
                    os._exit(code)
            children.append(pid)
    for pid in children:
        assert wait_child(pid, what="child forked while a thread writes") == 0
    stop.set()
    thread.join()
    events = s.read("run-a")[0]
    assert [e.seq for e in events if e.attempt == "writer"] == list(range(written[0]))
    assert sorted(e.seq for e in events if e.attempt == "child") == [0, 1, 2]
    assert s.integrity_check()
    s.close()


_WORKER = textwrap.dedent("""
    import os, sys, threading
    from goodput_core.events import EventRecord
    from goodput_core.stores.sqlite import SqliteStore

    path, proc, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("ready", flush=True)
    sys.stdin.readline()  # start barrier: every process opens the fresh file at once
    store = SqliteStore(path, chunk_events=int(sys.argv[4]))
    errors = []

    def work(thread):
        seq = 0
        try:
            for b in range(batches):
                size = 1 + (b * 7 + thread) % 6
                store.append([EventRecord(f"run-{(b + thread) % 2}", 3, float(seq), seq,
                                          None, proc, "host", os.getpid(), f"t{thread}",
                                          seq, 0.0) for seq in range(seq, seq + size)])
                seq += size
            store.read("run-0")
        except BaseException as exc:
            errors.append(repr(exc))
        counts[thread] = seq

    counts = {}
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("errors", errors, flush=True)
    print("counts", os.getpid(), *[counts[t] for t in range(4)], flush=True)
    sys.exit(1 if errors else 0)
""")


@pytest.mark.parametrize("chunk_events", [8192, 16, 3])  # 3: most batches packed at once
def test_four_processes_by_four_threads_lose_and_duplicate_nothing(tmp_path, chunk_events):
    path = str(tmp_path / "fresh" / "s.sqlite")
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, path, str(p), "100",
                               str(chunk_events)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for p in range(4)]
    expected = {}
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, out + err
            assert "locked" not in out + err and "busy" not in out + err
            assert "errors []" in out
            fields = out.split("counts ")[1].split()
            for thread, n in enumerate(fields[1:]):
                expected[(int(fields[0]), f"t{thread}")] = int(n)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    s = SqliteStore(path)
    events = s.read("run-0")[0] + s.read("run-1")[0]
    keys = [(e.pid, e.attempt, e.seq) for e in events]
    assert len(keys) == len(set(keys)) == sum(expected.values())
    for writer, n in expected.items():
        seqs = sorted(seq for pid, att, seq in keys if (pid, att) == writer)
        assert seqs == list(range(n))
    # Each writer's events were committed in its append order.
    for run in ("run-0", "run-1"):
        last = {}
        for e in s.read(run)[0]:
            assert e.seq > last.get((e.pid, e.attempt), -1)
            last[(e.pid, e.attempt)] = e.seq
    assert sorted(s.runs()) == ["run-0", "run-1"]
    assert s.integrity_check()
    s.close()
