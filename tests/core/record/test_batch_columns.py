"""The writer's batches as columns (goodput_core/record/slot_columns.py,
goodput_core/stores/event_batch.py): what the watchdog, the heartbeat and the
stores make of an EventBatch is what they make of the same EventRecords.

The one-by-one paths (StepSeries.start/end, the watchdog's loop over
EventRecords, Heartbeat over EventRecords) are the oracles, kept on purpose:
they are what memory rings and redelivered spill files still take.
"""

from __future__ import annotations

import math
import mmap
import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core import Recorder
from goodput_core.events import EventRecord, Kind
from goodput_core.record import journal as jr
from goodput_core.record.heartbeat import Heartbeat
from goodput_core.record.ring import Fence
from goodput_core.record.slot_columns import Pieces
from goodput_core.record.step_series import StepSeries
from goodput_core.record.watchdog import HangSettings, HangWatchdog
from goodput_core.stores.event_batch import EventBatch
from goodput_core.stores.memory import MemoryStore
from goodput_core.stores.sqlite import SqliteStore

IDENT = ("r", "h", 7, "a1")


def batch_of(events):
    """An EventBatch of (kind, time, step or None[, extra]) tuples, tickets from 1."""
    n = len(events)
    return EventBatch(
        IDENT, np.arange(1, n + 1, dtype=np.int64),
        np.array([int(e[0]) for e in events], np.uint16),
        np.array([e[1] for e in events], np.float64),
        np.array([0 if e[2] is None else e[2] for e in events], np.int64),
        np.array([e[2] is not None for e in events], bool),
        np.array([100.0 + i for i in range(n)], np.float64), np.zeros(n, np.int64),
        {i: e[3] for i, e in enumerate(events) if len(e) > 3 and e[3] is not None})


def state(series):
    return (series.step, list(series.starts), series.longest, series.sync, series.series_start,
            list(series.completed))


_S, _E = int(Kind.STEP_START), int(Kind.STEP_END)

# step starts and ends: mostly a regular loop (what the fast path takes), with
# restarts, repeated ends, times going back and long gaps mixed in
_step_events = st.lists(st.tuples(st.sampled_from([_S, _E]), st.integers(0, 40),
                                  st.integers(-3, 12)), min_size=0, max_size=60)


def _regular(first_step, n, t0=10.0, dt=0.5):
    out = []
    for k in range(first_step, first_step + n):
        out += [(_S, t0 + (k - first_step) * dt, k), (_E, t0 + (k - first_step) * dt + 0.25, k)]
    return out


@settings(max_examples=300, deadline=None)
@given(before=_step_events, run=_step_events, regular=st.booleans())
def test_step_columns_leave_the_state_one_by_one_leaves(before, run, regular):
    """Any state, any run of steps: add_columns either changes nothing and says
    so, or leaves exactly the state start()/end() one by one leave."""
    if regular:
        run = [(k, t, s) for k, t, s in _regular(before[-1][2] + 1 if before else 0, 5)]
    else:
        run = [(k, float(t) / 4, s) for k, t, s in run]
    oracle, fast = StepSeries(), StepSeries()
    for series in (oracle, fast):
        for k, t, s in before:
            (series.start if k == _S else series.end)(float(t) / 4, s)
    for k, t, s in run:
        (oracle.start if k == _S else oracle.end)(t, s)
    was = state(fast)
    took = fast.add_columns(np.array([k == _S for k, _, _ in run], bool),
                            np.array([t for _, t, _ in run], np.float64),
                            np.array([s for _, _, s in run], np.int64))
    assert state(fast) == (state(oracle) if took else was)


def test_a_regular_loop_is_taken_as_columns_across_batches():
    """The loop's own shape (start k, end k, start k+1...) cut anywhere into
    batches, restarted once at step 3: every batch is taken at once."""
    events = _regular(0, 50) + _regular(3, 40, t0=100.0)
    oracle = StepSeries()
    for k, t, s in events:
        (oracle.start if k == _S else oracle.end)(t, s)
    fast = StepSeries()
    cuts = [0, 1, 2, 7, 33, 100, 101, 140, len(events)]
    for a, b in zip(cuts, cuts[1:]):
        part = events[a:b]
        assert fast.add_columns(np.array([k == _S for k, _, _ in part]),
                                np.array([t for _, t, _ in part]),
                                np.array([s for _, _, s in part], np.int64))
    assert state(fast) == state(oracle)
    # the restart's gap, 100 - (10 + 49 x 0.5), is the longest "step"
    assert fast.completed[-1] == 0.5 and fast.longest == 65.5 and fast.step == 42


def _dog():
    rec = Recorder("w", MemoryStore(), hang_detection=False)
    return rec, HangWatchdog(rec, HangSettings(), monotonic=lambda: 5.0, wait=lambda s: True)


def _dog_state(dog):
    return (dog._job_open, {k: v for k, v in dog._phases.items() if v}, dog._progress_t,
            dog._progress_mono, state(dog._steps), dog._open_hang is None)


_kinds = st.sampled_from([_S, _S, _S, _E, _E, _E, int(Kind.JOB_START), int(Kind.JOB_END),
                          int(Kind.CHECKPOINT_SAVE_START), int(Kind.CHECKPOINT_SAVE_END),
                          int(Kind.DATA_LOADING_START), int(Kind.INPUT_STALL_END),
                          int(Kind.CUSTOM_BADPUT_START)])


@settings(max_examples=200, deadline=None)
@given(events=st.lists(st.tuples(_kinds, st.one_of(st.integers(0, 400).map(lambda v: v / 8),
                                                   st.just(math.nan)),
                                 st.one_of(st.none(), st.integers(0, 30))), max_size=80),
       cut=st.integers(0, 80), hung=st.booleans())
def test_the_watchdog_takes_a_batch_of_columns_as_its_events(events, cut, hung):
    """The same events, as EventRecords or as two EventBatches: the same
    watchdog state, and the same hang ended at the same time."""
    (rec_a, by_events), (rec_b, by_columns) = _dog(), _dog()
    if hung:
        for dog in (by_events, by_columns):
            dog._open_hang = {"detected_time": 3.0}
    records = [EventRecord("w", k, t, s) for k, t, s in events]
    by_events.observe(records[:cut])
    by_events.observe(records[cut:])
    by_columns.observe(batch_of(events[:cut]))
    by_columns.observe(batch_of(events[cut:]))
    assert _dog_state(by_columns) == _dog_state(by_events)
    ends = []
    for rec in (rec_a, rec_b):
        rec.flush(10)
        ends.append([(e.kind, e.time) for e in rec._store.read("w")[0]])
    assert ends[0] == ends[1]
    assert ends[0] == ([(int(Kind.HANG_END), ends[0][0][1])] if ends[0] else [])


def test_the_heartbeat_follows_the_last_job_start_or_end_of_a_batch():
    beat = Heartbeat(10.0)
    beat.observe(batch_of([(Kind.JOB_START, 1.0, None), (_S, 2.0, 0)]))
    assert beat.active
    beat.observe(batch_of([(Kind.JOB_END, 3.0, None), (Kind.JOB_START, 4.0, None),
                           (Kind.JOB_END, 5.0, None), (_S, 6.0, 1)]))
    assert not beat.active
    beat.observe(batch_of([(_S, 7.0, 2)]))  # neither: unchanged
    assert not beat.active


def test_an_event_batch_is_a_sequence_of_its_event_records():
    batch = batch_of([(Kind.JOB_START, 1.0, None), (_S, math.nan, 3, {"a": [1, 2]}),
                      (Kind.CUSTOM_BADPUT_START, 2.5, None, {"custom_badput_event_type": "x"})])
    expected = [EventRecord("r", 1, 1.0, None, None, 0, "h", 7, "a1", 1, 100.0),
                EventRecord("r", _S, math.nan, 3, {"a": [1, 2]}, 0, "h", 7, "a1", 2, 101.0),
                EventRecord("r", 11, 2.5, None, {"custom_badput_event_type": "x"}, 0, "h", 7,
                            "a1", 3, 102.0)]
    got = list(batch)
    assert len(batch) == 3 and [repr(e) for e in got] == [repr(e) for e in expected]
    assert all(type(e.kind) is int and type(e.seq) is int and type(e.time) is float
               for e in got)
    tail = batch[1:]
    assert isinstance(tail, EventBatch) and [e.seq for e in tail] == [2, 3]
    assert tail[1].extra == {"custom_badput_event_type": "x"} and batch[-1].seq == 3


class _Seen(SqliteStore):
    """A sqlite store that notes what each append was handed."""

    def __init__(self, path):
        super().__init__(path)
        self.handed = []

    def append(self, batch):
        self.handed.append(type(batch).__name__)
        super().append(batch)


class _Listing(MemoryStore):
    """A store of another kind, shared (a journal): it never appends columns."""

    def __init__(self, path):
        super().__init__()
        self.url = "sqlite:///" + path.lstrip("/")
        self.handed = []

    def append(self, batch):
        self.handed.append(type(batch).__name__)
        super().append(batch)


def test_a_small_ring_read_in_windows_delivers_every_event_once_in_order(tmp_path):
    """A ring of 64 slots lapped many times, windows wrapping around its end,
    with inline and multi-slot extra payloads, flushes (tickets without an
    event) between: every event once, in recording order, as recorded; the
    sqlite store is handed columns. (test_journal.py's full ring has events
    that waited in memory among the slots.)"""
    store = _Seen(str(tmp_path / "s.sqlite"))
    rec = Recorder("small", store, queue_size=64, flush_interval_s=3600)
    assert rec._ring.slots == 64
    expected = []
    long_text = "y" * 300  # continuation slots
    for k in range(1000):
        if k % 50 == 7:
            rec.record_custom_badput_event_start_time(2000.0 + k, f"e{k}")
            expected.append((int(Kind.CUSTOM_BADPUT_START), 2000.0 + k, None,
                             {"custom_badput_event_type": f"e{k}"}))
        if k % 90 == 3:
            rec.record(Kind.METRIC, 2000.0 + k, k, name="m", value=long_text)
            expected.append((int(Kind.METRIC), 2000.0 + k, k, {"name": "m",
                                                               "value": long_text}))
        rec.record_step_start_time(k, 2000.0 + k)
        expected.append((int(Kind.STEP_START), 2000.0 + k, k, None))
        if k % 20 == 19:
            assert rec.flush(30)
    assert rec.flush(30)
    events, _ = store.read("small")
    assert [(e.kind, e.time, e.step, e.extra) for e in events] == expected
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert set(store.handed) == {"EventBatch"} and rec.stats()["written"] == len(expected)
    assert rec.close(30)


def test_a_store_that_does_not_append_columns_is_handed_event_records(tmp_path):
    store = _Listing(str(tmp_path / "l.sqlite"))
    rec = Recorder("listing", store)
    assert rec._ring.journal is not None  # the batches are read as columns...
    for k in range(100):
        rec.record_step_start_time(k, 1000.0 + k)
    assert rec.flush(30)
    assert store.handed and set(store.handed) == {"list"}  # ...and handed on as EventRecords
    assert [e.step for e in store.read("listing")[0]] == list(range(100))
    assert rec.close(30)


def _slots(tickets, capacity=8):
    """A ring of ``capacity`` slots holding plain step starts of ``tickets``
    (time 10 + ticket, step = ticket, write time 20 + ticket, process index 0)."""
    mm = mmap.mmap(-1, capacity * jr.SLOT)  # as the journal's: a slice of it is bytes
    for n in tickets:
        jr.PLAIN.pack_into(mm, (n % capacity) * jr.SLOT, n, _S | jr.HAS_STEP << 8,
                           10.0 + n, n, 20.0 + n, 0, n)
    return mm


def test_events_that_waited_in_memory_join_the_slots_where_they_were_taken():
    """Ticket 2 in its slot, ticket 3 from memory, tickets 4-6 in a window that
    wraps round a ring of 5 (slots 4, 0, 1): one batch in ticket order; a time
    that is not a float (a clock giving ints) keeps the batch as EventRecords,
    the int kept."""
    for t3, kind in ((13.0, "EventBatch"), (13, "list")):
        pieces = Pieces(IDENT, _slots([2, 4, 5, 6], capacity=5), 5)
        assert pieces.add_window(2, 2) == 1  # ticket 3's slot is not written
        pieces.add_one((3, _S, t3, 3, {"k": "v"}, 23.0, 0))
        assert pieces.add_window(4, 3) == 3
        batch = pieces.batch()
        assert type(batch).__name__ == kind
        assert [(e.seq, e.time, e.step, e.extra, e.write_time) for e in batch] == [
            (2, 12.0, 2, None, 22.0), (3, t3, 3, {"k": "v"}, 23.0), (4, 14.0, 4, None, 24.0),
            (5, 15.0, 5, None, 25.0), (6, 16.0, 6, None, 26.0)]
        assert type(list(batch)[1].time) is type(t3)


class _Gated(SqliteStore):
    """Its first append waits for the test's gate (the events recorded
    meanwhile trickle into the ring); records the size of every append."""

    def __init__(self, path):
        super().__init__(path)
        self.sizes = []
        self.entered, self.gate = threading.Event(), threading.Event()

    def append(self, batch):
        self.sizes.append(len(batch))
        if len(self.sizes) == 1:
            self.entered.set()
            assert self.gate.wait(60)
        super().append(batch)


def _trickle(tmp_path, more, flush_meanwhile):
    """10 events drained, ``more`` recorded while they are written (a flush
    waiting meanwhile or not): what the writer decided after the batch, and
    the appends the store got."""
    store = _Gated(str(tmp_path / "t.sqlite"))
    rec = Recorder("trickle", store, flush_interval_s=3600)  # wakes when told, or half full
    writer = rec._writer
    decided, after_batch = [], threading.Event()
    real = writer._caught_up

    def spy():
        decided.append(real())
        after_batch.set()
        return decided[-1]

    writer._caught_up = spy
    for k in range(10):
        rec.record_step_start_time(k, 100.0 + k)
    writer.wake.set()  # a drain without a flush: as the interval's
    assert store.entered.wait(60)
    for k in range(10, 10 + more):
        rec.record_step_start_time(k, 100.0 + k)
    fence = Fence()
    if flush_meanwhile:
        writer.ring.nothing(fence)  # what flush() puts in the ring before it waits
    store.gate.set()
    assert after_batch.wait(60)
    sizes = list(store.sizes)
    if flush_meanwhile:
        assert fence.done.wait(60) and fence.ok
    waiting = rec.stats()["queued"]
    assert rec.flush(60)
    assert [e.step for e in store.read("trickle")[0]] == list(range(10 + more))
    assert rec.close(30)
    return decided[0], sizes, waiting


def test_events_that_trickle_in_while_a_batch_is_written_wait_for_the_next_wake_up(tmp_path):
    """Taken a few at a time they would each cost a transaction: they wait, as
    if recorded after the drain, unless a flush waits for them or a batch's
    worth is there."""
    assert _trickle(tmp_path / "a", 5, False) == (True, [10], 5)
    decided, sizes, waiting = _trickle(tmp_path / "b", 5, True)
    assert (decided, waiting) == (False, 0) and sizes[0] == 10
    decided, sizes, waiting = _trickle(tmp_path / "c", 2000, False)
    assert not decided and sizes[0] == 10


def test_a_window_of_one_slot_gives_its_event_whatever_it_holds():
    """One slot alone in its window (a job start or end drained by itself, a
    late ticket): its event, with or without a step."""
    mm = mmap.mmap(-1, 4 * jr.SLOT)
    jr.PLAIN.pack_into(mm, 1 * jr.SLOT, 1, int(Kind.JOB_END), 7.5, 0, 8.0, 0, 1)
    jr.PLAIN.pack_into(mm, 2 * jr.SLOT, 2, _S | jr.HAS_STEP << 8, 9.0, 3, 9.5, 0, 2)
    for first, expected in ((1, (1, int(Kind.JOB_END), 7.5, None, 8.0)),
                            (2, (2, _S, 9.0, 3, 9.5))):
        pieces = Pieces(IDENT, mm, 4)
        assert pieces.add_window(first, 1) == 1
        batch = pieces.batch()
        assert isinstance(batch, EventBatch)
        assert [(e.seq, e.kind, e.time, e.step, e.write_time) for e in batch] == [expected]
