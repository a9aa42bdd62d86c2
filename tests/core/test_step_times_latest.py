"""The latest run of each step, and a base of step times overridden by later
runs (``queries.step_stats``), against plain Python references: their
shortcuts (entries already in time order, a base replaced whole) must give
what the general computation gives.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from goodput_core.queries import step_stats


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
    got = step_stats._override(np.array(base, np.int64), np.array(times),
                               np.array(new, np.int64), np.array(new_times))
    assert (got[0].tolist(), got[1].tolist()) == _override_reference(base, times, new, new_times)
