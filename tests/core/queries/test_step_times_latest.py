"""The latest run of each step, and a base of step times overridden by later
runs (``queries.step_stats``, ``queries.step_series``), against plain Python
references: their shortcuts (entries already in time order, a base replaced
whole, appends into a chunk's spare room) must give what the general
computation gives.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from goodput_core.queries import step_series, step_stats


def _latest_reference(steps, times, when):
    best = {}
    for pos, (s, t, w) in enumerate(zip(steps, times, when)):
        if s not in best or (w, pos) >= best[s][0]:
            best[s] = ((w, pos), t)
    keys = sorted(best)
    return keys, [best[k][1] for k in keys]


@pytest.mark.parametrize("seed", range(30))
def test_latest_run_of_each_step_equals_the_reference(seed):
    r = random.Random(seed)
    n = r.choice([0, 1, 2, 50])
    kind = seed % 3
    if kind == 0:  # one run per step, in order: the fast path
        steps = list(range(n))
        when = sorted(r.randrange(100) for _ in range(n))
    elif kind == 1:  # restarts re-run steps, times in order
        steps = [r.randrange(20) for _ in range(n)]
        when = sorted(r.randrange(30) for _ in range(n))  # ties in time too
    else:  # times out of order
        steps = [r.randrange(20) for _ in range(n)]
        when = [r.randrange(30) for _ in range(n)]
    times = [r.random() for _ in range(n)]
    got = step_stats._latest(np.array(steps, np.int64), np.array(times),
                             np.array(when, np.float64))
    assert (got[0].tolist(), got[1].tolist()) == _latest_reference(steps, times, when)


def _override_reference(steps, times, new_steps, new_times):
    merged = dict(zip(steps, times))
    merged.update(zip(new_steps, new_times))
    keys = sorted(merged)
    return keys, [merged[k] for k in keys]


@pytest.mark.parametrize("seed", range(30))
def test_override_equals_the_reference(seed):
    r = random.Random(seed)
    base = sorted(r.sample(range(60), r.choice([0, 1, 20])))
    shape = seed % 3
    if shape == 0:  # a first update: every base step again, and later ones
        new = base + list(range(60, 60 + r.randrange(5)))
    elif shape == 1:  # the run goes on
        new = list(range(60, 60 + r.randrange(1, 5)))
    else:  # some replaced, some added among them
        new = sorted(r.sample(range(70), r.choice([0, 5, 30])))
    times = [r.random() for _ in base]
    new_times = [r.random() for _ in new]
    got = step_series.override(np.array(base, np.int64), np.array(times),
                               np.array(new, np.int64), np.array(new_times))
    assert (got[0].tolist(), got[1].tolist()) == _override_reference(base, times, new, new_times)


@pytest.mark.parametrize("seed", range(12))
def test_chunked_step_columns_equal_a_dict_and_series_handed_out_never_change(seed, monkeypatch):
    """Runs going on (appends), restarts re-running earlier steps, late steps
    before others: the chunked columns (tiny chunks, so that appends cross
    them and replacements hit several) equal a plain dict after each update,
    and every series handed out still holds what it held then."""
    monkeypatch.setattr(step_series, "CHUNK", 7)
    monkeypatch.setattr(step_series, "MIN_CONSECUTIVE", 2)  # consecutive steps as two numbers
    r = random.Random(seed)
    cols, ref, handed = step_series.StepColumns(), {}, []
    step = 0
    for _ in range(40):
        kind = r.random()
        if kind < 0.6:  # the run goes on
            new = list(range(step, step + r.randrange(0, 12)))
        elif kind < 0.85:  # a restart from a checkpoint a few steps back
            back = max(0, step - r.randrange(1, 25))
            new = list(range(back, back + r.randrange(1, 30)))
        else:  # sparse late steps anywhere
            new = sorted(r.sample(range(step + 5), min(step + 5, r.randrange(1, 6))))
        if new:
            step = max(step, new[-1] + 1)
        times = [r.random() for _ in new]
        cols.set(np.array(new, np.int64), np.array(times))
        ref.update(zip(new, times))
        # provisional steps laid over (some replace final ones, some follow)
        tail = sorted(r.sample(range(max(0, step - 8), step + 4), r.randrange(0, 5)))
        tail_times = [r.random() for _ in tail]
        series = cols.series(np.array(tail, np.int64), np.array(tail_times))
        want = dict(ref)
        want.update(zip(tail, tail_times))
        keys = sorted(want)
        got_steps, got_times = series.arrays()
        assert got_steps.tolist() == keys and got_times.tolist() == [want[k] for k in keys]
        assert len(series) == len(keys)
        if keys:
            assert series.last_step == keys[-1]
            probe = r.choice(keys)
            assert series.rank(probe) == keys.index(probe) + 1
            assert series.step_at(keys.index(probe)) == probe
            i, j = sorted(r.sample(range(len(keys) + 1), 2))
            sl = series.slice(i, j)
            assert sl[0].tolist() == keys[i:j] and sl[1].tolist() == [want[k] for k in keys[i:j]]
        found, times_now = cols.lookup(np.array(keys, np.int64))
        assert found.tolist() == [k in ref for k in keys]
        assert [t for t, f in zip(times_now.tolist(), found) if f] == [ref[k] for k in keys if k in ref]
        handed.append((series, keys, [want[k] for k in keys]))
    assert any(isinstance(c[0], step_series.Consecutive) for c in cols._chunks)
    for series, keys, times in handed:  # nothing written where a series can see it
        got = step_series.StepSeries(series._chunks).arrays()
        assert got[0].tolist() == keys and got[1].tolist() == times


def test_consecutive_steps_read_as_the_array_they_stand_for():
    c, a = step_series.Consecutive(10, 6), np.arange(10, 16)
    assert len(c) == 6 and c[0] == 10 and c[-1] == 15 and c[3] == 13
    assert np.asarray(c).tolist() == a.tolist() and np.asarray(c).dtype == np.int64
    for k in (slice(None), slice(2, 4), slice(-3, None), slice(5, 2)):
        assert c[k].tolist() == a[k].tolist()
    idx = np.array([0, 5, -1, 2])
    assert c[idx].tolist() == a[idx].tolist()
    probes = np.array([-3, 9, 10, 12, 15, 16, 40])
    for side in ("left", "right"):
        assert c.searchsorted(probes, side).tolist() == np.searchsorted(a, probes, side).tolist()
        assert [c.searchsorted(int(p), side) for p in probes] == \
            np.searchsorted(a, probes, side).tolist()
    for bad in (6, -7):
        with pytest.raises(IndexError):
            c[bad]
    with pytest.raises(IndexError):
        c[np.array([6])]


def test_step_stats_copy_and_pickle_with_their_chunks():
    """A snapshot's step statistics may be copied or pickled by a user's
    exporter: the chunked series goes with them (its lock does not)."""
    import copy
    import pickle

    cols = step_series.StepColumns()
    cols.set(np.arange(100, dtype=np.int64), np.linspace(1.0, 2.0, 100))
    series = cols.series(np.array([100, 101], np.int64), np.array([3.0, 4.0]))
    stats = step_stats.StepStats.of_series(series, 1.5)
    for other in (copy.deepcopy(stats), pickle.loads(pickle.dumps(stats))):
        assert other.steps.tolist() == list(range(102))
        assert other.deviations.tolist() == np.abs(stats.step_times - 1.5).tolist()
        assert other.deviation_aggregate == stats.deviation_aggregate
