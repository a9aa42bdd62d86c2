"""Step times computed once, block by block (``queries.step_blocks``), equal
a plain-Python reading of rule 12 over the events: through restarts (new
job starts, and steps going back inside one attempt), steps logged sparsely,
step ends, job ends, and blocks of any size (a step end at a block's edge,
a step re-run blocks later). The report reads them; the figures must not
depend on how the work is cut.
"""

from __future__ import annotations

import bisect
import random

import numpy as np
import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.queries import step_blocks
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.step_stats import step_times

RUN = "blocks"


def _job(rng: random.Random, wide: bool = False):
    """Events in time order (no ties): attempts with steps, sparse logging,
    step ends, steps going back (inside an attempt or after a restart)."""
    events, t, step = [], 1000.0, 0
    for a in range(rng.randint(1, 5)):
        events.append(EventRecord(RUN, int(Kind.JOB_START), t))
        t += rng.uniform(1, 5)
        for _ in range(rng.randint(0, 60)):
            events.append(EventRecord(RUN, int(Kind.STEP_START), t, step))
            if rng.random() < 0.2:  # a step end, now and then for another step
                other = step if rng.random() < 0.8 else step + 1
                events.append(EventRecord(RUN, int(Kind.STEP_END), t + rng.uniform(0.1, 0.5),
                                          other))
            t += rng.uniform(0.6, 1.4)
            step += rng.choice((1, 1, 1, 2, 3))
            if rng.random() < 0.05:  # back inside the attempt (a new segment)
                step = max(0, step - rng.randint(1, 20))
            if wide and rng.random() < 0.05:  # far apart: the general computation
                step += 10 ** 7
        if rng.random() < 0.5:
            events.append(EventRecord(RUN, int(Kind.JOB_END), t))
            t += rng.uniform(0.1, 3)
        t += rng.uniform(1, 30)
        step = max(0, step - rng.randint(0, 30))  # restart from a checkpoint
    return events


def _reference(events):
    """{step: seconds} of rule 12, by hand: segments of valid step starts with
    increasing steps; span time = its length over the steps it covers; a
    segment's last step measured to its step end; the latest run wins. A
    segment whose first sync point (a step end of the step started last, not
    a second one, not after the segment's close) is not on its last step is
    measured by completion instead: the steps after one sync point up to the
    next share the time between them (from the segment's first start for the
    first); steps after its last sync point are not measured."""
    by = lambda kind: [e for e in events if e.kind == int(kind)]  # noqa: E731
    js = [e.time for e in by(Kind.JOB_START)]
    je = [e.time for e in by(Kind.JOB_END)]
    ends = {}  # attempt -> its last job end
    for x in je:
        k = bisect.bisect_right(js, x) - 1
        if k >= 0:
            ends[k] = x
    nxt = js[1:] + [None]

    def attempt(x):
        k = bisect.bisect_right(js, x) - 1
        if k < 0 or (k in ends and ends[k] <= x):
            return None
        return k

    segs = []  # [attempt, [(t, step), ...]]
    for e in by(Kind.STEP_START):
        k = attempt(e.time)
        if k is None:
            continue
        if segs and segs[-1][0] == k and e.step > segs[-1][1][-1][1]:
            segs[-1][1].append((e.time, e.step))
        else:
            segs.append([k, [(e.time, e.step)]])
    # every step start (also those outside attempts) and the sync points
    starts = [(e.time, e.step) for e in by(Kind.STEP_START)]
    where = {}  # a start -> (its segment, its position there)
    for j, (_, pts) in enumerate(segs):
        for p, pt in enumerate(pts):
            where[pt] = (j, p)
    closes = []
    for j, (k, pts) in enumerate(segs):
        tm, sm = pts[-1]
        if j + 1 < len(segs) and segs[j + 1][0] == k:
            limit = segs[j + 1][1][0][0]
        elif k in ends:
            limit = ends[k]
        elif nxt[k] is not None:
            limit = nxt[k]
        else:
            limit = float("inf")
        found = [e.time for e in by(Kind.STEP_END) if e.step == sm and tm <= e.time < limit]
        last_in_attempt = j + 1 == len(segs) or segs[j + 1][0] != k
        closes.append(min(found) if found else ends[k] if last_in_attempt and k in ends
                      else None)
    sync = {}  # segment -> [(E, e, position of its step start)]
    prev_k = None
    for e in by(Kind.STEP_END):
        ks = bisect.bisect_right(starts, (e.time, float("inf"))) - 1
        dup, prev_k = ks == prev_k, ks
        if ks < 0 or dup or starts[ks] not in where or starts[ks][1] != e.step:
            continue
        j, p = where[starts[ks]]
        if p == len(segs[j][1]) - 1 and closes[j] is not None and e.time > closes[j]:
            continue
        sync.setdefault(j, []).append((e.time, e.step, p))
    spans, lasts = [], []  # (when, step, seconds)
    for j, (k, pts) in enumerate(segs):
        points = sync.get(j, [])
        if points and points[0][2] < len(pts) - 1:  # measured by completion
            a, e_prev, p_prev = pts[0][0], pts[0][1] - 1, -1
            for E, e, p in points:
                for when, step in pts[p_prev + 1:p + 1]:
                    spans.append((when, step, (E - a) / (e - e_prev)))
                a, e_prev, p_prev = E, e, p
            continue
        for (t0, s0), (t1, s1) in zip(pts, pts[1:]):
            spans.append((t0, s0, (t1 - t0) / (s1 - s0)))
        tm, sm = pts[-1]
        if closes[j] is not None and by_kind_end(events, sm, tm, closes[j]):
            lasts.append((tm, sm, closes[j] - tm))
    best = {}
    for pos, (when, s, secs) in enumerate(spans + lasts):
        if s not in best or (when, pos) >= best[s][0]:
            best[s] = ((when, pos), secs)
    return {s: best[s][1] for s in sorted(best)}


def by_kind_end(events, step, tm, close):
    """Whether the close at ``close`` is a step end of ``step`` (not a job end)."""
    return any(e.kind == int(Kind.STEP_END) and e.step == step and e.time == close and
               e.time >= tm for e in events)


@pytest.mark.parametrize("seed", range(40))
def test_block_by_block_equals_rule_12_by_hand(seed, monkeypatch):
    rng = random.Random(seed)
    events = _job(rng, wide=seed % 8 == 7)
    calc = Calculator(RUN)
    calc.add(events)
    calc._tl.update()
    want = _reference(events)
    for block in (1, 2, 3, 7, 1 << 17):
        monkeypatch.setattr(step_blocks, "BLOCK", block)
        steps, times = step_times(calc._tl)  # (without a cache: block by block)
        assert steps.dtype == np.int64
        assert dict(zip(steps.tolist(), times.tolist())) == want
        assert steps.tolist() == sorted(want)


def test_a_step_run_again_later_takes_the_later_time(monkeypatch):
    """Steps 0-3 at 1 s, a crash, a restart from step 2 at 2 s a step: steps
    2 and 3 take 2 s (their latest run), 0 and 1 keep 1 s, 4 takes 2 s; the
    last step of each attempt (3, then 5) has no end recorded, so that
    attempt does not measure it: 3 is measured by the second attempt, 5 not."""
    ev = [EventRecord(RUN, int(Kind.JOB_START), 0.0)]
    ev += [EventRecord(RUN, int(Kind.STEP_START), 10.0 + i, i) for i in range(4)]
    ev.append(EventRecord(RUN, int(Kind.JOB_START), 100.0))
    ev += [EventRecord(RUN, int(Kind.STEP_START), 110.0 + 2 * i, 2 + i) for i in range(4)]
    calc = Calculator(RUN)
    calc.add(ev)
    calc._tl.update()
    monkeypatch.setattr(step_blocks, "BLOCK", 2)
    steps, times = step_times(calc._tl)
    assert steps.tolist() == [0, 1, 2, 3, 4]
    assert times.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]


def test_the_report_path_gives_the_incremental_figures():
    """``step_stats(incremental=False)`` (the report) and the kept,
    incremental computation give the same arrays and ideal step time."""
    events = _job(random.Random(5))
    once, kept = Calculator(RUN), Calculator(RUN)
    once.add(events)
    for i in range(0, len(events), 40):
        kept.add(events[i:i + 40])
        kept.step_stats()
    a, b = once.step_stats(incremental=False), kept.step_stats()
    assert a.steps.tolist() == b.steps.tolist() and len(a.steps) > 20
    assert a.step_times.tolist() == b.step_times.tolist()
    assert a.ideal_step_time == b.ideal_step_time
    assert a.deviation_aggregate == b.deviation_aggregate
    assert a.deviations.tolist() == b.deviations.tolist()
    assert getattr(once, "_step_times", None) is None  # nothing kept for a next call


@pytest.mark.parametrize("n", [0, 1, 2, 255, 256, 257, 5000])
def test_sorted_times_held_as_views_give_the_figures_of_a_reset(n):
    """``SortedTimes.of_sorted`` (the report's ideal step time) holds the
    caller's sorted array without copying it, and gives what a monitor's
    first update (``reset``: sorted copies) gives, to the last bit."""
    from goodput_core.queries.sorted_times import SortedTimes

    x = np.round(np.random.default_rng(n).lognormal(0, 0.4, n), 3)
    x[::97] *= 20  # outliers above median + 3 MAD
    copied = SortedTimes()
    copied.reset(x)
    x.sort()
    viewed = SortedTimes.of_sorted(x)
    assert viewed.ideal() == copied.ideal()
    assert [viewed.percentile(p) for p in (50, 90)] == [copied.percentile(p) for p in (50, 90)]
    assert all(np.shares_memory(b, x) for b in viewed._blocks)
