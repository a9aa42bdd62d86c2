"""The recorder's journal (goodput_core/record/journal.py) and its ring: what
the SIGKILL tests (test_sigkill_durable.py) do not reach one by one.

A forked child never writes into, maps or locks its parent's journal
(docs/quality.md R7); a torn slot (a process killed in the middle of writing
it) is not delivered; a full ring sends events to memory instead of
dropping them; a store that delivers in the background frees the ring only
once it confirmed, and during an outage the events it holds move to a held
file instead of filling the ring.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap

from goodput_core import Recorder
from goodput_core.record import journal as jr
from goodput_core.record.spill import Outbox
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.sqlite import SqliteStore
from tests.support.children import wait_child

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_a_forked_child_neither_writes_maps_nor_locks_the_parents_journal(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("fork", path, flush_interval_s=3600)
    for k in range(5):
        rec.record_step_start_time(k, 1000.0 + k)
    parent_journal = rec.stats()["journal"]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own journal; none of the parent's left in it
        checks = {"ran": False}
        try:
            os.close(read_end)
            mine = rec.stats()["journal"]
            maps = open(f"/proc/{os.getpid()}/maps").read()
            fds = []
            for fd in os.listdir("/proc/self/fd"):
                try:  # the child's own writer thread opens and closes files meanwhile
                    fds.append(os.readlink(f"/proc/self/fd/{fd}"))
                except OSError:
                    pass
            for k in range(100):
                rec.record_step_start_time(1000 + k, 2000.0 + k)
            checks = {"ran": True, "flushed": rec.flush(30), "own journal": mine != parent_journal,
                      "parent's not mapped": parent_journal not in maps,
                      "parent's not open": parent_journal not in fds, "own mapped": mine in maps}
        finally:
            os.write(write_end, repr(sorted(k for k, v in checks.items() if not v)).encode())
            os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 1000) == b"[]"  # no check failed
    os.close(read_end)
    assert wait_child(pid) == 0
    assert rec.flush(30)
    events, _ = SqliteStore(path).read("fork")
    mine = [e for e in events if e.attempt == rec.attempt]
    theirs = [e for e in events if e.attempt != rec.attempt]
    assert [e.step for e in mine] == [0, 1, 2, 3, 4] and [e.seq for e in mine] == [1, 2, 3, 4, 5]
    assert [e.step for e in theirs] == list(range(1000, 1100))
    assert rec.close(30)
    assert not os.path.exists(parent_journal)  # all stored: deleted at close


def test_a_torn_slot_is_not_delivered_and_the_rest_is(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(tmp_path / "spill"))
    url = "sqlite:///" + str(tmp_path / "s.sqlite").lstrip("/")
    rec = Recorder("torn", url, flush_interval_s=3600)
    for k in range(10):
        rec.record_step_start_time(k, 1000.0 + k)
    journal = rec._ring.journal
    # the process dies while writing ticket 10's slot: its closing ticket is not there
    struct.pack_into("<Q", journal.mm, 10 * jr.SLOT + jr.SLOT - 8, 0)
    journal.release()  # left behind unlocked, as a killed writer leaves it
    rec._ring.journal = None  # this process no longer delivers it (as if it were dead)
    rec._ring.drained = rec._ring.freed = rec._ring.issued()
    box = Outbox(url)
    assert box.adopt() == 9
    assert [e.step for e in box.peek(100)] == list(range(9))
    box.rewind()
    box.close()
    nxt = Recorder("next", url)
    assert nxt.flush(30)
    nxt.close()
    assert [e.step for e in SqliteStore(str(tmp_path / "s.sqlite")).read("torn")[0]] == \
        list(range(9))


class _Held(SqliteStore):
    """An embedded store whose appends wait until the test lets them through."""

    def __init__(self, path):
        super().__init__(path)
        import threading
        self.gate = threading.Event()

    def append(self, batch):
        assert self.gate.wait(60)
        super().append(batch)


def test_a_full_ring_sends_events_to_memory_not_to_the_floor(tmp_path):
    store = _Held(str(tmp_path / "s.sqlite"))
    rec = Recorder("burst", store, queue_size=20_000)  # a ring of 16,384, then memory
    for k in range(19_000):
        rec.record_step_start_time(k, 1000.0 + k)
    stats = rec.stats()
    store.gate.set()
    assert rec.flush(60)
    assert stats["dropped"] == 0 and stats["overflowed"] > 0  # waited in memory, said so
    events, _ = store.read("burst")
    assert [e.step for e in events] == list(range(19_000))
    assert [e.seq for e in events] == list(range(1, 19_001))  # in recording order
    assert rec.close(30)


class _Background(MemoryStore):
    """A store that delivers in the background: its deliveries are confirmed
    when the test says (delivery_mark/delivered_mark, as a store's SendQueue)."""

    def __init__(self, path):
        super().__init__()
        self.url = "sqlite:///" + path.lstrip("/")  # a store a later process could read
        self.appended = 0
        self.confirmed = 0

    def append(self, batch):
        super().append(batch)
        self.appended += len(batch)

    def delivery_mark(self):
        return self.appended

    def delivered_mark(self):
        return self.confirmed

    def flush(self, timeout=None):
        return self.confirmed >= self.appended


def test_a_background_store_frees_the_ring_only_once_it_delivered(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPILL_DIR", str(tmp_path / "spill"))
    store = _Background(str(tmp_path / "s.sqlite"))
    rec = Recorder("bg", store, queue_size=100, flush_interval_s=3600)  # a ring of 100
    for k in range(30):
        rec.record_step_start_time(k)
    assert rec.flush(30, wait_for_delivery=False)
    assert rec._ring.freed < 30  # handed over, not confirmed: still in the journal
    # an outage: the store confirms nothing while more than half a ring waits
    for k in range(30, 90):
        rec.record_step_start_time(k)
    assert rec.flush(30, wait_for_delivery=False)
    held = rec._writer.outbox._held
    assert held is not None and held.unread >= 60  # kept on disk, out of the ring
    assert rec._ring.freed >= 90 and rec.stats()["overflowed"] == 0
    store.confirmed = store.appended  # delivered at last
    assert rec.flush(30)
    assert held.unread == 0  # the held file is emptied
    assert [e.step for e in store.read("bg")[0]] == list(range(90))
    assert rec.close(30)
    assert os.listdir(tmp_path / "spill") == []


_INTERRUPTED = textwrap.dedent("""
    import json, signal, sys, time
    from goodput_core import Recorder

    class Interrupt(BaseException):  # what a signal handler raises, as Ctrl-C's KeyboardInterrupt
        pass

    rec = Recorder("ctrl-c", sys.argv[1])
    returned, interrupted, armed = [], [], [False]

    def interrupt(signum, frame):
        if armed[0]:
            raise Interrupt()

    signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    k = 0
    while len(interrupted) < 300:  # exceptions land anywhere in record_*
        try:
            armed[0] = True
            rec.record_step_start_time(k, 1000.0 + k)
            returned.append(k)
            armed[0] = False
        except Interrupt:
            armed[0] = False
            interrupted.append(k)
        k += 1
    signal.setitimer(signal.ITIMER_REAL, 0)
    start = time.monotonic()
    ok = rec.flush(30)
    print(json.dumps({"flush": ok, "took": time.monotonic() - start, "returned": returned,
                      "interrupted": interrupted, "stats": rec.stats()}))
""")


def test_an_exception_between_a_ticket_and_its_slot_does_not_stall_the_writer(tmp_path):
    path = str(tmp_path / "s.sqlite")
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED, path], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, GOODPUT_SPILL_DIR=str(tmp_path / "spill")))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # a ticket taken and never written (the exception landed right after it was
    # taken) is passed over within a second: the writer never stalls on it
    assert out["flush"] and out["took"] < 10
    stored = {e.step for e in SqliteStore(path).read("ctrl-c")[0]}
    returned, interrupted = set(out["returned"]), set(out["interrupted"])
    assert returned <= stored <= returned | interrupted
    assert out["stats"]["rejected"] == {} and out["stats"]["dropped"] == 0


def test_a_forked_child_leaves_alone_the_descriptor_of_a_released_journal(tmp_path):
    # a closed recorder's journal released its descriptor; the number now
    # belongs to another file (here a pipe of ours): the child must not close it
    rec = Recorder("closed", str(tmp_path / "s.sqlite"))
    rec.record_step_start_time(0, 1000.0)
    journal = rec._ring.journal
    assert journal is not None and rec.close(30) and journal.released
    reused_read, reused_write = os.pipe()
    journal.fd = reused_write  # the number reused
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            journal.drop_in_forked_child()
            try:
                os.fstat(reused_write)
                os.write(write_end, b"open")
            except OSError:
                os.write(write_end, b"closed")
        finally:
            os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 10) == b"open"
    os.close(read_end)
    assert wait_child(pid) == 0
    os.close(reused_read)
    os.close(reused_write)
