"""Where our compat calculator deliberately differs from the reference.

Each test builds a job whose true durations are known by construction,
shows that our compat ``GoodputCalculator`` reports them, and that the
reference (ml-goodput-measurement 0.2.3, run offline) reports something
else. ``docs/differences.md`` lists these cases with the semantics.md rule
behind each; the test names there point here. All times are multiples of
1/4 s, exact in floating point and in ``datetime``'s microseconds.
"""

import datetime as dt
import json
import unittest.mock

import pytest


from goodput_core.compat import goodput_elastic as compat_elastic  # noqa: E402
from goodput_core.compat.goodput_utils import GoodputType  # noqa: E402
from ml_goodput_measurement.src import goodput_elastic as ref_elastic  # noqa: E402
from tests.support import reference_harness  # noqa: E402
from tests.support.compat_calculator import (  # noqa: E402
    JOB, T0, UTC, by_name, custom, fake_logger, flat, orbax, ours, p, reference, span, steps)
from tests.support.reference_families import FAMILIES  # noqa: E402
from tests.support.reference_harness import (  # noqa: E402
    reference_interval_goodput, reference_job_goodput, reference_job_goodput_with_exclusions)

BASE = reference_harness.REFERENCE_BUCKETS[:11]


def measured(calc, exclusions=None):
    """Our compat calculator's cumulative answer, by bucket name, in seconds."""
    if exclusions is None:
        goodput, breakdown, max_step = calc.get_job_goodput(include_badput_breakdown=True)
    else:
        goodput, breakdown, max_step, _ = calc.get_job_goodput_with_exclusions(exclusions, True)
    d = calc.get_job_goodput_details()
    seconds = {k: flat(v) for k, v in by_name(d["badput_time"]).items()}
    return {"goodput": goodput, "percent": by_name(breakdown), "seconds": seconds,
            "productive": d["goodput_time"][GoodputType.TOTAL],
            "total": d["total_elapsed_time"], "max_step": max_step,
            "disruptions": d["disruption_count"], "details": d}


def assert_truth(got, total, productive, **buckets):
    """``got`` reports the true total, productive time and buckets (seconds);
    every other partition bucket is zero and the partition sums to the total.

    Tolerance 1e-6 s: the heuristic's startup span is placed at absolute
    times near 1.7e9 s, whose float spacing is 2.4e-7 s."""
    assert got["total"] == pytest.approx(total, abs=1e-6)
    assert got["productive"] == pytest.approx(productive, abs=1e-6)
    assert got["goodput"] == pytest.approx(100.0 * productive / total)
    for name in BASE:
        if name != "DATA_LOADING_ASYNC":
            assert got["seconds"][name] == pytest.approx(buckets.get(name, 0.0), abs=1e-6), name
    partition = sum(v for k, v in got["seconds"].items() if k != "DATA_LOADING_ASYNC")
    assert productive + partition == pytest.approx(total)


def ref_seconds(ref):
    return {k: flat(v) for k, v in ref["badput_seconds"].items()}


# ------------------------------------------------------ rule 1: idle gap
def _two_attempts(second_end=True):
    x = [p(job_start_time=T0)] + steps(0, [T0 + i for i in range(5)]) + [p(job_end_time=T0 + 5)]
    x += [p(job_start_time=T0 + 105)] + steps(5, [T0 + 105 + i for i in range(5)])
    return x + ([p(job_end_time=T0 + 110)] if second_end else [])


def test_idle_time_between_attempts_is_not_job_time():
    payloads = _two_attempts()
    got = measured(ours(payloads, T0 + 200))
    assert_truth(got, total=10, productive=10)
    ref = reference_job_goodput(payloads, T0 + 200)
    # The reference counts the 100 s gap, and as productive step time.
    assert (ref["total_seconds"], ref["productive_seconds"]) == (110.0, 110.0)


def test_running_second_attempt_is_not_frozen_at_the_old_job_end():
    payloads = _two_attempts(second_end=False)[:-2]  # steps 5, 6 and 7 recorded
    got = measured(ours(payloads, T0 + 107.5))
    # 5 s of attempt 1; steps 5 and 6 (1 s each), the running step 7 (0.5 s,
    # OTHER until it ends, rule 3)
    assert_truth(got, total=7.5, productive=7, OTHER=0.5)
    ref = reference_job_goodput(payloads, T0 + 107.5)
    # Frozen at the old job end, which also "closes" step 7 (a -102 s span).
    assert (ref["total_seconds"], ref["productive_seconds"]) == (5.0, 5.0)


# ------------------------------------------ rule 2: crash, higher step
def test_crash_resumed_at_a_new_step_is_a_disruption():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0 + i for i in range(5)])
                + [p(job_start_time=T0 + 20)] + span("tpu_init", T0 + 20, T0 + 25)
                + steps(5, [T0 + 25 + i for i in range(5)]) + [p(job_end_time=T0 + 30)])
    got = measured(ours(payloads, T0 + 40))
    # crashed in step 4 (started T0+4); recovery until the new job start
    assert_truth(got, total=30, productive=9, TPU_INITIALIZATION=5,
                 INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION=16)
    assert got["disruptions"] == 1
    ref = reference_job_goodput(payloads, T0 + 40)
    assert ref["goodput_percent"] == 100.0 and ref["disruptions"] == 0
    assert ref["badput_seconds"]["TPU_INITIALIZATION"] == 5.0  # counted twice


# ------------------------------------------------ rule 3: sparse steps
def test_sparsely_logged_steps_are_productive():
    payloads = ([p(job_start_time=T0)] + [p(step_count=10 * i, step_start_time=T0 + 10 * i)
                                          for i in range(4)] + [p(job_end_time=T0 + 40)])
    assert_truth(measured(ours(payloads, T0 + 50)), total=40, productive=40)
    ref = reference_job_goodput(payloads, T0 + 50)
    assert (ref["productive_seconds"], ref["badput_seconds"]["OTHER"]) == (10.0, 30.0)


# ------------------------------------------------ rule 4: restart at 0
def test_restart_at_step_zero_wastes_the_crashed_segment():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0 + i for i in range(5)])
                + [p(job_start_time=T0 + 10)] + steps(0, [T0 + 10 + i for i in range(5)])
                + [p(job_end_time=T0 + 15)])
    assert_truth(measured(ours(payloads, T0 + 20)), total=15, productive=5,
                 WASTED_PROGRESS_FROM_DISRUPTION=4, INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION=6)
    ref = ref_seconds(reference_job_goodput(payloads, T0 + 20))
    assert (ref["WASTED_PROGRESS_FROM_DISRUPTION"], ref["OTHER"]) == (0.0, 4.0)


# -------------------------------------- rule 5: intervals inside steps
def test_custom_event_crossing_a_step_start_counts():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0 + t for t in (0, 1, 3, 5, 7, 9)])
                + custom(T0 + 4, T0 + 6) + [p(job_end_time=T0 + 11)])
    got = measured(ours(payloads, T0 + 20))
    assert_truth(got, total=11, productive=9, CUSTOM_BADPUT_EVENTS=2)
    assert got["percent"]["CUSTOM_BADPUT_EVENTS"] == {"EVAL": pytest.approx(200 / 11)}
    ref = reference_job_goodput(payloads, T0 + 20)
    assert ref["productive_seconds"] == 11.0 and ref["badput_seconds"]["CUSTOM_BADPUT_EVENTS"] == {}


def test_custom_event_in_the_last_step_counts():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0 + t for t in range(4)])
                + custom(T0 + 3.5, T0 + 4.5, "sdc_check") + [p(job_end_time=T0 + 5)])
    assert_truth(measured(ours(payloads, T0 + 9)), total=5, productive=4, CUSTOM_BADPUT_EVENTS=1)
    assert reference_job_goodput(payloads, T0 + 9)["productive_seconds"] == 5.0


def _prep_then_steps(entry):
    return ([p(job_start_time=T0), p(training_prep_start_time=T0), entry,
             p(training_prep_end_time=T0 + 10)]
            + steps(0, [T0 + 10 + i for i in range(5)]) + [p(job_end_time=T0 + 15)])


def test_checkpoint_save_outside_steps_is_counted_once():
    payloads = _prep_then_steps(orbax("save", 0, T0 + 2, 3.0))
    assert_truth(measured(ours(payloads, T0 + 20)), total=15, productive=5, TRAINING_PREP=7,
                 UNPRODUCTIVE_CHECKPOINT_SAVE_TIME=3)
    ref = reference_job_goodput(payloads, T0 + 20)
    # the save is subtracted from the steps and kept inside the prep as well
    assert ref["productive_seconds"] == 2.0 and ref["badput_seconds"]["TRAINING_PREP"] == 10.0


# ---------------------------------- rule 6: startup heuristic and saves
def test_startup_excess_is_measured_after_carving_out_saves():
    starts = [T0, T0 + 5, T0 + 8, T0 + 9, T0 + 10, T0 + 11]  # step 0: 1 s + 4 s compile
    payloads = ([p(job_start_time=T0)] + steps(0, starts)
                + [orbax("save", 1, T0 + 6, 2.0), p(job_end_time=T0 + 12)])
    assert_truth(measured(ours(payloads, T0 + 20)), total=12, productive=6, PROGRAM_STARTUP=4,
                 UNPRODUCTIVE_CHECKPOINT_SAVE_TIME=2)
    ref = reference_job_goodput(payloads, T0 + 20)
    assert ref["badput_seconds"]["PROGRAM_STARTUP"] == 3.5  # mean of 3, 1, 1, 1
    assert ref["productive_seconds"] == 6.5


def test_exclusion_inside_a_step_creates_no_startup_excess():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0 + 4 * i for i in range(6)])
                + [p(job_end_time=T0 + 24)])
    excl = [(dt.datetime.fromtimestamp(T0 + 5, UTC), dt.datetime.fromtimestamp(T0 + 7, UTC))]
    got = measured(ours(payloads, T0 + 30), excl)
    assert_truth(got, total=22, productive=22)
    ref = reference_job_goodput_with_exclusions(payloads, T0 + 30, excl)
    assert ref["badput_seconds"]["PROGRAM_STARTUP"] == 0.5
    assert ref["goodput_percent"] == pytest.approx(100 * 21.5 / 22)


# -------------------------------------------- rule 7: loads at restarts
@pytest.mark.parametrize("seed", range(3))
def test_loads_around_restarts_are_counted_once(seed):
    payloads, query_time, truth = FAMILIES["restart"](seed, loads_after_restart=True)
    got = measured(ours(payloads, query_time))
    b = truth["buckets"]
    assert_truth(got, truth["total_seconds"], truth["productive_seconds"],
                 **{k: flat(v) for k, v in b.items()})
    assert got["seconds"]["DATA_LOADING_ASYNC"] == pytest.approx(b["DATA_LOADING_ASYNC"])
    ref = ref_seconds(reference_job_goodput(payloads, query_time))
    assert ref["DATA_LOADING_SYNC"] > b["DATA_LOADING_SYNC"] + 0.01


@pytest.mark.parametrize("seed", range(3))
def test_exclusion_queries_keep_the_blocking_load_of_a_restart(seed):
    # The reference's exclusion path books the second attempt's blocking load
    # as asynchronous (its cumulative path does not): even with no exclusion.
    payloads, query_time, truth = FAMILIES["restart"](seed)
    got = measured(ours(payloads, query_time), exclusions=[])
    assert got["seconds"]["DATA_LOADING_SYNC"] == pytest.approx(
        truth["buckets"]["DATA_LOADING_SYNC"])
    assert got["productive"] == pytest.approx(truth["productive_seconds"])
    ref = ref_seconds(reference_job_goodput_with_exclusions(payloads, query_time, []))
    assert ref["DATA_LOADING_SYNC"] < truth["buckets"]["DATA_LOADING_SYNC"] - 0.01
    assert ref["OTHER"] > 0.01


# ---------------------------------------------- rule 8: overlap priority
def test_restore_inside_training_prep_is_counted_once():
    payloads = _prep_then_steps(orbax("restore", 0, T0 + 2, 4.0))
    got = measured(ours(payloads, T0 + 20))
    assert_truth(got, total=15, productive=5, TRAINING_PREP=6,
                 UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME=4)
    ref = reference_job_goodput(payloads, T0 + 20)
    assert ref["badput_seconds"]["TRAINING_PREP"] == 10.0
    assert ref["goodput_percent"] + sum(flat(v) for k, v in ref["badput_percent"].items()
                                        if k != "DATA_LOADING_ASYNC") > 100.0 + 1.0


def test_elastic_wait_inside_a_step_is_not_productive():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 9, T0 + 10])
                + [p(elastic_wait_event_type="slice_down", elastic_wait_start_time=T0 + 4),
                   p(elastic_wait_event_type="slice_down", elastic_wait_end_time=T0 + 9),
                   p(job_end_time=T0 + 11)])
    got = measured(ours(payloads, T0 + 20, cls=compat_elastic.ElasticGoodputCalculator))
    assert_truth(got, total=11, productive=6, ELASTIC_SLICE_DOWN=5)
    assert got["seconds"]["ELASTIC_SLICE_DOWN"] == 5.0
    with reference(payloads, T0 + 20, cls=ref_elastic.ElasticGoodputCalculator) as calc:
        goodput, breakdown, _ = calc.get_job_goodput(True)
    assert goodput == 100.0 and by_name(breakdown)["ELASTIC_SLICE_DOWN"] == pytest.approx(500 / 11)


# ---------------------------------------------- rule 9: percentages
def test_a_bucket_equal_to_the_whole_job_is_100_percent():
    payloads = [p(job_start_time=T0)] + span("tpu_init", T0, T0 + 10) + [p(job_end_time=T0 + 10)]
    got = measured(ours(payloads, T0 + 20))
    assert_truth(got, total=10, productive=0, TPU_INITIALIZATION=10)
    assert got["percent"]["TPU_INITIALIZATION"] == 100.0
    assert set(got["seconds"]) == set(BASE)  # every bucket, computed or not
    ref = reference_job_goodput(payloads, T0 + 20)
    assert ref["badput_percent"]["TPU_INITIALIZATION"] == 0.0
    assert len(ref["reported_buckets"]) < len(BASE)


# ---------------------------------------- rule 10: windows, exclusions
def test_interval_sees_the_history_before_the_window():
    payloads = [p(job_start_time=T0)]
    for i in range(10):
        payloads += steps(i, [T0 + i]) + span("data_loading", T0 + i, T0 + i + 0.25)
    payloads.append(p(job_end_time=T0 + 10))
    got = ours(payloads, T0 + 20).get_job_goodput_interval(T0 + 4.5, T0 + 15)
    goodput, breakdown, _, total, _ = got
    assert (goodput, total) == (100.0, 5.5)
    assert by_name(breakdown)["DATA_LOADING_SYNC"] == 0.0
    ref = reference_interval_goodput(payloads, T0 + 4.5, T0 + 15)
    assert ref["total_seconds"] == 5.0  # clipped to the first entry inside the window
    assert ref["badput_percent"]["DATA_LOADING_SYNC"] == 5.0  # an overlapped load as sync


def _prep_job():
    return ([p(job_start_time=T0)] + span("training_prep", T0, T0 + 4)
            + steps(0, [T0 + 4 + i for i in range(4)]) + [p(job_end_time=T0 + 8)])


def test_exclusions_in_any_time_zone_count():
    tz = dt.timezone(dt.timedelta(hours=2))
    excl = [(dt.datetime.fromtimestamp(T0 + 1, tz), dt.datetime.fromtimestamp(T0 + 3, tz))]
    calc = ours(_prep_job(), T0 + 10)
    assert calc.get_job_goodput_with_exclusions(excl)[3] == 2.0
    assert_truth(measured(calc, excl), total=6, productive=4, TRAINING_PREP=2)
    naive = [(dt.datetime.fromtimestamp(T0 + 1), dt.datetime.fromtimestamp(T0 + 3))]  # local
    assert ours(_prep_job(), T0 + 10).get_job_goodput_with_exclusions(naive)[3] == 2.0
    # (the harness converts exclusions to UTC: call the reference directly)
    for given in (excl, naive):
        with reference(_prep_job(), T0 + 10) as ref_calc:
            goodput, _, _, excluded = ref_calc.get_job_goodput_with_exclusions(given)
        assert (goodput, excluded) == (50.0, 0.0)  # silently skipped


def test_a_reversed_exclusion_is_an_error():
    excl = [(dt.datetime.fromtimestamp(T0 + 3, UTC), dt.datetime.fromtimestamp(T0 + 1, UTC))]
    with pytest.raises(ValueError):
        ours(_prep_job(), T0 + 10).get_job_goodput_with_exclusions(excl)
    assert reference_job_goodput_with_exclusions(_prep_job(), T0 + 10, excl)[
        "excluded_seconds"] == 0.0  # silently skipped


def test_details_report_the_excluded_time():
    excl = [(dt.datetime.fromtimestamp(T0 + 1, UTC), dt.datetime.fromtimestamp(T0 + 3, UTC))]
    got = measured(ours(_prep_job(), T0 + 10), excl)
    assert got["details"]["total_excluded_time"] == 2.0
    ref = reference_job_goodput_with_exclusions(_prep_job(), T0 + 10, excl)
    assert ref["excluded_seconds"] == 2.0
    assert ref["raw"]["get_job_goodput_details"]["total_excluded_time"] == 0.0


def test_excluded_time_is_the_measure_of_the_union():
    starts = [T0 + 2 * i for i in range(6)]
    payloads = ([p(job_start_time=T0)] + steps(0, starts)
                + span("data_loading", starts[3], starts[3] + 0.5) + [p(job_end_time=T0 + 12)])
    excl = [(dt.datetime.fromtimestamp(starts[3], UTC),
             dt.datetime.fromtimestamp(starts[3] + 1, UTC))]
    assert ours(payloads, T0 + 20).get_job_goodput_with_exclusions(excl)[3] == 1.0
    ref = reference_job_goodput_with_exclusions(payloads, T0 + 20, excl)
    assert ref["excluded_seconds"] == 1.5  # the step and the load overlapping it


@pytest.mark.parametrize("seed", range(3))
def test_exclusion_queries_keep_checkpoint_saves(seed):
    payloads, query_time, truth = FAMILIES["orbax_saves"](seed)
    got = measured(ours(payloads, query_time), exclusions=[])
    save = truth["buckets"]["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"]
    assert got["seconds"]["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] == pytest.approx(save)
    assert got["productive"] == pytest.approx(truth["productive_seconds"])
    ref = reference_job_goodput_with_exclusions(payloads, query_time, [])
    assert ref_seconds(ref)["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] == 0.0
    assert ref["productive_seconds"] == pytest.approx(truth["productive_seconds"] + save)


def test_interval_slice_efficiency_uses_the_slice_count_before_the_window():
    x = [p(job_start_time=T0), p(active_slices=3, total_slices=4, available_slices=3,
                                 elastic_slice_counts_timestamp=T0)]
    x += steps(0, [T0 + i for i in range(10)]) + [
        p(active_slices=4, total_slices=4, available_slices=4,
          elastic_slice_counts_timestamp=T0 + 6), p(job_end_time=T0 + 10)]
    lo, hi = (dt.datetime.fromtimestamp(t, UTC) for t in (T0 + 2, T0 + 10))
    calc = ours(x, T0 + 10, cls=compat_elastic.ElasticGoodputCalculator)
    got = calc.get_interval_metric_details(lo, hi)
    assert got["stepping_slice_efficiency"] == (4 * 0.75 + 4 * 1.0) / 8
    with reference(x, T0 + 10, cls=ref_elastic.ElasticGoodputCalculator) as ref_calc:
        theirs = ref_calc.get_interval_metric_details(lo, hi)
    assert theirs["stepping_slice_efficiency"] == 4 * 1.0 / 8  # the 3/4 before T0+6 lost


def test_interval_with_an_orbax_entry_without_a_first_time_value():
    entry = orbax("save", 2, T0 + 3, 0.5)
    entry["wait_for_prev_start_time"] = None  # Orbax writes None when it did not wait
    payloads = ([p(job_start_time=T0)] + steps(0, [T0, T0 + 1, T0 + 2, T0 + 3.5, T0 + 4.5])
                + [entry, p(job_end_time=T0 + 5.5)])
    calc = ours(payloads, T0 + 9)
    goodput, breakdown, _, total, _ = calc.get_job_goodput_interval(T0 - 1, T0 + 9)
    assert (goodput, total) == (100 * 5 / 5.5, 5.5)
    assert by_name(breakdown)["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] == pytest.approx(50 / 5.5)
    with pytest.raises(TypeError):
        reference_interval_goodput(payloads, T0 - 1, T0 + 9)


# ------------------------------------------ rule 11: steps reported
def test_max_productive_step_survives_a_restart():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0 + i for i in range(10)])
                + [p(job_start_time=T0 + 20)] + steps(5, [T0 + 21]))
    got = measured(ours(payloads, T0 + 21.5))
    assert got["max_step"] == 4 and got["disruptions"] == 1
    assert reference_job_goodput(payloads, T0 + 21.5)["max_productive_step"] == 0


# -------------------------------------------- rule 12: step statistics
def test_fast_steps_have_an_ideal_step_time():
    payloads = ([p(job_start_time=T0)] + steps(0, [T0 + 0.5 * i for i in range(10)])
                + [p(job_end_time=T0 + 5)])
    calc = ours(payloads, T0 + 9)
    assert calc.get_step_deviation() == {k: 0.0 for k in range(9)}
    calc.get_job_goodput()
    assert calc.get_job_goodput_details()["ideal_step_time"] == 0.5
    with reference(payloads, T0 + 9) as ref_calc:
        with pytest.raises(ValueError):
            ref_calc.get_step_deviation()


def test_sparse_steps_have_step_times():
    payloads = ([p(job_start_time=T0)] + [p(step_count=2 * i, step_start_time=T0 + 2 * i)
                                          for i in range(4)] + [p(job_end_time=T0 + 8)])
    assert ours(payloads, T0 + 9).get_step_deviation() == {0: 0.0, 2: 0.0, 4: 0.0}
    with reference(payloads, T0 + 9) as ref_calc:
        with pytest.raises(ValueError):
            ref_calc.get_step_deviation()


def test_deviations_after_an_exclusion_query_are_absolute():
    # step times 2, 1, 1.5, 1, 1.5, 1, 1.5 s: ideal 9.5/7 s, the 1 s steps are faster
    starts = [T0, T0 + 2, T0 + 3, T0 + 4.5, T0 + 5.5, T0 + 7, T0 + 8, T0 + 9.5]
    payloads = [p(job_start_time=T0)] + steps(0, starts) + [p(job_end_time=T0 + 10.5)]
    calc = ours(payloads, T0 + 20)
    calc.get_job_goodput_with_exclusions([])
    mine = calc.get_job_goodput_details()["step_time_deviation"]
    assert min(mine.values()) >= 0 and mine == calc.get_step_deviation()
    ref = reference_job_goodput_with_exclusions(payloads, T0 + 20, [])
    assert min(ref["raw"]["get_job_goodput_details"]["step_time_deviation"].values()) < 0


def test_a_new_configured_ideal_step_time_is_used():
    starts = [T0, T0 + 1, T0 + 2.5, T0 + 3.5, T0 + 5]  # step times 1, 1.5, 1, 1.5 s
    payloads = [p(job_start_time=T0)] + steps(0, starts) + [p(job_end_time=T0 + 6)]
    calc = ours(payloads, T0 + 9)
    calc.get_step_deviation()
    assert calc.get_step_deviation(2.0) == {0: 1.0, 1: 0.5, 2: 1.0, 3: 0.5}
    with reference(payloads, T0 + 9) as ref_calc:
        first = ref_calc.get_step_deviation()
        assert ref_calc.get_step_deviation(2.0) == first != {0: 1.0, 1: 0.5, 2: 1.0, 3: 0.5}


# -------------------------------------------- events.md: number types
def test_integer_valued_times_lose_no_bucket():
    t0 = int(T0)
    payloads = ([p(job_start_time=t0)] + span("tpu_init", t0, t0 + 1)
                + span("data_loading", t0 + 1, t0 + 3) + steps(0, [t0 + 3 + i for i in range(5)])
                + [p(job_end_time=t0 + 8)])
    # A custom cloud_logger may return ints (Cloud Logging returns doubles).
    with unittest.mock.patch.object(reference_harness, "_as_logged", lambda v: v):
        assert_truth(measured(ours(payloads, t0 + 9)), total=8, productive=5,
                     TPU_INITIALIZATION=1, DATA_LOADING_SYNC=2)
        ref = ref_seconds(reference_job_goodput(payloads, t0 + 9))
    assert (ref["DATA_LOADING_SYNC"], ref["OTHER"]) == (2.0, 2.0)  # counted twice


# ------------------------------------------------- the reference's cache
def test_a_stale_cache_file_is_not_used(tmp_path):
    old = [p(job_start_time=T0 - 1000), p(job_end_time=T0 - 990)]
    (tmp_path / f"{JOB}_timeline.jsonl").write_text("".join(json.dumps(x) + "\n" for x in old))
    payloads = [p(job_start_time=T0)] + steps(0, [T0 + i for i in range(4)]) + [
        p(job_end_time=T0 + 4)]
    fake = fake_logger(payloads, T0 + 9)
    calc = ours(payloads, T0 + 9, logger=fake)
    assert calc.get_job_goodput() == (100.0, {}, 3)
    from ml_goodput_measurement.src import goodput as ref_goodput

    ref_fake = fake_logger(payloads, T0 + 9)
    with reference_harness.frozen_reference_clock(T0 + 9):
        ref_calc = ref_goodput.GoodputCalculator(JOB, "log", cloud_logger=ref_fake,
                                                 cache_dir=str(tmp_path))
        assert ref_calc.get_job_goodput()[0] == 0.0
    assert ref_fake.reads == []


# ------------------------------------------------------ rule 12: completion
def test_step_times_come_from_sync_points_under_asynchronous_dispatch():
    """A JAX loop with ``sync_every=4``: four steps dispatched 0.25 s apart, then
    the loop waits for the fourth one's result, done 8 s after the group's first
    dispatch (our ``step_end_time``, which the reference does not read). The steps
    took 2 s each (8 s / 4)."""
    from tests.support.reference_harness import reference_step_deviation

    payloads, t = [p(job_start_time=T0)], T0
    for group in range(5):
        payloads += steps(4 * group, [t + 0.25 * i for i in range(4)])
        t += 8.0
        payloads.append(p(step_count=4 * group + 3, step_end_time=t))
    payloads.append(p(job_end_time=t))
    calc = ours(payloads, t + 1)
    assert calc.get_step_deviation() == {k: pytest.approx(0.0) for k in range(20)}
    calc.get_job_goodput()
    assert calc.get_job_goodput_details()["ideal_step_time"] == pytest.approx(2.0)
    ref = reference_step_deviation(payloads, t + 1)
    # The reference times steps between starts: 0.25 s dispatches (which it drops, being
    # under 1 s) and the 7.25 s that holds each wait: its ideal step time is 7.25 s.
    assert ref["ideal_step_time"] == pytest.approx(7.25)


# ------------------------------------------------------ rule 10: rolling windows
def test_a_finished_runs_rolling_window_ends_where_it_ended():
    """A run that ended (10 steps of 1 s, a job end at 10 s) read ten minutes
    later: its last minute is the window ending at its end (100 %), as
    ``goodput report --window 60s`` says; the reference's rolling uploader asks
    for the minute before now, which holds no entry."""
    from goodput_core.queries.calculator import Calculator

    payloads = [p(job_start_time=T0)] + steps(0, [T0 + i for i in range(10)])
    payloads.append(p(job_end_time=T0 + 10))
    now = T0 + 600
    calc = Calculator(clock=lambda: now)
    calc.add_payloads(payloads)
    (last_minute,) = calc.rolling([60])
    assert last_minute.window == (T0, T0 + 10)  # [end - 60, end], clipped to the lifetime
    assert (last_minute.total_seconds, last_minute.goodput) == (10.0, 100.0)
    with pytest.raises(ValueError):  # "no entry in the window"
        reference_interval_goodput(payloads, now - 60, now)
