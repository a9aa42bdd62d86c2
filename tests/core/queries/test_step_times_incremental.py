"""Step times kept incrementally equal the full computation, whatever arrives when.

The Calculator keeps step times incrementally (only the spans its timeline
may still change are recomputed); after every batch they must equal
:func:`step_times` computed from scratch over the same timeline, through
restarts, step ends, sparse steps, late events from another host and
events old enough to make the timeline rebuild everything.
"""

import random

import numpy as np
import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.step_stats import ideal_step_time, step_times

RUN = "inc"


def _job(rng, attempts=4, steps=300):
    """Events of a job with crashes and restarts from checkpoints, sparse
    steps, step ends and data loads (times increasing within each attempt)."""
    out, t, step = [], 1000.0, 0
    for a in range(attempts):
        out.append(EventRecord(RUN, int(Kind.JOB_START), t))
        t += 5.0
        for _ in range(steps):
            out.append(EventRecord(RUN, int(Kind.STEP_START), t, step))
            if rng.random() < 0.1:
                out.append(EventRecord(RUN, int(Kind.STEP_END), t + 0.5, step))
            t += rng.uniform(0.8, 1.2)
            step += rng.choice((1, 1, 1, 2, 5))  # sparse logging now and then
        if a < attempts - 1:
            step = max(0, step - rng.randint(1, 50))  # restart from a checkpoint
            t += 20.0
    out.append(EventRecord(RUN, int(Kind.STEP_END), t, step))
    out.append(EventRecord(RUN, int(Kind.JOB_END), t + 1.0))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_incremental_step_times_equal_the_full_computation(seed, monkeypatch):
    import goodput_core.queries.sorted_times as sorted_times_module
    import goodput_core.queries.step_series as step_series_module
    from goodput_core.monitor.cycle import fresh_deviations
    from goodput_core.queries.step_stats import deviation_aggregate

    if seed >= 4:  # tiny chunks and blocks: appends cross chunks, blocks split and empty
        monkeypatch.setattr(step_series_module, "CHUNK", 16)
        monkeypatch.setattr(step_series_module, "MIN_CONSECUTIVE", 4)
        monkeypatch.setattr(sorted_times_module, "BLOCK", 3)
    rng = random.Random(seed)
    events = _job(rng)
    if seed % 2:  # late events: a few arrive long after their time (another host)
        late = set(rng.sample(range(len(events) // 2), 15))
        moved = [events[i] for i in sorted(late)]
        events = [e for i, e in enumerate(events) if i not in late]
        for e in moved:
            events.insert(rng.randrange(len(events) // 2, len(events)), e)
    calc = Calculator(RUN)
    pos, checks, rebuilds = 0, 0, set()
    done, handed = np.empty(0, np.int64), set()  # the monitor's: deviations handed out
    while pos < len(events):
        n = rng.choice((1, 3, 17, 60))
        calc.add(events[pos:pos + n])
        pos += n
        got = calc.step_stats()
        new, done = fresh_deviations(got, done)
        full_steps, full_times = step_times(calc._tl)  # from scratch
        if got.ideal_step_time is not None:  # each step's deviation once, when it has a time
            fresh = [s not in handed for s in full_steps.tolist()]
            assert [s for s, _ in new] == full_steps[fresh].tolist()
            assert [d for _, d in new] == pytest.approx(
                np.abs(full_times[fresh] - got.ideal_step_time).tolist(), rel=1e-12)
            handed.update(s for s, _ in new)
        assert got.steps.tolist() == full_steps.tolist()
        np.testing.assert_array_equal(got.step_times, full_times)
        # the ideal from the times kept sorted: the direct figure (summed in another order)
        want = ideal_step_time(full_times)
        assert (got.ideal_step_time is None) == (want is None)
        if want is not None:
            assert got.ideal_step_time == pytest.approx(want, rel=1e-12)
            # the host breakdown's percentiles, from the times kept sorted
            assert calc.step_time_percentiles((50, 90)) == [
                np.percentile(full_times, 50), np.percentile(full_times, 90)]
            # the aggregate from the last deviations only: the one of them all
            assert got.deviation_aggregate == pytest.approx(
                deviation_aggregate(np.abs(full_times - want)), rel=1e-9, abs=1e-12)
        rebuilds.add(calc._tl.full_rebuilds)
        checks += 1
    assert checks > 50 and len(got.steps) > 500
    if seed % 2:
        assert max(rebuilds) > 0  # the late events made the timeline start afresh
    # the incremental path was taken: the base holds frozen steps
    assert len(calc._step_times._base) > 0
    if seed >= 4:
        assert len(calc._step_times._base._chunks) > 10 and len(calc._step_times.sorted._blocks) > 10


@pytest.mark.parametrize("block", [1, 2, 5, 256])
def test_the_ideal_step_time_from_sorted_blocks_equals_the_direct_one(block):
    """Times added (ties and outliers), some replaced by a later run (restarts),
    all of them replaced at once now and then: the blocks hold the times
    sorted and give the one-shot ideal step time (to 1e-12: summed in
    another order), with blocks small enough to split, empty and merge."""
    from goodput_core.queries.sorted_times import SortedTimes, ideal_of_sorted

    rng = np.random.default_rng(11 + block)
    kept = SortedTimes(block)
    times = np.empty(0)
    for round_ in range(120):
        n = int(rng.integers(0, 40))
        new = np.round(rng.lognormal(0, 0.3, n), 2)
        new[rng.random(n) < 0.05] *= 50
        removed = np.empty(0)
        if len(times) and round_ % 3 == 0:  # a restart: some steps run again
            idx = np.unique(rng.integers(0, len(times), int(rng.integers(1, 6))))
            removed = times[idx]
            times = np.delete(times, idx)
            new = np.concatenate((new, np.round(rng.lognormal(0, 0.3, len(idx)), 2)))
        if round_ % 37 == 36:  # a full rebuild's worth: every time replaced
            removed, new = np.concatenate((removed, times)), rng.lognormal(0, 0.3, len(times))
            times = np.empty(0)
        times = np.concatenate((times, new))
        kept.update(removed, new)
        np.testing.assert_array_equal(kept.sorted, np.sort(times))
        assert len(kept) == len(times)
        want = ideal_step_time(times)
        assert (kept.ideal() is None) == (want is None)
        if want is not None:
            assert kept.ideal() == pytest.approx(want, rel=1e-12)
            assert ideal_of_sorted(np.sort(times)) == pytest.approx(want, rel=1e-12)
        if block > 1:  # bounded blocks (the last one cut may be shorter)
            assert max(len(b) for b in kept._blocks) <= 2 * block
        for pct in (0, 50, 90, 99.9, 100):  # the host breakdown's percentiles
            assert kept.percentile(pct) == np.percentile(times, pct)
    # equal times in many blocks (a run of 1 s steps): one leaving a block that
    # ends with that time may be taken from the next; two blocks are copied, not all
    same = SortedTimes(4)
    same.reset(np.concatenate((np.full(40, 1.0), [0.5, 2.0])))
    same.update(np.array([1.0, 1.0, 1.0]), np.array([1.0]))
    np.testing.assert_array_equal(same.sorted, [0.5] + [1.0] * 38 + [2.0])
    assert same.touched <= 2 * 4
    with pytest.raises(ValueError):  # a time that is not held cannot leave
        kept.update(np.array([-1.0]), np.empty(0))
    for n in (1, 2, 3, 4, 5):  # odd and even counts, the MAD's two middle values
        x = np.sort(rng.lognormal(0, 1, n))
        assert ideal_of_sorted(x) == pytest.approx(ideal_step_time(x), rel=1e-12)
        one = SortedTimes(block)
        one.reset(x[::-1])
        assert one.ideal() == pytest.approx(ideal_step_time(x), rel=1e-12)


def test_steps_run_again_and_final_within_one_update_replace_their_earlier_times():
    """A restart from a checkpoint 100 steps back, the new attempt's steps
    arriving in one batch: the replayed steps are final at once (folded
    straight into the kept base, never provisional); their new times must
    replace the first run's, in the ideal step time too (the first run's
    would give 1.1 s)."""
    first, second, t = [EventRecord(RUN, int(Kind.JOB_START), 0.0)], [], 5.0
    for step in range(300):  # 1 s and 1.2 s steps in turn
        first.append(EventRecord(RUN, int(Kind.STEP_START), t, step))
        t += 1.0 + 0.2 * (step % 2)
    t += 20.0
    second.append(EventRecord(RUN, int(Kind.JOB_START), t))
    t += 5.0
    for step in range(200, 500):  # steps 200-299 again, now 1.15 s each
        second.append(EventRecord(RUN, int(Kind.STEP_START), t, step))
        t += 1.15 if step < 300 else 1.0 + 0.2 * (step % 2)
    calc = Calculator(RUN)
    for i in range(0, len(first), 7):  # the first attempt a little at a time
        calc.add(first[i:i + 7])
        calc.step_stats()
    calc.add(second)
    got = calc.step_stats()
    assert got.times_dict()[250] == pytest.approx(1.15)  # the latest run counts
    # 200 steps of 1 s, 100 of 1.15 s, 199 of 1.2 s (step 499 has no end): median
    # 1.15 s, MAD 0.05 s, none above median + 3 MAD
    assert got.ideal_step_time == pytest.approx((200 * 1.0 + 100 * 1.15 + 199 * 1.2) / 499)
    full_steps, full_times = step_times(calc._tl)
    np.testing.assert_array_equal(got.step_times, full_times)
    assert got.ideal_step_time == pytest.approx(ideal_step_time(full_times), rel=1e-12)


def test_an_update_recomputes_the_new_steps_not_the_attempt(monkeypatch):
    """One long attempt (a run without restarts is one segment row): after 10
    new steps, an update recomputes about those and the freeze lag's steps,
    whether 2,000 or 20,000 steps came before (counted, not timed)."""
    import goodput_core.queries.step_stats as step_stats_module
    from goodput_core.timeline.spans import FREEZE_LAG_STEPS

    recomputed = []
    entries = step_stats_module._entries

    def counting(timeline, lo, first_row):
        out = entries(timeline, lo, first_row)
        recomputed.append(len(out[0]))
        return out

    monkeypatch.setattr(step_stats_module, "_entries", counting)
    for history in (2_000, 20_000):
        calc = Calculator(RUN)
        calc.add([EventRecord(RUN, int(Kind.JOB_START), 0.0)]
                 + [EventRecord(RUN, int(Kind.STEP_START), 1.0 + k, k) for k in range(history)])
        calc.step_stats()
        for more in range(3):
            first = history + 10 * more
            calc.add([EventRecord(RUN, int(Kind.STEP_START), 1.0 + k, k)
                      for k in range(first, first + 10)])
            recomputed.clear()
            calc.step_stats()
            assert recomputed and max(recomputed) <= 10 + FREEZE_LAG_STEPS + 2
        full_steps, full_times = step_times(calc._tl)
        np.testing.assert_array_equal(calc.step_stats().step_times, full_times)


def test_a_cycle_allocates_and_sorts_the_same_whatever_the_history(monkeypatch):
    """A monitor cycle's step statistics (step times, ideal step time, the
    deviation aggregate and the new deviations) on a run going on, after
    20,000 or 200,000 steps of history: the memory it allocates at its peak
    (numpy's arrays are traced) and the sorted values it copies are about
    the new steps', not the run's length; one copy of the step times would
    be 1.6 MB at 200,000 steps (counted, not timed)."""
    import tracemalloc

    import goodput_core.queries.step_series as step_series_module
    from goodput_core.monitor.cycle import fresh_deviations
    from goodput_core.queries.sorted_times import BLOCK

    monkeypatch.setattr(step_series_module, "CHUNK", 4096)  # appends' room: 64 KiB at a time
    rng = np.random.default_rng(5)
    new_steps = 20

    def starts(first, n, t0):  # jittered step times: new ones land anywhere in the order
        t = t0 + np.cumsum(rng.uniform(0.9, 1.1, n))
        return [EventRecord(RUN, int(Kind.STEP_START), float(x), first + k)
                for k, x in enumerate(t)], float(t[-1])

    peaks, copied = {}, {}
    for history in (20_000, 200_000):
        calc = Calculator(RUN)
        events, t = starts(0, history, 1.0)
        calc.add([EventRecord(RUN, int(Kind.JOB_START), 0.0)] + events)
        done = fresh_deviations(calc.step_stats(), np.empty(0, np.int64))[1]
        peaks[history], copied[history] = [], []
        for cycle in range(5):
            first = history + new_steps * cycle
            events, t = starts(first, new_steps, t)
            calc.add(events)
            calc._tl.update()  # (the timeline's own update is not what is measured)
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                stats = calc.step_stats()
                new, done = fresh_deviations(stats, done)
                peaks[history].append(tracemalloc.get_traced_memory()[1] - base)
            finally:
                tracemalloc.stop()
            copied[history].append(calc._step_times.sorted.touched)
            # the step before the first new one has its time now (its span closed)
            assert [s for s, _ in new] == list(range(first - 1, first + new_steps - 1))
        full_steps, full_times = step_times(calc._tl)
        assert stats.ideal_step_time == pytest.approx(ideal_step_time(full_times), rel=1e-12)
        np.testing.assert_array_equal(stats.step_times, full_times)
    assert max(peaks[200_000]) < 1.5 * max(peaks[20_000]) + 20_000, peaks
    assert max(peaks[200_000]) < 200_000 * 8 / 8, peaks
    # each changed time copies a block or two of sorted times, wherever it lands
    for history in copied:
        assert max(copied[history]) <= 2 * BLOCK * 2 * new_steps, copied


def test_sorted_times_that_lost_track_are_sorted_afresh_not_failed_forever(monkeypatch):
    """Should the sorted times ever be told to drop a time they do not hold (a
    bug), the cycle sorts the step times afresh instead of failing this and
    every later cycle."""
    from goodput_core.queries.sorted_times import SortedTimes

    calc = Calculator(RUN)
    calc.add([EventRecord(RUN, int(Kind.JOB_START), 0.0)]
             + [EventRecord(RUN, int(Kind.STEP_START), 1.0 + 1.5 * k, k) for k in range(300)])
    calc.step_stats()
    real = SortedTimes.update

    def lost(self, removed, added):
        return real(self, np.append(removed, -1.0), added)  # a time never held

    monkeypatch.setattr(SortedTimes, "update", lost)
    calc.add([EventRecord(RUN, int(Kind.STEP_START), 451.0 + k, 300 + k) for k in range(50)])
    got = calc.step_stats()
    full_steps, full_times = step_times(calc._tl)
    assert got.ideal_step_time == pytest.approx(ideal_step_time(full_times), rel=1e-12)
    np.testing.assert_array_equal(calc._step_times.sorted.sorted, np.sort(full_times))


@pytest.mark.parametrize("removed", [1, 2, 5])
def test_a_time_equal_to_its_blocks_largest_is_also_looked_for_in_the_next_block(removed):
    """The monitor's blocked sorted step times (issue 40, item 6): block 0
    ends with the only 1.0 it holds and the next blocks hold many more (a
    run of 1 s steps). Removing ``removed`` times of 1.0 looks in block 0 and,
    the value being its largest, in block 1: those two blocks are copied
    (8 values less the removed), not the run's 24, and every figure equals
    the one of a sort."""
    from goodput_core.queries.sorted_times import SortedTimes

    x = np.concatenate(([0.5, 0.6, 0.7], np.full(20, 1.0), [2.0]))
    held = SortedTimes(4)
    held.reset(x)
    assert held._blocks[0].tolist() == [0.5, 0.6, 0.7, 1.0]  # the case: its largest, once
    held.update(np.full(removed, 1.0), np.empty(0))
    left = np.concatenate(([0.5, 0.6, 0.7], np.full(20 - removed, 1.0), [2.0]))
    np.testing.assert_array_equal(held.sorted, left)
    assert held.touched == 8 - removed
    # each block's count, sum and largest kept with it
    assert [len(b) for b in held._blocks] == held._counts.tolist()
    assert [float(b.sum()) for b in held._blocks] == pytest.approx(held._sums.tolist())
    assert [float(b[-1]) for b in held._blocks] == held._lasts.tolist()
    assert len(held) == len(left)
    assert held.ideal() == pytest.approx(ideal_step_time(left), rel=1e-12)
    for pct in (0, 10, 50, 90, 100):
        assert held.percentile(pct) == np.percentile(left, pct)
