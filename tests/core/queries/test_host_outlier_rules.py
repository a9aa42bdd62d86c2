"""The host-outlier rule pinned at its edges (docs/insights.md, "Host
outliers"): more than 2x the median host's host-local time AND more than 1 %
of the median host's total time over it; the cause is the bucket with the
largest excess over the median host's same bucket; largest excess first;
three hosts at least. Every host here lives [0, 100) s (total 100 s, so the
1 % floor is 1 s) and its blocking load, preparation and save lengths are
binary fractions, so the edges are exact. Each test names the mutation it was
checked against (the rule broken by hand, the test failing)."""

from __future__ import annotations

import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.host_outliers import HostTracker


def _host(pi, load, prep=0.0, save=0.0):
    """Job [0, 100); preparation [1, 1 + prep); a blocking load [20 - load, 20)
    before step 0 at 20; 1 s steps to 100 with a save [50, 50 + save) inside."""
    def ev(kind, t, step=None):
        return EventRecord("h", int(kind), float(t), step, None, pi)

    out = [ev(Kind.JOB_START, 0)]
    if prep:
        out += [ev(Kind.TRAINING_PREP_START, 1), ev(Kind.TRAINING_PREP_END, 1 + prep)]
    out += [ev(Kind.DATA_LOADING_START, 20 - load), ev(Kind.DATA_LOADING_END, 20)]
    out += [ev(Kind.STEP_START, 20 + k, k) for k in range(80)]
    if save:
        out += [ev(Kind.CHECKPOINT_SAVE_START, 50, 30), ev(Kind.CHECKPOINT_SAVE_END, 50 + save, 30)]
    out += [ev(Kind.STEP_END, 100, 79), ev(Kind.JOB_END, 100)]
    return sorted(out, key=lambda e: e.time)


def _breakdown(hosts):
    tracker = HostTracker("h", new_calculator=lambda: Calculator("h"))
    for pi, kw in enumerate(hosts):
        tracker.add(_host(pi, **kw))
    return tracker.breakdown(now=100)


def test_the_ratio_edge_exactly_twice_the_median_is_not_an_outlier():
    """Loads 2, 2, 2, 4, 4.25 s: median 2 s. Host 3 has exactly 2x (excess 2 s
    > the 1 s floor): not named, "more than 2x". Host 4 has 2.125x: named,
    excess 2.25 s. Mutation killed: ``>=`` for the ratio."""
    b = _breakdown([{"load": 2.0}, {"load": 2.0}, {"load": 2.0}, {"load": 4.0},
                    {"load": 4.25}])
    assert b.median["host_local_seconds"] == 2.0 and b.median["total_seconds"] == 100.0
    assert b.outliers == [(4, "DATA_LOADING", pytest.approx(2.25))]


def test_the_floor_edge_an_excess_of_exactly_one_percent_is_not_an_outlier():
    """Loads 0.5, 0.5, 0.5, 1.5, 1.625 s: median 0.5 s, floor 1 % of the median
    host's 100 s = 1 s. Host 3 (3x) exceeds by exactly 1 s: not named; host 4
    (3.25x) by 1.125 s: named. Mutations killed: ``>=`` for the floor, a floor
    of 1 % of the median host-local time (0.005 s: host 3 named) or no floor."""
    b = _breakdown([{"load": 0.5}, {"load": 0.5}, {"load": 0.5}, {"load": 1.5},
                    {"load": 1.625}])
    assert b.outliers == [(4, "DATA_LOADING", pytest.approx(1.125))]


def test_cause_is_the_largest_excess_and_outliers_come_largest_first():
    """Five hosts, three buckets non-zero. Hosts 0-2: load 4, save 1 (5 s).
    Host 3: load 5, save 1, prep 4.5 (10.5 s); host 4: load 4, save 8 (12 s).
    Medians: load 4, save 1, prep 0, host-local 5 s (ratio limit 10 s).
    Host 3: 10.5 > 10, excess 5.5 s; its largest *value* is the load (5 s) but
    the largest *excess* is preparation (4.5 s vs 1 s): TRAINING_PREP.
    Host 4: 12 > 10, excess 7 s, cause the save (7 s over). Largest excess
    first: host 4, then host 3. Mutations killed: cause = largest value
    (DATA_LOADING for host 3); ascending or by-index order."""
    base = {"load": 4.0, "save": 1.0}
    b = _breakdown([base, base, base, {"load": 5.0, "save": 1.0, "prep": 4.5},
                    {"load": 4.0, "save": 8.0}])
    by = {h.process_index: h for h in b.hosts}
    assert by[3].seconds == {"DATA_LOADING": 5.0, "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 1.0,
                             "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 0.0,
                             "TPU_INITIALIZATION": 0.0, "TRAINING_PREP": 4.5}
    assert b.median["host_local_seconds"] == 5.0
    assert b.outliers == [(4, "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", pytest.approx(7.0)),
                          (3, "TRAINING_PREP", pytest.approx(5.5))]


def test_three_hosts_are_enough():
    """Loads 1, 1, 5 s: median 1 s; host 2 has 5x and 4 s over: named. (With two
    hosts no host can be named at all: their median is their mean, and neither
    exceeds twice it.) Mutation killed: requiring four hosts or more."""
    b = _breakdown([{"load": 1.0}, {"load": 1.0}, {"load": 5.0}])
    assert b.outliers == [(2, "DATA_LOADING", pytest.approx(4.0))]
