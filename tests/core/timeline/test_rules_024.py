"""What we adopted from ml-goodput-measurement 0.2.4 (docs/differences.md):
the first data load of every attempt after the first blocks wherever it
lies (rule 7), and the checkpoint save bucket split into local and
persistent saves. Expected numbers derived by hand in each test."""

from __future__ import annotations

import json

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.timeline.buckets import BadputType

B = BadputType
T0 = 1_700_000_000.0
JOB = "rules-024"


def _calc(payloads, now=T0 + 1000):
    calc = Calculator(JOB, clock=lambda: now, liveness=False)
    calc.add_payloads([{"job_name": JOB, **p} for p in payloads])
    return calc


def _step(k, t):
    return {"step_count": k, "step_start_time": T0 + t}


def _load(a, b):
    return [{"data_loading_start_time": T0 + a}, {"data_loading_end_time": T0 + b}]


def _restarted_job(graceful_first=False):
    """Attempt 1: steps 0-3 every 10 s, each recording its step start before
    loading (1 s loads at +0.5 s, inside the step spans), then a crash in
    step 3 (or a job end at 30 s). Attempt 2 at 50 s: step 2 again at 52 s,
    its first load 52.5-54.5 s inside step 2's span, steps 3 and 4, job end at 82 s."""
    p = [{"job_start_time": T0}]
    for k in range(4):
        p += [_step(k, 10 * k)] + (_load(10 * k + 0.5, 10 * k + 1.5) if k < 3 else [])
    if graceful_first:
        p.append({"job_end_time": T0 + 30})
    p += [{"job_start_time": T0 + 50}, _step(2, 52)] + _load(52.5, 54.5)
    p += [_step(3, 62)] + _load(62.5, 63.5) + [_step(4, 72), {"job_end_time": T0 + 82}]
    return p


def test_the_first_load_after_a_restart_blocks_wherever_it_lies():
    r = _calc(_restarted_job()).cumulative()
    # attempt 1: steps 0, 1 kept (20 s), step 2 redone (10 s wasted), 30 -> 50 s recovery;
    # attempt 2: 50 -> 52 s OTHER, its first load 2 s blocking (carved out of step 2's
    # span), 8 + 10 + 10 s productive; the other loads overlapped (async)
    assert r.total_seconds == pytest.approx(82.0)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0)
    assert r.productive_seconds == pytest.approx(48.0)
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(10.0)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(20.0)
    assert r.badput_seconds[B.OTHER] == pytest.approx(2.0)
    assert r.data_loading_async_seconds == pytest.approx(4.0)  # 3 in attempt 1, 1 in 2


def test_a_new_attempt_after_a_job_end_is_a_restart_of_the_pipeline_too():
    r = _calc(_restarted_job(graceful_first=True)).cumulative()
    # attempt 1 ended at 30 s: 20 s idle (not in total); step 2 re-recorded: the
    # restart wastes [20, 30); the first load of attempt 2 blocks as above
    assert r.idle_seconds == pytest.approx(20.0)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0)
    # the first attempt's first load, inside step 0's span, stays overlapped
    first = _calc(_restarted_job()[:6]).cumulative(now=T0 + 20)
    assert first.badput_seconds[B.DATA_LOADING_SYNC] == 0.0


def test_read_incrementally_it_is_the_same():
    payloads = _restarted_job()
    calc = Calculator(JOB, clock=lambda: T0 + 1000, liveness=False)
    for p in payloads:  # one event at a time, querying in between
        calc.add_payloads([{"job_name": JOB, **p}])
        calc.cumulative()
    assert calc.cumulative().badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0)
    assert calc.timeline.full_rebuilds < len(payloads)


def _save(step, start, seconds, directory):
    return {"step": step, "event_type": "save", "directory": directory,
            "checkpoint_manager_blocking_start_time": T0 + start,
            "checkpoint_manager_blocking_duration_secs": seconds}


def test_checkpoint_save_time_splits_into_local_and_persistent_saves():
    p = [{"job_start_time": T0}] + [_step(k, 10 * k) for k in range(6)]
    p += [_save(1, 12, 3.0, "gs://bucket/run/checkpoints"),   # persistent
          _save(2, 23, 2.0, "/mnt/ramdisk/checkpoints"),      # local (emergency checkpoint)
          _save(3, 33, 1.0, "s3://other/ckpt"),               # persistent too
          {"job_end_time": T0 + 60}]
    calc = _calc(p)
    r = calc.cumulative()
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == pytest.approx(6.0)
    assert calc.save_seconds_by_storage() == pytest.approx({"local": 2.0, "persistent": 4.0})
    # a window and an exclusion apply as they do to the bucket
    assert calc.save_seconds_by_storage(T0 + 20, T0 + 40) == pytest.approx(
        {"local": 2.0, "persistent": 1.0})
    assert calc.save_seconds_by_storage(exclude=[(T0 + 12, T0 + 14)]) == pytest.approx(
        {"local": 2.0, "persistent": 2.0})


def test_a_persistent_save_in_redone_progress_is_wasted_not_save_time():
    p = [{"job_start_time": T0}] + [_step(k, 10 * k) for k in range(4)]
    p += [_save(2, 22, 3.0, "gs://bucket/ckpt"), {"job_start_time": T0 + 50},
          _step(2, 50), _step(3, 60), {"job_end_time": T0 + 70}]
    calc = _calc(p)
    r = calc.cumulative()
    # the restart at step 2 wastes [20, 30), the save inside it with it
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == 0.0
    assert calc.save_seconds_by_storage() == {"local": 0.0, "persistent": 0.0}


def test_the_report_shows_the_split_under_the_save_bucket(tmp_path, capsys):
    from goodput_core.cli import main
    from goodput_core.events import from_payload
    from goodput_core.stores import open_store

    p = [{"job_start_time": T0}] + [_step(k, 10 * k) for k in range(4)]
    p += [_save(1, 12, 3.0, "gs://bucket/ckpt"), _save(2, 23, 1.0, "/local/ckpt"),
          {"job_end_time": T0 + 40}]
    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    store = open_store(url)
    store.append([from_payload({"job_name": JOB, **x}) for x in p])
    store.close()
    assert main(["report", JOB, "--store", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["checkpoint_save_storage"] == {"local": 1.0, "persistent": 3.0}
    assert main(["report", JOB, "--store", url]) == 0
    text = capsys.readouterr().out
    assert "    local saves" in text and "    persistent saves" in text


@pytest.mark.parametrize("resume_at, wasted", [(6, 0.0),   # jump forward: steps 4, 5 skipped
                                                (4, 0.0),   # sequential: the next step
                                                (2, 10.0)])  # rollback: step 2 redone
def test_resume_modes_jump_forward_sequential_and_rollback(resume_at, wasted):
    # steps 0-3 every 10 s, a crash in step 3 (no job end), a new attempt at 50 s that
    # resumes at `resume_at` at 52 s, two 10 s steps, job end at 72 s
    p = [{"job_start_time": T0}] + [_step(k, 10 * k) for k in range(4)]
    p += [{"job_start_time": T0 + 50}, _step(resume_at, 52), _step(resume_at + 1, 62),
          {"job_end_time": T0 + 72}]
    r = _calc(p).cumulative()
    assert r.disruptions == 1                       # a restart in all three modes
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(wasted)
    # the crashed step 3, from its start to the new job start, is recovery
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(20.0)
    assert r.productive_seconds == pytest.approx(30.0 - wasted + 20.0)
    assert r.max_productive_step == resume_at + 1
