"""Reliability bars R8 and R10 of docs/quality.md: unstorable events, a failing store, forks.

Real SQLite files throughout; the writer's backoff wait is observed through a
stand-in for its wait object, never by sleeping.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading

import pytest

from goodput_core import Recorder, open_store
from goodput_core.events import EventRecord, Kind
from goodput_core.stores import StoreError
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.sqlite import SqliteStore
from tests.support.children import wait_child


class Cyclic(list):
    pass


def _cyclic():
    c = Cyclic()
    c.append(c)
    return c


class Unprintable:
    def __str__(self):
        raise RuntimeError("no str for you")

    __repr__ = __str__


HOSTILE_METADATA = {
    "cyclic": lambda rec: rec.record_metadata(configs=_cyclic()),
    "tuple_key": lambda rec: rec.record_metadata(configs={(1, 2): "x"}),
    "unprintable": lambda rec: rec.record_metadata(configs=Unprintable()),
    "surrogate": lambda rec: rec.record_metadata(note="bad \udc80 text"),
    "deep": lambda rec: rec.record_metadata(configs=_nested(100_000)),
    "huge_step": lambda rec: rec.record_step_start_time(2 ** 63),
    "huge_orbax_step": lambda rec: rec.record_checkpoint_stats(
        {"event_type": "save", "step": 2 ** 64, "checkpoint_manager_blocking_start_time": 5.0,
         "checkpoint_manager_blocking_duration_secs": 1.0}),
    "orbax_tuple_key": lambda rec: rec.record_checkpoint_stats(
        {"event_type": "save", (1,): 2, "checkpoint_manager_blocking_start_time": 5.0,
         "checkpoint_manager_blocking_duration_secs": 1.0}),
    "record_extra": lambda rec: rec.record(Kind.METADATA, None, None, cfg=_cyclic()),
}


def _nested(depth):
    obj = []
    for _ in range(depth):
        obj = [obj]
    return obj


@pytest.mark.parametrize("case", sorted(HOSTILE_METADATA))
def test_r8_an_unstorable_event_alone_is_rejected_at_record_time(tmp_path, case):
    rec = Recorder("r8", str(tmp_path / "r8.sqlite"))
    for i in range(50):
        rec.record_step_start_time(i, 100.0 + i)
    HOSTILE_METADATA[case](rec)
    for i in range(50, 100):
        rec.record_step_start_time(i, 100.0 + i)
    assert rec.flush(30)
    stats = rec.stats()
    assert sum(stats["rejected"].values()) == 1, stats
    assert stats["write_errors"] == 0 and stats["unstorable"] == 0
    events, _ = open_store(str(tmp_path / "r8.sqlite")).read("r8")
    assert [e.step for e in events] == list(range(100))
    rec.close()


@pytest.mark.parametrize("case", sorted(HOSTILE_METADATA))
def test_r8_strict_recorders_raise_at_the_call(tmp_path, case):
    rec = Recorder("r8", MemoryStore(), strict=True)
    with pytest.raises(ValueError):
        HOSTILE_METADATA[case](rec)


@pytest.mark.parametrize("bad", [{"run": "bad \udc80 run"}, {"process_index": 2 ** 70},
                                 {"process_index": "0"}])
def test_r8_run_names_and_process_indexes_the_store_cannot_hold_fail_at_construction(bad):
    kwargs = {"run": "r8", **bad}
    with pytest.raises(ValueError):
        Recorder(kwargs.pop("run"), MemoryStore(), **kwargs)


class PoisonableSqlite(SqliteStore):
    """A real sqlite store fed events the recorder would reject (a foreign writer's bug)."""

    def __init__(self, path):
        super().__init__(path)
        self.appends = 0

    def append(self, batch):
        self.appends += 1
        super().append(batch)


def test_r8_a_poisoned_batch_is_split_and_only_the_bad_events_are_dropped(tmp_path):
    store = PoisonableSqlite(str(tmp_path / "p.sqlite"))
    rec = Recorder("r8", store, flush_interval_s=60, durable=False)  # events in memory
    for i in range(1000):
        rec.record_step_start_time(i, 100.0 + i)
    # Slip unstorable events past record-time validation, straight into the queue:
    # a step beyond 64 bits, a tuple key, an object whose str() raises.
    for poison in ((2 ** 70, None), (1, {(1, 2): 3}), (2, {"x": Unprintable()})):
        # (ticket, kind, time, step, extra, write time, process index): the queue's tuples
        rec._ring.memory.append((next(rec._ring.tickets), int(Kind.STEP_START), 1.0,
                                 poison[0], poison[1], 1.0, 0))
    for i in range(1000, 2000):
        rec.record_step_start_time(i, 100.0 + i)
    assert rec.flush(30)
    events, _ = store.read("r8")
    assert [e.step for e in events] == list(range(2000))
    stats = rec.stats()
    assert stats["unstorable"] == 3 and stats["write_errors"] == 0
    assert store.appends < 100  # bisection, not one append per event or a retry loop
    rec.close()


class FailingStore(MemoryStore):
    """Fails every append with a store error (disk full) until ``healthy`` is set."""

    def __init__(self):
        super().__init__()
        self.calls = 0
        self.healthy = False

    def append(self, batch):
        self.calls += 1
        if not self.healthy:
            raise StoreError("database or disk is full")
        super().append(batch)


class RecordingWait:
    """Stands in for the writer's backoff wait: records each wait, returns when told."""

    def __init__(self):
        self.waits = []
        self.cond = threading.Condition()
        self.released = 0

    def wait(self, seconds):
        with self.cond:
            self.waits.append(seconds)
            self.cond.notify_all()
            n = len(self.waits)
            self.cond.wait_for(lambda: self.released >= n, timeout=60)
        return False

    def set(self):
        self.release()

    def release(self):
        with self.cond:
            self.released += 1
            self.cond.notify_all()

    def wait_for_waits(self, n):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.waits) >= n, timeout=30), self.waits


def test_r10_the_writer_backs_off_for_real_while_the_store_fails():
    store = FailingStore()
    rec = Recorder("r10", store, queue_size=400, flush_interval_s=60)
    backoff = rec._writer.backoff = RecordingWait()
    rec.record_step_start_time(0, 1.0)
    assert not rec.flush(0)  # wakes the writer, which fails and starts backing off
    backoff.wait_for_waits(1)
    # What used to cut the backoff short: more flushes and a queue past half full.
    for i in range(1, 130):  # events and fences pass half of the queue's 400
        rec.record_step_start_time(i, 1.0 + i)
        rec.flush(0)
    assert store.calls == 1  # no retry before the backoff wait returned
    backoff.release()
    backoff.wait_for_waits(2)
    assert store.calls == 2
    assert backoff.waits == [0.05, 0.1]  # exponential backoff
    store.healthy = True
    backoff.release()
    assert rec.flush(30)
    assert [e.step for e in store.read("r10")[0]] == list(range(130))
    rec.close()


def test_r10_close_ends_a_backoff_wait_and_later_events_are_dropped():
    store = FailingStore()
    rec = Recorder("r10", store, flush_interval_s=60)
    rec.record_step_start_time(0, 1.0)
    assert not rec.close(timeout=0.2)  # the store fails: close gives up, the writer stops
    store.healthy = True
    rec.record_step_start_time(1, 2.0)  # after close(): dropped, as documented
    assert rec.stats()["dropped"] == 1
    assert rec.flush(30)  # the store works again: what was recorded before close() is kept
    assert [e.step for e in store.read("r10")[0]] == [0]


class SignallingSqlite(SqliteStore):
    """Sets ``writing`` when the store's writer starts a write transaction (the
    run's first registers the run and the writer)."""

    writing = threading.Event()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        part = self._writer  # the store's writer part (stores/sqlite/write.py)
        register, insert = part._register, part._insert

        def signalling(step):
            def wrapped(*a):
                SignallingSqlite.writing.set()
                return step(*a)
            return wrapped

        part._register, part._insert = signalling(register), signalling(insert)


LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_r10_fork_never_waits_on_another_process_holding_the_store_lock(tmp_path):
    db = str(tmp_path / "locked.sqlite")
    store = SignallingSqlite(db, busy_timeout_s=20)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, db], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        rec = Recorder("r10", store, flush_interval_s=60)
        rec.record_job_start_time(1.0)
        rec.flush(0)
        assert SignallingSqlite.writing.wait(30)  # the writer is blocked on the lock
        forked = threading.Event()

        def fork():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            forked.set()
            wait_child(pid, 60, "child that exits at once")

        forker = threading.Thread(target=fork)
        forker.start()
        # The lock is still held: a fork that waited for it would not finish
        # before the store's 20 s busy timeout.
        assert forked.wait(10), "os.fork() waited for another process's SQLite lock"
        forker.join()
    finally:
        holder.communicate("go\n", timeout=30)
    assert rec.flush(30)
    assert [e.kind for e in open_store(db).read("r10")[0]] == [Kind.JOB_START]
    rec.close()


class RefusesStepThirteen(MemoryStore):
    """Raises the store error SQLite gives for data it refuses, for batches with step 13."""

    def append(self, batch):
        if any(e.step == 13 for e in batch):
            try:
                raise sqlite3.DataError("string or blob too big")
            except sqlite3.DataError as exc:
                raise StoreError("cannot use the store") from exc
        super().append(batch)


def test_r8_an_event_sqlite_refuses_for_its_content_is_isolated_not_retried():
    store = RefusesStepThirteen()
    rec = Recorder("r8", store, flush_interval_s=60, durable=False)  # events in memory
    for i in range(100):
        rec.record_step_start_time(i, 100.0 + i)
    assert rec.flush(30)
    assert [e.step for e in store.read("r8")[0]] == [i for i in range(100) if i != 13]
    assert rec.stats()["unstorable"] == 1 and rec.stats()["write_errors"] == 0
    rec.close()
