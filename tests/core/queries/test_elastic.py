"""Elastic training: the three elastic buckets and time-weighted slice efficiency.

Every expected number is derived by hand from the definitions in
goodput_core/queries/elastic.py (the reference's ``_compute_time_weighted_efficiency``
and elastic bucket rules); the comment above each assertion says how. The
last tests compare with the reference's ``ElasticGoodputCalculator`` reading
the same fake Cloud Logging stream.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.elastic import SliceCounts, slice_efficiency, time_weighted_mean
from goodput_core.events import EventRecord, Kind as K

R = "run"


def ev(kind, t, step=None, **extra):
    return EventRecord(R, int(kind), float(t), step, extra or None)


def counts(t, active, total, available):
    return ev(K.ELASTIC_SLICE_COUNTS, t, active_slices=active, total_slices=total,
              available_slices=available)


def wait(a, b, kind):
    return [ev(K.ELASTIC_WAIT_START, a, elastic_wait_event_type=kind),
            ev(K.ELASTIC_WAIT_END, b, elastic_wait_event_type=kind)]


def pair(start_kind, a, b):
    return [ev(start_kind, a), ev(K(int(start_kind) + 1), b)]


def calc_of(events, now=1000.0):
    calc = Calculator(clock=lambda: now)
    calc.add(events)
    return calc


# --------------------------------------------------------------- buckets
def test_waits_split_by_type_and_reinit_counts_init_and_prep_once():
    events = [ev(K.JOB_START, 0)]
    events += wait(1, 3, "SCALE_UP") + wait(3, 4, "wait_scale_up_v2")  # scale-ups: 2 + 1
    events += wait(4, 7, "slice_down") + wait(7, 8, "preempted")       # other types: 3 + 1
    events += pair(K.ELASTIC_REINIT_START, 8, 14)
    events += pair(K.TPU_INIT_START, 9, 10) + pair(K.TRAINING_PREP_START, 10, 12)
    events += pair(K.TPU_INIT_START, 14, 15)  # outside the re-init: TPU init
    events += [ev(K.STEP_START, 15, 0), ev(K.STEP_START, 16, 1), ev(K.JOB_END, 17)]
    r = calc_of(events).cumulative()
    s = r.badput_seconds
    assert s[B.ELASTIC_SCALE_UP] == 3.0
    assert s[B.ELASTIC_SLICE_DOWN] == 4.0
    # [8, 14): the init and prep inside it are re-initialisation, counted once
    assert s[B.ELASTIC_REINITIALIZATION] == 6.0
    assert s[B.TPU_INITIALIZATION] == 1.0
    assert s[B.TRAINING_PREP] == 0.0
    # [0, 1) is the only unlabelled time; steps [15, 17) are productive
    assert s[B.OTHER] == 1.0 and r.productive_seconds == 2.0 and r.total_seconds == 17.0


def test_overlapping_waits_and_reinit_are_counted_once():
    # scale-up [2, 6) and slice-down [4, 8) overlap; re-init [7, 9) overlaps
    # the slice-down: priority re-init > scale-up > slice-down
    events = [ev(K.JOB_START, 0), *wait(2, 6, "scale_up"), *wait(4, 8, "slice_down"),
              *pair(K.ELASTIC_REINIT_START, 7, 9), ev(K.JOB_END, 10)]
    s = calc_of(events).cumulative().badput_seconds
    assert (s[B.ELASTIC_SCALE_UP], s[B.ELASTIC_SLICE_DOWN], s[B.ELASTIC_REINITIALIZATION]) == \
        (4.0, 1.0, 2.0)
    assert s[B.OTHER] == 3.0  # [0, 2) and [9, 10)


def test_wait_pairing_follows_the_reference():
    # a second start of the same type replaces the pending one; an end
    # without a start is skipped; types pair separately
    events = [ev(K.JOB_START, 0),
              ev(K.ELASTIC_WAIT_START, 1, elastic_wait_event_type="slice_down"),
              ev(K.ELASTIC_WAIT_START, 3, elastic_wait_event_type="slice_down"),
              ev(K.ELASTIC_WAIT_START, 4, elastic_wait_event_type="scale_up"),
              ev(K.ELASTIC_WAIT_END, 5, elastic_wait_event_type="slice_down"),
              ev(K.ELASTIC_WAIT_END, 6, elastic_wait_event_type="scale_up"),
              ev(K.ELASTIC_WAIT_END, 7, elastic_wait_event_type="scale_up"),
              ev(K.JOB_END, 10)]
    r = calc_of(events).cumulative()
    # slice-down [3, 5) under scale-up [4, 6): slice-down keeps [3, 4)
    assert r.badput_seconds[B.ELASTIC_SLICE_DOWN] == 1.0
    assert r.badput_seconds[B.ELASTIC_SCALE_UP] == 2.0
    assert r.skipped == {"unmatched_start": 1, "unmatched_end": 1}


# ----------------------------------------------------- slice efficiency
def job(*extra, end=20.0):
    return [ev(K.JOB_START, 0), *extra, ev(K.JOB_END, end)]


def test_cumulative_efficiency_is_time_weighted():
    calc = calc_of(job(counts(0, 4, 4, 4), counts(5, 2, 4, 3), counts(15, 4, 4, 4)))
    e = calc.slice_efficiency()
    # stepping: 5·1 + 10·(2/4) + 5·1 = 15 over 20 s; available: 5 + 10·(3/4) + 5 = 17.5
    assert e.stepping == pytest.approx(15 / 20)
    assert e.available == pytest.approx(17.5 / 20)
    assert e.seconds == 20.0 and e.window == (0.0, 20.0)


def test_any_window_uses_the_record_in_force_at_its_start():
    calc = calc_of(job(counts(0, 4, 4, 4), counts(5, 2, 4, 3), counts(15, 4, 4, 4)))
    e = calc.slice_efficiency(10, 18)
    # [10, 15) at 2/4 (recorded at 5, before the window), [15, 18) at 4/4
    assert e.stepping == pytest.approx((5 * 0.5 + 3) / 8)
    assert e.available == pytest.approx((5 * 0.75 + 3) / 8)
    # a window reaching beyond the lifetime is clipped to it
    e = calc.slice_efficiency(12, 500)
    assert e.window == (12.0, 20.0)
    assert e.stepping == pytest.approx((3 * 0.5 + 5) / 8)
    # a window inside one record's reign
    assert calc.slice_efficiency(6, 7).stepping == pytest.approx(0.5)


def test_time_before_the_first_record_counts_as_zero():
    e = calc_of(job(counts(5, 3, 4, 4))).slice_efficiency()
    # [0, 5) unknown = 0, [5, 20) at 3/4 and 4/4
    assert e.stepping == pytest.approx(15 * 0.75 / 20)
    assert e.available == pytest.approx(15 / 20)


def test_records_at_the_same_time_the_last_one_holds():
    calc = calc_of(job(counts(0, 4, 4, 4), counts(10, 3, 4, 4), counts(10, 1, 4, 2)))
    e = calc.slice_efficiency()
    assert e.stepping == pytest.approx((10 + 10 * 0.25) / 20)
    assert e.available == pytest.approx((10 + 10 * 0.5) / 20)


def test_zero_total_is_taken_as_one_and_fractions_are_not_clamped():
    # the reference's max(total, 1); 2 active of "0" total -> 2.0
    e = calc_of(job(counts(0, 2, 0, 1))).slice_efficiency()
    assert (e.stepping, e.available) == (pytest.approx(2.0), pytest.approx(1.0))


def test_idle_time_between_attempts_is_left_out():
    events = [ev(K.JOB_START, 0), counts(0, 4, 4, 4), ev(K.JOB_END, 10),
              counts(15, 1, 4, 4),  # recorded while idle: holds from 15 on
              ev(K.JOB_START, 20), ev(K.JOB_END, 30)]
    e = calc_of(events).slice_efficiency()
    # measured time [0, 10) + [20, 30) = 20 s: 10·1 + 10·0.25
    assert e.seconds == 20.0
    assert e.stepping == pytest.approx(12.5 / 20)


def test_open_job_runs_to_now():
    calc = calc_of([ev(K.JOB_START, 0), counts(0, 2, 4, 4)], now=8.0)
    e = calc.slice_efficiency()
    assert e.window == (0.0, 8.0) and e.stepping == pytest.approx(0.5)
    assert calc.slice_efficiency(now=4.0).window == (0.0, 4.0)


def test_no_records_no_job_and_empty_windows():
    assert calc_of(job()).slice_efficiency() is None            # no slice counts
    assert calc_of([counts(0, 1, 1, 1)]).slice_efficiency() is None  # no job start
    e = calc_of(job(counts(0, 4, 4, 4))).slice_efficiency(30, 40)  # after the job
    assert (e.stepping, e.available, e.seconds) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        calc_of(job()).slice_efficiency(5, 1)
    with pytest.raises(ValueError):
        calc_of(job()).slice_efficiency(math.nan)


def test_slice_counts_are_kept_compactly_and_bad_ones_counted():
    calc = calc_of(job(counts(3, 1, 2, 2), counts(1, 2, 2, 2), counts(1, 2, 2, 2),
                       ev(K.ELASTIC_SLICE_COUNTS, 4, active_slices="2", total_slices=2,
                          available_slices=2),
                       ev(K.ELASTIC_SLICE_COUNTS, 5, active_slices=math.inf, total_slices=2,
                          available_slices=2)))
    c = calc.slice_counts()
    assert isinstance(c, SliceCounts) and c.times.dtype == np.float64
    assert c.times.tolist() == [1.0, 3.0] and c.active.tolist() == [2.0, 1.0]
    assert calc.skipped == {"duplicate": 1, "missing_field": 1, "non_finite": 1}


def test_slice_counts_do_not_dirty_the_timeline():
    calc = calc_of(job(*[ev(K.STEP_START, t, i) for i, t in enumerate(range(1, 10))]))
    calc.cumulative()
    tl = calc.timeline
    version = tl.version
    calc.add([counts(2, 1, 1, 1)])  # older than the freeze point: no recompute
    calc.cumulative()
    assert tl.version == version and tl.dirty_from == math.inf


def test_time_weighted_mean_over_pieces():
    times, values = np.array([0.0, 10.0]), np.array([1.0, 0.5])
    mean, seconds = time_weighted_mean(times, values, np.array([5.0, 12.0]), np.array([8.0, 14.0]))
    assert seconds == 5.0 and mean == pytest.approx((3 * 1 + 2 * 0.5) / 5)
    assert time_weighted_mean(times, values, np.empty(0), np.empty(0)) == (0.0, 0.0)
    empty = SliceCounts(*(np.empty(0),) * 4)
    assert slice_efficiency(empty, (0.0, 1.0)) is None


# ------------------------------------------------- against the reference
from ml_goodput_measurement.src import goodput_elastic as ref_elastic  # noqa: E402

from tests.support.compat_calculator import T0, UTC, p, reference, span, steps  # noqa: E402


def elastic_job():
    """Init and prep; a slice-down wait; a re-initialisation that re-runs init
    and prep; a scale-up wait and a second re-init; 10 steps of 1 s; slice
    counts at 0, 5, 15 and twice at 22 (the second holds)."""
    def sc(t, active, total, available):
        return p(active_slices=active, total_slices=total, available_slices=available,
                 elastic_slice_counts_timestamp=T0 + t)

    x = [p(job_start_time=T0), sc(0, 4, 4, 4)]
    x += span("tpu_init", T0, T0 + 2) + span("training_prep", T0 + 2, T0 + 5)
    x += [sc(5, 2, 4, 3), p(elastic_wait_event_type="slice_down", elastic_wait_start_time=T0 + 5),
          p(elastic_wait_event_type="slice_down", elastic_wait_end_time=T0 + 9),
          p(elastic_reinit_start_time=T0 + 9)]
    x += span("tpu_init", T0 + 9, T0 + 11) + span("training_prep", T0 + 11, T0 + 12)
    x += [p(elastic_reinit_end_time=T0 + 13),
          p(elastic_wait_event_type="SCALE_UP", elastic_wait_start_time=T0 + 13),
          p(elastic_wait_event_type="SCALE_UP", elastic_wait_end_time=T0 + 15),
          sc(15, 4, 4, 4), p(elastic_reinit_start_time=T0 + 15)]
    x += span("tpu_init", T0 + 15, T0 + 16)
    x += [p(elastic_reinit_end_time=T0 + 17)]
    x += steps(0, [T0 + 17 + i for i in range(5)])
    x += [sc(22, 3, 4, 4), sc(22, 1, 4, 2)]
    x += steps(5, [T0 + 22 + i for i in range(5)]) + [p(job_end_time=T0 + 27)]
    return x, T0 + 40


def test_elastic_buckets_and_efficiency_agree_with_the_reference():
    payloads, query_time = elastic_job()
    with reference(payloads, query_time, cls=ref_elastic.ElasticGoodputCalculator) as ref:
        ref_goodput = ref.get_job_goodput(True)[0]
        details = ref.get_job_goodput_details()
    calc = Calculator(clock=lambda: query_time)
    calc.add_payloads(payloads)
    r = calc.cumulative()
    # hand truth: TPU init 2 (the other 3 s lie in re-inits), prep 3, slice-down
    # 4, scale-up 2, re-init 4 + 2, steps [17, 27) productive, total 27
    truth = {B.TPU_INITIALIZATION: 2.0, B.TRAINING_PREP: 3.0, B.ELASTIC_SLICE_DOWN: 4.0,
             B.ELASTIC_SCALE_UP: 2.0, B.ELASTIC_REINITIALIZATION: 6.0, B.OTHER: 0.0}
    for bucket, seconds in truth.items():
        assert r.badput_seconds[bucket] == pytest.approx(seconds, abs=1e-9), bucket
    assert (r.productive_seconds, r.total_seconds) == (pytest.approx(10.0), pytest.approx(27.0))
    theirs = {k.name: v for k, v in details["badput_time"].items() if not isinstance(v, dict)}
    for bucket in truth:
        assert theirs.get(bucket.name, 0.0) == pytest.approx(truth[bucket], abs=1e-6), bucket
    assert r.goodput == pytest.approx(ref_goodput, rel=1e-6)
    assert r.total_seconds == pytest.approx(details["total_elapsed_time"], rel=1e-6)
    e = calc.slice_efficiency()
    # stepping: 5·1 + 10·(2/4) + 7·1 + 5·(1/4) = 18.25 over 27 s
    # available: 5·1 + 10·(3/4) + 7·1 + 5·(2/4) = 22 over 27 s
    assert e.stepping == pytest.approx(18.25 / 27)
    assert e.available == pytest.approx(22 / 27)
    assert e.stepping == pytest.approx(details["stepping_slice_efficiency"], rel=1e-9)
    assert e.available == pytest.approx(details["available_slice_efficiency"], rel=1e-9)


def test_interval_efficiency_counts_the_record_in_force_unlike_the_reference():
    """The reference's interval query reads only entries written inside the
    window, so the record in force when the window opens is missing and that
    time counts as 0; we keep the history (docs/elastic-and-diagnostics.md)."""
    import datetime as dt

    payloads, query_time = elastic_job()
    a, b = T0 + 10, T0 + 20
    with reference(payloads, query_time, cls=ref_elastic.ElasticGoodputCalculator) as ref:
        theirs = ref.get_interval_metric_details(dt.datetime.fromtimestamp(a, UTC),
                                                 dt.datetime.fromtimestamp(b, UTC))
    calc = Calculator(clock=lambda: query_time)
    calc.add_payloads(payloads)
    e = calc.slice_efficiency(a, b)
    # truth: [10, 15) at 2/4 (recorded at 5), [15, 20) at 4/4
    assert e.stepping == pytest.approx((5 * 0.5 + 5) / 10)
    # the reference: [10, 15) unknown = 0, [15, 20) at 4/4
    assert theirs["stepping_slice_efficiency"] == pytest.approx(5 / 10)
