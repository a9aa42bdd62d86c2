"""Late events: the monitor (incremental) and ``goodput report`` (one shot) agree.

Events reach a store in arrival order, which is not time order: a writer
flushes every half second, hosts' clocks and buffers differ, a backfilled
phase arrives after the steps that followed it. The monitor refreshes its
calculator every few seconds and queries it each time; the report reads
everything at once. Property: whatever the stream and wherever the refreshes
cut it, the final answer of the incremental calculator is the one-shot answer.
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from goodput_core.queries.calculator import Calculator
from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.buckets import BadputType

SETTINGS = settings(max_examples=int(os.environ.get("GOODPUT_HYPOTHESIS_EXAMPLES", 300)),
                    deadline=None, suppress_health_check=list(HealthCheck))

K = Kind


def _ev(kind, t, step=None, extra=None):
    return EventRecord("r", int(kind), float(t), step, extra)


@st.composite
def jobs(draw):
    """A realistic job: attempts of steps with loads, saves, custom events, restarts."""
    events = []
    t = 1000.0
    step = 0
    for attempt in range(draw(st.integers(1, 3))):
        events.append(_ev(K.JOB_START, t))
        if draw(st.booleans()):
            d = draw(st.floats(0.5, 20))
            events += [_ev(K.TPU_INIT_START, t + 0.1), _ev(K.TPU_INIT_END, t + 0.1 + d)]
            t += d
        if draw(st.booleans()):
            d = draw(st.floats(0.5, 10))
            events += [_ev(K.TRAINING_PREP_START, t + 0.2), _ev(K.TRAINING_PREP_END, t + 0.2 + d)]
            t += d
        if attempt:  # restart from an earlier checkpoint: wasted progress
            step = max(0, step - draw(st.integers(0, 5)))
            if draw(st.booleans()):
                d = draw(st.floats(0.1, 10))
                events += [_ev(K.CHECKPOINT_RESTORE_START, t, step),
                           _ev(K.CHECKPOINT_RESTORE_END, t + d, step)]
                t += d
        t += 1.0
        for _ in range(draw(st.integers(0, 12))):
            if draw(st.integers(0, 3)) == 0:
                d = draw(st.floats(0.01, 3))
                events += [_ev(K.DATA_LOADING_START, t), _ev(K.DATA_LOADING_END, t + d)]
                t += d
            events.append(_ev(K.STEP_START, t, step))
            if draw(st.integers(0, 3)) == 0:  # a second host records the step a bit later
                events.append(_ev(K.STEP_START, t + draw(st.floats(0, 0.5)), step))
            t += draw(st.floats(0.2, 8))
            if draw(st.integers(0, 5)) == 0:
                events.append(_ev(K.STEP_END, t, step))
            kind = draw(st.integers(0, 7))
            if kind == 0:
                d = draw(st.floats(0.1, 15))
                events += [_ev(K.CHECKPOINT_SAVE_START, t, step),
                           _ev(K.CHECKPOINT_SAVE_END, t + d, step)]
                t += d
            elif kind == 1:
                d = draw(st.floats(0.1, 15))
                extra = {"custom_badput_event_type": "eval"}
                events += [_ev(K.CUSTOM_BADPUT_START, t, None, extra),
                           _ev(K.CUSTOM_BADPUT_END, t + d, None, extra)]
                t += d
            elif kind == 2:
                d = draw(st.floats(0.1, 15))
                events += [_ev(K.PROGRAM_STARTUP_START, t), _ev(K.PROGRAM_STARTUP_END, t + d)]
                t += d
            elif kind == 3:
                d = draw(st.floats(0.1, 15))
                events.append(_ev(K.CHECKPOINT_STATS, t, step, {
                    "event_type": "save", "step": step,
                    "checkpoint_manager_blocking_start_time": t,
                    "checkpoint_manager_blocking_duration_secs": d}))
                t += d
            step += 1
        if draw(st.booleans()):
            events.append(_ev(K.JOB_END, t))
        elif draw(st.booleans()):
            events.append(_ev(K.DISRUPTION, t + draw(st.floats(0, 5)), None,
                              {"disruption_cause": "sigterm"}))
        t += draw(st.floats(1, 60))  # the gap before the next attempt (a crash or not)
    return events


@st.composite
def arrivals(draw):
    """A job's events in a store's order: each arrives up to 60 s after its time."""
    events = draw(jobs())
    late = [draw(st.floats(0, 60)) if draw(st.integers(0, 2)) == 0 else 0.0 for _ in events]
    order = sorted(range(len(events)), key=lambda i: (events[i].time + late[i], i))
    stream = [events[i] for i in order]
    arrival = [events[i].time + late[i] for i in order]
    cuts = sorted(set(draw(st.lists(st.integers(0, len(stream)), max_size=8))))
    return stream, arrival, cuts


def _summary(result):
    return (round(result.total_seconds, 6), round(result.productive_seconds, 6),
            {k: round(v, 6) for k, v in result.badput_seconds.items() if v},
            dict(result.skipped) if hasattr(result, "skipped") else None)


def _replay(stream, arrival, cuts):
    """(monitor's final calculator, one-shot calculator, end time) for one split."""
    end = (max(arrival) if arrival else 1000.0) + 1.0
    one_shot = Calculator("r")
    one_shot.add(stream)
    monitor = Calculator("r")
    start = 0
    for cut in cuts + [len(stream)]:
        monitor.add(stream[start:cut])
        if cut > start:  # a refresh that read something is followed by the monitor's queries
            monitor.cumulative(now=arrival[cut - 1])
            monitor.step_stats()
        start = cut
    return monitor, one_shot, end


def test_a_late_job_end_after_the_next_job_start_is_not_a_crash():
    # Found by the property below: attempt 1's job end (and the end of its
    # save) arrive after attempt 2's job start, which the monitor had already
    # read and taken for a crash at the last step.
    stream = [_ev(K.JOB_START, 1000.0)] + [_ev(K.STEP_START, 1003.0 + i, i) for i in range(9)]
    stream += [_ev(K.CHECKPOINT_SAVE_START, 1012.5, 8), _ev(K.JOB_START, 1017.0),
               _ev(K.CHECKPOINT_SAVE_END, 1016.0, 8), _ev(K.JOB_END, 1016.0)]
    stream += [_ev(K.STEP_START, 1019.0 + i, 9 + i) for i in range(3)]
    stream += [_ev(K.JOB_END, 1023.0)]
    arrival = [max(e.time for e in stream[:i + 1]) for i in range(len(stream))]
    monitor, one_shot, end = _replay(stream, arrival, [12])
    assert _summary(monitor.cumulative(now=end)) == _summary(one_shot.cumulative(now=end))
    assert one_shot.cumulative(now=end).productive_seconds == 13.5


def test_a_step_that_arrives_in_a_disrupted_attempt_moves_its_recovery():
    # Found by the many-hosts refresh property (tests/core/queries/test_many_hosts.py):
    # attempt 2 (job start 2.25) recorded a disruption at 2.25 and no step yet,
    # so its restart at 14.375 made [2.25, 14.375) recovery (rule 2); the
    # monitor's freeze point had moved past 2.25 (a load pending from 2.5), so
    # when step 0 arrived at 4.25 the recovery before it was never repainted.
    first = [_ev(K.JOB_START, 0.125), _ev(K.BLOCKING_LOAD_START, 0.375),
             _ev(K.BLOCKING_LOAD_END, 0.875),
             _ev(K.DISRUPTION, 2.25, extra={"disruption_cause": "crash"}),
             _ev(K.JOB_START, 2.25), _ev(K.BLOCKING_LOAD_START, 2.5), _ev(K.JOB_START, 14.375)]
    second = [_ev(K.STEP_START, 4.25, 0), _ev(K.BLOCKING_LOAD_END, 3.0)]
    stream = first + second
    arrival = [e.time for e in first] + [15.0, 15.0]
    monitor, one_shot, end = _replay(stream, arrival, [len(first)])
    assert _summary(monitor.cumulative(now=19.25)) == _summary(one_shot.cumulative(now=19.25))
    # attempt 2 crashed after its step 0: recovery from that step's start (4.25)
    # to the restart, 10.125 s; not from the disruption (12.125 s)
    recovery = one_shot.cumulative(now=19.25).badput_seconds[
        BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION]
    assert recovery == 14.375 - 4.25


def test_a_metric_point_that_arrives_late_ends_an_open_phase_of_a_restarted_attempt():
    # Found by the many-hosts refresh property (tests/core/queries/test_many_hosts.py):
    # attempt 1's program startup began at 0.5 and never ended; attempt 2
    # started at 10. The startup runs to attempt 1's last sign of life (rules
    # 14, 15): its metric point at 4, once that arrives. A metric point is a
    # side row (no span of its own), and the monitor did not look at the
    # spans again when one came.
    first = [_ev(K.JOB_START, 0.0), _ev(K.PROGRAM_STARTUP_START, 0.5), _ev(K.JOB_START, 10.0),
             _ev(K.STEP_START, 11.0, 0), _ev(K.JOB_END, 12.0)]
    second = [_ev(K.METRIC, 4.0, None, {"metric_name": "loss", "metric_value": 1.0})]
    arrival = [e.time for e in first] + [13.0]
    monitor, one_shot, end = _replay(first + second, arrival, [len(first)])
    assert _summary(monitor.cumulative(now=end)) == _summary(one_shot.cumulative(now=end))
    # the startup [0.5, 4): 3.5 s
    assert one_shot.cumulative(now=end).badput_seconds[BadputType.PROGRAM_STARTUP] == 3.5


@SETTINGS
@given(arrivals())
def test_any_split_into_refreshes_gives_the_one_shot_result(case):
    stream, arrival, cuts = case
    monitor, one_shot, end = _replay(stream, arrival, cuts)
    expected = one_shot.cumulative(now=end)
    got = monitor.cumulative(now=end)
    assert _summary(got) == _summary(expected)
    assert math.isclose(got.goodput, expected.goodput, abs_tol=1e-9)
    assert monitor.step_stats().step_times.tolist() == one_shot.step_stats().step_times.tolist()
