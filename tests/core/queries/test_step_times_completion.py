"""Step times from completion (semantics.md rule 12, ``queries.step_groups``):
worked by hand. Step ends recorded at sync points make the steps between two
of them share the time between them, the recorded phases in it (an
evaluation, a save) left out; a segment with no step end in its middle keeps
the spans between step starts; the report says which."""

from __future__ import annotations

import pytest

from goodput_core.events import EventRecord, Kind as K
from goodput_core.queries.calculator import Calculator

R = "run"


def ev(kind, t, step=None, **extra):
    return EventRecord(R, int(kind), float(t), step, extra or None)


def _calc(events, now=100.0):
    c = Calculator(clock=lambda: now)
    c.add(events)
    return c


def _times(calc, incremental=True):
    return calc.step_stats(incremental=incremental).times_dict()


def _eval(a, b):
    return [ev(K.CUSTOM_BADPUT_START, a, custom_badput_event_type="eval"),
            ev(K.CUSTOM_BADPUT_END, b, custom_badput_event_type="eval")]


# A synchronous loop with `with rec.step(k)`: step 0 [1, 2], an evaluation
# [2, 5) after it, step 1 [5, 6], step 2 [6, 7.5] with a save [6.2, 6.7) in it,
# steps 3 [7.5, 8.5] and 4 [8.5, 9.5], job end 10.
SYNC_LOOP = [ev(K.JOB_START, 0),
             ev(K.STEP_START, 1, 0), ev(K.STEP_END, 2, 0), *_eval(2, 5),
             ev(K.STEP_START, 5, 1), ev(K.STEP_END, 6, 1),
             ev(K.STEP_START, 6, 2), ev(K.CHECKPOINT_SAVE_START, 6.2, 2),
             ev(K.CHECKPOINT_SAVE_END, 6.7, 2), ev(K.STEP_END, 7.5, 2),
             ev(K.STEP_START, 7.5, 3), ev(K.STEP_END, 8.5, 3),
             ev(K.STEP_START, 8.5, 4), ev(K.STEP_END, 9.5, 4), ev(K.JOB_END, 10)]


@pytest.mark.parametrize("incremental", [True, False])
def test_an_evaluation_and_a_save_are_not_step_time_when_step_ends_are_recorded(incremental):
    # step 0: [1, 2] = 1; step 1: from step 0's end, [2, 6] less the eval's 3 s = 1;
    # step 2: [6, 7.5] less the save's 0.5 s = 1; steps 3 and 4: 1 each.
    # (By the spans between starts: 4, 1, 1.5, 1, 1: the evaluation and the
    # save were spikes of the step-time chart.)
    stats = _calc(SYNC_LOOP).step_stats(incremental=incremental)
    assert stats.times_dict() == {k: pytest.approx(1.0) for k in range(5)}
    assert stats.ideal_step_time == pytest.approx(1.0)
    assert stats.basis == "sync points"


def test_asynchronous_dispatch_with_a_sync_point_every_third_step():
    # dispatches 1 ms apart; the step end of each third step when its result is
    # ready: steps 0-2 (dispatched from 0) done at 0.9, steps 3-5 at 1.8; an
    # evaluation [1.85, 2.15); steps 6-8 from 2.2, done at 3.0; step 9 dispatched
    # at 3.001 and not synced yet.
    events = [ev(K.JOB_START, 0)]
    for first, at, done in ((0, 0.0, 0.9), (3, 0.901, 1.8), (6, 2.2, 3.0)):
        events += [ev(K.STEP_START, at + 0.001 * i, first + i) for i in range(3)]
        events.append(ev(K.STEP_END, done, first + 2))
    events[8:8] = _eval(1.85, 2.15)
    events.append(ev(K.STEP_START, 3.001, 9))
    calc = _calc(events, now=3.5)
    # (0.9 - 0) / 3, (1.8 - 0.9) / 3, (3.0 - 1.8 - 0.3) / 3: 0.3 each; step 9 not measured
    # (the spans between dispatches would have said 0.001, 0.001, 0.898, ...)
    assert _times(calc) == {k: pytest.approx(0.3) for k in range(9)}
    assert _times(calc, incremental=False) == _times(calc)


def test_a_lone_step_end_at_the_end_keeps_the_spans_between_starts():
    # the reference's way (starts only) plus the last step's end: not sync points
    events = [ev(K.JOB_START, 0), ev(K.STEP_START, 1, 0), ev(K.STEP_START, 3, 1),
              ev(K.STEP_START, 4, 2), ev(K.STEP_END, 4.5, 2), ev(K.JOB_END, 5)]
    stats = _calc(events).step_stats()
    assert stats.times_dict() == {0: 2.0, 1: 1.0, 2: 0.5}
    assert stats.basis == "step starts"


def test_a_step_end_of_an_older_step_or_a_second_one_is_no_sync_point():
    # step 1's end arrives after step 2 started (not the step started last), and
    # step 0 ends twice: only the first end of step 0 and step 3's end are sync points
    events = [ev(K.JOB_START, 0), ev(K.STEP_START, 1, 0), ev(K.STEP_END, 2, 0),
              ev(K.STEP_END, 2.5, 0), ev(K.STEP_START, 3, 1), ev(K.STEP_START, 4, 2),
              ev(K.STEP_END, 4.2, 1), ev(K.STEP_START, 5, 3), ev(K.STEP_END, 8, 3),
              ev(K.JOB_END, 9)]
    # [1, 2]: step 0 = 1; [2, 8] shared by steps 1-3: 2 each
    assert _times(_calc(events)) == {0: 1.0, 1: 2.0, 2: 2.0, 3: 2.0}


def test_the_latest_run_of_a_step_counts_after_a_restart():
    # attempt 1: steps 0-3 synced every step, 1 s each, crash; attempt 2 restarts at
    # step 2 with 2 s steps: steps 2 and 3 take their latest run's 2 s
    events = [ev(K.JOB_START, 0)]
    for k in range(4):
        events += [ev(K.STEP_START, 1 + k, k), ev(K.STEP_END, 2 + k, k)]
    events.append(ev(K.JOB_START, 20))
    for i, k in enumerate(range(2, 5)):
        events += [ev(K.STEP_START, 21 + 2 * i, k), ev(K.STEP_END, 23 + 2 * i, k)]
    events.append(ev(K.JOB_END, 30))
    assert _times(_calc(events)) == {0: 1.0, 1: 1.0, 2: 2.0, 3: 2.0, 4: 2.0}
    assert _times(_calc(events), incremental=False) == _times(_calc(events))


def test_the_report_says_what_step_times_are_measured_from():
    from goodput_core.cli.commands.report import build_report

    def report(events):
        calc = _calc(events)
        return build_report(calc, calc.cumulative(), calc.step_stats(), store_url="memory://x",
                            window_spec=None, exclude=[])["step_time"]

    synced = report(SYNC_LOOP)
    assert synced["measured_from"] == "sync points" and "completed work" in synced["note"]
    starts = report([ev(K.JOB_START, 0)] + [ev(K.STEP_START, 1 + k, k) for k in range(5)]
                    + [ev(K.JOB_END, 7)])
    assert starts["measured_from"] == "step starts"
    assert "dispatch intervals" in starts["note"] and "sync_every" in starts["note"]
