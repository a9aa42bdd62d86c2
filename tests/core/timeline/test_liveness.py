"""Liveness (semantics.md rule 15), from hand-built events and from the
recorder's writer thread on a fake clock: a stopped run does not decay, a
heartbeat keeps a live one running, a restart is recovery as before and its
gap from the last sign of life is reported. Every expected number is derived
by hand in the comments. Real processes (Ctrl-C, SIGKILL, a long step):
tests/core/timeline/test_liveness_processes.py."""

from __future__ import annotations

import time
import uuid

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.compat.goodput import GoodputCalculator
from goodput_core.events import Kind as K
from goodput_core.record.heartbeat import heartbeat_seconds
from goodput_core.stores.memory import MemoryStore
from goodput_core.timeline.buckets import BadputType as B
from tests.support.event_builders import RUN, calc_of, ev
from tests.support.fake_clock import FakeClock

REC = B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION


def hb(t, every=10.0):
    return ev(K.HEARTBEAT, t, heartbeat_seconds=every)


def _steps():
    """Job start 0, heartbeat 0.5, steps 0..2 at 10, 20, 30 (steps of 10 s)."""
    return [ev(K.JOB_START, 0), hb(0.5), *[ev(K.STEP_START, 10 * (k + 1), k) for k in range(3)]]


def test_a_recorded_disruption_stops_the_run_and_a_heartbeat_at_exit_does_not_reopen_it():
    events = _steps() + [ev(K.DISRUPTION, 35, disruption_cause="exception:KeyboardInterrupt"),
                         hb(35.2)]
    c = calc_of(events)
    results = [c.cumulative(now=now) for now in (36, 40, 10_000)]
    for r in results:
        # the lifetime ends at the disruption: [0, 10) OTHER, spans [10, 30)
        # productive (the first one's excess over the second is 0), the open
        # step [30, 35) OTHER: total 35, productive 20, OTHER 15
        assert r.total_seconds == pytest.approx(35.0)
        assert r.productive_seconds == pytest.approx(20.0)
        assert r.badput_seconds[B.OTHER] == pytest.approx(15.0)
        assert r.disruptions == 0  # no restart (yet)
    assert results[0].badput_seconds == results[2].badput_seconds
    st = c.state(now=10_000)
    assert (st.state, st.stopped_at, st.cause) == ("stopped", 35.0, "exception:KeyboardInterrupt")
    assert st.describe() == "stopped at 1970-01-01T00:00:35Z (exception:KeyboardInterrupt)"


def test_silence_longer_than_three_heartbeat_intervals_stops_the_run_at_its_last_sign_of_life():
    events = _steps() + [hb(31), hb(41)]  # SIGKILL after 41: nothing more
    c = calc_of(events)
    # at 70, the last sign (41) is 29 s old: within 3 x 10 s, still running
    r = c.cumulative(now=70)
    assert c.state(now=70).state == "running" and r.total_seconds == pytest.approx(70.0)
    # at 71.5 it is 30.5 s old: stopped at 41, however late it is read
    for now in (71.5, 1000, 1e6):
        r = c.cumulative(now=now)
        assert r.total_seconds == pytest.approx(41.0)
        assert r.productive_seconds == pytest.approx(20.0)
        assert r.badput_seconds[B.OTHER] == pytest.approx(21.0)  # [0, 10) and [30, 41)
        st = c.state(now=now)
        assert (st.state, st.stopped_at, st.cause) == ("stopped", 41.0, "no sign of life")
    # the interval comes from the heartbeats themselves
    assert c.state(now=1000).heartbeat_seconds == 10.0


def test_a_live_process_inside_one_long_step_is_not_stopped():
    # step 2 started at 30 and runs for an hour; heartbeats every 10 s say so
    events = _steps() + [hb(t) for t in range(40, 3600, 10)]
    c = calc_of(events)
    r = c.cumulative(now=3605)
    assert c.state(now=3605).state == "running"
    assert r.total_seconds == pytest.approx(3605.0)


def test_without_heartbeats_or_a_final_disruption_an_open_attempt_runs_to_the_query_time():
    # the reference's logs (rule 1): no heartbeat, the last event a step start
    events = [e for e in _steps() if e.kind != K.HEARTBEAT]
    c = calc_of(events)
    for now in (100, 10_000):
        assert c.cumulative(now=now).total_seconds == pytest.approx(now)
        assert c.state(now=now).state == "running"


def test_a_restart_after_a_stop_is_recovery_as_before_and_its_gap_is_reported():
    stopped = _steps() + [ev(K.DISRUPTION, 35, disruption_cause="sigterm"), hb(35.1)]
    restarted = stopped + [ev(K.JOB_START, 100), hb(100.5), ev(K.STEP_START, 101, 2),
                           ev(K.STEP_START, 102, 3), ev(K.JOB_END, 103)]
    r = calc_of(restarted).cumulative(now=200)
    # rule 4 as before: recovery from the disruption (35) to the job start
    # (100) = 65; the crashed segment's step 2, closed by the disruption,
    # spans [30, 35) and is redone by the restart at step 2: wasted 5
    assert r.badput_seconds[REC] == pytest.approx(65.0)
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(5.0)
    assert r.disruptions == 1
    (gap,) = calc_of(restarted).state(now=200).restarts
    # last sign of life of the first attempt: its final disruption at 35
    assert (gap.restart_time, gap.last_sign_of_life, gap.seconds, gap.cause) == \
        (100.0, 35.0, 65.0, "sigterm")
    assert calc_of(restarted).state(now=200).state == "ended"


def test_a_restart_after_a_sigkill_reports_the_silence_before_it():
    events = _steps() + [hb(41), ev(K.JOB_START, 120), ev(K.STEP_START, 121, 3),
                         ev(K.JOB_END, 122)]
    (gap,) = calc_of(events).state(now=200).restarts
    assert (gap.last_sign_of_life, gap.seconds, gap.cause) == (41.0, 120.0 - 41.0, None)


def test_the_compatibility_calculator_keeps_rule_1():
    # the reference's contract: an open attempt runs to the query time
    store = MemoryStore(uuid.uuid4().hex)
    store.append([e._replace(run="compat") for e in _steps()] +
                 [ev(K.DISRUPTION, 35, disruption_cause="sigterm")._replace(run="compat")])
    ours = Calculator("compat", store, clock=lambda: 500.0)
    ours.refresh()
    assert ours.cumulative().total_seconds == pytest.approx(35.0)
    compat = Calculator("compat", store, clock=lambda: 500.0, liveness=False)
    compat.refresh()
    assert compat.cumulative().total_seconds == pytest.approx(500.0)
    # the reference-named calculator: productive 20 s of 500 s (to the query time)
    goodput, _, _ = GoodputCalculator("compat", "log", store=store,
                                      clock=lambda: 500.0).get_job_goodput()
    assert goodput == pytest.approx(100 * 20 / 500)


# ---------------------------------------------------------------- the writer
def _heartbeats(store, run="hb"):
    return [e.time for e in store.read(run)[0] if e.kind == K.HEARTBEAT]


def _recorder(clock, store, **kw):
    return Recorder("hb", store, clock=clock, hang_detection=False, heartbeat_seconds=10, **kw)


def test_the_writer_beats_once_the_job_started_and_at_most_once_per_interval():
    clock, store = FakeClock(1000.0), MemoryStore(uuid.uuid4().hex)
    rec = _recorder(clock, store)
    rec.flush()
    assert _heartbeats(store) == []  # no job yet: nothing to keep alive
    rec.record_job_start_time()
    rec.flush()  # the batch with the job start is stored: the first heartbeat
    assert _heartbeats(store) == [1000.0]
    for k in range(25):  # 25 steps of 1 s, each flushed: one beat per 10 s
        rec.record_step_start_time(k)
        rec.flush()
        clock.advance(1.0)
    assert _heartbeats(store) == [1000.0, 1010.0, 1020.0]
    beat = [e for e in store.read("hb")[0] if e.kind == K.HEARTBEAT][0]
    assert beat.extra == {"heartbeat_seconds": 10.0}
    assert rec.stats()["written"] == 26  # heartbeats are not the user's events
    rec.record_job_end_time()
    rec.flush()
    clock.advance(30)
    rec.flush()
    assert len(_heartbeats(store)) == 3  # the job ended: no more
    rec.close()


def test_only_the_lead_writer_beats_and_zero_turns_it_off():
    for kw in ({"process_index": 1}, {"heartbeat_seconds": 0}):
        clock, store = FakeClock(1000.0), MemoryStore(uuid.uuid4().hex)
        rec = Recorder("hb", store, clock=clock, hang_detection=False,
                       **{"heartbeat_seconds": 10, **kw})
        rec.record_job_start_time()
        rec.flush()
        clock.advance(60)
        rec.record_step_start_time(0)
        rec.flush()
        assert _heartbeats(store) == []
        rec.close()


def test_the_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("GOODPUT_HEARTBEAT_SECONDS")
    assert heartbeat_seconds() == 10.0
    monkeypatch.setenv("GOODPUT_HEARTBEAT_SECONDS", "2.5")
    assert heartbeat_seconds() == 2.5
    monkeypatch.setenv("GOODPUT_HEARTBEAT_SECONDS", "off")
    assert heartbeat_seconds() == 0.0
    monkeypatch.setenv("GOODPUT_HEARTBEAT_SECONDS", "-1")
    with pytest.raises(ValueError, match="GOODPUT_HEARTBEAT_SECONDS"):
        heartbeat_seconds()
    assert heartbeat_seconds(0) == 0.0 and heartbeat_seconds(3) == 3.0
    with pytest.raises(ValueError):
        Recorder("x", MemoryStore(uuid.uuid4().hex), heartbeat_seconds=float("nan"))


def test_the_reference_ignores_heartbeats():
    from tests.support.compat_calculator import T0, p, steps
    from tests.support.reference_harness import reference_job_goodput

    pays = [p(job_start_time=T0), *steps(0, [T0 + 1, T0 + 2, T0 + 3]), p(job_end_time=T0 + 4)]
    beats = [p(heartbeat_time=T0 + 0.5, heartbeat_seconds=10.0),
             p(heartbeat_time=T0 + 3.5, heartbeat_seconds=10.0)]
    with_beats = reference_job_goodput(pays[:-1] + beats + pays[-1:], T0 + 10)
    assert with_beats == reference_job_goodput(pays, T0 + 10)
    ours = Calculator(RUN, clock=lambda: T0 + 10)
    ours.add_payloads([{**x, "job_name": RUN} for x in pays[:-1] + beats + pays[-1:]])
    assert ours.cumulative().goodput == pytest.approx(with_beats["goodput_percent"])


def test_on_cloud_logging_a_heartbeat_is_one_entry_per_interval(tmp_path):
    from tests.support.fake_cloud_logging import FakeCloudLogging, cloud_store_factory

    with FakeCloudLogging() as fake, \
            cloud_store_factory(fake, tmp_path / "spill", "proj-1", "goodput-hb") as make:
        store = make()
        clock = FakeClock(float(int(time.time()) - 600))  # recent: reads look back 7 days
        t0 = clock.t
        rec = Recorder("hb", store, clock=clock, hang_detection=False, heartbeat_seconds=10)
        rec.record_job_start_time()
        for k in range(35):  # 35 s of 1 s steps, each flushed to the service
            rec.record_step_start_time(k)
            assert rec.flush()
            clock.advance(1.0)
        beats = [p["heartbeat_time"] for p in fake.payloads("hb") if "heartbeat_time" in p]
        # one entry at the job start, then one each 10 s of the recorder's clock
        assert beats == [t0, t0 + 10, t0 + 20, t0 + 30]
        assert len(fake.payloads("hb")) == 1 + 35 + 4
        calc = Calculator("hb", store, clock=clock)
        calc.refresh()
        st = calc.state()
        assert st.state == "running" and st.heartbeat_seconds == 10.0
        rec.close()
