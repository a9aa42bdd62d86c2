"""A writer's columns read from their last rows (goodput_core/timeline/host_columns.py,
``TimeColumn``): a refresh of a many-host run reads every host's last rows as
Python lists, not by a numpy call per host. Whatever rows arrived (a few at a
time in order, late ones that move others, large pages), the searches and the
rows read equal numpy's on the whole column."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core.timeline.time_column import RECENT as _RECENT, TimeColumn as _Column


def _grow(rnd: random.Random, col: _Column, t: float, k: int, refresh: bool):
    """Adds rows the way pages bring them: a few in order as lists (a
    refresh), a late one, a large page as arrays; returns the next time and step."""
    shape = 0.0 if refresh else rnd.random()
    if shape < 0.7:  # a refresh: a row or two, as lists
        n = rnd.randint(1, 4)
        ts = [t + rnd.choice((0.0, 0.25, 1.0)) * i for i in range(n)]
        col.add(ts, list(range(k, k + n)))
        return ts[-1], k + n
    if shape < 0.8 and len(col):  # a late row: moves others
        late = float(col.t.a[rnd.randrange(len(col))]) - rnd.choice((0.0, 0.5))
        col.add([late], [k])
        return t, k + 1
    n = rnd.randint(5, 3 * _RECENT)  # a page of one writer's rows, as arrays
    ts = t + np.cumsum(np.asarray([rnd.choice((0.0, 0.25, 1.0)) for _ in range(n)]))
    col.add(ts, np.arange(k, k + n, dtype=np.int64))
    return float(ts[-1]), k + n


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 32))
def test_last_rows_read_as_numpy_reads_the_column(seed):
    rnd = random.Random(seed)
    col = _Column(np.int64)
    t, k = 0.0, 0
    # random pages, then a monitor's refreshes: more rows than the lists hold
    for i in range(rnd.randint(1, 30) + 3 * _RECENT):
        t, k = _grow(rnd, col, t, k, refresh=i >= 30)
        n = len(col)
        ta, va = col.t.a.copy(), col.v.a.copy()
        for _ in range(6):
            lo = rnd.randrange(n + 1)
            hi = rnd.randrange(lo, n + 1)
            x = rnd.choice([float(ta[rnd.randrange(n)]), t + 1.0, -1.0, t - 0.125])
            assert col.search(x, lo, hi) == lo + int(np.searchsorted(ta[lo:hi], x, "left"))
            if hi > lo and (va[lo + 1:hi] > va[lo:hi - 1]).all():  # step numbers that increase
                step = rnd.choice([int(va[rnd.randrange(lo, hi)]), k + 1, -1])
                assert col.search(step, lo, hi, values=True) == \
                    lo + int(np.searchsorted(va[lo:hi], step, "left"))
            assert col.lists(lo, hi) == (ta[lo:hi].tolist(), va[lo:hi].tolist())
            if n:
                i = rnd.randrange(n)
                assert col.row(i) == (ta[i].item(), va[i].item())
