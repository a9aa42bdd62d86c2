"""A disruption before the first step is a disruption (semantics.md rule 2):
a preemption during initialisation or compilation makes the next job start a
restart, the gap to it is infrastructure recovery, and nothing is wasted.
Every expected number is derived by hand in the comments."""

from __future__ import annotations

import pytest

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.events import Kind as K
from tests.support.event_builders import calc_of, ev

REC = B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION


def preempted_in_compile(disruption=True):
    """Attempt 1: init [0, 5), prep [5, 8), a compile started at 8 and never
    finished, SIGTERM at 9 (recorded when ``disruption``). Attempt 2 at 20:
    init [20, 22), steps 0, 1, 2 at 22, 23, 24, job end 25."""
    first = [ev(K.JOB_START, 0), ev(K.TPU_INIT_START, 0), ev(K.TPU_INIT_END, 5),
             ev(K.TRAINING_PREP_START, 5), ev(K.TRAINING_PREP_END, 8),
             ev(K.PROGRAM_STARTUP_START, 8)]
    if disruption:
        first.append(ev(K.DISRUPTION, 9, disruption_cause="sigterm"))
    return first + [ev(K.JOB_START, 20), ev(K.TPU_INIT_START, 20), ev(K.TPU_INIT_END, 22),
                    *[ev(K.STEP_START, t, k) for k, t in enumerate((22, 23, 24))],
                    ev(K.JOB_END, 25)]


def test_a_preemption_during_compilation_is_a_disruption():
    r = calc_of(preempted_in_compile()).cumulative()
    # recovery [9, 20) = 11; init 5 + 2; prep 3; the unfinished compile
    # [8, 9) has no end: it is open up to the attempt's last sign of life,
    # the disruption at 9 (rules 14-15): PROGRAM_STARTUP 1, OTHER 0;
    # productive: the three 1 s spans of attempt 2; nothing wasted
    assert r.disruptions == 1
    assert r.total_seconds == 25
    assert r.badput_seconds[REC] == pytest.approx(11.0)
    assert r.badput_seconds[B.TPU_INITIALIZATION] == pytest.approx(7.0)
    assert r.badput_seconds[B.TRAINING_PREP] == pytest.approx(3.0)
    assert r.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(1.0)
    assert r.badput_seconds[B.OTHER] == 0
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == 0
    assert r.productive_seconds == pytest.approx(3.0)
    assert r.max_productive_step == 2


def test_without_a_recorded_disruption_the_gap_stays_unlabelled():
    r = calc_of(preempted_in_compile(disruption=False)).cumulative()
    # no evidence of a crash: [8, 20) is OTHER and nothing restarts (the
    # open compile ends at the attempt's last sign of life: its own start)
    assert r.disruptions == 0
    assert r.badput_seconds[REC] == 0
    assert r.badput_seconds[B.OTHER] == pytest.approx(12.0)


def test_before_the_next_job_start_the_attempt_is_stopped_at_its_disruption():
    events = [e for e in preempted_in_compile() if e.time < 20]
    c = calc_of(events)
    for now in (15, 500):
        r = c.cumulative(now=now)
        # rule 15: the last event is the disruption at 9: the attempt stopped
        # there, whenever it is read; the open compile [8, 9) is startup
        assert r.disruptions == 0
        assert r.total_seconds == 9
        assert r.badput_seconds[REC] == 0
        assert r.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(1.0)
        assert r.badput_seconds[B.OTHER] == 0
        state = c.state(now=now)
        assert (state.state, state.stopped_at, state.cause) == ("stopped", 9.0, "sigterm")


def test_the_first_disruption_of_the_attempt_starts_the_recovery():
    events = preempted_in_compile() + [ev(K.DISRUPTION, 9.5, disruption_cause="exception:X")]
    r = calc_of(events).cumulative()
    assert r.disruptions == 1
    assert r.badput_seconds[REC] == pytest.approx(11.0)


def test_every_disrupted_attempt_counts():
    """Crash with steps (no disruption event) at step 3; an attempt preempted
    during init; then a restart from step 2."""
    events = [ev(K.JOB_START, 0), *[ev(K.STEP_START, t, k) for k, t in enumerate((0, 1, 2, 3))],
              # attempt 2: preempted during init at 12
              ev(K.JOB_START, 10), ev(K.TPU_INIT_START, 10),
              ev(K.DISRUPTION, 12, disruption_cause="preemption"),
              # attempt 3: init [20, 21), steps 2, 3 at 21, 22, job end 23
              ev(K.JOB_START, 20), ev(K.TPU_INIT_START, 20), ev(K.TPU_INIT_END, 21),
              ev(K.STEP_START, 21, 2), ev(K.STEP_START, 22, 3), ev(K.JOB_END, 23)]
    r = calc_of(events).cumulative()
    # restarts: attempt 3's segment (after a crashed attempt with steps) and
    # attempt 2's recorded disruption
    assert r.disruptions == 2
    # recovery: [3, 10) from the crashed segment's last step start, [12, 20)
    assert r.badput_seconds[REC] == pytest.approx(7.0 + 8.0)
    # wasted: steps >= 2 of the first segment: [2, 3)
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(1.0)
    # attempt 2's unfinished init [10, 12) is OTHER; its start is replaced by
    # attempt 3's (counted as unmatched, rule 7), so it is no open phase
    assert r.badput_seconds[B.OTHER] == pytest.approx(2.0)
    assert r.badput_seconds[B.TPU_INITIALIZATION] == pytest.approx(1.0)
    assert r.productive_seconds == pytest.approx(2.0 + 2.0)
    assert r.skipped == {"unmatched_start": 1}


def test_a_window_counts_the_restart_at_the_next_job_start():
    c = calc_of(preempted_in_compile())
    assert c.window(0, 19).disruptions == 0
    assert c.window(19, 21).disruptions == 1
    w = c.window(10, 15)
    assert w.badput_seconds[REC] == pytest.approx(5.0)


def test_incremental_updates_agree_with_a_cold_calculation():
    events = preempted_in_compile()
    warm = Calculator(clock=lambda: 1000.0)
    for e in events:
        warm.add([e])
        warm.cumulative()
    got, want = warm.cumulative(), calc_of(events).cumulative()
    assert got.badput_seconds == pytest.approx(want.badput_seconds)
    assert got.disruptions == want.disruptions == 1


def test_the_timeline_shows_the_recovery():
    spans = calc_of(preempted_in_compile()).spans(8, 22)
    assert spans == [(8.0, 9.0, "PROGRAM_STARTUP"), (9.0, 20.0, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"),
                     (20.0, 22.0, "TPU_INITIALIZATION")]


def test_the_reference_sees_no_disruption_before_the_first_step():
    """docs/differences.md: the same job as reference payloads."""
    from tests.support.compat_calculator import T0, p, span, steps
    from tests.support.reference_harness import reference_job_goodput

    pays = [p(job_start_time=T0), *span("tpu_init", T0, T0 + 5),
            *span("training_prep", T0 + 5, T0 + 8), p(program_startup_start_time=T0 + 8),
            p(disruption_time=T0 + 9, disruption_cause="sigterm"),
            p(job_start_time=T0 + 20), *span("tpu_init", T0 + 20, T0 + 22),
            *steps(0, [T0 + 22, T0 + 23, T0 + 24]), p(job_end_time=T0 + 25)]
    ref = reference_job_goodput(pays, T0 + 100)
    assert ref["disruptions"] == 0
    assert ref["badput_seconds"]["OTHER"] == pytest.approx(12.0)
    assert ref["badput_seconds"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == 0
    ours = Calculator(clock=lambda: T0 + 100)
    ours.add_payloads(pays)
    r = ours.cumulative()
    assert r.disruptions == 1
    assert r.badput_seconds[REC] == pytest.approx(11.0)
    assert r.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(1.0)  # open compile, rule 14
    assert r.productive_seconds == ref["productive_seconds"] == pytest.approx(3.0)


def test_the_timeline_picture_marks_the_restart():
    from goodput_core.cli.plot_timeline import collect

    data = collect(calc_of(preempted_in_compile()))
    kinds = [(m.t, m.kind) for m in data.markers]
    assert (9.0, "crash") in kinds and (20.0, "restart") in kinds
