"""The Calculator's API: windows, exclusions, rolling windows, the store
cursor, payload input, step-time statistics, and agreement with the
reference on the compatibility families. Expected numbers are derived by
hand in the comments."""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid

import numpy as np
import pytest

from goodput_core.timeline.buckets import BASE_BADPUT, BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.events import EventRecord, Kind as K
from goodput_core.record.recorder import Recorder
from goodput_core.queries.step_stats import deviation_aggregate, ideal_step_time

R = "run"


def ev(kind, t, step=None, **extra):
    return EventRecord(R, int(kind), float(t), step, extra or None)


def calc_of(events, now=1000.0, **kw):
    c = Calculator(clock=lambda: now, **kw)
    c.add(events)
    return c


# A job: init [0,10), steps 0..4 at 10,20,22,24,26, eval [23,24) inside
# step 2 (kept spans 10, 2, 1, 2: startup 10 - 5/3 at the start), job end 30;
# idle [30,50); second attempt [50,60): init [50,52), steps 5,6 at 52,56, end 60.
JOB = [ev(K.JOB_START, 0), ev(K.TPU_INIT_START, 0), ev(K.TPU_INIT_END, 10),
       *[ev(K.STEP_START, t, s) for s, t in enumerate([10, 20, 22, 24, 26])],
       ev(K.CUSTOM_BADPUT_START, 23, custom_badput_event_type="eval"),
       ev(K.CUSTOM_BADPUT_END, 24, custom_badput_event_type="eval"), ev(K.JOB_END, 30),
       ev(K.JOB_START, 50), ev(K.TPU_INIT_START, 50), ev(K.TPU_INIT_END, 52),
       ev(K.STEP_START, 52, 5), ev(K.STEP_START, 56, 6), ev(K.JOB_END, 60)]


def test_cumulative_of_the_reference_job():
    r = calc_of(JOB).cumulative()
    # spans of attempt 1 after the eval: 10, 2, 1, 2 and the last [26,30) 4;
    # mean of the between-start others (2, 1, 2) = 5/3: startup 10 - 5/3
    startup = 10 - 5 / 3
    assert r.total_seconds == 40 and r.idle_seconds == 20
    assert r.badput_seconds[B.TPU_INITIALIZATION] == 12
    assert r.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(startup)
    assert r.custom_badput_seconds == {"EVAL": 1}
    assert r.productive_seconds == pytest.approx(40 - 12 - 1 - startup)
    assert r.goodput == pytest.approx(100 * r.productive_seconds / 40)
    assert set(r.badput_seconds) == set(BASE_BADPUT)
    assert r.max_productive_step == 6 and r.last_step == 6 and r.disruptions == 0
    assert r.window == (0, 60) and r.lifetime == (0, 60)


def test_window_clips_spans_and_counts_idle():
    c = calc_of(JOB)
    r = c.window(25, 55)
    # [25,26) step 3, [26,30) step 4 (last): productive 5; idle [30,50);
    # [50,52) init; [52,55) step 5
    assert r.total_seconds == 10 and r.idle_seconds == 20
    assert r.productive_seconds == 8
    assert r.badput_seconds[B.TPU_INITIALIZATION] == 2
    assert r.window == (25, 55)


def test_window_outside_the_lifetime_is_empty():
    c = calc_of(JOB)
    for a, b in ((-50, -10), (70, 90), (5, 5)):
        r = c.window(a, b)
        assert r.total_seconds == 0 and r.goodput == 0
        assert all(v == 0 for v in r.badput_seconds.values())


def test_exclusions_remove_the_union_and_never_count_idle():
    c = calc_of(JOB)
    r = c.cumulative(exclude=[(0, 5), (3, 8), (45, 51), (100, 200)])
    # union inside the lifetime: [0,8) (8 s of init) and [45,51): 5 s of it
    # idle, 1 s of init
    assert r.excluded_seconds == 9
    assert r.idle_seconds == 20
    assert r.total_seconds == 31
    assert r.badput_seconds[B.TPU_INITIALIZATION] == 12 - 8 - 1
    parts = r.productive_seconds + sum(v for k, v in r.badput_seconds.items()
                                       if k is not B.DATA_LOADING_ASYNC)
    assert parts == pytest.approx(r.total_seconds)


def test_exclusion_inside_a_window_is_clipped_to_it():
    r = calc_of(JOB).window(10, 20, exclude=[(0, 12), (19, 40)])
    # window [10,20) is the first span: startup [10, 10 + x), x = 10 - 5/3,
    # then productive; kept part [12,19)
    x = 10 - 5 / 3
    assert r.excluded_seconds == 3  # [10,12) and [19,20)
    assert r.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(10 + x - 12)
    assert r.productive_seconds == pytest.approx(19 - (10 + x))


def test_rolling_windows_end_now():
    c = calc_of(JOB, now=60)
    rs = c.rolling([10, 40, 1000])
    assert [r.window for r in rs] == [(50, 60), (20, 60), (0, 60)]
    assert rs[0].total_seconds == 10 and rs[0].badput_seconds[B.TPU_INITIALIZATION] == 2
    assert rs[2].goodput == c.cumulative().goodput


def test_rolling_windows_of_a_finished_run_end_where_it_ended():
    # JOB ended at 60: read at 600, its 10 s window is [50, 60] (init [50, 52),
    # steps 52-60): total 10, init 2, productive 8 -- what it said at 60
    c = calc_of(JOB, now=600)
    assert c.rolling_end() == 60
    r10, r40 = c.rolling([10, 40])
    assert r10.window == (50, 60) and r10.total_seconds == 10
    assert r10.badput_seconds[B.TPU_INITIALIZATION] == 2 and r10.productive_seconds == 8
    assert r10.goodput == calc_of(JOB, now=60).rolling([10])[0].goodput == 80
    assert r40.window == (20, 60) and r40.total_seconds == 20  # idle [30, 50) is not job time
    # stopped (a recorded disruption last, rule 15): at the disruption, 35
    stopped = [ev(K.JOB_START, 0), *[ev(K.STEP_START, t, s) for s, t in enumerate([0, 10, 20])],
               ev(K.DISRUPTION, 35, disruption_cause="sigterm")]
    c = calc_of(stopped, now=900)
    assert c.state().state == "stopped" and c.rolling_end() == 35
    r = c.rolling([20])[0]
    assert r.window == (15, 35) and r.productive_seconds == 5  # [15, 20); [20, 35) OTHER
    # running: now (a query of the past sees the run as it was then)
    assert calc_of(JOB[:9], now=40).rolling_end() == 40
    assert calc_of(JOB, now=55).rolling([5])[0].window == (50, 55)


def test_open_attempt_grows_with_now():
    events = JOB[:9]  # attempt 1 up to step 4's start, no end yet
    c = Calculator(clock=lambda: 40.0)
    c.add(events)
    assert c.cumulative().total_seconds == 40
    assert c.cumulative(now=35).total_seconds == 35
    assert c.lifetime() == (0.0, 40.0)
    # the open step 4 [26,now) is OTHER
    assert c.cumulative().badput_seconds[B.OTHER] == 14


def test_datetimes_are_accepted():
    utc = dt.timezone.utc
    c = calc_of([ev(K.JOB_START, 0), ev(K.JOB_END, 100)])
    r = c.window(dt.datetime(1970, 1, 1, 0, 0, 10, tzinfo=utc),
                 dt.datetime.fromtimestamp(30))  # naive = local time
    assert r.window == (10, 30)


def test_add_payloads_parses_and_counts_unusable_ones():
    c = Calculator("job", clock=lambda: 100.0)
    c.add_payloads([{"job_name": "job", "job_start_time": 0.0},
                    {"job_name": "job", "step_count": 0, "step_start_time": 10.0},
                    {"job_name": "job", "step_count": "x", "step_start_time": 11.0},
                    {"job_name": "job", "tpu_init_start_time": math.nan},
                    {"job_name": 5, "job_start_time": 1.0}, "junk",
                    {"job_name": "job", "job_end_time": 20.0}])
    r = c.cumulative()
    assert r.total_seconds == 20 and r.productive_seconds == 10
    assert r.skipped == {"bad_step": 1, "non_finite": 1, "no_job_name": 1, "not_a_dict": 1}


def test_refresh_reads_only_new_events_from_the_store():
    store = f"memory://calc-{uuid.uuid4().hex}"
    clock = [0.0]
    rec = Recorder("job", store, clock=lambda: clock[0], strict=True)
    c = Calculator("job", store, clock=lambda: clock[0])
    rec.record_job_start_time()
    rec.record_step_start_time(0)
    rec.flush()
    assert c.refresh() == 2
    assert c.refresh() == 0
    clock[0] = 10.0
    rec.record_step_start_time(1)
    clock[0] = 12.0
    rec.record_job_end_time()
    rec.flush()
    assert c.refresh() == 2
    r = c.cumulative()
    assert r.total_seconds == 12 and r.productive_seconds == 12
    rec.close()


def test_a_calculator_given_a_store_reads_it_on_its_first_query():
    """As the reference's calculator: no 0 % of 0 s because refresh() was not
    called. The first query reads what is stored; later ones read nothing new
    until refresh() (which then reads only what is new)."""
    store = f"memory://calc-{uuid.uuid4().hex}"
    rec = Recorder("job", store, clock=lambda: 0.0, strict=True)
    rec.record_job_start_time(0.0)
    rec.record_step_start_time(0, 1.0)
    rec.record_step_start_time(1, 3.0)
    rec.record_job_end_time(4.0)
    rec.flush()
    r = Calculator("job", store, clock=lambda: 10.0).cumulative()
    assert (r.total_seconds, r.productive_seconds) == (4.0, 3.0)
    c = Calculator("job", store, clock=lambda: 10.0)
    assert c.step_stats().times_dict() == {0: 2.0}  # any query: here step statistics
    rec.record_job_start_time(5.0)  # a second attempt, open at the query time 10
    rec.flush()
    assert c.cumulative().total_seconds == 4.0  # not read again by itself
    # then [0, 4) and [5, 10) (idle [4, 5) is not job time)
    assert c.refresh() == 1 and c.cumulative().total_seconds == 9.0
    rec.close()
    # fed by hand (no store): nothing is read from anywhere
    assert Calculator(R, clock=lambda: 1.0).cumulative().total_seconds == 0


def test_events_of_other_runs_are_skipped():
    c = Calculator(R, clock=lambda: 10.0)
    c.add([ev(K.JOB_START, 0), EventRecord("other", int(K.JOB_END), 5.0)])
    assert c.cumulative().total_seconds == 10
    assert c.skipped == {"other_run": 1}


def test_constructor_checks_its_arguments():
    with pytest.raises(ValueError):
        Calculator(store="memory://x")
    with pytest.raises(ValueError):
        Calculator(ideal_step_time=-1.0)


# ------------------------------------------------------------- step stats
def test_step_times_and_ideal_step_time():
    s = calc_of(JOB).step_stats()
    # between-start spans: step 0: 10, 1: 2, 2: 2, 3: 2; step 5: 4 (the last
    # spans are closed by job ends: not measured)
    assert s.steps.tolist() == [0, 1, 2, 3, 5]
    assert s.step_times.tolist() == [10, 2, 2, 2, 4]
    # median 2, MAD 0: threshold 2 -> mean of the three 2 s steps
    assert s.ideal_step_time == 2
    assert s.as_dict() == {0: 8, 1: 0, 2: 0, 3: 0, 5: 2}
    assert s.deviation_aggregate == pytest.approx(10 / 5)  # mean below 100 steps


def test_sparse_spans_are_shared_and_latest_run_wins_and_step_end_counts():
    events = [ev(K.JOB_START, 0), ev(K.STEP_START, 0, 0), ev(K.STEP_START, 10, 10),
              ev(K.STEP_START, 12, 11), ev(K.JOB_START, 20), ev(K.STEP_START, 20, 10),
              ev(K.STEP_START, 23, 11), ev(K.STEP_END, 28, 11), ev(K.JOB_END, 30)]
    s = calc_of(events).step_stats()
    # step 0: 10 s over steps 0-9 -> 1 s; step 10 ran twice: 2 s then 3 s;
    # step 11's last run is closed by its step end: 5 s
    assert s.times_dict() == {0: 1.0, 10: 3.0, 11: 5.0}


def test_fast_steps_still_get_an_ideal_step_time_and_it_can_be_configured():
    events = [ev(K.JOB_START, 0)] + [ev(K.STEP_START, i / 10, i) for i in range(11)]
    c = calc_of(events)
    assert c.step_stats().ideal_step_time == pytest.approx(0.1)
    assert c.step_stats(ideal_step_time=0.05).ideal_step_time == 0.05
    c2 = calc_of(events, ideal_step_time=0.2)
    assert c2.step_stats().deviations == pytest.approx(np.full(10, 0.1))


def test_ideal_step_time_filters_slow_outliers_with_raw_mad():
    # median 2, MAD 1 (|x - 2| = 1,1,0,1,8 -> median 1): threshold 5
    assert ideal_step_time(np.array([1.0, 3.0, 2.0, 1.0, 10.0])) == pytest.approx(7 / 4)
    assert ideal_step_time(np.array([])) is None


@pytest.mark.parametrize("n", [0, 5, 99, 100, 150, 1099, 1100, 2500])
def test_deviation_aggregate_follows_the_reference(n):
    from ml_goodput_measurement.src import goodput_utils as ref
    rnd = random.Random(n)
    devs = [rnd.random() * (5 if i % 37 == 0 else 1) for i in range(n)]
    want = ref.compute_step_deviation_from_baseline(dict(enumerate(devs)))
    assert deviation_aggregate(np.array(devs)) == pytest.approx(float(want), abs=1e-12)
    want_i = ref.compute_step_deviation_from_baseline(
        dict(enumerate(devs)), ref.MonitoringWindowType.INTERVAL)
    assert deviation_aggregate(np.array(devs), "interval") == pytest.approx(float(want_i))


# ------------------------------------------------------ incremental path
def test_incremental_updates_equal_a_cold_computation_on_a_long_job():
    rnd = random.Random(3)
    events, t, step = [], 0.0, 0
    for attempt in range(6):
        events += [ev(K.JOB_START, t), ev(K.TPU_INIT_START, t), ev(K.TPU_INIT_END, t + 5)]
        t += 5
        for _ in range(rnd.randint(20, 60)):
            events.append(ev(K.STEP_START, t, step))
            events += [ev(K.DATA_LOADING_START, t + 0.25), ev(K.DATA_LOADING_END, t + 0.5)]
            if step % 7 == 0:
                events += [ev(K.CUSTOM_BADPUT_START, t + 0.5, custom_badput_event_type="eval"),
                           ev(K.CUSTOM_BADPUT_END, t + 1.5, custom_badput_event_type="eval")]
            t += 2 + (3 if step == 0 else 0)
            step += 1
        if attempt % 2:
            events.append(ev(K.JOB_END, t))
            t += 10
        else:
            events.append(ev(K.DISRUPTION, t - 1, disruption_cause="preemption"))
            t += 30
            step -= rnd.randint(1, 10)
    cold = calc_of(events, now=t + 5)
    inc = Calculator(clock=lambda: t + 5)
    i = 0
    while i < len(events):
        k = rnd.randint(1, 40)
        inc.add(events[i:i + k])
        inc.cumulative()
        i += k
    a, b = inc.cumulative(), cold.cumulative()
    assert a == b
    assert inc.rolling([17, 300]) == cold.rolling([17, 300])
    assert inc.step_stats().as_dict() == cold.step_stats().as_dict()
    assert a.disruptions == 3


def test_monitoring_with_late_orbax_entries_stays_incremental():
    c = Calculator(clock=lambda: 1e4)
    c.add([ev(K.JOB_START, 0)])
    c.cumulative()
    for s in range(200):
        batch = [ev(K.STEP_START, 10 + s, s)]
        if s % 10 == 9:  # the save of step s-5 is logged 5 steps later
            batch.append(EventRecord(R, int(K.CHECKPOINT_STATS), 10.0 + s - 5 + 0.5, s - 5, {
                "event_type": "save", "checkpoint_manager_blocking_start_time": 10.0 + s - 4.5,
                "checkpoint_manager_blocking_duration_secs": 0.25}))
        c.add(batch)
        c.cumulative()
    assert c.timeline.full_rebuilds == 1  # the first update only
    assert c.cumulative().badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == 20 * 0.25
    c.add([ev(K.TPU_INIT_START, 1), ev(K.TPU_INIT_END, 2)])  # far in the past: full
    assert c.cumulative().badput_seconds[B.TPU_INITIALIZATION] == 1
    assert c.timeline.full_rebuilds == 2


def test_spans_tile_the_lifetime_with_overlays_applied():
    c = calc_of([ev(K.JOB_START, 0), *[ev(K.STEP_START, t, s) for s, t in
                                         enumerate([0, 10, 20, 30, 40])],
                 ev(K.JOB_START, 100), ev(K.STEP_START, 100, 2), ev(K.STEP_START, 110, 3),
                 ev(K.JOB_END, 120)])
    # first span [0,10) vs kept [10,20): no startup; steps 2-3 wasted
    # [20,40); crash recovery [40,100); new segment productive [100,120)
    assert c.spans() == [(0.0, 20.0, "PRODUCTIVE"), (20.0, 40.0, "WASTED_PROGRESS_FROM_DISRUPTION"),
                         (40.0, 100.0, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"),
                         (100.0, 120.0, "PRODUCTIVE")]
    assert c.spans(15, 25) == [(15.0, 20.0, "PRODUCTIVE"),
                               (20.0, 25.0, "WASTED_PROGRESS_FROM_DISRUPTION")]
    h = calc_of(JOB).spans(0, 31)
    assert h[0] == (0.0, 10.0, "TPU_INITIALIZATION")
    assert h[1][::2] == (10.0, "PROGRAM_STARTUP") and h[1][1] == pytest.approx(20 - 5 / 3)
    assert (23.0, 24.0, "CUSTOM_BADPUT_EVENTS:EVAL") in h
    assert h[-1] == (30.0, 31.0, "IDLE")


# ------------------------------------------------- reference compatibility
def test_reference_families_agree_with_the_reference_and_the_truth():
    from tests.support.reference_families import FAMILIES
    from tests.support.reference_harness import reference_job_goodput

    for name, family in FAMILIES.items():
        for seed in range(3):
            payloads, query_time, truth = family(seed)
            c = Calculator(clock=lambda: query_time)
            c.add_payloads(payloads)
            r = c.cumulative()
            ref = reference_job_goodput(payloads, query_time)
            for ours, theirs, true in (
                    (r.total_seconds, ref["total_seconds"], truth["total_seconds"]),
                    (r.productive_seconds, ref["productive_seconds"],
                     truth["productive_seconds"])):
                assert ours == pytest.approx(theirs, rel=1e-6) == pytest.approx(true, rel=1e-6)
            for b in BASE_BADPUT:
                theirs = ref["badput_seconds"].get(b.name, 0.0)
                theirs = sum(theirs.values()) if isinstance(theirs, dict) else theirs
                assert r.badput_seconds[b] == pytest.approx(theirs, rel=1e-6, abs=1e-9), \
                    (name, seed, b)
            assert r.max_productive_step == truth["max_productive_step"]
            assert r.disruptions == truth["disruptions"]


@pytest.mark.parametrize("t0", [0.0, 1_700_000_000.0])
def test_startup_excess_is_exact_at_absolute_timestamps(t0):
    """Steps at +0, 5, 6, 7, 9 and a job end at +10: the first step takes 5 s, the
    others 1, 1, 2 (mean 4/3), so program startup is 5 - 4/3 = 11/3 s exactly,
    even where absolute times are only known to ~2e-7 s."""
    from goodput_core.events import EventRecord, Kind

    events = [EventRecord("r", Kind.JOB_START, t0)]
    events += [EventRecord("r", Kind.STEP_START, t0 + d, i) for i, d in enumerate([0, 5, 6, 7, 9])]
    events += [EventRecord("r", Kind.JOB_END, t0 + 10)]
    calc = Calculator("r")
    calc.add(events)
    result = calc.cumulative(now=t0 + 10)
    assert result.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(11 / 3, abs=1e-12)
    assert result.productive_seconds == pytest.approx(10 - 11 / 3, abs=1e-12)
