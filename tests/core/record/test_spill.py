"""R13/R14 for every store: events that have not reached an opened store are
spilled to a private local file and delivered exactly once; ``flush()`` keeps
its timeout; ``stats()`` says where every event is.

The embedded store in a directory its user may not write runs as an
unprivileged user (``setpriv``) when the tests run as root, in real
processes: the first cannot store, the next (once the directory is writable)
delivers. The PostgreSQL cases are in stores/postgres/test_refusals.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from goodput_core import Recorder
from goodput_core.events import EventRecord
from goodput_core.record.spill import Outbox
from goodput_core.stores.base import StoreError
from goodput_core.stores.deferred import DeferredStore
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.sqlite import SqliteStore
from tests.support.cli_process import NOBODY, as_nobody_prefix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

_WRITER = textwrap.dedent("""
    import json, sys
    from goodput_core import Recorder
    store, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rec = Recorder(run, store, flush_interval_s=0.05)
    for i in range(n):
        rec.record_step_start_time(i, 1000.0 + i)
    ok = rec.flush(10)
    print(json.dumps({"flush": ok, "stats": rec.stats()}), flush=True)
""")


def test_embedded_store_in_an_unwritable_directory_is_delivered_by_the_next_process():
    prefix = as_nobody_prefix() if os.geteuid() == 0 else []
    if prefix is None:
        pytest.skip("root without setpriv: cannot make a directory unwritable")
    base = tempfile.mkdtemp(prefix="goodput-spill-")  # tmp_path's parents are 0700
    try:
        os.chmod(base, 0o755)
        locked, spill = os.path.join(base, "ro"), os.path.join(base, "spill")
        os.mkdir(locked)
        os.mkdir(spill)
        if prefix:
            os.chown(spill, NOBODY, NOBODY)
        os.chmod(locked, 0o555)  # the writer may enter and read, not write
        env = dict(os.environ, GOODPUT_SPILL_DIR=spill,
                   PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        store = os.path.join(locked, "s.sqlite")

        def writer(run, n):
            proc = subprocess.run(prefix + [sys.executable, "-c", _WRITER, store, run, str(n)],
                                  capture_output=True, text=True, env=env, timeout=120, cwd=base)
            assert proc.returncode == 0, proc.stderr
            return json.loads(proc.stdout), proc.stderr

        out, err = writer("job", 22)
        stats = out["stats"]
        assert out["flush"] is False
        # the 22 events are neither stored nor dropped: spilled, and said so
        assert (stats["written"], stats["dropped"], stats["spilled"]) == (0, 0, 22)
        assert "is not writable" in stats["store_error"]
        assert "22 events not stored" in err and "are kept in" in err, err
        (left,) = [n for n in os.listdir(spill) if n.endswith(".jsonl")]
        assert stat.S_IMODE(os.stat(os.path.join(spill, left)).st_mode) == 0o600

        os.chmod(locked, 0o777)  # the directory is writable again
        out, _ = writer("next", 3)
        assert out["flush"] is True
        assert out["stats"]["spill_adopted"] == 22
        assert out["stats"]["written"] == 25  # its own 3 and the 22 it delivered
        read = SqliteStore(store, readonly=True)
        events = read.read("job")[0]
        assert sorted(e.step for e in events) == list(range(22))  # each once
        assert [n for n in os.listdir(spill) if n.endswith(".jsonl")] == []
        read.close()
    finally:
        os.chmod(os.path.join(base, "ro"), 0o755)
        shutil.rmtree(base)


class FailingStore(MemoryStore):
    """An open store that refuses every append (an outage) until ``healthy``."""

    def __init__(self):
        super().__init__()
        self.healthy = False

    def append(self, batch):
        if not self.healthy:
            raise StoreError("attempt to write a readonly database")
        super().append(batch)


def test_a_refusing_store_spills_and_the_same_process_delivers_once(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(tmp_path / "spill"))
    store = FailingStore()
    rec = Recorder("r", store, flush_interval_s=0.05)
    for i in range(300):
        rec.record_step_start_time(i, 1000.0 + i)
    assert rec.flush(0.5) is False  # a bounded wait: the store refuses
    # the writer's first failed attempt moves them to the spill file; on a loaded
    # machine that attempt can still be in flight when flush() gives up (its
    # batch then counts as neither queued nor spilled): wait for it, bounded
    deadline = time.monotonic() + 30
    while rec.stats()["spilled"] < 300 and time.monotonic() < deadline:
        rec.flush(0.1)
    stats = rec.stats()
    # none stored, none in memory: the 300 are in the spill file
    assert (stats["written"], stats["queued"], stats["spilled"]) == (0, 0, 300)
    assert stats["unstorable"] == 0 and stats["dropped"] == 0
    assert os.path.exists(stats["spill_file"])
    assert stat.S_IMODE(os.stat(stats["spill_file"]).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "spill").st_mode) == 0o700
    for i in range(300, 310):  # recorded during the outage, after the spill
        rec.record_step_start_time(i, 1000.0 + i)
    store.healthy = True
    assert rec.flush(30)
    stats = rec.stats()
    assert (stats["written"], stats["spilled"]) == (310, 0)
    # every spilled event was delivered (the last 10 were spilled too when the
    # writer retried before the store came back)
    assert 300 <= stats["spill_delivered"] == stats["spilled_total"] <= 310
    # in order and once: the spilled 300 first, then the 10 recorded later
    assert [e.step for e in store.read("r")[0]] == list(range(310))
    rec.close()


def test_flush_never_exceeds_its_timeout_while_the_store_hangs_opening(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(tmp_path / "spill"))
    release = threading.Event()
    opened = MemoryStore()

    def hanging_open(url):  # a server that accepts the connection and never answers
        release.wait(60)
        return opened

    rec = Recorder("hang", DeferredStore("memory://hang", opener=hanging_open),
                   flush_interval_s=0.05)
    try:
        rec.record_step_start_time(0, 1000.0)
        start = time.monotonic()
        assert rec.flush(0.3) is False
        # the old flush opened the store on the caller's thread and took the
        # whole hang; a bound of 0.3 s plus scheduling slack
        assert time.monotonic() - start < 2.0
    finally:
        release.set()
    assert rec.flush(30)
    assert [e.step for e in opened.read("hang")[0]] == [0]
    rec.close()


def _events(n, seq0=1):
    return [EventRecord("o", 1, 1000.0 + i, i, {"k": "v"} if i % 2 else None, 0, "h", 7,
                        "att", seq0 + i, 1000.0 + i) for i in range(n)]


def test_a_file_adopted_after_a_crash_resumes_after_what_was_delivered(tmp_path):
    first = Outbox("sqlite:///x.sqlite", directory=str(tmp_path))
    assert first.put(_events(10)) == 10
    assert len(first.peek(4)) == 4
    first.commit(4)  # four delivered, then the process is killed: no close()
    own = first._own
    own._reader.close()
    os.close(own.fd)  # what the kernel does for a killed process (the lock goes)
    second = Outbox("sqlite:///x.sqlite", directory=str(tmp_path))
    assert second.adopt() == 6
    events = second.peek(100)
    assert [e.step for e in events] == [4, 5, 6, 7, 8, 9]
    assert events[1].extra == {"k": "v"} and events[0].extra is None  # as recorded
    second.commit(len(events))
    assert second.close() == (0, None)
    assert os.listdir(tmp_path) == []  # a delivered file is deleted, with its offset
    # another store's files are not taken
    other = Outbox("sqlite:///y.sqlite", directory=str(tmp_path))
    other.put(_events(1))
    assert Outbox("sqlite:///x.sqlite", directory=str(tmp_path)).adopt() == 0
    other.close()


def test_a_live_writers_file_is_not_adopted(tmp_path):
    live = Outbox("sqlite:///x.sqlite", directory=str(tmp_path))
    live.put(_events(3))
    assert Outbox("sqlite:///x.sqlite", directory=str(tmp_path)).adopt() == 0  # flock held
    assert live.close()[0] == 3


def test_the_spill_file_is_bounded_and_counts_what_it_drops(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPILL_MAX_MB", str(2000 / 2**20))  # 2,000 bytes
    box = Outbox("sqlite:///b.sqlite", directory=str(tmp_path))
    kept = box.put(_events(100))
    # one event is ~100 bytes of JSON: fewer than 100 fit, the rest are counted
    assert 0 < kept < 100
    assert box.stats()["spill_dropped"] == 100 - kept
    assert os.path.getsize(box.stats()["spill_file"]) <= 2000
    box.close()


def test_a_symlink_planted_in_the_spill_directory_is_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    box = Outbox("sqlite:///s.sqlite", directory=str(tmp_path / "spill"))
    box.put(_events(1))
    path = box.stats()["spill_file"]
    os.symlink(target, path + ".pos")  # the offset file a commit writes
    box.peek(1)
    box.commit(1)
    assert target.read_text() == "keep"
    box.close()
