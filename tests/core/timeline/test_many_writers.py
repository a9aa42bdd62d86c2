"""Many writers, one job (docs/semantics.md, "Many writers"): job figures
come from the lead stream, a straggler's blocking time gates the job, one
host's disruption is the job's, and identical lockstep hosts give exactly the
single-host numbers; with real processes on SQLite and a real PostgreSQL
server, clean and killed with SIGKILL then restarted from a checkpoint."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import signal
import uuid

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.events import EventRecord, Kind
from goodput_core.timeline.buckets import BadputType as B
from goodput_core.timeline.streams import lead_events
from tests.support.fake_clock import FakeClock
from tests.support.lockstep_hosts import lockstep_host
from tests.support.postgres_server import PostgresServer, skip_without_postgres

T0 = 1_700_000_000.0


def _host(index, load, *, pid=None, steps=10, t0=0.0, job_end=True, known_late=False,
          disruption_at=None):
    """One host's events: job start at t0, steps 1 s apart from t0 + 1, a
    blocking load of ``load`` s 0.5 s into each step, a job end at the end."""
    pid = 100 + index if pid is None else pid
    seq = itertools.count(1)

    def ev(kind, t, step=None, idx=index):
        return EventRecord("m", int(kind), t0 + t, step, None, idx, f"host{index}", pid, "a",
                           next(seq), t0 + t)

    out = [ev(Kind.JOB_START, 0.0, idx=0 if known_late else index)]
    for k in range(steps):
        out += [ev(Kind.STEP_START, 1.0 + k, k), ev(Kind.BLOCKING_LOAD_START, 1.5 + k),
                ev(Kind.BLOCKING_LOAD_END, 1.5 + k + load)]
    if disruption_at is not None:
        out.append(ev(Kind.DISRUPTION, disruption_at))
        out[-1] = out[-1]._replace(extra={"disruption_cause": "sigterm"})
    if job_end:
        out.append(ev(Kind.JOB_END, 1.0 + steps))
    return out


def _calc(*hosts):
    calc = Calculator("m")
    for h in hosts:
        calc.add(h)
    return calc


def test_identical_lockstep_hosts_give_the_single_host_numbers():
    # 10 spans of 1 s, each with 0.1 s blocking load; 1 s before step 0 is OTHER
    one = _calc(_host(0, 0.1)).cumulative(now=100)
    many = _calc(_host(0, 0.1), _host(1, 0.1, known_late=True),
                 _host(2, 0.1, known_late=True)).cumulative(now=100)
    assert one.productive_seconds == pytest.approx(9.0)
    assert one.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(1.0)
    for r in (one, many):
        assert r.total_seconds == pytest.approx(11.0)
        assert r.disruptions == 0 and r.skipped == {}
    assert many.goodput == one.goodput
    assert many.badput_seconds == one.badput_seconds


def test_a_straggler_gates_every_step():
    # host 2 blocks 0.4 s per step, the lead 0.1 s: each step loses 0.4 s
    r = _calc(_host(0, 0.1), _host(1, 0.1), _host(2, 0.4)).cumulative(now=100)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(10 * 0.4)
    assert r.productive_seconds == pytest.approx(10 * 0.6)
    assert r.disruptions == 0 and r.skipped == {}


def test_the_lead_is_the_lowest_index_and_streams_are_writer_processes():
    # process 1's job start was recorded under index 0 (before it knew): it is
    # still process 1's; the lead is process 0 whose steps are 2 s apart here
    lead = _host(0, 0.0, steps=3)
    lead = [e._replace(time=e.time * 2) for e in lead]
    late = _host(1, 0.0, steps=3, known_late=True)
    got = lead_events(late + lead)
    assert {e.host for e in got} == {"host0"}
    assert sorted(e.time for e in got if e.kind == Kind.STEP_START) == [2.0, 4.0, 6.0]


def test_writers_without_an_index_the_earliest_leads():
    # two recorders on one run, both index 0: the one that started first leads
    a = [e._replace(process_index=0) for e in _host(1, 0.2, t0=0.0)]
    b = [e._replace(process_index=0) for e in _host(2, 0.0, t0=0.5)]
    r = _calc(b, a).cumulative(now=100)
    assert r.disruptions == 0 and r.skipped == {}
    # a's loads (0.2 s x 10) are the job's; b's steps (0.5 s later) block 0 s
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.0)


@pytest.mark.parametrize("with_no_writer", [False, True])
def test_only_this_runs_events_with_a_writer_are_kept_for_the_lead_stream(with_no_writer):
    # host 0's batch also carries another run's events, and events without
    # writer metadata (as read from a foreign log); once host 1 shows up, the
    # job is host 0 (the lead, 0.4 s loads) gated by host 1 (0.1 s loads):
    # 0.4 s lost per step, whatever the other events (0.9 s loads) say
    other_run = [e._replace(run="other") for e in _host(5, 0.9)]
    no_writer = [e._replace(process_index=0, host="", pid=0) for e in _host(6, 0.9, t0=0.2)]
    first = _host(0, 0.4) + other_run + (no_writer if with_no_writer else [])
    r = _calc(first, _host(1, 0.1)).cumulative(now=100)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(10 * 0.4)
    assert r.productive_seconds == pytest.approx(10 * 0.6)
    assert r.total_seconds == pytest.approx(11.0)


def test_one_hosts_disruption_is_the_jobs_counted_once():
    # attempt 1: host 2 records a SIGTERM at 6.5 s; all hosts crash; attempt 2
    # starts at 20 s and resumes at step 4 (steps 4 and 5 redone)
    first = [_host(i, 0.0, steps=6, job_end=False, disruption_at=6.5 if i == 2 else None)
             for i in range(3)]
    second = []
    for i in range(3):
        evs = _host(i, 0.0, pid=200 + i, steps=4, t0=20.0)
        second.append([e._replace(step=e.step + 4) if e.step is not None else e for e in evs])
    r = _calc(*first, *second).cumulative(now=100)
    assert r.disruptions == 1
    assert r.skipped == {}
    # wasted: steps 4 and 5 of attempt 1, [5, 6.5): step 5 runs up to the disruption
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(1.5)
    # recovery: from the disruption (6.5) to the new job start (20)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(13.5)


def test_host_outliers_use_each_processs_settled_index():
    # the slow host's job start is stored under index 0: still host 2's
    hosts = [_host(0, 0.05), _host(1, 0.05, known_late=True), _host(2, 0.5, known_late=True),
             _host(3, 0.06, known_late=True)]
    calc = _calc(*hosts)
    from goodput_core.queries.host_outliers import HostTracker

    tracker = HostTracker("m", new_calculator=lambda: Calculator("m"))
    for h in hosts:
        tracker.add(h)
    b = tracker.breakdown(now=100)
    assert sorted(h.process_index for h in b.hosts) == [0, 1, 2, 3]
    assert [o[0] for o in b.outliers] == [2]
    assert calc.cumulative(now=100).badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(5.0)


# --------------------------------------------------- real processes, real stores
def _run_hosts(store, run, *, first, steps, t0, hang_at=None, during=None):
    ctx = mp.get_context("spawn")
    barrier, ready = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=lockstep_host,
                         args=(store, run, i, barrier, first, steps, t0, hang_at, ready))
             for i in range(3)]
    for p in procs:
        p.start()
    if hang_at is not None:
        assert sorted(ready.get(timeout=120) for _ in procs) == [0, 1, 2]
        if during is not None:
            during()  # a read while the hosts are alive, mid-step
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == (-signal.SIGKILL if hang_at is not None else 0)


def _check_clean_and_killed(store):
    run = "lockstep-" + uuid.uuid4().hex[:8]
    _run_hosts(store, run, first=0, steps=20, t0=T0)
    calc = Calculator(run, store)
    calc.refresh()
    r = calc.cumulative(now=T0 + 1000)
    # process 0's truth: 20 steps of 1 s, each a 0.25 s blocking load + 0.75 s compute
    assert r.total_seconds == pytest.approx(20.0)
    assert r.productive_seconds == pytest.approx(15.0)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(5.0)
    assert r.goodput == pytest.approx(75.0)
    assert r.disruptions == 0 and r.skipped == {}
    assert not calc.checkpoint_advice().available
    assert sorted(h.process_index for h in calc.hosts().hosts) == [0, 1, 2]

    run = "killed-" + uuid.uuid4().hex[:8]
    calc = Calculator(run, store)  # one calculator, read live then at the end

    def live():
        calc.refresh()
        r = calc.cumulative(now=T0 + 8.25)
        # steps 0..7 done (6 s computing, 2 s loading); step 8 open since T0 + 8,
        # its 0.25 s load blocking even in the open step
        assert r.total_seconds == pytest.approx(8.25)
        assert r.productive_seconds == pytest.approx(6.0)
        assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(2.25)
        assert r.disruptions == 0 and r.skipped == {}

    # attempt 1: steps 0..7, killed inside step 8 (started at T0 + 8); the
    # checkpoint is at step 5, so attempt 2 starts at T0 + 20 and redoes 6..
    _run_hosts(store, run, first=0, steps=9, t0=T0, hang_at=8, during=live)
    _run_hosts(store, run, first=6, steps=6, t0=T0 + 20)
    calc.refresh()
    r = calc.cumulative(now=T0 + 1000)
    assert r.disruptions == 1 and r.skipped == {}
    # wasted: process 0's spans of steps 6 and 7 ([T0+6, T0+8)), redone
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(2.0)
    # recovery: from the crashed step 8's start to the new job start
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(12.0)
    # kept: steps 0..5 and 6..11, 0.75 s of compute and 0.25 s of load each
    assert r.productive_seconds == pytest.approx(9.0)
    assert r.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(3.0)
    assert r.total_seconds == pytest.approx(26.0)


def test_three_real_processes_on_sqlite(tmp_path):
    _check_clean_and_killed(f"sqlite:///{tmp_path / 'hosts.sqlite'}")


@pytest.fixture(scope="module")
def postgres():
    skip_without_postgres()
    srv = PostgresServer()
    srv.start()
    yield srv
    srv.stop()
    srv.remove()


def test_three_real_processes_on_postgres(postgres, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name = "t_" + uuid.uuid4().hex[:12]
    postgres.create_database(name)
    _check_clean_and_killed(postgres.url(name))


def test_recorded_index_is_the_one_in_force_when_recorded(tmp_path):
    store = f"sqlite:///{tmp_path / 'idx.sqlite'}"
    rec = Recorder("idx", store, clock=FakeClock(T0), hang_detection=False)
    rec.record_job_start_time()
    rec.process_index = 2  # the writer thread has not stored the job start yet
    rec.record_step_start_time(0)
    assert rec.flush(30)
    rec.close()
    from goodput_core.stores import open_store

    events, _ = open_store(store).read("idx")
    assert [(Kind(e.kind).name, e.process_index) for e in events] == [
        ("JOB_START", 0), ("STEP_START", 2)]


def _lockstep_in_process(make_store, hosts, run, t0):
    """``hosts`` recorders (one simulated host each) playing the README loop in
    lockstep with one fake clock: 20 steps of a 0.25 s blocking load and
    0.75 s of compute, the later hosts' job start under index 0."""
    from unittest import mock

    clock = FakeClock(t0)
    recs = []
    for i in range(hosts):
        with mock.patch("socket.gethostname", return_value=f"cl-host-{i}"):
            recs.append(Recorder(run, make_store(), clock=clock, hang_detection=False))
    for r in recs:
        r.record_job_start_time()
    for i, r in enumerate(recs):
        r.process_index = i
    for step in range(20):
        for r in recs:
            r.record_step_start_time(step)
            r.record_input_stall_start_time()  # what `with rec.data_loading():` adds
        clock.advance(0.25)
        for r in recs:
            r.record_input_stall_end_time()
        clock.advance(0.75)
    for r in recs:
        r.record_job_end_time()
        assert r.flush(30)
        r.close()


def test_identical_lockstep_hosts_on_cloud_logging(tmp_path):
    pytest.importorskip("google.cloud.logging_v2")
    from tests.support.fake_cloud_logging import FakeCloudLogging, cloud_store_factory

    import time as _time

    t0 = _time.time() - 600  # entries of the last minutes, as a live job writes them
    with FakeCloudLogging() as fake, \
            cloud_store_factory(fake, tmp_path / "spill", "proj", "goodput") as make:
        results = []
        for hosts, run in ((1, "cl-one"), (3, "cl-three")):
            _lockstep_in_process(make, hosts, run, t0)
            calc = Calculator(run, make())
            calc.refresh()
            results.append(calc.cumulative(now=t0 + 1000))
    one, three = results
    # 20 steps of 1 s: 0.25 s stalled, 0.75 s computing; job end closes the last
    assert one.productive_seconds == pytest.approx(15.0)
    assert one.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(5.0)
    assert three.disruptions == 0 and three.skipped == {}
    assert three.goodput == pytest.approx(one.goodput, abs=1e-9)
    assert three.badput_seconds == pytest.approx(one.badput_seconds, abs=1e-9)


def test_compat_calculator_reads_three_hosts_as_the_reference_cannot(tmp_path):
    """Three hosts 10 ms apart, each recording the same 10 steps of 1 s through
    the compat recorder (a job start at 0 + d, steps at 1 + k + d, a job end at
    11 + d): the reference reads every host's entries as one stream (20
    restarts); ours reads process 0's: 0 restarts, 10 s productive of 11 s."""
    pytest.importorskip("ml_goodput_measurement")
    from unittest import mock

    from goodput_core.compat.goodput import GoodputCalculator, GoodputRecorder
    from tests.support.compat_calculator import T0 as CT0
    from tests.support.compat_calculator import p, steps
    from tests.support.reference_harness import reference_job_goodput

    store = f"sqlite:///{tmp_path / 'compat.sqlite'}"
    payloads = []
    for i, d in enumerate((0.0, 0.01, 0.02)):
        with mock.patch("socket.gethostname", return_value=f"compat-host-{i}"):
            rec = GoodputRecorder("job", "log", True, store=store, clock=lambda: CT0 + 100,
                                  process_index=i)
        host = ([p(job_start_time=CT0 + d)] + steps(0, [CT0 + 1 + k + d for k in range(10)])
                + [p(job_end_time=CT0 + 11 + d)])
        rec.record_job_start_time(CT0 + d)
        for k in range(10):
            rec.record_step_start_time(k, CT0 + 1 + k + d)
        rec.record_job_end_time(CT0 + 11 + d)
        assert rec.flush(30)
        rec.close()
        payloads += host
    payloads.sort(key=lambda x: next(v for k, v in x.items() if k.endswith("_time")))
    ref = reference_job_goodput(payloads, CT0 + 100)
    assert ref["disruptions"] == 20
    calc = GoodputCalculator("job", "log", store=store, clock=lambda: CT0 + 100)
    goodput, _, max_step = calc.get_job_goodput(include_badput_breakdown=True)
    details = calc.get_job_goodput_details()
    assert details["disruption_count"] == 0 and max_step == 9
    assert goodput == pytest.approx(100 * 10 / 11)


def test_scheduler_times_from_another_writer_are_kept():
    # the launcher (its own process) records the submission and the grant;
    # the hosts record the training: the scheduler's times are the job's
    launcher = [EventRecord("m", int(Kind.JOB_SUBMITTED), -30.0, None, None, 0, "login", 7, "l", 1),
                EventRecord("m", int(Kind.RESOURCES_GRANTED), -10.0, None, None, 0, "login", 7,
                            "l", 2)]
    got = lead_events(launcher + _host(0, 0.1) + _host(1, 0.1))
    kinds = [Kind(e.kind) for e in got]
    assert kinds.count(Kind.JOB_SUBMITTED) == 1 and kinds.count(Kind.RESOURCES_GRANTED) == 1
    assert {e.host for e in got if e.kind == Kind.STEP_START} == {"host0"}
