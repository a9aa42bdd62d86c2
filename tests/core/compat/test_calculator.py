"""Differential tests: our compat GoodputCalculator against the reference's.

On the five compatibility families (semantics.md, "Compatibility contract")
both libraries must agree to 1e-6 relative on goodput, productive and total
seconds and every bucket, through the public compat API: our calculator
reading a fake Cloud Logging reader, and reading our memory store written by
our compat recorder. Interval queries are compared where the reference's
interval semantics agree with ours (a window over the whole job, and - in
the Orbax family, whose first step has no startup excess - windows from
before the job to a step start); exclusions where the reference's exclusion
path agrees with its own cumulative path (an exclusion inside training
prep; not the Orbax family, whose saves that path ignores, nor the restart
family, whose second blocking load it books as asynchronous: see
compat/test_differences.py). Shapes and types of every return value are
compared on the same input. Where the numbers differ on purpose:
docs/differences.md and tests/core/compat/test_differences.py.
"""

import datetime as dt
import enum

import pytest


from goodput_core.timeline.buckets import BadputType  # noqa: E402
from goodput_core.compat import goodput as compat  # noqa: E402
from goodput_core.compat import goodput_elastic as compat_elastic  # noqa: E402
from goodput_core.compat.goodput_utils import GoodputType  # noqa: E402
from goodput_core.events import from_payload  # noqa: E402
from goodput_core.stores import open_store  # noqa: E402
from ml_goodput_measurement.src import goodput_elastic as ref_elastic  # noqa: E402
from tests.support.compat_calculator import (  # noqa: E402
    T0, UTC, by_name, fake_logger, ours, ours_via_recorder, p, reference, span, steps)
from tests.support.reference_families import FAMILIES  # noqa: E402
from tests.support.reference_harness import (  # noqa: E402
    REFERENCE_BUCKETS, reference_interval_goodput, reference_job_goodput,
    reference_job_goodput_with_exclusions, reference_step_deviation)

BASE = REFERENCE_BUCKETS[:11]
CASES = [(name, seed) for name in FAMILIES for seed in range(4)]
REL = 1e-6


def close(ours_value, theirs, what=""):
    """Equal within 1e-6 relative (1e-9 absolute near zero), dicts key by key."""
    if isinstance(theirs, list):
        assert len(ours_value) == len(theirs), what
        for x, y in zip(ours_value, theirs):
            close(x, y, what)
        return
    if isinstance(theirs, dict) or isinstance(ours_value, dict):
        assert set(ours_value) == set(theirs), what
        for k in theirs:
            close(ours_value[k], theirs[k], f"{what}[{k}]")
        return
    assert ours_value == pytest.approx(theirs, rel=REL, abs=1e-9), what


def first_prep(payloads):
    a = next(x["training_prep_start_time"] for x in payloads if "training_prep_start_time" in x)
    b = next(x["training_prep_end_time"] for x in payloads if "training_prep_end_time" in x)
    return a, b


# ------------------------------------------------------------- cumulative
@pytest.mark.parametrize("name,seed", CASES)
def test_cumulative_agrees_with_the_reference_and_the_truth(name, seed):
    payloads, query_time, truth = FAMILIES[name](seed)
    ref = reference_job_goodput(payloads, query_time)
    for source, calc in (("cloud_logger", ours(payloads, query_time)),
                         ("recorder+store", ours_via_recorder(payloads, query_time))):
        what = f"{name}/{seed}/{source}"
        goodput, breakdown, max_step = calc.get_job_goodput(include_badput_breakdown=True)
        details = calc.get_job_goodput_details()
        close(goodput, ref["goodput_percent"], what)
        percent, seconds = by_name(breakdown), by_name(details["badput_time"])
        for bucket in BASE:
            close(percent[bucket], ref["badput_percent"][bucket], f"{what} {bucket} %")
            close(seconds[bucket], ref["badput_seconds"][bucket], f"{what} {bucket} s")
            close(seconds[bucket], truth["buckets"][bucket], f"{what} {bucket} truth")
        productive = details["goodput_time"][GoodputType.TOTAL]
        close(productive, ref["productive_seconds"], what)
        close(productive, truth["productive_seconds"], what)
        close(details["total_elapsed_time"], ref["total_seconds"], what)
        close(details["total_elapsed_time"], truth["total_seconds"], what)
        assert max_step == details["max_productive_step"] == ref["max_productive_step"]
        assert details["disruption_count"] == ref["disruptions"] == truth["disruptions"]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_step_deviation_agrees_when_every_step_takes_a_second_or_more(name):
    # The reference drops steps under 1 s from its ideal step time (rule 12).
    for seed in range(3):
        payloads, query_time, _ = FAMILIES[name](seed, step_time=(1.0, 3.0))
        ref = reference_step_deviation(payloads, query_time)
        calc = ours(payloads, query_time)
        close(calc.get_step_deviation(), ref["step_deviations"], f"{name}/{seed}")
        calc.get_job_goodput()
        details = calc.get_job_goodput_details()
        close(details["ideal_step_time"], ref["ideal_step_time"])
        close(details["step_time_deviation"], ref["step_deviations"])
        configured = reference_step_deviation(payloads, query_time, configured_ideal_step_time=2.0)
        close(calc.get_step_deviation(2.0), configured["step_deviations"])


# --------------------------------------------------------------- intervals
@pytest.mark.parametrize("name,seed", CASES)
def test_interval_over_the_whole_job_agrees(name, seed):
    payloads, query_time, _ = FAMILIES[name](seed)
    ref = reference_interval_goodput(payloads, T0 - 5, query_time)
    calc = ours(payloads, query_time)
    start, end = dt.datetime.fromtimestamp(T0 - 5, UTC), dt.datetime.fromtimestamp(query_time, UTC)
    goodput, breakdown, max_step, total, disruptions = calc.get_job_goodput_interval(start, end)
    close(goodput, ref["goodput_percent"])
    percent = by_name(breakdown)
    for bucket in BASE:
        close(percent[bucket], ref["badput_percent"][bucket], bucket)
    close(total, ref["total_seconds"])
    assert (max_step, disruptions) == (ref["max_productive_step"], ref["disruptions"])
    details = calc.get_interval_metric_details(start, end)
    close(details["interval_goodput"][GoodputType.TOTAL], ref["goodput_percent"])
    assert details["interval_size"] == int(query_time - (T0 - 5))


@pytest.mark.parametrize("seed", range(4))
def test_interval_ending_at_a_step_start_agrees_without_startup_excess(seed):
    # From before the job to a step start: the reference clips the window to
    # that step's entry, as ours ends there; with no startup excess (the Orbax
    # family) the heuristic does not depend on steps after the window.
    payloads, query_time, _ = FAMILIES["orbax_saves"](seed)
    starts = [x["step_start_time"] for x in payloads if "step_start_time" in x]
    calc = ours(payloads, query_time)
    for k in (2, 5, 6, 11, 17):
        ref = reference_interval_goodput(payloads, T0 - 5, starts[k])
        goodput, breakdown, max_step, total, disruptions = calc.get_job_goodput_interval(
            T0 - 5, starts[k])
        close(goodput, ref["goodput_percent"], k)
        percent = by_name(breakdown)
        for bucket in BASE:
            close(percent[bucket], ref["badput_percent"][bucket], f"{k} {bucket}")
        close(total, ref["total_seconds"])
        assert (max_step, disruptions) == (ref["max_productive_step"], ref["disruptions"])


# -------------------------------------------------------------- exclusions
@pytest.mark.parametrize("name", ["clean", "compile_heavy", "custom_events"])
def test_exclusion_inside_training_prep_agrees(name):
    for seed in range(3):
        payloads, query_time, truth = FAMILIES[name](seed)
        a, b = first_prep(payloads)
        # 1/4 s inside both ends: exact in datetime's microseconds
        excl = [(dt.datetime.fromtimestamp(a + 0.25, UTC),
                 dt.datetime.fromtimestamp(b - 0.25, UTC))]
        ref = reference_job_goodput_with_exclusions(payloads, query_time, excl)
        calc = ours(payloads, query_time)
        goodput, breakdown, max_step, excluded = calc.get_job_goodput_with_exclusions(
            excl, include_badput_breakdown=True)
        close(goodput, ref["goodput_percent"], f"{name}/{seed}")
        percent = by_name(breakdown)
        for bucket in BASE:
            close(percent[bucket], ref["badput_percent"][bucket], f"{name}/{seed} {bucket}")
        close(excluded, ref["excluded_seconds"])
        close(excluded, b - a - 0.5)
        assert max_step == ref["max_productive_step"] == truth["max_productive_step"]
        details = calc.get_job_goodput_details()
        close(details["total_elapsed_time"], ref["total_seconds"])
        close(details["goodput_time"][GoodputType.TOTAL], ref["productive_seconds"])


# ------------------------------------------------------------------ shapes
def shape(value, key=None):
    """A comparable description of a return value's structure and types."""
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.name)
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, tuple):
        return ("tuple", tuple(shape(v) for v in value))
    if isinstance(value, dict):
        if value and all(type(k) is int for k in value):  # {step: deviation}
            return ("steps", frozenset(shape(v) for v in value.values()))
        return ("dict", frozenset((shape(k) if not isinstance(k, str) else k, shape(v, k))
                                  for k, v in value.items()))
    return type(value).__name__


def _all_calls(calc, payloads, query_time):
    """Every compat method on one input, in the order a monitor would call them."""
    starts = [x["step_start_time"] for x in payloads if "step_start_time" in x]
    a, b = first_prep(payloads)
    lo, hi = dt.datetime.fromtimestamp(T0 - 5, UTC), dt.datetime.fromtimestamp(starts[9], UTC)
    out = {"details_before": calc.get_job_goodput_details(),
           "goodput": calc.get_job_goodput(),
           "goodput_breakdown": calc.get_job_goodput(include_badput_breakdown=True),
           "details": calc.get_job_goodput_details(),
           "interval": calc.get_job_goodput_interval(lo, hi),
           "interval_details": calc.get_interval_metric_details(lo, hi),
           "interval_details_failed": calc.get_interval_metric_details(
               lo - dt.timedelta(days=9), lo - dt.timedelta(days=8)),
           "deviation": calc.get_step_deviation(),
           "deviation_configured": calc.get_step_deviation(1.25)}
    excl = [(dt.datetime.fromtimestamp(a, UTC), dt.datetime.fromtimestamp((a + b) / 2, UTC))]
    out["exclusions"] = calc.get_job_goodput_with_exclusions(excl)
    out["exclusions_breakdown"] = calc.get_job_goodput_with_exclusions(excl, True)
    return out


@pytest.mark.parametrize("name", ["custom_events", "restart", "orbax_saves"])
def test_every_method_returns_the_reference_shape(name):
    payloads, query_time, _ = FAMILIES[name](0, step_time=(1.0, 2.0))
    with reference(payloads, query_time) as ref_calc:
        theirs = _all_calls(ref_calc, payloads, query_time)
    mine = _all_calls(ours(payloads, query_time), payloads, query_time)
    assert set(mine) == set(theirs)
    for call in theirs:
        if call == "details":
            continue
        assert shape(mine[call]) == shape(theirs[call]), call
    # Details: the same keys and types, but our seconds dict has every bucket
    # (the reference's only those it computed: semantics.md rule 9).
    d_mine, d_theirs = mine["details"], theirs["details"]
    assert set(d_mine) == set(d_theirs)
    for key in d_theirs:
        if key != "badput_time":
            assert shape(d_mine[key]) == shape(d_theirs[key]), key
    names = {k.name for k in d_theirs["badput_time"]}
    assert names <= {k.name for k in d_mine["badput_time"]} == set(BASE)
    assert all(shape(d_mine["badput_time"][BadputType[n]]) == shape(v)
               for n, v in by_name(d_theirs["badput_time"]).items())


def test_errors_are_the_references():
    empty = [p(step_count=0, step_start_time=T0)]  # no job start: no total time
    with reference(empty, T0 + 10) as ref_calc:
        with pytest.raises(ValueError):
            ref_calc.get_job_goodput()
        with pytest.raises(ValueError):
            ref_calc.get_step_deviation()
    calc = ours(empty, T0 + 10)
    with pytest.raises(ValueError):
        calc.get_job_goodput()
    with pytest.raises(ValueError):
        calc.get_step_deviation()
    with pytest.raises(ValueError):
        calc.get_job_goodput_interval(T0 + 5, T0)
    assert calc.get_job_goodput_with_exclusions([]) == (0.0, {}, 0, 0.0)


# ----------------------------------------------------------------- reading
def test_cloud_logger_is_read_incrementally_with_its_cursor():
    payloads, query_time, _ = FAMILIES["restart"](1)
    now = [T0]
    fake = fake_logger([], query_time, job=payloads[0]["job_name"])
    fake._clock = lambda: now[0]  # pylint: disable=protected-access
    calc = compat.GoodputCalculator(fake.job_name, "log", cloud_logger=fake, clock=lambda: now[0])
    half = len(payloads) // 2
    for x in payloads[:half]:
        fake.append(x)
    now[0] = max(x.get("step_start_time", 0.0) for x in payloads[:half]) + 0.5
    calc.get_job_goodput()
    for x in payloads[half:]:
        fake.append(x)
    now[0] = query_time
    goodput, breakdown, step = calc.get_job_goodput(True)
    fresh = ours(payloads, query_time).get_job_goodput(True)
    assert (goodput, breakdown, step) == fresh
    assert len(fake.reads) == 2
    # the first read has no bounds (as the reference's); later ones start at the cursor
    assert fake.reads[0] == {"start_time": None, "end_time": None, "last_entry_info": None}
    cursor = fake.reads[1]["last_entry_info"]
    assert cursor is not None and fake.reads[1]["start_time"] == cursor[0]
    assert fake.reads[1]["end_time"] is None
    # A query before the cursor still reads (what is new: nothing) and changes nothing.
    now[0] = T0
    with pytest.raises(ValueError):
        calc.get_job_goodput_interval(T0 + 1e6, T0 + 2e6)
    assert len(fake.reads) == 3 and fake.reads[2]["last_entry_info"][0] > cursor[0]
    now[0] = query_time
    assert calc.get_job_goodput(True) == fresh


def test_store_is_read_incrementally():
    payloads, query_time, _ = FAMILIES["custom_events"](2)
    store = open_store("memory://compat-calculator-incremental")
    calc = compat.GoodputCalculator(payloads[0]["job_name"], "log", store=store,
                                    clock=lambda: query_time)
    records = [from_payload(x) for x in payloads]
    store.append(records[:40])
    first = calc.get_job_goodput()
    store.append(records[40:])
    assert calc.get_job_goodput(True) == ours(payloads, query_time).get_job_goodput(True)
    assert first != calc.get_job_goodput()
    assert calc.sync_to_gcs() is None


def test_constructor_has_the_references_positional_order(tmp_path):
    fake = fake_logger([], T0)
    calc = compat.GoodputCalculator("j", "log", fake, True, dt.timedelta(days=1),
                                    None, str(tmp_path))
    assert (calc.job_name, calc.logger_name, calc.using_pathways) == ("j", "log", True)
    assert list(tmp_path.iterdir()) == []  # no cache files


# ----------------------------------------------------------------- elastic
def _elastic_run():
    """Init and prep, a slice-down wait, a re-initialisation that re-runs init
    and prep, then 10 steps of 1 s and a job end; slice counts recorded."""
    x = [p(job_start_time=T0),
         p(active_slices=4, total_slices=4, available_slices=4,
           elastic_slice_counts_timestamp=T0)]
    x += span("tpu_init", T0, T0 + 2) + span("training_prep", T0 + 2, T0 + 5)
    x += [p(active_slices=3, total_slices=4, available_slices=3,
            elastic_slice_counts_timestamp=T0 + 5),
          p(elastic_wait_event_type="slice_down", elastic_wait_start_time=T0 + 5),
          p(elastic_wait_event_type="slice_down", elastic_wait_end_time=T0 + 9),
          p(elastic_reinit_start_time=T0 + 9)]
    x += span("tpu_init", T0 + 9, T0 + 11) + span("training_prep", T0 + 11, T0 + 12)
    x += [p(elastic_reinit_end_time=T0 + 13),
          p(active_slices=4, total_slices=4, available_slices=4,
            elastic_slice_counts_timestamp=T0 + 13)]
    x += steps(0, [T0 + 13 + i for i in range(10)]) + [p(job_end_time=T0 + 23)]
    return x, T0 + 30


def test_elastic_calculator_agrees_with_the_reference():
    payloads, query_time = _elastic_run()
    with reference(payloads, query_time, cls=ref_elastic.ElasticGoodputCalculator) as ref_calc:
        theirs = ref_calc.get_job_goodput(True)
        t_details = ref_calc.get_job_goodput_details()
        t_interval = ref_calc.get_interval_metric_details(
            dt.datetime.fromtimestamp(T0 - 1, UTC), dt.datetime.fromtimestamp(query_time, UTC))
    for calc in (ours(payloads, query_time, cls=compat_elastic.ElasticGoodputCalculator),
                 ours_via_recorder(payloads, query_time,
                                   cls=compat_elastic.ElasticGoodputCalculator)):
        mine = calc.get_job_goodput(True)
        close(mine[0], theirs[0])
        assert mine[2] == theirs[2] == 9
        close(by_name(mine[1]), by_name(theirs[1]))
        assert shape(mine) == shape(theirs)
        details = calc.get_job_goodput_details()
        assert details["stepping_slice_efficiency"] == pytest.approx(
            t_details["stepping_slice_efficiency"]) == (5 + 8 * 0.75 + 10) / 23
        assert details["available_slice_efficiency"] == pytest.approx(
            t_details["available_slice_efficiency"])
        interval = calc.get_interval_metric_details(T0 - 1, query_time)
        assert set(interval) == set(t_interval)
        # (each library's own GoodputType.TOTAL is the only key)
        close(list(interval["interval_goodput"].values()),
              list(t_interval["interval_goodput"].values()))
    # seconds: reinit 4 s; TPU init 2 + 2 - 2 (inside reinit) s; prep 3 s
    seconds = by_name(details["badput_time"])
    assert (seconds["ELASTIC_REINITIALIZATION"], seconds["ELASTIC_SLICE_DOWN"],
            seconds["TPU_INITIALIZATION"], seconds["TRAINING_PREP"]) == (4.0, 4.0, 2.0, 3.0)


def test_base_calculator_reports_elastic_buckets_only_when_recorded():
    payloads, query_time = _elastic_run()
    breakdown = ours(payloads, query_time).get_job_goodput(True)[1]
    assert BadputType.ELASTIC_REINITIALIZATION in breakdown
    clean, query_time, _ = FAMILIES["clean"](0)
    breakdown = ours(clean, query_time).get_job_goodput(True)[1]
    assert {k.name for k in breakdown} == set(BASE)
    breakdown = ours(clean, query_time, cls=compat_elastic.ElasticGoodputCalculator
                     ).get_job_goodput(True)[1]
    assert len(breakdown) == 14
