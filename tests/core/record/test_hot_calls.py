"""The one-frame step calls (goodput_core/record/hot_calls.py) do exactly
what the generic typed methods do, and hand them every call they do not take.

Each case records through the recorder's bound ``record_step_*_time`` and,
for comparison, through :class:`PhaseMixin`'s generic method on a second
recorder with the same clock; the two stores must hold the same events.
"""

from __future__ import annotations

import threading

import pytest

from goodput_core import Recorder
from goodput_core.events import Kind
from goodput_core.record.phases import PhaseMixin
from goodput_core.stores.sqlite import SqliteStore


class Ticks:
    """A clock that advances one second per read."""

    def __init__(self):
        self.t = 1_000.0

    def __call__(self):
        self.t += 1.0
        return self.t


def stored(path, run):
    events, _ = SqliteStore(path).read(run)
    return [(e.kind, e.time, e.step, e.write_time, e.process_index) for e in events]


def generic(name):
    return getattr(PhaseMixin, name)


@pytest.mark.parametrize("durable", [True, False])
def test_the_bound_calls_store_what_the_generic_methods_store(tmp_path, durable):
    path = str(tmp_path / "s.sqlite")
    hot = Recorder("hot", path, clock=Ticks(), durable=durable, process_index=3)
    slow = Recorder("slow", path, clock=Ticks(), durable=durable, process_index=3)
    assert "record_step_start_time" in vars(hot)  # bound per instance
    for k in (0, 1, -5, 2 ** 63 - 1, -2 ** 63):
        hot.record_step_start_time(k)
        hot.record_step_end_time(k)
        generic("record_step_start_time")(slow, k)
        generic("record_step_end_time")(slow, k)
    hot.record_step_start_time(7, start_time=5_000.5)  # a given time: the generic path
    hot.record_step_end_time(7, end_time=5_001.5)
    hot.record_step_end_time(8, 5_002.5)
    generic("record_step_start_time")(slow, 7, start_time=5_000.5)
    generic("record_step_end_time")(slow, 7, end_time=5_001.5)
    generic("record_step_end_time")(slow, 8, 5_002.5)
    assert hot.flush(30) and slow.flush(30)
    got, want = stored(path, "hot"), stored(path, "slow")
    assert got == want
    assert [(kind, step) for kind, _, step, _, _ in got[:4]] == [
        (Kind.STEP_START, 0), (Kind.STEP_END, 0), (Kind.STEP_START, 1), (Kind.STEP_END, 1)]
    assert got[0][1] == got[0][3] == 1_001.0  # time and write time: one clock read
    assert got[-3][1:3] == (5_000.5, 7) and got[-1][1:3] == (5_002.5, 8)
    assert {pidx for *_, pidx in got} == {3}


def test_bad_steps_and_wrong_keywords_behave_as_the_generic_methods(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("bad", path, clock=Ticks())
    for bad in ("3", True, 2 ** 63, 1.5, None):
        rec.record_step_start_time(bad)
        rec.record_step_end_time(bad)
    rec.record_step_start_time(4.0)  # an integral float: the generic path keeps it as 4
    assert rec.stats()["rejected"] == {"step_start": 5, "step_end": 5}
    with pytest.raises(TypeError, match="end_time"):
        rec.record_step_start_time(1, end_time=3.0)
    with pytest.raises(TypeError, match="start_time"):
        rec.record_step_end_time(1, start_time=3.0)
    with pytest.raises(TypeError):
        generic("record_step_start_time")(rec, 1, end_time=3.0)
    strict = Recorder("strict", path, clock=Ticks(), strict=True)
    with pytest.raises(ValueError, match="step"):
        strict.record_step_start_time("3")
    assert rec.flush(30) and strict.flush(30)
    assert [(kind, step) for kind, _, step, _, _ in stored(path, "bad")] == [
        (Kind.STEP_START, 4)]


def test_a_clock_that_raises_is_counted_not_raised(tmp_path):
    def broken():
        raise OSError("no clock")

    rec = Recorder("clock", str(tmp_path / "s.sqlite"), clock=broken)
    rec.record_step_start_time(1)
    rec.record_step_end_time(1)
    assert rec.stats()["rejected"] == {"step_start": 1, "step_end": 1}


def test_after_close_the_calls_are_counted_as_the_generic_ones(tmp_path):
    rec = Recorder("closed", str(tmp_path / "s.sqlite"), clock=Ticks())
    rec.record_step_start_time(1)
    rec.close()
    before = rec.stats()["dropped"]
    rec.record_step_start_time(2)
    rec.record_step_end_time(2)
    assert rec.stats()["dropped"] == before + 2
    assert [step for _, _, step, _, _ in stored(str(tmp_path / "s.sqlite"), "closed")] == [1]


def test_a_full_ring_sends_the_call_to_memory_in_order(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("full", path, clock=Ticks(), flush_interval_s=3600)
    ring = rec._ring
    assert ring.journal is not None
    rec.record_step_start_time(0)
    ring.freed -= ring.slots + 1  # as if the writer were a whole ring behind
    rec.record_step_start_time(1)
    rec.record_step_end_time(1)
    ring.freed += ring.slots + 1
    rec.record_step_start_time(2)
    assert rec.stats()["overflowed"] == 2
    assert rec.flush(30)
    assert [(kind, step) for kind, _, step, _, _ in stored(path, "full")] == [
        (Kind.STEP_START, 0), (Kind.STEP_START, 1), (Kind.STEP_END, 1), (Kind.STEP_START, 2)]


def test_the_recording_thread_is_the_progress_thread(tmp_path):
    rec = Recorder("progress", str(tmp_path / "s.sqlite"), clock=Ticks())
    rec.record_step_start_time(1)
    assert rec.progress_thread == threading.get_ident()
    seen = []
    worker = threading.Thread(target=lambda: (rec.record_step_end_time(1),
                                              seen.append(threading.get_ident())))
    worker.start()
    worker.join()
    assert rec.progress_thread == seen[0]


def test_a_subclass_override_is_kept(tmp_path):
    calls = []

    class Mine(Recorder):
        def record_step_start_time(self, step, start_time=None):
            calls.append(step)
            super().record_step_start_time(step, start_time)

    rec = Mine("sub", str(tmp_path / "s.sqlite"), clock=Ticks())
    assert "record_step_start_time" not in vars(rec)
    assert "record_step_end_time" in vars(rec)
    rec.record_step_start_time(9)
    assert calls == [9]
    assert rec.flush(30)
    assert [step for _, _, step, _, _ in stored(str(tmp_path / "s.sqlite"), "sub")] == [9]


def test_the_bound_calls_keep_the_generic_names_and_docs(tmp_path):
    rec = Recorder("names", str(tmp_path / "s.sqlite"))
    for name in ("record_step_start_time", "record_step_end_time"):
        bound = getattr(rec, name)
        assert bound.__name__ == name and bound.__doc__ == generic(name).__doc__


# ------------------------------------------------------- the stall span call
_STALL = (Kind.INPUT_STALL_START, Kind.INPUT_STALL_END)


def test_the_span_call_stores_what_the_generic_one_stores_across_the_ring_end(tmp_path):
    path = str(tmp_path / "s.sqlite")
    hot = Recorder("hot", path, clock=Ticks(), queue_size=64, process_index=2)
    slow = Recorder("slow", path, clock=Ticks(), queue_size=64, process_index=2)
    assert "_record_since" in vars(hot) and hot._ring.slots % 2 == 0
    slots = hot._ring.slots
    for i in range(3 * slots):  # around the ring three times; a single event every 7th
        # pair shifts the pairs' alignment: some start in the ring's last slot
        start = 2_000.0 + i
        hot._record_since(*_STALL, start)
        Recorder._record_since(slow, *_STALL, start)
        if i % 7 == 0:
            hot.record_step_start_time(i)
            slow.record_step_start_time(i)
        if i % 11 == 0:
            assert hot.flush(30) and slow.flush(30)
    assert hot.flush(30) and slow.flush(30)
    got, want = stored(path, "hot"), stored(path, "slow")
    assert len(got) > 6 * slots and got == want
    first = next(e for e in got if e[0] == Kind.INPUT_STALL_START)
    end = got[got.index(first) + 1]
    assert first[1] == 2_000.0 and first[3] == end[1] == end[3] and first[4] == 2
    assert hot.stats()["dropped"] == 0 and not hot.stats().get("rejected")


def test_the_span_call_hands_bad_starts_and_split_tickets_to_the_generic_path(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("odd", path, clock=Ticks(), flush_interval_s=3600)  # holes stay till flush
    for bad in (5, float("nan"), float("inf"), "3.0"):
        rec._record_since(*_STALL, bad)
    ring = rec._ring

    class Skipping:  # another thread takes a ticket between the call's two
        def __init__(self, it):
            self.it, self.calls, self.given = it, 0, []

        def __next__(self):
            self.calls += 1
            n = next(self.it)
            if self.calls == 2:
                ring._abandon(n)  # the other thread's ticket (its event is not ours)
                n = next(self.it)
            self.given.append(n)
            return n

        def __repr__(self):  # the ring reads how many it issued from the count's repr
            return repr(self.it)

    ring.tickets = Skipping(ring.tickets)
    from goodput_core.record.hot_calls import bind_hot_calls

    bind_hot_calls(rec, rec._emit, Recorder)
    rec._record_since(*_STALL, 1_500.0)
    assert ring.tickets.calls == 2 and set(ring.tickets.given) <= ring.holes  # passed over
    assert rec.flush(30)
    kept = [(kind, t) for kind, t, *_ in stored(path, "odd")]
    assert (Kind.INPUT_STALL_START, 1_500.0) in kept and kept[-1][0] == Kind.INPUT_STALL_END
    generic_kept = Recorder("odd-generic", path, clock=Ticks())
    for bad in (5, float("nan"), float("inf"), "3.0"):
        Recorder._record_since(generic_kept, *_STALL, bad)
    assert generic_kept.flush(30)
    assert rec.stats()["rejected"] == generic_kept.stats()["rejected"]
    assert [k for k, *_ in stored(path, "odd-generic")] == [k for k, _ in kept[:-2]]
    assert rec.stats()["dropped"] == 0


def test_the_stall_then_step_call_stores_what_the_generic_one_stores_across_the_ring_end(
        tmp_path):
    path = str(tmp_path / "s.sqlite")
    hot = Recorder("hot3", path, clock=Ticks(), queue_size=64, process_index=4)
    slow = Recorder("slow3", path, clock=Ticks(), queue_size=64, process_index=4)
    assert "_record_stall_then_step" in vars(hot)
    slots = hot._ring.slots
    for i in range(2 * slots):  # three slots a call: every alignment against the ring's end
        start, end = 3_000.0 + i, 3_000.5 + i
        hot._record_stall_then_step(start, end, i)
        Recorder._record_stall_then_step(slow, start, end, i)
        if i % 5 == 0:
            hot.record_step_end_time(i)
            slow.record_step_end_time(i)
        if i % 9 == 0:
            assert hot.flush(30) and slow.flush(30)
    hot._record_stall_then_step(3_999.0, 3_999.5, 2 ** 63)  # not a 64-bit step: generic
    Recorder._record_stall_then_step(slow, 3_999.0, 3_999.5, 2 ** 63)
    assert hot.flush(30) and slow.flush(30)
    got, want = stored(path, "hot3"), stored(path, "slow3")
    # the same events (the generic path reads the clock once per event, the
    # one-call path once per call: clock-given times are compared apart)
    def given(events):
        stalls = (Kind.INPUT_STALL_START, Kind.INPUT_STALL_END)
        return [(k, t if k in stalls else None, st, p) for k, t, st, _, p in events]

    assert len(got) > 6 * slots and given(got) == given(want)
    clock_times = [t for k, t, *_ in got if k in (Kind.STEP_START, Kind.STEP_END)]
    assert clock_times == sorted(clock_times)
    starts = [i for i, e in enumerate(got) if e[0] == Kind.STEP_START]
    assert all(got[i - 2][3] == got[i - 1][3] == got[i][3] == got[i][1] for i in starts)
    assert hot.stats()["dropped"] == 0 and hot.stats()["rejected"] == slow.stats()["rejected"]
    assert hot.progress_thread == threading.get_ident()
