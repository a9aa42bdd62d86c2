"""The monitor loop: incremental cycles, schedule, and R5 (hanging/raising exporters).

No test sleeps: the loop is stepped with ``run_once()`` or with an injected
clock and ``wait``; waits on events only bound how long a broken build could
hang the suite.
"""

import logging
import threading
import time
import uuid

import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.cli import main as cli_main
from goodput_core.exporters.base import Exporter
from goodput_core.monitor.loop import Monitor, parse_windows
from goodput_core.record.recorder import Recorder
from goodput_core.stores.memory import MemoryStore
from goodput_core.cli.synthetic import record_synthetic_job
from tests.support.fake_deadlines import FakeDeadlines, Parking, monitor_settled

T0 = 1_700_000_000.0
GUARD_S = 30.0  # upper bound for waits on threads (never reached when things work)


class FakeClock:
    def __init__(self, t=T0):
        self.t = t

    def __call__(self):
        return self.t

    def advance(self, s):
        self.t += s


class Collect(Exporter):
    """Records snapshots; ``seen(n)`` waits until n have arrived."""

    name = "collect"

    def __init__(self):
        self.snapshots, self.closed = [], 0
        self._cv = threading.Condition()

    def export(self, snapshot):
        with self._cv:
            self.snapshots.append(snapshot)
            self._cv.notify_all()

    def seen(self, n):
        with self._cv:
            return self._cv.wait_for(lambda: len(self.snapshots) >= n, GUARD_S)

    def close(self):
        self.closed += 1


class Raising(Exporter):
    name = "raising"

    def __init__(self):
        self.calls = 0
        self.closed = 0

    def export(self, snapshot):
        self.calls += 1
        raise ValueError("boom")

    def close(self):
        self.closed += 1
        raise RuntimeError("close boom")


class Hanging(Exporter):
    """Blocks in export (and close) until released; counts calls."""

    name = "hanging"

    def __init__(self, hang_calls=None):
        self.parking = Parking()
        self.release = self.parking.release
        self.snapshots = []
        self._hang_calls = hang_calls  # None: every call hangs

    def export(self, snapshot):
        self.snapshots.append(snapshot)
        if self._hang_calls is None or len(self.snapshots) <= self._hang_calls:
            self.parking.block()

    def close(self):
        self.parking.block()


def _store():
    return MemoryStore(uuid.uuid4().hex)


def _record_steps(rec, t, first, last, step_time=2.0):
    """Steps first..last-1 of step_time seconds each, from t; returns the end."""
    for k in range(first, last):
        rec.record_step_start_time(k, t)
        t += step_time + (1.0 if k % 5 == 4 else 0.0)
    return t


@pytest.fixture
def synthetic():
    store = _store()
    rec = Recorder("syn", store, clock=lambda: T0)
    played = record_synthetic_job(rec, T0)
    assert rec.flush(GUARD_S)
    rec.close()
    return store, played


def test_snapshot_matches_the_calculator(synthetic):
    store, played = synthetic
    now = played["end"] + 5.0
    out = Collect()
    m = Monitor("syn", store, [out], rolling_windows=(60, 3600), clock=lambda: now)
    snap = m.run_once()
    assert out.snapshots == [snap]
    calc = Calculator("syn", store)
    calc.refresh()
    assert snap.query_time == now and snap.run == "syn" and not snap.final
    assert snap.cumulative == calc.cumulative(now)
    assert snap.rolling == dict(zip((60, 3600), calc.rolling([60, 3600], now)))
    stats = calc.step_stats()
    assert dict(snap.new_step_deviations) == stats.as_dict()
    assert snap.step_stats.ideal_step_time == stats.ideal_step_time
    # no new events: the next cycle hands out no deviation again
    assert m.run_once().new_step_deviations == []
    assert m.stop(5.0) is True
    assert out.snapshots[-1].final and out.closed == 1


def test_cycles_read_only_new_events_and_hand_out_only_new_steps():
    class CountingStore(MemoryStore):
        returned = 0

        def read(self, run, since=None, limit=None):
            events, cursor = super().read(run, since, limit)
            self.returned += len(events)
            return events, cursor

    store = CountingStore("counting")
    clock = FakeClock()
    rec = Recorder("inc", store, clock=clock)
    rec.record_job_start_time(T0)
    t = _record_steps(rec, T0, 0, 10)
    assert rec.flush(GUARD_S)
    clock.t = t
    m = Monitor("inc", store, [], clock=clock, configured_ideal_step_time=2.0)
    first = m.run_once()
    m.run_once()
    assert store.returned == 11  # the second cycle read nothing again
    t = _record_steps(rec, t, 10, 20)
    rec.record_step_end_time(19, t)
    assert rec.flush(GUARD_S)
    clock.t = t
    second = m.run_once()
    assert store.returned == 11 + 11
    s1 = [s for s, _ in first.new_step_deviations]
    s2 = [s for s, _ in second.new_step_deviations]
    assert s1 == list(range(0, 9))  # step 9's time is known once step 10 starts
    assert s2 == list(range(9, 20))
    full = second.step_stats.as_dict()
    assert dict(first.new_step_deviations + second.new_step_deviations) == full
    assert full[4] == pytest.approx(1.0) and full[5] == pytest.approx(0.0)
    m.stop(5.0)


def test_a_raising_and_a_hanging_exporter_do_not_stop_the_others(synthetic, caplog):
    """R5: the monitor keeps running, the good exporter gets every cycle,
    the error is logged once, and stop() returns within its deadline."""
    store, played = synthetic
    clock = FakeClock(played["end"])
    good, bad, hung = Collect(), Raising(), Hanging()
    deadlines = FakeDeadlines()
    m = Monitor("syn", store, [hung, bad, good], clock=clock, export_timeout_s=1.0,
                deadlines=deadlines)
    deadlines.settled = monitor_settled(m, hung.parking)
    caplog.set_level(logging.WARNING, logger="goodput_core.monitor.loop")
    try:
        for _ in range(4):
            clock.advance(30)
            assert m.run_once() is not None
        assert [s.query_time for s in good.snapshots] == [played["end"] + 30 * k
                                                          for k in range(1, 5)]
        assert bad.calls == 4
        assert len(hung.snapshots) == 1  # skipped while still busy
        errors = m.stats()["errors"]
        assert errors["exporter raising: ValueError"] == 4
        assert errors["exporter hanging: timeout"] == 1
        assert errors["exporter hanging: busy"] == 3
        boom = [r for r in caplog.records if "boom" in r.getMessage()]
        assert len(boom) == 1  # logged once, then counted
        assert deadlines.expired == [1.0]  # the first cycle waited export_timeout_s for it
        assert m.stop(timeout=2.0) is False  # the hung exporter could not be closed
        assert deadlines.expired == [1.0]  # and stop() did not wait for it: it was busy
        assert good.snapshots[-1].final and good.closed == 1 and bad.closed == 1
        assert m.stats()["errors"]["exporter raising: RuntimeError"] == 1
    finally:
        hung.release.set()


def test_an_exporter_that_hangs_at_close_does_not_block_stop(synthetic):
    store, played = synthetic
    closing, good = Hanging(hang_calls=0), Collect()  # exports fine, hangs in close()
    deadlines = FakeDeadlines()
    m = Monitor("syn", store, [closing, good], clock=lambda: played["end"],
                deadlines=deadlines)
    deadlines.settled = monitor_settled(m, closing.parking)
    try:
        m.run_once()
        assert m.stop(timeout=1.0) is False
        assert deadlines.expired == [pytest.approx(1.0)]  # close() had all of stop()'s time
        assert deadlines.now == pytest.approx(101.0)
        assert len(closing.snapshots) == 2 and closing.snapshots[-1].final
        assert good.closed == 1
    finally:
        closing.release.set()


def test_a_slow_exporter_gets_the_step_deviations_it_missed():
    clock = FakeClock()
    store = _store()
    rec = Recorder("slow", store, clock=clock)
    rec.record_job_start_time(T0)
    t = _record_steps(rec, T0, 0, 6)
    assert rec.flush(GUARD_S)
    clock.t = t
    slow, good = Hanging(hang_calls=1), Collect()
    deadlines = FakeDeadlines()
    m = Monitor("slow", store, [slow, good], clock=clock, export_timeout_s=1.0,
                configured_ideal_step_time=2.0, deadlines=deadlines)
    deadlines.settled = monitor_settled(m, slow.parking)
    m.run_once()  # slow hangs in this one (steps 0-4)
    assert deadlines.expired == [1.0]
    t = _record_steps(rec, t, 6, 9)
    assert rec.flush(GUARD_S)
    clock.t = t
    m.run_once()  # slow is skipped (steps 5-7 kept for it)
    slow.release.set()
    assert m.wait_idle(GUARD_S)
    t = _record_steps(rec, t, 9, 11)
    assert rec.flush(GUARD_S)
    clock.t = t
    m.run_once()  # steps 8-9, plus what slow missed
    got = [[s for s, _ in snap.new_step_deviations] for snap in slow.snapshots]
    assert got == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert [[s for s, _ in snap.new_step_deviations] for snap in good.snapshots] == [
        [0, 1, 2, 3, 4], [5, 6, 7], [8, 9]]
    assert m.stop(5.0)


def test_the_loop_follows_the_injected_clock_and_wait(synthetic):
    store, played = synthetic
    clock = FakeClock(played["end"] + 1000)
    start = clock.t
    waits, parked = [], threading.Event()
    out = Collect()

    def wait(seconds):
        waits.append(seconds)
        if len(waits) > 6:
            parked.set()
            m.stop_requested.wait(GUARD_S)
            return True
        clock.advance(seconds)
        return False

    m = Monitor("syn", store, [out], interval_s=30, step_deviation_interval_s=10,
                rolling_windows=(60,), clock=clock, wait=wait)
    m.start()
    assert parked.wait(GUARD_S)
    # the first cycle at start (every part), then each part every interval
    assert waits[:6] == pytest.approx([0] + [10] * 5)
    when = [s.query_time - start for s in out.snapshots]
    assert when == pytest.approx([0, 10, 20, 30, 40, 50])
    with_goodput = [s.query_time - start for s in out.snapshots if s.cumulative is not None]
    with_rolling = [s.query_time - start for s in out.snapshots if s.rolling]
    assert with_goodput == with_rolling == pytest.approx([0, 30])
    assert all(s.step_stats is not None for s in out.snapshots)
    assert m.stop(5.0)
    assert out.snapshots[-1].final and len(out.snapshots) == 7


def test_the_default_wait_is_interrupted_by_stop(synthetic):
    store, _ = synthetic
    out = Collect()
    m = Monitor("syn", store, [out], interval_s=3600)
    m.start()
    m.start()  # idempotent
    assert sum(t.name == "goodput-monitor-syn" for t in threading.enumerate()) == 1
    assert m.stop(GUARD_S) is True  # does not wait out the hour
    assert m.stop(GUARD_S) is True  # idempotent
    # (the cycle at start, if the thread got to it before stop(), and the final one)
    assert out.closed == 1 and len(out.snapshots) <= 2 and out.snapshots[-1].final


def test_the_first_cycle_runs_at_start_not_one_interval_later(synthetic):
    store, _ = synthetic
    out = Collect()
    got = threading.Event()
    out.export = lambda snap: (out.snapshots.append(snap), got.set())
    m = Monitor("syn", store, [out], interval_s=3600, rolling_windows=(60,), process=False)
    m.start()
    assert got.wait(GUARD_S)  # not an hour: at start
    first = out.snapshots[0]
    assert not first.final and first.cumulative is not None and first.rolling
    assert m.stop(GUARD_S)
    m.start()  # a stopped monitor stays stopped
    assert not any(t.name == "goodput-monitor-syn" and t.is_alive()
                   for t in threading.enumerate())
    assert m.run_once() is None


def test_stop_can_skip_the_final_cycle(synthetic):
    store, _ = synthetic
    out = Collect()
    m = Monitor("syn", store, [out], skip_final_flush=True)
    assert m.stop(5.0) and out.snapshots == [] and out.closed == 1
    out2 = Collect()
    m2 = Monitor("syn", store, [out2])
    assert m2.stop(5.0, skip_final_flush=True) and out2.snapshots == []


def test_a_failing_store_skips_the_cycle_and_is_logged_once(synthetic, caplog):
    store, played = synthetic
    out = Collect()
    m = Monitor("syn", store, [out], clock=lambda: played["end"])
    real = m.calculator.refresh
    m.calculator.refresh = lambda: (_ for _ in ()).throw(OSError("store down"))
    caplog.set_level(logging.WARNING, logger="goodput_core.monitor.loop")
    assert m.run_once() is None and m.run_once() is None
    assert m.stats()["errors"] == {"store: OSError": 2}
    assert len([r for r in caplog.records if "store down" in r.getMessage()]) == 1
    m.calculator.refresh = real
    assert m.run_once() is not None and len(out.snapshots) == 1
    m.stop(5.0)


def test_stop_returns_within_its_deadline_when_the_store_hangs(synthetic):
    store, _ = synthetic
    stuck_read = Parking()
    out = Collect()
    deadlines = FakeDeadlines()
    m = Monitor("syn", store, [out], deadlines=deadlines)
    deadlines.settled = monitor_settled(m, stuck_read)
    m.calculator.refresh = stuck_read.block
    try:
        assert m.stop(timeout=1.0) is False  # the final cycle was abandoned
        # 0.2 s (a fifth) is kept for close(); the cycle was given up after 0.8 s
        assert deadlines.expired == [pytest.approx(0.8)]
        assert out.closed == 1  # the exporters were still closed
    finally:
        stuck_read.release.set()


def test_parts_can_be_switched_at_run_time(synthetic):
    store, played = synthetic
    m = Monitor("syn", store, [], include_goodput=False, include_step_deviation=False,
                clock=lambda: played["end"])
    assert m.parts == frozenset()
    m.configure(goodput=True, rolling_windows=[60, 60.0, 90.5])
    assert m.parts == {"goodput", "rolling"} and m.rolling_windows == (60, 90.5)
    snap = m.run_once()
    assert snap.step_stats is None and set(snap.rolling) == {60, 90.5}
    m.configure(rolling_windows=())
    assert m.parts == {"goodput"}
    assert m.flush(5.0, parts={"step_deviation"})  # a one-off part
    with pytest.raises(ValueError):
        m.flush(5.0, parts={"nope"})
    m.stop(5.0)


@pytest.mark.parametrize("kwargs", [{"interval_s": 0}, {"interval_s": float("nan")},
                                    {"export_timeout_s": -1},
                                    {"configured_ideal_step_time": 0},
                                    {"rolling_windows": (60, -1)}])
def test_bad_settings_raise(kwargs):
    with pytest.raises(ValueError):
        Monitor("x", _store(), [], **kwargs)


def test_parse_windows():
    assert parse_windows("60,3600") == (60, 3600)
    assert parse_windows(" 1.5 ,60,") == (1.5, 60)
    with pytest.raises(ValueError):
        parse_windows("60,-5")


def test_recorder_drops_are_reported(synthetic):
    store, _ = synthetic

    class Rec:
        def stats(self):
            return {"dropped": 7}

    assert Monitor("syn", store, [], recorder=Rec()).run_once().recorder_dropped == 7
    assert Monitor("syn", store, []).run_once().recorder_dropped is None


# ----------------------------------------------------------- the command
def test_goodput_monitor_once(tmp_path, capsys):
    from tests.support.tfevents import read_scalars

    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder("cli-run", url)
    record_synthetic_job(rec, time.time() - 200)
    assert rec.close(GUARD_S)
    code = cli_main(["monitor", "cli-run", "--store", url, "--once", "--rolling", "60,3600",
                     "--tensorboard", str(tmp_path / "tb")])
    assert code == 0
    line = capsys.readouterr().out
    assert line.startswith("goodput run=cli-run goodput=") and "rolling=60s:" in line
    tags = read_scalars(str(tmp_path / "tb" / "goodput"))
    # the job ended ~116 s ago: its rolling windows end where it ended (rule 10),
    # as `goodput report --window 60s` does, not in the idle time after it
    assert {"goodput/goodput", "goodput/rolling_3600s", "goodput/rolling_60s",
            "step_deviation"} <= set(tags)
    calc = Calculator("cli-run", url)
    calc.refresh()
    end = calc.lifetime()[1]
    last_minute = calc.window(end - 60, end).goodput
    assert 0 < last_minute < 100
    assert f"rolling=60s:{last_minute:.2f}%" in line
    assert tags["goodput/rolling_60s"][-1][1] == pytest.approx(last_minute, rel=1e-6)


def test_goodput_monitor_errors_are_one_line(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    assert cli_main(["monitor", "missing", "--store", url, "--once", "--quiet"]) == 2
    assert "has no job start" in capsys.readouterr().err
    assert cli_main(["monitor", "x", "--store", url, "--once", "--project", "p"]) == 2
    assert "--gcm" in capsys.readouterr().err
    assert cli_main(["monitor", "x", "--store", url, "--once", "--prometheus", "9431"]) == 2
    assert "9431" in capsys.readouterr().err


def test_goodput_monitor_gcm_flag_builds_the_cloud_monitoring_exporter(tmp_path, monkeypatch):
    made = []

    class FakeGCM(Exporter):
        name = "gcm"

        def __init__(self, run, options, **kwargs):
            self.run, self.options, self.snapshots = run, options, []
            made.append(self)

        def export(self, snapshot):
            self.snapshots.append(snapshot)

    from goodput_core.exporters import cloud_monitoring

    monkeypatch.setattr(cloud_monitoring, "CloudMonitoringExporter", FakeGCM)
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder("gcm-run", url)
    record_synthetic_job(rec, time.time() - 200)
    assert rec.close(GUARD_S)
    assert cli_main(["monitor", "gcm-run", "--store", url, "--once", "--quiet", "--gcm",
                     "--project", "proj", "--location", "us-east5-a"]) == 0
    (gcm,) = made
    assert gcm.run == "gcm-run" and gcm.options.project_id == "proj"
    assert gcm.options.location == "us-east5-a" and len(gcm.snapshots) == 1


def test_a_monitor_started_on_a_long_run_hands_out_only_the_recent_deviations(monkeypatch):
    import numpy as np

    import goodput_core.monitor.cycle as monitor_extras
    from goodput_core.queries.step_stats import StepStats

    def stats(steps):  # ideal 0: each deviation is the step's time, half its number
        return StepStats(steps, steps * 0.5, 0.0)

    monkeypatch.setattr(monitor_extras, "MAX_CARRY", 50)
    steps = np.arange(1000)
    times = []
    new, done = monitor_extras.fresh_deviations(stats(steps), np.empty(0, np.int64),
                                                times.append)
    assert new == [(s, s * 0.5) for s in range(950, 1000)]  # the last 50, in order
    assert np.concatenate(times).tolist() == (steps * 0.5).tolist()  # the sketch sees all
    assert done.arrays()[0].tolist() == steps.tolist()  # the older ones are not handed out later
    more = stats(np.arange(1003))
    new, done = monitor_extras.fresh_deviations(more, done)
    assert new == [(1000, 500.0), (1001, 500.5), (1002, 501.0)]
    # a run going on: what is done is the cycle's own series, not a copy grown
    # each cycle (no work or memory in the run's length)
    assert done is more.series
    late = stats(np.concatenate(([-5], np.arange(1004))))
    new, done = monitor_extras.fresh_deviations(late, done)  # a step before the others
    assert [s for s, _ in new] == [-5, 1003]
    assert done.arrays()[0].tolist() == late.steps.tolist()
    assert monitor_extras.fresh_deviations(late, done) == ([], done)  # nothing new
