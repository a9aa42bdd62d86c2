"""Four rules of the record path, each pinned by a test that fails when the
rule is broken (issue 42, item 6):

* spill files and journals are never opened through a symlink on adoption;
* ``GOODPUT_SPILL_MAX_MB`` bounds what one writer holds on disk, not one write;
* ``flush(timeout)`` never waits past its timeout: the background store's
  own fence gets what is left of it, not a fresh timeout;
* ``stats()["waiting"]`` counts the batch being written or retried.
"""

from __future__ import annotations

import os
import threading

from goodput_core import Recorder
from goodput_core.events import EventRecord, Kind
from goodput_core.record import writer
from goodput_core.record.journal import JournalOrphan
from goodput_core.record.spill import Outbox
from goodput_core.stores.memory import MemoryStore


def _events(n, first=0):
    return [EventRecord("o", int(Kind.STEP_START), 1000.0 + i, i, None, 0, "h", 7, "att",
                        i + 1, 1000.0 + i) for i in range(first, first + n)]


def test_adoption_never_follows_a_symlink_to_a_spill_file_or_journal(tmp_path, monkeypatch):
    url = "sqlite:///" + str(tmp_path / "s.sqlite").lstrip("/")
    elsewhere = tmp_path / "elsewhere"
    # a real spill file and a real journal of this store, left outside the spill directory
    left = Outbox(url, directory=str(elsewhere))
    left.put(_events(5))
    spill_file = left.close()[1]
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(elsewhere))
    rec = Recorder("o", url, flush_interval_s=3600)
    rec.record_step_start_time(1)
    journal = rec.stats()["journal"]
    rec._ring.journal.release()  # left behind unlocked, as by a killed writer
    orphan = JournalOrphan(journal)
    assert orphan.unread == 1  # a journal an adopter would deliver...
    orphan.close(delete=False)
    spill = tmp_path / "spill"
    spill.mkdir(mode=0o700)
    for target in (spill_file, journal):  # ...planted in the spill directory as symlinks
        os.symlink(target, spill / os.path.basename(target))
    box = Outbox(url, directory=str(spill))
    assert box.adopt() == 0 and box.peek(10) == []
    box.close()
    assert os.path.isfile(spill_file) and os.path.isfile(journal)  # not deleted through them
    assert sorted(os.listdir(spill)) == sorted(map(os.path.basename, (spill_file, journal)))


def test_the_spill_bound_is_per_writer_not_per_write(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPILL_MAX_MB", str(3000 / 2**20))  # 3,000 bytes
    box = Outbox("sqlite:///b.sqlite", directory=str(tmp_path))
    kept = [box.put(_events(20, first=20 * i)) for i in range(5)]  # each write fits alone
    assert kept[0] == 20 and sum(kept) < 100
    assert box.stats()["spill_dropped"] == 100 - sum(kept)
    assert os.path.getsize(box.stats()["spill_file"]) <= 3000
    box.close()


class _DeliveringStore(MemoryStore):
    """A store that delivers in the background: its flush takes the time it is given."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.flush_timeouts = []
        self.delivering = False

    def append(self, batch):
        self.clock.t += 8.0  # the append took 8 s (of the recorder's monotonic clock)
        super().append(batch)

    def flush(self, timeout=None):
        if self.delivering:
            return True
        self.flush_timeouts.append(timeout)
        self.clock.t += timeout  # waits all it may, and does not deliver
        return False


class _Monotonic:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_flush_never_gives_the_background_store_a_fresh_timeout(monkeypatch):
    clock = _Monotonic()
    monkeypatch.setattr(writer.time, "monotonic", clock)
    store = _DeliveringStore(clock)
    rec = Recorder("r", store)
    rec.record_step_start_time(0)
    start = clock()
    assert rec.flush(10.0) is False
    assert store.flush_timeouts == [2.0]  # what was left of the 10 s after the 8 s append
    assert clock() - start <= 10.0
    store.delivering = True
    assert rec.close(30)


class _HeldStore(MemoryStore):
    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def append(self, batch):
        self.entered.set()
        assert self.release.wait(60)
        super().append(batch)


def test_waiting_counts_the_batch_being_written():
    store = _HeldStore()
    rec = Recorder("r", store)
    for k in range(7):
        rec.record_step_start_time(k)
    rec._writer.wake.set()
    assert store.entered.wait(60)  # the writer holds the 7 events in its append now
    for k in range(7, 10):
        rec.record_step_start_time(k)  # and 3 more wait in the queue
    stats = rec.stats()
    store.release.set()
    assert (stats["queued"], stats["waiting"]) == (3, 10)
    assert rec.flush(30)
    assert rec.stats()["waiting"] == 0
    rec.close()
