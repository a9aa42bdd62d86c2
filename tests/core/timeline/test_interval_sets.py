"""The timeline's interval set operations against brute-force references.

``union`` skips its sort on sorted starts and returns masks' selections;
``split_by_regions`` classifies intervals in blocks: both must give exactly
what a plain Python computation gives, and never hand back (or change) the
caller's arrays.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from goodput_core.timeline import intervals
from goodput_core.timeline.intervals import split_by_regions, union


def _union_reference(s, e):
    merged = []
    for a, b in sorted((a, b) for a, b in zip(s, e) if b > a):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [a for a, _ in merged], [b for _, b in merged]


def _intervals(r: random.Random, n: int, sorted_starts: bool):
    s = [r.randrange(0, 400) / 4 for _ in range(n)]
    if sorted_starts:
        s.sort()
    e = [a + r.choice([0.0, -1.0, r.randrange(1, 30) / 4]) for a in s]
    return np.array(s), np.array(e)


@pytest.mark.parametrize("seed", range(30))
def test_union_equals_the_reference(seed):
    r = random.Random(seed)
    s, e = _intervals(r, r.choice([0, 1, 5, 200]), sorted_starts=seed % 2 == 0)
    before = (s.copy(), e.copy())
    us, ue = union(s, e)
    ref = _union_reference(s.tolist(), e.tolist())
    assert (us.tolist(), ue.tolist()) == ref
    assert np.array_equal(s, before[0]) and np.array_equal(e, before[1])
    assert not np.shares_memory(us, s) and not np.shares_memory(ue, e)


def test_union_of_disjoint_sorted_intervals_is_a_copy():
    s, e = np.array([0.0, 2.0, 4.0]), np.array([1.0, 3.0, 5.0])
    us, ue = union(s, e)
    assert us.tolist() == [0.0, 2.0, 4.0] and ue.tolist() == [1.0, 3.0, 5.0]
    us[0] = 99.0
    assert s[0] == 0.0


def _regions(r: random.Random, n: int):
    edges = sorted(r.sample(range(0, 440), 2 * n))
    return (np.array(edges[0::2], np.float64) / 4, np.array(edges[1::2], np.float64) / 4)


def _measure(s, e) -> float:
    return float(sum(b - a for a, b in zip(*_union_reference(s, e))))


@pytest.mark.parametrize("seed", range(20))
def test_split_by_regions_in_blocks_equals_one_block_and_the_reference(monkeypatch, seed):
    r = random.Random(seed)
    s, e = _intervals(r, r.choice([0, 3, 150]), sorted_starts=seed % 2 == 0)
    rs, re = _regions(r, r.choice([0, 1, 12]))
    whole = split_by_regions(s, e, rs, re)
    monkeypatch.setattr(intervals, "_SPLIT_BLOCK", 7)
    blocks = split_by_regions(s, e, rs, re)
    assert [a.tolist() for a in blocks] == [a.tolist() for a in whole]
    # the reference: inside = the union clipped to the regions, outside = the rest
    us, ue = _union_reference(s.tolist(), e.tolist())
    cut_s, cut_e = [], []
    for a, b in zip(us, ue):
        for x, y in zip(rs.tolist(), re.tolist()):
            if min(b, y) > max(a, x):
                cut_s.append(max(a, x))
                cut_e.append(min(b, y))
    assert (whole[0].tolist(), whole[1].tolist()) == _union_reference(cut_s, cut_e)
    total = _measure(s.tolist(), e.tolist())
    inside = float((whole[1] - whole[0]).sum())
    outside = float((whole[3] - whole[2]).sum())
    assert inside + outside == pytest.approx(total, abs=1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_split_by_regions_reusing_the_given_arrays_gives_the_same_pieces(monkeypatch, seed):
    """``owned=True``: the inside parts are gathered into the given arrays,
    block by block, while later blocks are still to be read."""
    r = random.Random(100 + seed)
    s, e = _intervals(r, r.choice([0, 3, 150]), sorted_starts=seed % 2 == 0)
    if seed % 4 < 2:  # no empty interval: the blocks are views of the given arrays
        s, e = s[e > s], e[e > s]
    rs, re = _regions(r, r.choice([0, 1, 12]))
    monkeypatch.setattr(intervals, "_SPLIT_BLOCK", r.choice([1, 7, 1000]))
    want = split_by_regions(s, e, rs, re)
    got = split_by_regions(s.copy(), e.copy(), rs, re, owned=True)
    assert [a.tolist() for a in got] == [a.tolist() for a in want]
