"""The whole life of a job: scheduling time carved out of the runtime partition,
SG x RG = ETTR, MPG, and a ground truth with submissions, queueing and requeues.
Every expected number is derived by hand in the comments."""

import math
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from goodput_core.queries.calculator import Calculator
from goodput_core.queries.lifecycle import lifecycle
from goodput_core.record.recorder import Recorder
from goodput_core.stores.memory import MemoryStore
from goodput_core.timeline.buckets import BadputType as B


def _calc(record):
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("r", store, strict=True, clock=lambda: 0.0)
    record(rec)
    assert rec.flush(30)
    calc = Calculator("r", store)
    calc.refresh()
    return calc


def _requeued_job(rec):
    """submit 0, granted 10, job start 12, steps 0..6 at 13..19 (1 s each),
    preemption at 19.5; requeued at 21, granted 30, job start 33, steps 5..10 at
    34..39, step 10 ends at 40, job end 40."""
    rec.record_job_submitted(0)
    rec.record_resources_granted(10)
    rec.record_job_start_time(12)
    for k in range(7):
        rec.record_step_start_time(k, 13 + k)
    rec.record_disruption("preemption", 19.5)
    rec.record_job_submitted(21)
    rec.record_resources_granted(30)
    rec.record_job_start_time(33)
    for i, k in enumerate(range(5, 11)):
        rec.record_step_start_time(k, 34 + i)
    rec.record_step_end_time(10, 40)
    rec.record_job_end_time(40)


def test_a_requeue_wait_leaves_the_partition_and_sg_times_rg_is_ettr():
    calc = _calc(_requeued_job)
    r = calc.cumulative(50)
    # The job holds its resources from the first grant (10) to the end (40): 30 s,
    # minus the requeue's wait [21, 30]: 9 s of scheduling -> total 21 s.
    assert r.lifetime == (10, 40)
    assert r.scheduling_seconds == pytest.approx(9)
    assert r.total_seconds == pytest.approx(21)
    assert r.excluded_seconds == 0
    # productive: steps 0..4 [13, 18) and steps 5..10 of attempt 2 [34, 40): 11 s;
    # wasted: steps 5, 6 of attempt 1 [18, 19.5): 1.5 s (redone from step 5);
    # recovery: the disruption to the next job start [19.5, 33) less the wait:
    # 13.5 - 9 = 4.5 s; OTHER: grant -> first step [10, 13) and [33, 34): 4 s.
    assert r.productive_seconds == pytest.approx(11)
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(1.5)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(4.5)
    assert r.badput_seconds[B.OTHER] == pytest.approx(4)
    lc = lifecycle(calc, 50)
    assert lc.available and lc.requeues == 1
    # wall clock from the first submission (0) to the end (40); waits [0, 10] and
    # [21, 30]: 19 s; SG = 21/40, RG = 11/21, ETTR = 11/40 = SG x RG
    assert lc.wall_seconds == 40 and lc.held_seconds == pytest.approx(21)
    assert lc.scheduling_seconds == pytest.approx(19)
    assert lc.scheduling_goodput == pytest.approx(21 / 40)
    assert lc.runtime_goodput == pytest.approx(11 / 21)
    assert lc.ettr == pytest.approx(11 / 40)
    assert lc.scheduling_goodput * lc.runtime_goodput == pytest.approx(lc.ettr, rel=1e-12)
    assert lc.program_goodput is None and lc.mpg is None  # no FLOPs known


def test_mpg_multiplies_the_three_factors():
    def record(rec):
        rec.record_job_submitted(0)
        rec.record_resources_granted(5)
        rec.record_job_start_time(5)
        rec.record_metadata(flops_per_step=1e12, peak_flops_per_device=1e12, num_devices=4)
        for k in range(10):
            rec.record_step_start_time(k, 5 + k)
        rec.record_step_end_time(9, 15)
        rec.record_job_end_time(15)

    calc = _calc(record)
    lc = lifecycle(calc, 20)
    # held [5, 15] = 10 s, all productive except the startup heuristic (equal steps:
    # none): RG = 1; SG = 10/15; PG = MFU = 1e12 FLOPs / 1 s / (4 x 1e12) = 0.25
    assert lc.runtime_goodput == pytest.approx(1.0)
    assert lc.scheduling_goodput == pytest.approx(10 / 15)
    assert lc.program_goodput == pytest.approx(0.25)
    assert lc.mpg == pytest.approx(10 / 15 * 0.25)


def test_without_scheduling_events_nothing_changes():
    def record(rec):
        rec.record_job_start_time(0)
        for k in range(5):
            rec.record_step_start_time(k, 1 + k)
        rec.record_job_end_time(6)

    calc = _calc(record)
    r = calc.cumulative(10)
    assert r.scheduling_seconds == 0 and r.lifetime == (0, 6) and r.total_seconds == 6
    assert not lifecycle(calc, 10).available


def test_a_submission_without_a_grant_is_granted_at_the_job_start():
    def record(rec):
        rec.record_job_submitted(0)
        rec.record_job_start_time(4)
        rec.record_step_start_time(0, 5)
        rec.record_job_end_time(8)

    calc = _calc(record)
    lc = lifecycle(calc, 10)
    # wait [0, 4]; held = the lifetime [4, 8]: SG = 4/8
    assert lc.scheduling_seconds == 4 and lc.held_seconds == 4
    assert lc.scheduling_goodput == pytest.approx(0.5)


# --------------------------------------------------------- ground truth
@st.composite
def jobs(draw):
    """A job with known phases: queue, start-up, steps, crashes, requeue waits."""
    n_attempts = draw(st.integers(1, 4))
    attempts = []
    for _ in range(n_attempts):
        attempts.append(dict(
            queue=draw(st.floats(0.0, 50.0)), boot=draw(st.floats(0.0, 5.0)),
            pre=draw(st.floats(0.5, 5.0)), steps=draw(st.integers(1, 6)),
            step=draw(st.floats(0.5, 3.0)), crash_after=draw(st.floats(0.1, 0.9)),
            gap=draw(st.floats(0.1, 20.0))))  # the requeue comes after the crash
    return attempts


@settings(max_examples=60, deadline=None)
@given(jobs())
def test_ground_truth_with_submission_queueing_and_requeues(attempts):
    """Each attempt: submitted (or requeued) at s, waits `queue`, is granted,
    boots for `boot` (held, nothing recorded: OTHER), job start, `pre` seconds
    before its first step (OTHER), steps; every attempt but the last crashes
    `crash_after` into its last step (a recorded disruption), the scheduler
    requeues it `gap` seconds later. Each attempt starts from step 0 again, so
    a crashed attempt's steps are all wasted (rule 4: restart at step 0)."""
    truth = {"sched": 0.0, "productive": 0.0, "wasted": 0.0, "recovery": 0.0, "other": 0.0}
    events = []
    t = 1000.0
    first_sub = t
    for i, a in enumerate(attempts):
        last = i == len(attempts) - 1
        events.append(("sub", t))
        t += a["queue"]
        truth["sched"] += a["queue"]
        events.append(("grant", t))
        if i == 0:
            truth["other"] += a["boot"]  # held from the grant, before the first job start
        else:
            truth["recovery"] += a["boot"]  # grant -> job start after a requeue: recovery
        t += a["boot"]
        events.append(("start", t))
        truth["other"] += a["pre"]
        t += a["pre"]
        for k in range(a["steps"]):
            events.append(("step", k, t))
            t += a["step"]
        if last:
            events.append(("end", t))
            truth["productive"] += a["steps"] * a["step"]
        else:
            t -= a["step"] * (1 - a["crash_after"])  # the crash, inside the last step
            events.append(("crash", t))
            # restart at step 0: every span of the crashed segment is redone
            truth["wasted"] += (a["steps"] - 1) * a["step"] + a["step"] * a["crash_after"]
            truth["recovery"] += a["gap"]  # crash -> requeue
            t += a["gap"]
    end = t

    def record(rec):
        for ev in events:
            if ev[0] == "sub":
                rec.record_job_submitted(ev[1])
            elif ev[0] == "grant":
                rec.record_resources_granted(ev[1])
            elif ev[0] == "start":
                rec.record_job_start_time(ev[1])
            elif ev[0] == "step":
                rec.record_step_start_time(ev[1], ev[2])
            elif ev[0] == "crash":
                rec.record_disruption("preemption", ev[1])
            else:
                rec.record_step_end_time(attempts[-1]["steps"] - 1, ev[1])
                rec.record_job_end_time(ev[1])

    calc = _calc(record)
    r = calc.cumulative(end + 100)
    held = end - first_sub - truth["sched"]
    assert r.total_seconds == pytest.approx(held, abs=1e-6)
    assert r.productive_seconds + r.badput_seconds[B.PROGRAM_STARTUP] == \
        pytest.approx(truth["productive"], abs=1e-6)  # the startup heuristic may split step 0
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == \
        pytest.approx(truth["wasted"], abs=1e-6)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == \
        pytest.approx(truth["recovery"], abs=1e-6)
    assert r.badput_seconds[B.OTHER] == pytest.approx(truth["other"], abs=1e-6)
    # the first wait is before the lifetime; the others are inside it
    assert r.scheduling_seconds == pytest.approx(truth["sched"] - attempts[0]["queue"], abs=1e-6)
    lc = lifecycle(calc, end + 100)
    assert lc.scheduling_seconds == pytest.approx(truth["sched"], abs=1e-6)
    assert lc.requeues == len(attempts) - 1
    wall = end - first_sub
    assert lc.wall_seconds == pytest.approx(wall)
    assert lc.ettr == pytest.approx(r.productive_seconds / wall)
    assert lc.scheduling_goodput * lc.runtime_goodput == pytest.approx(lc.ettr, rel=1e-9)
    assert not math.isnan(lc.ettr)
