"""Each clause of semantics rule 13 (many writers, one job) pinned by figures
derived by hand, through the calculator (the column-wise pass), independent
of the per-event oracle that test_lead_events_columns.py compares it with: a
bug both passes shared would fail here. The arithmetic is in each test's
comments; times are seconds from 0, ``S3@20`` is "step 3 started at 20".

Each test was checked to fail with its clause broken in
goodput_core/timeline/streams.py, first_step.py or stragglers.py (the break
is named in the test's docstring)."""

from __future__ import annotations

import pytest

from goodput_core.events import Kind
from goodput_core.queries.incidents import incidents
from goodput_core.timeline.buckets import BadputType as B
from tests.support.writers import Writer, job

NOW = 1000.0
SYNC, REC, WASTED = B.DATA_LOADING_SYNC, B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, \
    B.WASTED_PROGRESS_FROM_DISRUPTION

# each test twice: records given to the calculator, and a SQLite store read by
# columns per writer (tests/core/conftest.py, read_path)
pytestmark = pytest.mark.usefixtures("read_path")


def _figures(calc, now=NOW):
    r = calc.cumulative(now=now)
    return r, {b: v for b, v in r.badput_seconds.items()
               if abs(v) > 1e-9 and b is not B.DATA_LOADING_ASYNC}


def test_an_earlier_writer_without_steps_does_not_lead():
    """Two recorders under index 0: A (the JAX adapter's other process)
    records only its job start at 0 and job end at 11; B starts at 0.5 and
    records the training. B leads. (Broken: the earliest to start leads
    whatever it recorded.)"""
    a = Writer(0, "a").ev(Kind.JOB_START, 0.0).ev(Kind.JOB_END, 11.0)
    b = Writer(0, "b").ev(Kind.JOB_START, 0.5).steps(0, [1.0 + k for k in range(10)], load=0.2)
    b.ev(Kind.JOB_END, 11.0)
    r, bad = _figures(job(a, b))
    # B's lifetime [0.5, 11) = 10.5 s; its 10 spans of 1 s, 0.2 s loading each:
    # sync 10 x 0.2 = 2, productive 10 - 2 = 8; OTHER [0.5, 1) = 0.5
    assert r.total_seconds == pytest.approx(10.5)
    assert r.productive_seconds == pytest.approx(8.0)
    assert bad == pytest.approx({SYNC: 2.0, B.OTHER: 0.5})
    assert r.disruptions == 0 and r.last_step == 9


def _two_attempts(disrupt):
    """Hosts 0..2: attempt 1 (job start 0, S0@1 .. S5@6, no job end),
    attempt 2 (job start 20 under new pids, S4@21 .. S7@24, job end 25);
    ``disrupt``: {host: time of its disruption in attempt 1}."""
    hosts = []
    for i in range(3):
        w = Writer(i, f"h{i}", pid=1).ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(6)])
        if i in disrupt:
            w.disruption(disrupt[i], f"cause-{i}")
        w2 = Writer(i, f"h{i}", pid=2).ev(Kind.JOB_START, 20.0)
        w2.steps(4, [21.0 + k for k in range(4)]).ev(Kind.JOB_END, 25.0)
        hosts += [w, w2]
    return job(*hosts)


def test_several_hosts_recording_disruptions_in_one_gap_count_once_from_the_earliest():
    """Hosts 1 and 2 record a disruption at 6.5 and 7.0, the lead none: one
    restart, recovery from the earliest. (Broken: the latest is borrowed, or
    every one.)"""
    calc = _two_attempts({2: 7.0, 1: 6.5})
    r, bad = _figures(calc)
    # restart at step 4: wasted S4 [5, 6) and S5 [6, 6.5) (closed by the
    # disruption) = 1.5; recovery [6.5, 20) = 13.5; productive S0..S3 [1, 5) = 4
    # and S4..S7 [21, 25) = 4; OTHER [0, 1) + [20, 21) = 2; total 25
    assert r.disruptions == 1
    # one incident, seen by the host that saw it first
    assert [(i.cause, i.seen_by) for i in incidents(calc, NOW).incidents] == [
        ("cause-1", (1, "h1"))]
    assert r.total_seconds == pytest.approx(25.0)
    assert bad == pytest.approx({WASTED: 1.5, REC: 13.5, B.OTHER: 2.0})
    assert r.productive_seconds == pytest.approx(8.0)


def test_the_leads_own_disruption_beside_another_hosts_is_the_one_counted():
    """The lead records its disruption at 6.8, host 2 an earlier one at 6.5:
    the lead's own is used, once. (Broken: the earliest of any host's.)"""
    calc = _two_attempts({0: 6.8, 2: 6.5})
    r, bad = _figures(calc)
    # wasted S4 [5, 6) + S5 [6, 6.8) = 1.8; recovery [6.8, 20) = 13.2
    assert r.disruptions == 1
    assert [(i.cause, i.seen_by) for i in incidents(calc, NOW).incidents] == [
        ("cause-0", (0, "h0"))]
    assert bad == pytest.approx({WASTED: 1.8, REC: 13.2, B.OTHER: 2.0})
    assert r.productive_seconds == pytest.approx(8.0)


def test_a_non_lead_host_restarting_while_the_others_run_on():
    """Hosts 0 and 1 run S0@1 .. S9@10 (0.1 s loads), job end 11; host 2 runs
    S0..S3 (0.1 s loads), dies silently, restarts (job start 4.5, a new pid)
    and runs S4..S9 with 0.4 s loads. The job did not restart, and host 2's
    second process gates its steps. (Broken: only a host's first piece is
    compared.)"""
    h0 = Writer(0, "h0").ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(10)], load=0.1)
    h1 = Writer(1, "h1").ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(10)], load=0.1)
    h0.ev(Kind.JOB_END, 11.0)
    h1.ev(Kind.JOB_END, 11.0)
    h2a = Writer(2, "h2", pid=1).ev(Kind.JOB_START, 0.0).steps(0, [1.0, 2.0, 3.0], load=0.1)
    h2a.ev(Kind.STEP_START, 4.0, 3)  # killed in S3 (no load, no end)
    h2b = Writer(2, "h2", pid=2).ev(Kind.JOB_START, 4.5)
    h2b.steps(4, [5.0 + k for k in range(6)], load=0.4).ev(Kind.JOB_END, 11.0)
    r, bad = _figures(job(h0, h1, h2a, h2b))
    # sync: S0..S3 0.1 each (everyone's) = 0.4; S4..S9 host 2's 0.4 each = 2.4;
    # 2.8 in all; OTHER [0, 1) = 1; total 11. Startup (rule 6): S0 keeps 0.9,
    # the other spans between step starts (S1..S8; S9 is closed by the job end)
    # keep 3 x 0.9 + 5 x 0.6 = 5.7, mean 0.7125: excess 0.1875; productive
    # 10 - 2.8 - 0.1875 = 7.0125
    assert r.disruptions == 0
    assert r.total_seconds == pytest.approx(11.0)
    assert bad == pytest.approx({SYNC: 2.8, B.OTHER: 1.0, B.PROGRAM_STARTUP: 0.1875})
    assert r.productive_seconds == pytest.approx(7.0125)


def test_two_blocking_intervals_in_one_step_of_a_straggler_add_up():
    """Host 1 blocks twice in every step: a load [0.1, 0.3) and an input stall
    [0.6, 0.8) into it; the lead 0.1 s at 0.5. (Broken: one interval per step.)"""
    h0 = Writer(0, "h0").ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(10)], load=0.1)
    h1 = Writer(1, "h1").ev(Kind.JOB_START, 0.0)
    for k in range(10):
        t = 1.0 + k
        h1.ev(Kind.STEP_START, t, k)
        h1.pair(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END, t + 0.1, t + 0.3)
        h1.pair(Kind.INPUT_STALL_START, Kind.INPUT_STALL_END, t + 0.6, t + 0.8)
    h0.ev(Kind.JOB_END, 11.0)
    h1.ev(Kind.JOB_END, 11.0)
    r, bad = _figures(job(h0, h1))
    # each step: host 1 blocked 0.2 + 0.2 = 0.4 > the lead's 0.1: sync 10 x 0.4
    # = 4, productive 10 - 4 = 6; OTHER [0, 1) = 1
    assert bad == pytest.approx({SYNC: 4.0, B.OTHER: 1.0})
    assert r.productive_seconds == pytest.approx(6.0)


def _first_loads(slow, kind=(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END), skew=0.0):
    """Hosts 0..2: job start 0, a first load from 1 (0.5 s; ``slow`` s on host
    2, recorded as ``kind``, its clock ``skew`` s off), S0@3 .. S4@7 with a
    0.1 s load each, job end 8."""
    hosts = []
    for i in range(3):
        w = Writer(i, f"h{i}", skew=skew if i == 2 else 0.0).ev(Kind.JOB_START, 0.0)
        w.pair(*(kind if i == 2 else (Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END)),
               1.0, 1.0 + (slow if i == 2 else 0.5))
        w.steps(0, [3.0 + k for k in range(5)], load=0.1).ev(Kind.JOB_END, 8.0)
        hosts.append(w)
    return job(*hosts)


@pytest.mark.parametrize("kind", [(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END),
                                  (Kind.DATA_LOADING_START, Kind.DATA_LOADING_END),
                                  (Kind.INPUT_STALL_START, Kind.INPUT_STALL_END)])
def test_a_straggler_before_the_first_step_gates_the_job(kind):
    """Host 2's first load takes 1.5 s, the others' 0.5 s: every host waits
    for it before step 0 (a load of any kind blocks before the first step).
    (Broken: no gating before the first step.)"""
    r, bad = _figures(_first_loads(1.5, kind))
    # before S0: the job waits 1.5 s (host 2's [1, 2.5)); the lead's own 0.5 s
    # plus 1.0 carved where host 2 still loaded, [1.5, 2.5); in steps 5 x 0.1:
    # sync 1.5 + 0.5 = 2.0; OTHER [0, 1) + [2.5, 3) = 1.5; productive 5 - 0.5 = 4.5
    assert bad == pytest.approx({SYNC: 2.0, B.OTHER: 1.5})
    assert r.productive_seconds == pytest.approx(4.5)
    assert r.total_seconds == pytest.approx(8.0)
    # a faster host before the first step changes nothing: the lead's own 0.5 s
    r, bad = _figures(_first_loads(0.25, kind))
    assert bad == pytest.approx({SYNC: 1.0, B.OTHER: 2.5})


def _first_phases(lead, slow):
    """Hosts 0..2, job start 0, S0@3 .. S4@7 (0.1 s loads), job end 8; before
    S0 the lead records ``lead`` and host 2 ``slow`` ((kind pair, a, b), ...),
    host 1 a load [1, 1.5)."""
    hosts = []
    for i, pairs in enumerate((lead, [((Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END),
                                       1.0, 1.5)], slow)):
        w = Writer(i, f"h{i}").ev(Kind.JOB_START, 0.0)
        for kinds, a, b in pairs:
            w.pair(*kinds, a, b)
        hosts.append(w.steps(0, [3.0 + k for k in range(5)], load=0.1).ev(Kind.JOB_END, 8.0))
    return job(*hosts)


_LOAD = (Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END)
_COMPILE = (Kind.PROGRAM_STARTUP_START, Kind.PROGRAM_STARTUP_END)


def test_a_compile_inside_a_hosts_first_load_is_not_its_loading():
    """Host 2's first load [1, 2.5) holds a compile [1.2, 1.7): what its own
    timeline counts as loading there is 1.0 s, the lead's 0.5 s. (Broken: the
    whole load is compared, 1.5 s.)"""
    calc = _first_phases([(_LOAD, 1.0, 1.5)], [(_LOAD, 1.0, 2.5), (_COMPILE, 1.2, 1.7)])
    r, bad = _figures(calc)
    # need 1.0 - 0.5 = 0.5, carved where host 2 loaded ([1, 1.2) and [1.7, 2.5),
    # same first step start) and the lead is free: [1.7, 2.2). Sync: 0.5 + 0.5
    # before S0, 5 x 0.1 in steps = 1.5; OTHER [0, 1) + [1.5, 1.7) + [2.2, 3)
    # = 2.0; productive 5 - 0.5 = 4.5; total 8
    assert bad == pytest.approx({SYNC: 1.5, B.OTHER: 2.0})
    assert r.productive_seconds == pytest.approx(4.5)


def test_what_the_leads_time_before_its_first_step_cannot_hold_goes_to_its_first_step():
    """The lead is busy up to S0 (init [0, 1), its load [1, 1.5), preparation
    [1.5, 3)); host 2 loads [1, 2.1): the 0.6 s it waited longer is carved
    from the lead's step 0, from its start, where the lead waited at the
    first collective. (Broken: only the time before the first step holds it.)"""
    calc = _first_phases([((Kind.TPU_INIT_START, Kind.TPU_INIT_END), 0.0, 1.0), (_LOAD, 1.0, 1.5),
                          ((Kind.TRAINING_PREP_START, Kind.TRAINING_PREP_END), 1.5, 3.0)],
                         [(_LOAD, 1.0, 2.1)])
    r, bad = _figures(calc)
    # nothing free before S0; in S0 [3, 4) the lead loads [3.5, 3.6): the 0.6 s go
    # to [3, 3.5) and [3.6, 3.7). Sync: 0.5 before S0, 0.1 + 0.6 in S0, 4 x 0.1
    # in S1..S4 = 1.6; init 1; preparation 1.5; productive 0.3 + 3.6 = 3.9;
    # total 8 (startup, rule 6: S0 keeps 0.3 < the others' 0.9: none)
    assert bad == pytest.approx({SYNC: 1.6, B.TPU_INITIALIZATION: 1.0, B.TRAINING_PREP: 1.5})
    assert r.productive_seconds == pytest.approx(3.9)
    assert r.total_seconds == pytest.approx(8.0)


def _overlapping_restart(*, sigterm=True, job_end_at=None, save=True):
    """Issue 40: the old process (A, index 0) runs S0@1 .. S19@20, records a
    SIGTERM at 20.5, heartbeats while it shuts down (21 .. 24, a save
    [20.6, 23)) and maybe a job end; the new one (B, index 0, another pid)
    starts at 21.5 and runs S20@22 .. S39@41, job end 42."""
    a = Writer(0, "pod-a").ev(Kind.JOB_START, 0.0).heartbeat(0.1)
    a.steps(0, [1.0 + k for k in range(20)])
    if sigterm:
        a.disruption(20.5)
    if save:
        a.pair(Kind.CHECKPOINT_SAVE_START, Kind.CHECKPOINT_SAVE_END, 20.6, 23.0)
    for t in (21.0, 22.0, 23.0, 24.0):
        a.heartbeat(t)
    if job_end_at is not None:
        a.ev(Kind.JOB_END, job_end_at)
    b = Writer(0, "pod-b").ev(Kind.JOB_START, 21.5).heartbeat(21.6)
    b.steps(20, [22.0 + k for k in range(20)]).ev(Kind.JOB_END, 42.0)
    return a, b


@pytest.mark.parametrize("heartbeats", [True, False])
@pytest.mark.parametrize("job_end_at", [None, 24.5])
def test_a_restart_overlapping_the_old_process_shutdown_is_the_jobs(heartbeats, job_end_at):
    """The issue's first case: 1 disruption, the new attempt's steps, state
    "ended"; the same with heartbeats off, and when the old process also
    records a job end on its way out. (Broken: the closing rule and the
    takeover both; either alone keeps this case.)"""
    calc = job(*_overlapping_restart(job_end_at=job_end_at), heartbeats=heartbeats)
    r, bad = _figures(calc)
    # A: productive S0..S18 [1, 20) = 19 and S19 [20, 20.5) (closed by the
    # SIGTERM) = 0.5; recovery [20.5, 21.5) = 1 (A's save after its SIGTERM is
    # under it); B: productive [22, 42) = 20; OTHER [0, 1) + [21.5, 22) = 1.5
    assert r.disruptions == 1 and r.last_step == 39 and r.max_productive_step == 39
    assert r.total_seconds == pytest.approx(42.0)
    assert r.productive_seconds == pytest.approx(39.5)
    assert bad == pytest.approx({REC: 1.0, B.OTHER: 1.5})
    st = calc.state(now=NOW)
    assert st.state == "ended"
    # the old attempt's last sign of life before the new start: its heartbeat
    # at 21 (a sign of life by definition, rule 15), else its save's start
    assert [(x.restart_time, x.last_sign_of_life) for x in st.restarts] == [
        (21.5, 21.0 if heartbeats else 20.6)]


def test_a_writer_that_recorded_a_disruption_leads_no_later_attempt():
    """A is preempted while compiling (SIGTERM at 5, no step) and shuts down
    (heartbeats to 8, a job end at 8); B starts at 6. A's attempt is the
    job's first, B's the second. (Broken: a piece runs to its last event:
    B, with steps, replaces A and A's attempt is lost.)"""
    a = Writer(0, "pod-a").ev(Kind.JOB_START, 0.0).ev(Kind.PROGRAM_STARTUP_START, 1.0)
    a.disruption(5.0).heartbeat(6.0).heartbeat(7.0).ev(Kind.JOB_END, 8.0)
    b = Writer(0, "pod-b").ev(Kind.JOB_START, 6.0).steps(0, [7.0 + k for k in range(5)])
    b.ev(Kind.JOB_END, 12.0)
    r, bad = _figures(job(a, b))
    # A: startup [1, 5) (open up to its disruption, rule 14) = 4, OTHER [0, 1);
    # recovery [5, 6) = 1 (a recorded disruption before any step, rule 2);
    # B: OTHER [6, 7), productive [7, 12) = 5; total 12
    assert r.disruptions == 1
    assert r.total_seconds == pytest.approx(12.0)
    assert bad == pytest.approx({B.PROGRAM_STARTUP: 4.0, REC: 1.0, B.OTHER: 2.0})
    assert r.productive_seconds == pytest.approx(5.0)


def test_a_new_process_training_after_the_old_one_stopped_takes_the_lead():
    """The old process recorded no SIGTERM (no handler) but a job end at 24
    as it left, after the new one started (21.5): the new one trains after
    the old one's last step, so it takes the lead at its start, and the old
    one's job end is not the job's. (Broken: no takeover: the earliest with
    steps keeps the lead and the new attempt is lost.)"""
    calc = job(*_overlapping_restart(sigterm=False, job_end_at=24.0, save=False))
    r, bad = _figures(calc)
    # A crashed as far as the job knows (no job end before B's start): the
    # crashed S19 [20, 21.5) is recovery (rule 4) = 1.5; productive S0..S18
    # [1, 20) = 19 and B's [22, 42) = 20; OTHER [0, 1) + [21.5, 22) = 1.5
    assert r.disruptions == 1 and r.last_step == 39
    assert r.total_seconds == pytest.approx(42.0)
    assert bad == pytest.approx({REC: 1.5, B.OTHER: 1.5})
    assert r.productive_seconds == pytest.approx(39.0)
    assert calc.state(now=NOW).state == "ended"


@pytest.mark.parametrize("heartbeats", [True, False])
@pytest.mark.parametrize("disrupted", [True, False])
def test_heartbeats_stamped_now_beside_explicit_past_times_place_no_writer(heartbeats,
                                                                            disrupted):
    """The issue's second case, where only the liveness clauses decide: A
    (index 0) dies during accelerator init (preempted, or killed silently),
    its times explicit (a replay), its heartbeats stamped now (100, 101); B
    (index 0) records attempt 2. (Broken: heartbeats place a piece: A runs
    to 101, B, with steps, replaces it and A's attempt is lost; with the
    disruption, the closing clause alone also keeps A's attempt.)"""
    a = Writer(0, "a").ev(Kind.JOB_START, 0.0).ev(Kind.TPU_INIT_START, 0.0)
    if disrupted:
        a.disruption(5.0)
    a.heartbeat(100.0).heartbeat(101.0)
    b = Writer(0, "b").ev(Kind.JOB_START, 20.0).steps(0, [21.0 + k for k in range(5)])
    b.ev(Kind.JOB_END, 26.0)
    calc = job(a, b, heartbeats=heartbeats)
    r, bad = _figures(calc)
    # total 26: A's attempt [0, 20), B's [20, 26); B: OTHER [20, 21) = 1,
    # productive [21, 26) = 5. A preempted: TPU init [0, 5) (open up to its
    # disruption, rule 14) = 5, recovery [5, 20) = 15 (a recorded disruption
    # counts before any step, rule 2). A killed silently: no restart (rule 2),
    # its init open up to its last sign of life (its start: the heartbeats
    # stamped now are not its attempt's), OTHER [0, 20) = 20
    assert r.total_seconds == pytest.approx(26.0)
    assert r.productive_seconds == pytest.approx(5.0)
    if disrupted:
        assert r.disruptions == 1
        assert bad == pytest.approx({B.TPU_INITIALIZATION: 5.0, REC: 15.0, B.OTHER: 1.0})
    else:
        assert r.disruptions == 0
        assert bad == pytest.approx({B.OTHER: 21.0})
    assert calc.state(now=NOW).state == "ended"


@pytest.mark.parametrize("heartbeats", [True, False])
def test_explicit_past_times_with_heartbeats_stamped_now_keep_the_second_attempt(heartbeats):
    """The issue's second case with steps: A records S0@1 .. S14@15 and a
    crash at 15.5 with explicit past times, its heartbeats stamped now
    (1000, 1001); B records job start 40, S10@42 .. S24@70 (2 s apart),
    job end 72. The truth with heartbeats on is the truth with them off."""
    a = Writer(0, "a").ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(15)])
    a.disruption(15.5, "crash").heartbeat(NOW).heartbeat(NOW + 1)
    b = Writer(0, "b").ev(Kind.JOB_START, 40.0).steps(10, [42.0 + 2 * k for k in range(15)])
    b.ev(Kind.JOB_END, 72.0)
    calc = job(a, b, heartbeats=heartbeats)
    r, bad = _figures(calc, now=NOW + 5)
    # restart at step 10: wasted S10..S13 [11, 15) and S14 [15, 15.5) = 4.5;
    # recovery [15.5, 40) = 24.5; productive S0..S9 [1, 11) = 10 and
    # S10..S24 [42, 72) = 30; OTHER [0, 1) + [40, 42) = 3; total 72
    assert r.disruptions == 1 and r.last_step == 24
    assert r.total_seconds == pytest.approx(72.0)
    assert bad == pytest.approx({WASTED: 4.5, REC: 24.5, B.OTHER: 3.0})
    assert r.productive_seconds == pytest.approx(40.0)
    st = calc.state(now=NOW + 5)
    assert st.state == "ended"
    # A's last sign of life is its crash, not a heartbeat stamped now
    assert [(x.restart_time, x.last_sign_of_life) for x in st.restarts] == [(40.0, 15.5)]


def test_liveness_only_writers_lead_nothing():
    """A writer of index 0 that recorded only metadata, metrics and
    heartbeats (an evaluator, a launcher) beside hosts 1 and 2 that record
    the training: host 1 leads, the others' metrics are kept. (Broken: such
    a writer is a piece: as the lowest index it leads and the job is empty.)"""
    side = Writer(0, "launcher").ev(Kind.METADATA, 0.5, extra={"config": 1})
    side.ev(Kind.METRIC, 5.0, 4, extra={"metric_name": "eval", "metric_value": 1.0})
    side.heartbeat(6.0)
    hosts = [Writer(i, f"h{i}").ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(10)],
                                                                 load=0.1 * i)
             for i in (1, 2)]
    for h in hosts:
        h.ev(Kind.JOB_END, 11.0)
    r, bad = _figures(job(side, *hosts))
    # host 1 leads: 10 spans of 1 s, host 2's 0.2 s loads gate each: sync 2,
    # productive 8; OTHER [0, 1) = 1
    assert r.total_seconds == pytest.approx(11.0)
    assert bad == pytest.approx({SYNC: 2.0, B.OTHER: 1.0})
    assert r.productive_seconds == pytest.approx(8.0)


def test_an_observers_disruptions_place_no_attempt_and_are_borrowed():
    """A process that recorded only disruptions (a watchdog beside the job,
    no job start, no step) at 6.5 and 16.5: each is borrowed by the attempt
    it fell in, with its writer. (Broken: its rows are a piece: from its
    first disruption it leads a phantom attempt, cut at the next attempt's
    start, and the second disruption is lost.)"""
    lead = Writer(0, "h0")
    for t0, first in ((0.0, 0), (10.0, 4), (20.0, 8)):
        lead.ev(Kind.JOB_START, t0).steps(first, [t0 + 1.0 + k for k in range(6)])
    lead.ev(Kind.JOB_END, 27.0)
    watch = Writer(0, "watchdog", pid=9).disruption(6.5, "preemption").disruption(16.5, "hang")
    calc = job(lead, watch)
    r, bad = _figures(calc)
    # attempts [0, 10), [10, 20), [20, 27); each crashed one restarts 2 steps
    # back: wasted S4 [5, 6) + S5 [6, 6.5) = 1.5 and S8 [15, 16) + S9 [16, 16.5)
    # = 1.5; recovery [6.5, 10) + [16.5, 20) = 7; productive [1, 5) + [11, 15)
    # + [21, 27) = 14; OTHER [0, 1) + [10, 11) + [20, 21) = 3; total 27
    assert r.disruptions == 2
    assert r.total_seconds == pytest.approx(27.0)
    assert bad == pytest.approx({WASTED: 3.0, REC: 7.0, B.OTHER: 3.0})
    assert [(i.cause, i.seen_by) for i in incidents(calc, NOW).incidents] == [
        ("preemption", (0, "watchdog")), ("hang", (0, "watchdog"))]


@pytest.mark.parametrize("heartbeats", [True, False])
def test_a_heartbeat_witnesses_only_how_long_a_phase_that_never_ended_ran(heartbeats):
    """A (index 0) is killed silently in accelerator init (its start at 0, no
    end) while it beats at 1 .. 5; B restarts at 20. With heartbeats on, the
    init ran to A's last sign of life (rule 14); off, nothing says it ran
    at all. Nothing else differs: the same attempts, lead and steps."""
    a = Writer(0, "a").ev(Kind.JOB_START, 0.0).ev(Kind.TPU_INIT_START, 0.0)
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        a.heartbeat(t)
    b = Writer(0, "b").ev(Kind.JOB_START, 20.0).steps(0, [21.0 + k for k in range(5)])
    b.ev(Kind.JOB_END, 26.0)
    r, bad = _figures(job(a, b, heartbeats=heartbeats))
    # total 26; no restart (no step, no disruption before B: rule 2); B: OTHER
    # [20, 21), productive [21, 26) = 5. On: init [0, 5) = 5, OTHER [5, 21) = 16;
    # off: OTHER [0, 21) = 21
    assert (r.total_seconds, r.productive_seconds, r.disruptions) == pytest.approx((26, 5, 0))
    assert bad == pytest.approx({B.TPU_INITIALIZATION: 5.0, B.OTHER: 16.0} if heartbeats
                                else {B.OTHER: 21.0})


SHUTDOWN = {"custom_badput_event_type": "shutdown"}


@pytest.mark.parametrize("heartbeats", [True, False])
def test_an_observers_tail_after_the_leads_job_end_is_the_jobs(heartbeats):
    """Hosts 0 and 1: job start 0, S0@1 .. S8@9, job end 10. A watcher of
    host 0's exit (index 0, same host, another pid; no job start, no step)
    records the custom badput shutdown [10, 13) and a job end at 13; host 0
    beats at 5, the watcher at 11. The tail is the job's: the attempt ends
    at 13, with heartbeats on as off. (Broken: the watcher's rows are an
    observer's, nothing of them the job's: total 10, no shutdown.)"""
    hosts = [Writer(i, f"h{i}").ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(9)])
             .ev(Kind.JOB_END, 10.0) for i in (0, 1)]
    hosts[0].heartbeat(5.0)
    watch = Writer(0, "h0", pid=9).ev(Kind.CUSTOM_BADPUT_START, 10.0, extra=SHUTDOWN)
    watch.heartbeat(11.0).ev(Kind.CUSTOM_BADPUT_END, 13.0, extra=SHUTDOWN)
    watch.ev(Kind.JOB_END, 13.0)
    calc = job(*hosts, watch, heartbeats=heartbeats)
    r, bad = _figures(calc)
    # lifetime [0, 13); OTHER [0, 1) = 1; S0..S8 [1, 10) productive 9 (S8's span
    # closed by the shutdown that starts at its job end); shutdown [10, 13) = 3
    assert r.lifetime == (0.0, 13.0)
    assert r.total_seconds == pytest.approx(13.0)
    assert r.productive_seconds == pytest.approx(9.0)
    assert bad == pytest.approx({B.CUSTOM_BADPUT_EVENTS: 3.0, B.OTHER: 1.0})
    assert set(r.custom_badput_percent) == {"SHUTDOWN"}
    assert (r.disruptions, r.last_step) == (0, 8)
    assert calc.state(now=NOW).state == "ended"
