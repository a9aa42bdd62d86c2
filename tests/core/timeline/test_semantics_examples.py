"""Worked examples of docs/semantics.md that no rule-by-rule test pinned yet.

Every expected number is derived by hand in the comment above it (the same
derivation is written out in docs/semantics.md).
"""

from __future__ import annotations

import math

import pytest

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.events import EventRecord, Kind as K

R = "run"


def ev(kind, t, step=None, **extra):
    return EventRecord(R, int(kind), float(t), step, extra or None)


def calc_of(events, now=1000.0):
    c = Calculator(clock=lambda: now)
    c.add(events)
    return c


def nonzero(result):
    out = {k.name: v for k, v in result.badput_seconds.items()
           if v and k is not B.DATA_LOADING_ASYNC}
    out["PRODUCTIVE"] = result.productive_seconds
    return out


def test_rule8_priority_outside_steps_init_over_prep_over_sync_loading():
    # TPU init [0,10), training prep [5,15), a blocking load [12,20), then
    # steps at 20 and 30 and the job end at 40.
    events = [ev(K.JOB_START, 0), ev(K.TPU_INIT_START, 0), ev(K.TPU_INIT_END, 10),
              ev(K.TRAINING_PREP_START, 5), ev(K.TRAINING_PREP_END, 15),
              ev(K.DATA_LOADING_START, 12), ev(K.DATA_LOADING_END, 20),
              ev(K.STEP_START, 20, 0), ev(K.STEP_START, 30, 1), ev(K.JOB_END, 40)]
    r = calc_of(events).cumulative()
    # init keeps [0,10); prep only [10,15); the load only [15,20); the two
    # step spans are productive (the last is closed by the job end, so there
    # is no other span for the startup heuristic of rule 6)
    assert nonzero(r) == {"TPU_INITIALIZATION": 10, "TRAINING_PREP": 5,
                          "DATA_LOADING_SYNC": 5, "PRODUCTIVE": 20}
    assert r.total_seconds == 40


def test_rule8_priority_inside_steps_save_over_custom_over_compile():
    save = {"event_type": "save", "step": 1, "checkpoint_manager_blocking_start_time": 12.0,
            "checkpoint_manager_blocking_duration_secs": 4.0}
    events = [ev(K.JOB_START, 0), *[ev(K.STEP_START, t, s) for s, t in enumerate([0, 10, 20, 30])],
              ev(K.PROGRAM_STARTUP_START, 0), ev(K.PROGRAM_STARTUP_END, 4),
              ev(K.CUSTOM_BADPUT_START, 3, custom_badput_event_type="eval"),
              ev(K.CUSTOM_BADPUT_END, 5, custom_badput_event_type="eval"),
              ev(K.CUSTOM_BADPUT_START, 14, custom_badput_event_type="eval"),
              ev(K.CUSTOM_BADPUT_END, 18, custom_badput_event_type="eval"),
              EventRecord(R, int(K.CHECKPOINT_STATS), 12.0, 1, save), ev(K.JOB_END, 40)]
    r = calc_of(events).cumulative()
    # compile [0,4) loses [3,4) to the custom event [3,5): startup 3, custom 2;
    # the save [12,16) keeps all 4 s, the custom event [14,18) only [16,18): 2;
    # explicit compile spans replace the heuristic (rule 6): productive
    # 40 - 3 - 4 - 4 = 29
    assert nonzero(r) == {"PROGRAM_STARTUP": 3, "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 4,
                          "CUSTOM_BADPUT_EVENTS": 4, "PRODUCTIVE": 29}
    assert r.custom_badput_seconds == {"EVAL": 4}


def test_rule10_excluded_time_is_never_more_than_the_window():
    events = [ev(K.JOB_START, 0), *[ev(K.STEP_START, t, s) for s, t in enumerate([0, 10, 20])],
              ev(K.JOB_END, 30)]
    r = calc_of(events).window(10, 20, exclude=[(-100, 100)])
    # the exclusion covers the whole job; inside the window it is 10 s
    assert r.excluded_seconds == 10 and r.total_seconds == 0 and r.goodput == 0.0
    # outside the lifetime an exclusion removes nothing
    r = calc_of(events).cumulative(exclude=[(30, 90), (-math.inf, -5)])
    assert r.excluded_seconds == 0 and r.total_seconds == 30


def test_rule12_step_time_of_a_sparse_span_is_divided_by_the_steps_it_covers():
    # steps 0, 5, 10 logged at 0, 10, 20, then 11 at 22; job end 30
    events = [ev(K.JOB_START, 0), ev(K.STEP_START, 0, 0), ev(K.STEP_START, 10, 5),
              ev(K.STEP_START, 20, 10), ev(K.STEP_START, 22, 11), ev(K.JOB_END, 30)]
    s = calc_of(events).step_stats()
    # [0,10) covers steps 0-4: 2 s each; [10,20) steps 5-9: 2 s; [20,22) step 10: 2 s;
    # step 11 is closed by the job end: not measured
    assert s.times_dict() == {0: 2.0, 5: 2.0, 10: 2.0}
    assert s.ideal_step_time == pytest.approx(2.0)
