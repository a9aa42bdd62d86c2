"""Incidents: per disruption its cause, who saw it, time to detect, to restart
and to the first step, the progress lost; MTBF, MTTR, badput by cause and by
host, suspect hosts. Expected numbers derived by hand in the comments."""

import uuid

import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.incidents import incidents
from goodput_core.record.recorder import Recorder
from goodput_core.stores.memory import MemoryStore


def _calc(record, store=None):
    store = store or MemoryStore(uuid.uuid4().hex)
    rec = Recorder("r", store, strict=True, clock=lambda: 0.0)
    record(rec)
    assert rec.flush(30)
    calc = Calculator("r", store)
    calc.refresh()
    return calc


def _steps(rec, first, n, t0):
    for i in range(n):
        rec.record_step_start_time(first + i, t0 + i)
    return t0 + n


def test_a_recorded_preemption_with_a_requeue_wait():
    def record(rec):
        # submit 0, granted 10; job start 12; steps 0..6 at 13..19; preemption at
        # 19.5; requeued 21, granted 30; job start 33; steps 5..10 at 34..39; end 40
        rec.record_job_submitted(0)
        rec.record_resources_granted(10)
        rec.record_job_start_time(12)
        _steps(rec, 0, 7, 13)
        rec.record_disruption("preemption", 19.5)
        rec.record_job_submitted(21)
        rec.record_resources_granted(30)
        rec.record_job_start_time(33)
        _steps(rec, 5, 6, 34)
        rec.record_step_end_time(10, 40)
        rec.record_job_end_time(40)

    s = incidents(_calc(record), 50)
    (i,) = s.incidents
    assert i.cause == "preemption" and i.attempt == 1
    assert i.seen_by is not None and i.seen_by[0] == 0
    # last progress: step 6 started at 19; detected by the recorded disruption
    # at 19.5: 0.5 s to detect; restart at 33: 13.5 s, of which the requeue's
    # wait [21, 30] is 9 s; first step 1 s after the job start
    assert (i.last_progress, i.detected, i.restarted, i.first_step) == (19, 19.5, 33, 34)
    assert i.time_to_detect == pytest.approx(0.5)
    assert i.time_to_restart == pytest.approx(13.5)
    assert i.scheduling_seconds == pytest.approx(9)
    assert i.time_to_first_step == pytest.approx(1)
    # restart from step 5: steps 5 and 6 redone; wasted [18, 19.5) = 1.5 s;
    # recovery [19.5, 33) less the 9 s wait = 4.5 s
    assert i.lost_steps == 2
    assert i.lost_seconds == pytest.approx(1.5)
    assert i.recovery_seconds == pytest.approx(4.5)
    # MTBF = runtime total (21 s, see test_lifecycle.py) / 1; MTTR = 34 - 19 = 15 s
    assert s.mtbf_seconds == pytest.approx(21)
    assert s.mttr_seconds == pytest.approx(15)
    assert s.badput_by_cause == {"preemption": pytest.approx(6.0)}
    assert s.suspect_hosts == []


def test_a_crash_seen_only_by_the_scheduler_and_a_clean_restart():
    def record(rec):
        # attempt 1: job start 0, steps 0..3 at 1..4, nothing more (killed);
        # the scheduler requeues at 6, grants at 8; attempt 2 starts 9, steps
        # 2..4 at 10..12, job end 13; attempt 3 after a clean end: no incident
        rec.record_job_start_time(0)
        _steps(rec, 0, 4, 1)
        rec.record_job_submitted(6)
        rec.record_resources_granted(8)
        rec.record_job_start_time(9)
        _steps(rec, 2, 3, 10)
        rec.record_job_end_time(13)
        rec.record_job_start_time(20)
        _steps(rec, 5, 2, 21)
        rec.record_job_end_time(23)

    s = incidents(_calc(record), 30)
    (i,) = s.incidents
    assert i.cause == "requeued by the scheduler" and i.seen_by is None
    # last progress 4 (step 3 started); detected at the requeue (6): 2 s;
    # restart 9 - 6 = 3 s, 2 s of it waiting; steps 2, 3 redone
    assert i.time_to_detect == pytest.approx(2)
    assert i.time_to_restart == pytest.approx(3)
    assert i.scheduling_seconds == pytest.approx(2)
    assert i.lost_steps == 2


def test_a_host_that_saw_two_disruptions_is_a_suspect():
    store = MemoryStore(uuid.uuid4().hex)

    def record(rec):
        rec.record_job_start_time(0)
        _steps(rec, 0, 3, 1)
        rec.record_job_start_time(10)
        _steps(rec, 2, 3, 11)
        rec.record_job_start_time(20)
        _steps(rec, 4, 3, 21)
        rec.record_job_end_time(24)

    # the disruptions come from host "h3" (process 3), as a per-host writer records them
    store.append([EventRecord("r", int(Kind.DISRUPTION), 4.5, None,
                              {"disruption_cause": "exception:NCCLError"}, 3, "h3"),
                  EventRecord("r", int(Kind.DISRUPTION), 14.5, None,
                              {"disruption_cause": "exception:NCCLError"}, 3, "h3")])
    s = incidents(_calc(record, store), 30)
    assert [i.seen_by for i in s.incidents] == [(3, "h3"), (3, "h3")]
    assert s.suspect_hosts == ["3 (h3)"]
    assert set(s.badput_by_host) == {"3 (h3)"}


def test_no_incident_without_a_restart():
    def record(rec):
        rec.record_job_start_time(0)
        _steps(rec, 0, 3, 1)
        rec.record_job_end_time(4)

    s = incidents(_calc(record), 10)
    assert s.incidents == [] and s.mtbf_seconds is None and s.mttr_seconds is None


def test_a_kill_seen_by_the_heartbeats_stopping():
    """No disruption recorded (SIGKILL): the liveness rule's detection, 3 heartbeat
    intervals after the last sign of life."""
    store = MemoryStore(uuid.uuid4().hex)

    def record(rec):
        # job start 0; steps 0..4 at 1..5; heartbeats every 10 s at 0 and 10 (the
        # last sign of life: 10); killed; next job start 60; steps 3..5 at 61..63
        rec.record_job_start_time(0)
        _steps(rec, 0, 5, 1)
        rec.record_job_start_time(60)
        _steps(rec, 3, 3, 61)
        rec.record_job_end_time(64)

    store.append([EventRecord("r", int(Kind.HEARTBEAT), t, None, {"heartbeat_seconds": 10.0})
                  for t in (0.0, 10.0)])
    (i,) = incidents(_calc(record, store), 100).incidents
    assert i.cause == "no sign of life (killed, or the host was lost)"
    # detected at 10 + 3 x 10 = 40; last progress: step 4 started at 5
    assert i.detected == pytest.approx(40)
    assert i.time_to_detect == pytest.approx(35)
    assert i.time_to_restart == pytest.approx(20)


def test_a_stop_without_a_restart_is_an_open_incident():
    """Ctrl-C (a recorded disruption last) and no restart: ``goodput runs --state``
    says stopped, so the incidents say so too, open. By hand: steps 0..2 at 1..3,
    the disruption at 5: detected 5, last progress 3 (step 2's start), nothing
    lost or recovered yet; MTBF = the 5 s runtime over one incident."""
    def record(rec):
        rec.record_job_start_time(0)
        _steps(rec, 0, 3, 1)
        rec.record_disruption("exception:KeyboardInterrupt", 5)

    calc = _calc(record)
    assert calc.state(100).state == "stopped"
    (i,) = incidents(calc, 100).incidents
    assert i.open and i.attempt == 1 and i.cause == "exception:KeyboardInterrupt"
    assert (i.detected, i.last_progress, i.time_to_detect) == (5, 3, 2)
    assert (i.restarted, i.first_step, i.time_to_restart, i.time_to_first_step) == \
        (None, None, None, None)
    assert (i.lost_seconds, i.lost_steps, i.recovery_seconds) == (0, 0, 0)
    s = incidents(calc, 100)
    assert s.mtbf_seconds == pytest.approx(5.0) and s.mttr_seconds is None


def test_a_kill_without_a_restart_is_open_once_the_heartbeats_stopped():
    """SIGKILL, no restart: running while the last heartbeat is recent, then an open
    incident known 3 intervals after the last sign of life (10 + 30 = 40)."""
    store = MemoryStore(uuid.uuid4().hex)

    def record(rec):
        rec.record_job_start_time(0)
        _steps(rec, 0, 5, 1)

    store.append([EventRecord("r", int(Kind.HEARTBEAT), t, None, {"heartbeat_seconds": 10.0})
                  for t in (0.0, 10.0)])
    calc = _calc(record, store)
    assert incidents(calc, 35).incidents == []  # 25 s of silence: still running
    (i,) = incidents(calc, 100).incidents
    assert i.open and i.cause == "no sign of life (killed, or the host was lost)"
    assert i.detected == pytest.approx(40) and i.time_to_detect == pytest.approx(35)
