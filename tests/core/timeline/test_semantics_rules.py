"""Hand-built cases for each rule of semantics.md.

Every expected number is derived by hand from the rule it tests (the
comment above each assertion says how), not copied from the output.
Times are small integers so every sum is exact.
"""

from __future__ import annotations

import math

import pytest

from goodput_core.timeline.buckets import BASE_BADPUT, BadputType as B
from goodput_core.queries.calculator import Calculator
from goodput_core.events import Kind as K
from tests.support.timeline_cases import ev, orbax, run, seconds, steps


def assert_partition(result):
    parts = result.productive_seconds + sum(
        v for k, v in result.badput_seconds.items() if k is not B.DATA_LOADING_ASYNC)
    assert parts == pytest.approx(result.total_seconds, abs=1e-9)


# ----------------------------------------------------------------- rule 1
def test_rule1_total_runs_from_first_start_to_last_end():
    r = run([ev(K.JOB_START, 0), *steps([0, 10]), ev(K.JOB_END, 20)])
    # [0,10) and [10,20) are step spans (the last closed by the job end)
    assert r.total_seconds == 20
    assert seconds(r) == {"PRODUCTIVE": 20}
    assert r.goodput == 100.0


def test_rule1_open_attempt_runs_to_query_time_and_open_step_is_other():
    r = run([ev(K.JOB_START, 0), *steps([0, 10])], now=25)
    # lifetime [0,25); step 0 kept [0,10); step 1 open: OTHER [10,25)
    assert r.total_seconds == 25
    assert seconds(r) == {"PRODUCTIVE": 10, "OTHER": 15}


def test_rule1_idle_between_attempts_is_excluded_and_reported():
    events = [ev(K.JOB_START, 0), *steps([0, 10]), ev(K.JOB_END, 20),
              ev(K.JOB_START, 50), *steps([50, 55], first=2), ev(K.JOB_END, 60)]
    r = run(events)
    # attempts [0,20) and [50,60); the gap [20,50) is idle, not total time
    assert r.total_seconds == 30
    assert r.idle_seconds == 30
    assert seconds(r) == {"PRODUCTIVE": 30}
    assert r.disruptions == 0  # step 2 continues after step 1: not a restart


def test_rule1_events_before_first_job_start_are_outside_the_lifetime():
    r = run([ev(K.TPU_INIT_START, -5), ev(K.TPU_INIT_END, 2), ev(K.JOB_START, 0),
             ev(K.JOB_END, 10)])
    # only [0,2) of the init lies in the lifetime [0,10)
    assert seconds(r) == {"TPU_INITIALIZATION": 2, "OTHER": 8}


def test_rule1_no_job_start_gives_an_empty_result():
    r = run([*steps([0, 10])])
    assert r.total_seconds == 0 and r.goodput == 0.0
    assert set(r.badput_seconds) == set(BASE_BADPUT)


# ------------------------------------------------------------- rules 2 + 4
CRASH = [ev(K.JOB_START, 0), *steps([0, 10, 20, 30, 40]),
         ev(K.JOB_START, 100), *steps([100, 110], first=2), ev(K.JOB_END, 120)]


def test_rule2_4_crash_restart_wastes_redone_spans_and_recovers():
    r = run(CRASH)
    # restart at r=2: spans of steps 2 and 3 ([20,40)) are wasted; the last
    # step (4, started at 40) crashed: recovery [40,100); kept [0,20) and the
    # new segment [100,120)
    assert seconds(r) == {"PRODUCTIVE": 40, "WASTED_PROGRESS_FROM_DISRUPTION": 20,
                          "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 60}
    assert r.disruptions == 1
    # kept: steps 0-1 before the crash, 2-3 after it
    assert r.max_productive_step == 3
    assert_partition(r)


def test_rule4_disruption_time_starts_recovery_and_closes_the_last_step():
    events = CRASH[:6] + [ev(K.DISRUPTION, 45, disruption_cause="preemption")] + CRASH[6:]
    r = run(events)
    # step 4's span [40,45) is closed by the disruption and redone (4 >= 2)
    assert seconds(r) == {"PRODUCTIVE": 40, "WASTED_PROGRESS_FROM_DISRUPTION": 25,
                          "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 55}


def test_rule2_restart_inside_an_attempt():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20, 30]), *steps([50, 60], first=1),
              ev(K.JOB_END, 70)]
    r = run(events)
    # step 1 re-recorded: spans of steps 1-2 [10,30) wasted; step 3's start
    # at 30 is not closed (no step end, no job end in its segment): OTHER to 50
    assert seconds(r) == {"PRODUCTIVE": 30, "WASTED_PROGRESS_FROM_DISRUPTION": 20, "OTHER": 20}
    assert r.disruptions == 1


def test_rule4_restart_at_step_zero_wastes_the_whole_segment():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20]), ev(K.JOB_START, 50),
              *steps([50, 60]), ev(K.JOB_END, 70)]
    r = run(events)
    assert seconds(r) == {"PRODUCTIVE": 20, "WASTED_PROGRESS_FROM_DISRUPTION": 20,
                          "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 30}
    assert r.max_productive_step == 1  # only the new segment's step 0-1


def test_rule2_new_attempt_after_clean_end_re_recording_a_step_is_a_restart():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20]), ev(K.JOB_END, 30),
              ev(K.JOB_START, 100), *steps([100, 110], first=1), ev(K.JOB_END, 120)]
    r = run(events)
    # spans of steps 1 and 2 ([10,30), the last closed by the job end) redone
    assert seconds(r) == {"PRODUCTIVE": 30, "WASTED_PROGRESS_FROM_DISRUPTION": 20}
    assert r.idle_seconds == 70
    assert r.disruptions == 1


def test_rule2_crash_is_a_restart_even_when_resuming_after_the_last_step():
    events = [ev(K.JOB_START, 0), *steps([0, 10, 20]), ev(K.JOB_START, 50),
              *steps([50, 60], first=3), ev(K.JOB_END, 70)]
    r = run(events)
    # no step >= 3 to waste; the crashed step 2 [20,50) is recovery
    assert seconds(r) == {"PRODUCTIVE": 40, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 30}
    assert r.disruptions == 1


def test_rule2_crash_without_steps_is_not_a_restart():
    events = [ev(K.JOB_START, 0), ev(K.TPU_INIT_START, 0), ev(K.TPU_INIT_END, 5),
              ev(K.JOB_START, 20), *steps([25, 35]), ev(K.JOB_END, 45)]
    r = run(events)
    assert seconds(r) == {"TPU_INITIALIZATION": 5, "PRODUCTIVE": 20, "OTHER": 20}
    assert r.disruptions == 0


# ----------------------------------------------------------------- rule 3
def test_rule3_sparse_steps_count():
    r = run([ev(K.JOB_START, 0), *steps([0, 10, 30], step_numbers=[0, 10, 20]),
             ev(K.JOB_END, 40)])
    # spans [0,10) steps 0-9, [10,30) steps 10-19, [30,40) step 20
    assert seconds(r) == {"PRODUCTIVE": 40}
    assert r.max_productive_step == 20


def test_rule3_step_end_closes_the_last_step():
    r = run([ev(K.JOB_START, 0), *steps([0, 10]), ev(K.STEP_END, 15, 1), ev(K.JOB_END, 20)])
    assert seconds(r) == {"PRODUCTIVE": 15, "OTHER": 5}


# ----------------------------------------------------------------- rule 5
def test_rule5_custom_event_across_a_step_boundary_is_clipped_not_ignored():
    r = run([ev(K.JOB_START, 0), *steps([0, 10, 20, 30]),
             ev(K.CUSTOM_BADPUT_START, 8, custom_badput_event_type="eval"),
             ev(K.CUSTOM_BADPUT_END, 12, custom_badput_event_type="eval"), ev(K.JOB_END, 40)])
    # 4 s of eval; first span keeps 8 s, others 8 and 10: no startup excess
    assert seconds(r) == {"PRODUCTIVE": 36, "CUSTOM_BADPUT_EVENTS": 4}
    assert r.custom_badput_seconds == {"EVAL": 4}


def test_rule5_orbax_save_and_restore_spans():
    save = {"event_type": "save", "step": 2, "checkpoint_manager_blocking_start_time": 22.0,
            "checkpoint_manager_blocking_duration_secs": 3.0}
    restore = {"event_type": "restore", "step": 0, "checkpoint_manager_start_time": 1.0,
               "checkpoint_manager_duration_secs": 2.0}
    r = run([ev(K.JOB_START, 0), orbax(1.0, restore),
             *steps([5, 15, 25, 35]), orbax(22.0, save), ev(K.JOB_END, 45)])
    # restore [1,3), save [22,25) (carved out of step 1's span), other [0,1)+[3,5);
    # rule 6 on the carved spans: first 10 s, others 7 and 10 s (the last,
    # closed by the job end, does not count): startup 10 - 8.5 = 1.5
    assert seconds(r) == {"UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 2, "PROGRAM_STARTUP": 1.5,
                          "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 3, "PRODUCTIVE": 35.5, "OTHER": 3}


def test_rule5_orbax_entry_without_start_ends_at_its_write_time():
    entry = {"event_type": "save", "step": 1, "checkpoint_manager_blocking_duration_secs": 2.0}
    r = run([ev(K.JOB_START, 0), *steps([0, 10, 20]),
             orbax(math.nan, entry, write_time=16.0), ev(K.JOB_END, 30)])
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == 2  # [14,16)


def test_rule5_non_orbax_checkpoint_spans():
    r = run([ev(K.JOB_START, 0), ev(K.CHECKPOINT_RESTORE_START, 1), ev(K.CHECKPOINT_RESTORE_END, 4),
             *steps([5, 15, 25]), ev(K.CHECKPOINT_SAVE_START, 17, 1),
             ev(K.CHECKPOINT_SAVE_END, 19, 1), ev(K.JOB_END, 35)])
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME] == 3
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == 2


# ----------------------------------------------------------------- rule 6
HEURISTIC = [ev(K.JOB_START, 0), *steps([0, 10, 12, 14, 16]), ev(K.JOB_END, 18)]


def test_rule6_first_step_excess_is_program_startup_at_its_beginning():
    calc = Calculator(clock=lambda: 100.0)
    calc.add(HEURISTIC)
    r = calc.cumulative()
    # first span 10 s, other between-start spans 2 s each: excess 8
    assert seconds(r) == {"PROGRAM_STARTUP": 8, "PRODUCTIVE": 10}
    assert calc.window(0, 8).badput_seconds[B.PROGRAM_STARTUP] == 8
    assert calc.window(8, 18).productive_seconds == 10


def test_rule6_startup_is_taken_from_productive_time_after_carving():
    events = HEURISTIC + [ev(K.CUSTOM_BADPUT_START, 0, custom_badput_event_type="x"),
                          ev(K.CUSTOM_BADPUT_END, 2, custom_badput_event_type="x")]
    calc = Calculator(clock=lambda: 100.0)
    calc.add(events)
    # first span keeps 8 s after the custom event: excess 6, placed at [2,8)
    assert seconds(calc.cumulative()) == {"CUSTOM_BADPUT_EVENTS": 2, "PROGRAM_STARTUP": 6,
                                          "PRODUCTIVE": 10}
    w = calc.window(0, 8)
    assert seconds(w) == {"CUSTOM_BADPUT_EVENTS": 2, "PROGRAM_STARTUP": 6}


def test_rule6_explicit_compile_spans_replace_the_heuristic():
    events = HEURISTIC + [ev(K.PROGRAM_STARTUP_START, 0), ev(K.PROGRAM_STARTUP_END, 3),
                          ev(K.PROGRAM_STARTUP_START, 12), ev(K.PROGRAM_STARTUP_END, 13)]
    r = run(events)
    # compile [0,3) and a re-compile [12,13): 4 s; no heuristic excess
    assert seconds(r) == {"PROGRAM_STARTUP": 4, "PRODUCTIVE": 14}


def test_rule6_no_startup_without_other_kept_spans_or_with_a_wasted_first_span():
    r = run([ev(K.JOB_START, 0), *steps([0, 10]), ev(K.JOB_END, 12)])
    assert seconds(r) == {"PRODUCTIVE": 12}
    r = run([ev(K.JOB_START, 0), *steps([0, 10, 12, 14]), ev(K.JOB_START, 20),
             *steps([20, 22]), ev(K.JOB_END, 24)])
    # restart at step 0: the first span is wasted, no startup is split out
    assert r.badput_seconds[B.PROGRAM_STARTUP] == 0
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == 14


# ----------------------------------------------------------------- rule 7
def test_rule7_pairing_second_start_replaces_and_orphan_end_is_counted():
    r = run([ev(K.JOB_START, 0), ev(K.TPU_INIT_START, 1), ev(K.TPU_INIT_START, 2),
             ev(K.TPU_INIT_END, 5), ev(K.TRAINING_PREP_END, 6), ev(K.JOB_END, 10)])
    assert r.badput_seconds[B.TPU_INITIALIZATION] == 3
    assert r.badput_seconds[B.TRAINING_PREP] == 0
    assert r.skipped == {"unmatched_start": 1, "unmatched_end": 1}


def test_rule7_data_loading_outside_steps_is_sync_inside_is_async():
    r = run([ev(K.JOB_START, 0), ev(K.DATA_LOADING_START, 1), ev(K.DATA_LOADING_END, 4),
             *steps([4, 14, 24]), ev(K.DATA_LOADING_START, 13), ev(K.DATA_LOADING_END, 16),
             ev(K.JOB_END, 34)])
    # [1,4) blocks; [13,16) is inside step spans: async, productive
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == 3
    assert r.data_loading_async_seconds == 3
    assert r.badput_seconds[B.DATA_LOADING_ASYNC] == 3
    assert r.productive_seconds == 30


def test_rule7_elastic_buckets():
    r = run([ev(K.JOB_START, 0), ev(K.ELASTIC_WAIT_START, 1, elastic_wait_event_type="SCALE_UP"),
             ev(K.ELASTIC_WAIT_END, 3, elastic_wait_event_type="SCALE_UP"),
             ev(K.ELASTIC_WAIT_START, 4, elastic_wait_event_type="slice_lost"),
             ev(K.ELASTIC_WAIT_END, 7, elastic_wait_event_type="slice_lost"),
             ev(K.ELASTIC_REINIT_START, 7), ev(K.TPU_INIT_START, 8), ev(K.TPU_INIT_END, 9),
             ev(K.ELASTIC_REINIT_END, 11), ev(K.JOB_END, 12)])
    # TPU init inside the re-init counts once, as re-init (rule 8)
    assert seconds(r) == {"ELASTIC_SCALE_UP": 2, "ELASTIC_SLICE_DOWN": 3,
                          "ELASTIC_REINITIALIZATION": 4, "OTHER": 3}


def test_elastic_keys_only_for_elastic_runs():
    r = run([ev(K.JOB_START, 0), ev(K.JOB_END, 1)])
    assert set(r.badput_seconds) == set(BASE_BADPUT)
    # a large batch takes the column-wise path: same answer
    big = [ev(K.JOB_START, 0), ev(K.ELASTIC_REINIT_START, 1), ev(K.ELASTIC_REINIT_END, 3)]
    big += [ev(K.DATA_LOADING_START, 4 + i / 1000) for i in range(300)]
    r = run(big + [ev(K.JOB_END, 10)])
    assert r.badput_seconds[B.ELASTIC_REINITIALIZATION] == 2
    assert r.skipped == {"unmatched_start": 299}


# ----------------------------------------------------------------- rule 8
def test_rule8_restore_inside_prep_counts_once():
    restore = {"event_type": "restore", "checkpoint_manager_start_time": 8.0,
               "checkpoint_manager_duration_secs": 3.0}
    r = run([ev(K.JOB_START, 0), ev(K.TRAINING_PREP_START, 5), ev(K.TRAINING_PREP_END, 15),
             orbax(8.0, restore), ev(K.JOB_END, 20)])
    assert seconds(r) == {"TRAINING_PREP": 7, "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 3, "OTHER": 10}


def test_rule8_wasted_outranks_what_happened_inside_and_recovery_outranks_all():
    save = {"event_type": "save", "checkpoint_manager_blocking_start_time": 25.0,
            "checkpoint_manager_blocking_duration_secs": 2.0}
    events = CRASH + [orbax(25.0, save), ev(K.TPU_INIT_START, 60),
                      ev(K.TPU_INIT_END, 70)]
    r = run(events)
    # the save at [25,27) lies in step 2's wasted span; the init inside the
    # recovery gap is recovery
    assert seconds(r) == {"PRODUCTIVE": 40, "WASTED_PROGRESS_FROM_DISRUPTION": 20,
                          "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 60}


# ----------------------------------------------------------------- rule 9
def test_rule9_bucket_equal_to_the_job_is_100_percent():
    r = run([ev(K.JOB_START, 0), ev(K.TPU_INIT_START, 0), ev(K.TPU_INIT_END, 10),
             ev(K.JOB_END, 10)])
    assert r.badput_percent[B.TPU_INITIALIZATION] == 100.0
    assert set(r.badput_percent) == set(BASE_BADPUT)


# ---------------------------------------------------------------- rule 11
def test_rule11_max_productive_step_survives_a_restart():
    events = CRASH[:8]  # the new attempt has just recorded step 2
    r = run(events, now=105)
    # kept: steps 0 and 1 (the new segment's step 2 is still open)
    assert r.max_productive_step == 1
    assert r.disruptions == 1
    assert r.last_step == 2
