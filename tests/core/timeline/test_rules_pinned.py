"""One hand-derived case per documented rule that a small slip would break.

Every expected number is worked out by hand from semantics.md (the comment
above each assertion says how); nothing is copied from the engine's output.
The cases complement ``test_semantics_rules.py``: the overlap priority (rule 8) is
pinned for every adjacent pair of levels, in both orders of appearance,
and the places where a rule has a boundary (a restart inside a sparse span,
a resume after a step end, loads in the unfinished last step of an open or
crashed attempt) each have their own case.

Mutations these tests kill (each applied to the source by hand, these tests
run, the mutation reverted). Survivors of the whole suite before (the
issue's audit; ours rechecked against test_semantics_rules, queries/test_calculator and
test_ground_truth):

* ``segments.py`` ``_wasted``: waste from the sparse span that contains the
  restart step (``searchsorted(..., side="right") - 1``) instead of the first
  span at or after it -> ``test_restart_inside_a_sparse_span_wastes_from_the_next_span``;
* ``timeline.py`` ``_levels``: every swap of two adjacent levels (recovery/save,
  save/restore, restore/custom, custom/compile, compile/re-init,
  re-init/scale-up, scale-up/slice-down, slice-down/TPU init, TPU init/prep,
  prep/sync loading) -> ``test_rule8_adjacent_levels`` and
  ``test_rule8_recovery_outranks_a_save_inside_it``;
* ``segments.py`` ``_closes``: loads in the last step of a crashed attempt
  turned sync (``region_end`` = the step start) ->
  ``test_load_in_the_last_step_of_a_crashed_attempt_is_async``;
* ``segments.py`` ``_closes``: recovery from the last step's start even when
  its end was recorded -> ``test_resume_after_a_step_end_wastes_nothing``.

Caught before only elsewhere (the hypothesis ground truth, or one case of
test_semantics_rules), now pinned here by a case of their own:

* loads in the last step of the open attempt turned sync ->
  ``test_load_in_the_last_step_of_the_open_attempt_is_async``;
* ``segments.py`` ``_restarts``: ``<`` for ``<=`` (re-recording the last step
  is no restart), and the job end outranking the step end as the close of
  the last step -> ``test_re_recording_the_last_step_after_a_clean_end_is_a_restart``;
* ``timeline.py`` ``measure``: wasted progress not taking what was carved
  inside it -> ``test_rule8_wasted_outranks_a_save_inside_it``.

Two swaps cannot change any result and are not tested: idle/recovery (idle
follows a job end, recovery a crash: never the same instant) and sync
loading/productive (a load inside a step span is overlapped, never sync).
"""

from __future__ import annotations

import pytest

from goodput_core.timeline.buckets import BadputType as B
from goodput_core.events import Kind as K
from tests.support.timeline_cases import ev, orbax, run, seconds, steps


def span(kind_start, kind_end, a, b, **extra):
    return [ev(kind_start, a, **extra), ev(kind_end, b, **extra)]


# The levels of rule 8 below recovery and wasted progress, highest first,
# with the event pair that records each and the bucket it lands in. Ties the
# rule leaves open are those of the timeline module's docstring (a save
# outranks a restore; re-init > scale-up > slice-down).
LEVELS = [
    ("save", lambda a, b: span(K.CHECKPOINT_SAVE_START, K.CHECKPOINT_SAVE_END, a, b),
     "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"),
    ("restore", lambda a, b: span(K.CHECKPOINT_RESTORE_START, K.CHECKPOINT_RESTORE_END, a, b),
     "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"),
    ("custom", lambda a, b: span(K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END, a, b,
                                 custom_badput_event_type="eval"), "CUSTOM_BADPUT_EVENTS"),
    ("compile", lambda a, b: span(K.PROGRAM_STARTUP_START, K.PROGRAM_STARTUP_END, a, b),
     "PROGRAM_STARTUP"),
    ("reinit", lambda a, b: span(K.ELASTIC_REINIT_START, K.ELASTIC_REINIT_END, a, b),
     "ELASTIC_REINITIALIZATION"),
    ("scale_up", lambda a, b: span(K.ELASTIC_WAIT_START, K.ELASTIC_WAIT_END, a, b,
                                   elastic_wait_event_type="SCALE_UP"), "ELASTIC_SCALE_UP"),
    ("slice_down", lambda a, b: span(K.ELASTIC_WAIT_START, K.ELASTIC_WAIT_END, a, b,
                                     elastic_wait_event_type="slice_lost"), "ELASTIC_SLICE_DOWN"),
    ("tpu_init", lambda a, b: span(K.TPU_INIT_START, K.TPU_INIT_END, a, b), "TPU_INITIALIZATION"),
    ("prep", lambda a, b: span(K.TRAINING_PREP_START, K.TRAINING_PREP_END, a, b), "TRAINING_PREP"),
    ("sync_load", lambda a, b: span(K.DATA_LOADING_START, K.DATA_LOADING_END, a, b),
     "DATA_LOADING_SYNC"),
]
PAIRS = [(LEVELS[i], LEVELS[i + 1]) for i in range(len(LEVELS) - 1)]


@pytest.mark.parametrize("high, low", PAIRS, ids=[f"{h[0]}>{lo[0]}" for h, lo in PAIRS])
@pytest.mark.parametrize("high_first", [True, False], ids=["high_first", "low_first"])
def test_rule8_adjacent_levels(high, low, high_first):
    (_, make_high, high_bucket), (_, make_low, low_bucket) = high, low
    if high_first:
        # high [5,10), low [8,12): the overlap [8,10) is high's
        events = make_high(5, 10) + make_low(8, 12)
        expected = {high_bucket: 5, low_bucket: 2}
    else:
        # low [5,10), high [8,12): the overlap [8,10) is still high's
        events = make_low(5, 10) + make_high(8, 12)
        expected = {low_bucket: 3, high_bucket: 4}
    r = run([ev(K.JOB_START, 0), *events, ev(K.JOB_END, 100)])
    # no steps: the rest of the lifetime [0,100) is OTHER
    expected["OTHER"] = 100 - sum(expected.values())
    assert seconds(r) == expected


def test_rule8_the_issues_three_examples():
    save = {"event_type": "save", "checkpoint_manager_blocking_start_time": 5.0,
            "checkpoint_manager_blocking_duration_secs": 5.0}
    restore = {"event_type": "restore", "checkpoint_manager_start_time": 8.0,
               "checkpoint_manager_duration_secs": 4.0}
    events = [ev(K.JOB_START, 0), orbax(5.0, save), orbax(8.0, restore),
              *span(K.TPU_INIT_START, K.TPU_INIT_END, 20, 25),
              *span(K.TRAINING_PREP_START, K.TRAINING_PREP_END, 22, 27),
              *span(K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END, 30, 34,
                    custom_badput_event_type="eval"),
              *span(K.PROGRAM_STARTUP_START, K.PROGRAM_STARTUP_END, 32, 36),
              ev(K.JOB_END, 40)]
    r = run(events)
    # Orbax save [5,10) over restore [8,12): 5 and 2; TPU init [20,25) over
    # prep [22,27): 5 and 2; custom [30,34) over compile [32,36): 4 and 2;
    # the rest of [0,40) is OTHER: 40 - 20 = 20
    assert seconds(r) == {"UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 5,
                          "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 2,
                          "TPU_INITIALIZATION": 5, "TRAINING_PREP": 2,
                          "CUSTOM_BADPUT_EVENTS": 4, "PROGRAM_STARTUP": 2, "OTHER": 20}
    assert r.custom_badput_seconds == {"EVAL": 4}


def test_rule8_recovery_outranks_a_save_inside_it():
    events = [ev(K.JOB_START, 0), *steps([0, 10]),
              ev(K.JOB_START, 50), *steps([50, 60], first=2), ev(K.JOB_END, 70),
              *span(K.CHECKPOINT_SAVE_START, K.CHECKPOINT_SAVE_END, 30, 55)]
    r = run(events)
    # crash: recovery from the crashed step 1's start (10) to the job start
    # (50): 40 s; the save [30,55) keeps only [50,55) = 5 s, carved out of
    # step 2's span; productive [0,10) + [50,70) - 5 = 25
    assert seconds(r) == {"INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 40,
                          "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 5, "PRODUCTIVE": 25}
    assert r.disruptions == 1


def test_rule8_wasted_outranks_a_save_inside_it():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20, 30]), ev(K.JOB_END, 40),
              *span(K.CHECKPOINT_SAVE_START, K.CHECKPOINT_SAVE_END, 22, 26),
              ev(K.JOB_START, 50), *steps([50, 60], first=2), ev(K.JOB_END, 70)]
    r = run(events)
    # restart at r=2: the spans of steps 2 and 3, [20,40), are wasted whole,
    # the save inside them too; idle [40,50); productive [0,20) + [50,70)
    assert seconds(r) == {"WASTED_PROGRESS_FROM_DISRUPTION": 20, "PRODUCTIVE": 40}
    assert r.idle_seconds == 10 and r.total_seconds == 60


# ------------------------------------------------------- rules 2-4 boundaries
SPARSE = [ev(K.JOB_START, 0), *steps([0, 20, 40], step_numbers=[0, 10, 20]),
          ev(K.STEP_END, 45, 20)]


def test_restart_inside_a_sparse_span_wastes_from_the_next_span():
    r = run(SPARSE + [ev(K.JOB_START, 60), *steps([60, 70], first=15), ev(K.JOB_END, 80)])
    # restart at r=15: the span [20,40) of steps 10-19 is not redone as a
    # whole (steps 10-14 are kept), the first span at or after 15 is step 20's
    # [40,45): 5 s wasted. Recovery from step 20's end (45) to 60: 15 s.
    # Productive [0,40) + [60,80) = 60.
    assert seconds(r) == {"WASTED_PROGRESS_FROM_DISRUPTION": 5,
                          "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 15, "PRODUCTIVE": 60}
    assert r.disruptions == 1


def test_restart_at_a_sparse_step_wastes_its_span():
    r = run(SPARSE + [ev(K.JOB_START, 60), *steps([60, 70], first=10), ev(K.JOB_END, 80)])
    # r=10 is a recorded step: its span [20,40) and step 20's [40,45) are redone
    assert seconds(r) == {"WASTED_PROGRESS_FROM_DISRUPTION": 25,
                          "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 15, "PRODUCTIVE": 40}


def test_resume_after_a_step_end_wastes_nothing():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20]), ev(K.STEP_END, 25, 2),
              ev(K.JOB_START, 40), *steps([40, 50], first=3), ev(K.JOB_END, 60)]
    r = run(events)
    # the crash is a restart at r=3, but no step >= 3 was recorded: nothing
    # wasted. Step 2 ended at 25: its span [20,25) is kept, recovery is
    # [25,40) = 15 s. Productive [0,25) + [40,60) = 45.
    assert seconds(r) == {"INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 15, "PRODUCTIVE": 45}
    assert r.disruptions == 1
    assert r.max_productive_step == 4


def test_re_recording_the_last_step_after_a_clean_end_is_a_restart():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20]), ev(K.STEP_END, 25, 2),
              ev(K.JOB_END, 30), ev(K.JOB_START, 40), *steps([40, 50], first=2),
              ev(K.JOB_END, 60)]
    r = run(events)
    # step 2 is recorded again (r=2): its span, closed by its step end (not
    # by the job end), [20,25) is wasted; [25,30) is OTHER; idle [30,40);
    # productive [0,20) + [40,60) = 40
    assert seconds(r) == {"WASTED_PROGRESS_FROM_DISRUPTION": 5, "OTHER": 5, "PRODUCTIVE": 40}
    assert r.idle_seconds == 10
    assert r.disruptions == 1
    assert r.max_productive_step == 3


# ----------------------------------------------------------------- rule 7
def test_load_in_the_last_step_of_the_open_attempt_is_async():
    events = [ev(K.JOB_START, 0), *span(K.DATA_LOADING_START, K.DATA_LOADING_END, 1, 3),
              *steps([3, 13]), *span(K.DATA_LOADING_START, K.DATA_LOADING_END, 16, 19)]
    r = run(events, now=30)
    # [1,3) lies before the first step: sync, 2 s. [16,19) lies in the open
    # step 1 (from 13 to the query time 30): overlapped, 3 s async, and that
    # step's time stays OTHER: [0,1) + [13,30) = 18. Productive [3,13).
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == 2
    assert r.data_loading_async_seconds == 3
    assert seconds(r) == {"DATA_LOADING_SYNC": 2, "PRODUCTIVE": 10, "OTHER": 18}


def test_load_in_the_last_step_of_a_crashed_attempt_is_async():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20]),
              *span(K.DATA_LOADING_START, K.DATA_LOADING_END, 22, 24),
              ev(K.JOB_START, 50), *steps([50, 60], first=2), ev(K.JOB_END, 70)]
    r = run(events)
    # the load [22,24) lies in the crashed attempt's unfinished step 2:
    # overlapped (2 s async, no sync). Recovery [20,50) = 30 s; step 2 had
    # no span (no close), so nothing is wasted; productive [0,20) + [50,70).
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == 0
    assert r.data_loading_async_seconds == 2
    assert seconds(r) == {"INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 30, "PRODUCTIVE": 40}
