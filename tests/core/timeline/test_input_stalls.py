"""Input stalls (semantics.md rule 7): stall spans are carved out of step
spans as DATA_LOADING_SYNC, the rest of a load stays DATA_LOADING_ASYNC, and
readers that do not know the kind (the reference) see ordinary data loading.
Every expected number is derived by hand in the comments."""

from __future__ import annotations

import pytest

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.events import Kind as K, from_payload, to_payload
from tests.support.compat_calculator import T0, p, span, steps
from tests.support.event_builders import RUN as R, calc_of, ev
from tests.support.reference_harness import reference_job_goodput


def starved_job(with_stalls=True):
    """Job [0, 10): a blocking load [0, 2) before the first step; steps 0..3
    start at 2, 4, 6, 8 (the last one closed by the job end at 10). Inside each
    step span [t, t+2) a load [t+0.5, t+1.5) of which the device sat idle for
    [t+1, t+1.5) (an input stall)."""
    events = [ev(K.JOB_START, 0), ev(K.DATA_LOADING_START, 0), ev(K.DATA_LOADING_END, 2)]
    for k, t in enumerate((2, 4, 6, 8)):
        events += [ev(K.STEP_START, t, k), ev(K.DATA_LOADING_START, t + 0.5),
                   ev(K.DATA_LOADING_END, t + 1.5)]
        if with_stalls:
            events += [ev(K.INPUT_STALL_START, t + 1), ev(K.INPUT_STALL_END, t + 1.5)]
    return events + [ev(K.JOB_END, 10)]


def test_stall_spans_are_sync_loading_and_the_rest_of_the_load_is_async():
    r = calc_of(starved_job()).cumulative()
    # sync: the blocking load 2 s + four stalls of 0.5 s; async: the four
    # loads minus their stalls, 4 x 0.5 s; productive: 8 s of steps - 2 s.
    # Startup heuristic: every span keeps 1.5 s productive: no excess.
    assert r.total_seconds == 10
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(4.0)
    assert r.data_loading_async_seconds == pytest.approx(2.0)
    assert r.productive_seconds == pytest.approx(6.0)
    assert r.badput_seconds[B.PROGRAM_STARTUP] == 0
    assert r.skipped == {}


def test_without_stall_spans_the_positional_rule_applies():
    r = calc_of(starved_job(with_stalls=False)).cumulative()
    # only the load before the first step blocks; the four inside are overlapped
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0)
    assert r.data_loading_async_seconds == pytest.approx(4.0)
    assert r.productive_seconds == pytest.approx(8.0)


def test_the_timeline_shows_each_stall_where_it_happened():
    spans = calc_of(starved_job()).spans(2, 4)
    # step 0's span: productive [2, 3), the stall [3, 3.5), productive [3.5, 4)
    assert spans == [(2.0, 3.0, "PRODUCTIVE"), (3.0, 3.5, "DATA_LOADING_SYNC"),
                     (3.5, 4.0, "PRODUCTIVE")]


def test_a_stall_across_a_step_start_is_counted_whole():
    # steps at 0, 2, 4 (job end 6); a stall [1.5, 2.5) crosses the start of step 1
    events = [ev(K.JOB_START, 0), *[ev(K.STEP_START, t, k) for k, t in enumerate((0, 2, 4))],
              ev(K.INPUT_STALL_START, 1.5), ev(K.INPUT_STALL_END, 2.5), ev(K.JOB_END, 6)]
    r = calc_of(events).cumulative()
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(1.0)
    # spans keep 1.5, 1.5 and 2 (last, closed by the job end: not in the mean)
    assert r.productive_seconds == pytest.approx(5.0)


def test_a_stall_inside_a_blocking_load_is_counted_once():
    # a load [0, 2) before the first step (sync) holds a stall [1, 2): still 2 s
    events = [ev(K.JOB_START, 0), ev(K.DATA_LOADING_START, 0), ev(K.INPUT_STALL_START, 1),
              ev(K.DATA_LOADING_END, 2), ev(K.INPUT_STALL_END, 2), ev(K.STEP_START, 2, 0),
              ev(K.JOB_END, 3)]
    r = calc_of(events).cumulative()
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0)
    assert r.productive_seconds == pytest.approx(1.0)
    assert r.data_loading_async_seconds == 0


def test_higher_priority_buckets_win_over_a_stall():
    # steps at 0, 4, 8 (job end 12); a stall [1, 3) of which [2, 3) lies in an
    # eval; steps 1.. redone after a restart at step 1 in a second attempt:
    # the stall in step 0's span stays 1 s sync, the eval 1 s custom.
    events = [ev(K.JOB_START, 0), *[ev(K.STEP_START, t, k) for k, t in enumerate((0, 4, 8))],
              ev(K.INPUT_STALL_START, 1), ev(K.INPUT_STALL_END, 3),
              ev(K.CUSTOM_BADPUT_START, 2, custom_badput_event_type="eval"),
              ev(K.CUSTOM_BADPUT_END, 3, custom_badput_event_type="eval"),
              # a stall inside step 1's span, which is wasted by the restart
              ev(K.INPUT_STALL_START, 5), ev(K.INPUT_STALL_END, 6),
              ev(K.JOB_START, 20), ev(K.STEP_START, 20, 1), ev(K.STEP_END, 21, 1),
              ev(K.JOB_END, 21)]
    r = calc_of(events).cumulative()
    assert r.custom_badput_seconds == {"EVAL": pytest.approx(1.0)}
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(1.0)
    # the crashed segment's spans of steps >= 1: [4, 8) wasted whole (the
    # stall inside it too); recovery from the last step's start 8 to 20
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(4.0)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(12.0)
    assert r.productive_seconds == pytest.approx(2.0 + 1.0)
    assert r.disruptions == 1


def test_incremental_updates_agree_with_a_cold_calculation():
    events = starved_job()
    warm = Calculator(clock=lambda: 1000.0)
    for i, e in enumerate(events):  # one event at a time, querying in between:
        warm.add([e])               # a stall start waits for its end across updates
        if i % 3 == 0:
            warm.cumulative()
    want = calc_of(events).cumulative()
    got = warm.cumulative()
    assert got.badput_seconds == pytest.approx(want.badput_seconds)
    assert got.productive_seconds == pytest.approx(want.productive_seconds)
    assert got.data_loading_async_seconds == pytest.approx(want.data_loading_async_seconds)


def test_an_unmatched_stall_end_is_skipped_and_counted():
    events = [ev(K.JOB_START, 0), ev(K.STEP_START, 0, 0), ev(K.INPUT_STALL_END, 0.5),
              ev(K.JOB_END, 1)]
    r = calc_of(events).cumulative()
    assert r.skipped == {"unmatched_end": 1}
    assert r.productive_seconds == 1


# ------------------------------------------------- the wire format and the reference
def test_stall_payloads_round_trip():
    for kind, key in ((K.INPUT_STALL_START, "input_stall_start_time"),
                      (K.INPUT_STALL_END, "input_stall_end_time")):
        payload = to_payload(ev(kind, 12.5))
        assert payload == {"job_name": R, key: 12.5}
        assert from_payload(payload) == ev(kind, 12.5)


def _starved_payloads(with_stalls):
    """The starved job as reference payloads, from T0 (see starved_job)."""
    out = [p(job_start_time=T0), *span("data_loading", T0, T0 + 2)]
    for k, t in enumerate((2, 4, 6, 8)):
        out += steps(k, [T0 + t]) + span("data_loading", T0 + t + 0.5, T0 + t + 1.5)
        if with_stalls:
            out += span("input_stall", T0 + t + 1, T0 + t + 1.5)
    return out + [p(job_end_time=T0 + 10)]


def test_the_reference_sees_ordinary_data_loading():
    """The reference ignores the stall kind: its numbers are those of the same
    log without stalls (the loads inside steps count as async)."""
    with_stalls = reference_job_goodput(_starved_payloads(True), T0 + 20)
    without = reference_job_goodput(_starved_payloads(False), T0 + 20)
    for key in ("goodput_percent", "productive_seconds", "total_seconds", "badput_seconds",
                "max_productive_step", "disruptions"):
        assert with_stalls[key] == without[key], key
    assert with_stalls["badput_seconds"]["DATA_LOADING_SYNC"] == pytest.approx(2.0)
    assert with_stalls["badput_seconds"]["DATA_LOADING_ASYNC"] == pytest.approx(4.0)


def test_we_count_the_stalls_the_reference_cannot_see():
    """docs/differences.md: the same payloads, read by our calculator."""
    c = Calculator(R, clock=lambda: T0 + 20)
    c.add_payloads({**x, "job_name": R} for x in _starved_payloads(True))
    r = c.cumulative()
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(4.0)
    assert r.data_loading_async_seconds == pytest.approx(2.0)
    assert r.productive_seconds == pytest.approx(6.0)


def test_rule7_example_of_docs_semantics():
    """docs/semantics.md, rule 7's example: loads [1, 4) and [13, 16), steps at
    4, 14, 24, job end 34, and an input stall [13, 15) inside the second load."""
    base = [ev(K.JOB_START, 0), ev(K.DATA_LOADING_START, 1), ev(K.DATA_LOADING_END, 4),
            *[ev(K.STEP_START, t, k) for k, t in enumerate((4, 14, 24))],
            ev(K.DATA_LOADING_START, 13), ev(K.DATA_LOADING_END, 16), ev(K.JOB_END, 34)]
    r = calc_of(base).cumulative()
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == 3
    assert r.data_loading_async_seconds == 3 and r.productive_seconds == 30
    stalled = base + [ev(K.INPUT_STALL_START, 13), ev(K.INPUT_STALL_END, 15)]
    r = calc_of(stalled).cumulative()
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == 3 + 2
    assert r.data_loading_async_seconds == 1 and r.productive_seconds == 28
