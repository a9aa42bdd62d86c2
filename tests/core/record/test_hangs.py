"""Hang detection: the HANG bucket (hand-derived), the watchdog (injected
clocks), and a real process whose step blocks on a lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.timeline.buckets import BadputType as B
from goodput_core.compat._calculator_shapes import breakdown
from goodput_core.events import EventRecord, Kind
from goodput_core.stores.memory import MemoryStore
from goodput_core.record.watchdog import HangSettings, HangWatchdog
from tests.support.fake_clock import FakeClock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _ev(kind, t, step=None, extra=None):
    return EventRecord("r", int(kind), float(t), step, extra)


def _hang_run(end_kind=Kind.HANG_END):
    """Job start 0; steps 0..5 at 1..6 s; the watchdog detects a hang at 50 s
    (last progress 6, expected 1 s: the span starts at 7); progress at 100."""
    ev = [_ev(Kind.JOB_START, 0)]
    ev += [_ev(Kind.STEP_START, 1 + k, k) for k in range(6)]
    ev.append(_ev(Kind.HANG, 50, 5, {"last_progress_time": 6.0, "expected_step_seconds": 1.0,
                                     "hang_stack": "thread MainThread:\n  train.py:9 step"}))
    if end_kind is Kind.HANG_END:
        ev += [_ev(Kind.HANG_END, 100), _ev(Kind.STEP_START, 100, 6),
               _ev(Kind.STEP_END, 101, 6), _ev(Kind.JOB_END, 101)]
    return ev


def test_a_resolved_hang_is_its_own_bucket_and_not_productive():
    calc = Calculator()
    calc.add(_hang_run())
    r = calc.cumulative(now=200)
    # [7, 100) is the hang; step spans [1,6) 5 s + [6,7) 1 s + [100,101) 1 s productive;
    # [0, 1) before the first step is OTHER.
    assert r.badput_seconds[B.HANG] == pytest.approx(93.0)
    assert r.productive_seconds == pytest.approx(7.0)
    assert r.badput_seconds[B.OTHER] == pytest.approx(1.0)
    assert r.total_seconds == pytest.approx(101.0)
    (hang,) = calc.hangs(now=200)
    assert (hang.step, hang.start, hang.detected, hang.end) == (5, 7.0, 50.0, 100.0)
    assert hang.ended_by == "progress" and hang.seconds == pytest.approx(93.0)
    assert hang.thread == "MainThread" and hang.top_frames(2) == ["train.py:9 step"]
    # The reference's keys stay: the compat breakdown reports the hang as OTHER.
    shaped = breakdown(r, seconds=True)
    assert B.HANG not in shaped and shaped[B.OTHER] == pytest.approx(94.0)


def test_a_run_without_hangs_has_no_hang_key():
    calc = Calculator()
    calc.add([_ev(Kind.JOB_START, 0), _ev(Kind.STEP_START, 1, 0), _ev(Kind.JOB_END, 3)])
    assert B.HANG not in calc.cumulative(now=5).badput_seconds
    assert calc.hangs() == []


def test_a_hang_ended_by_a_crash_is_recovery():
    ev = _hang_run(end_kind=None)
    ev += [_ev(Kind.DISRUPTION, 80, None, {"disruption_cause": "sigkill"}),
           _ev(Kind.JOB_START, 120), _ev(Kind.STEP_START, 121, 4), _ev(Kind.STEP_START, 122, 5),
           _ev(Kind.STEP_END, 123, 5), _ev(Kind.JOB_END, 123)]
    calc = Calculator()
    calc.add(ev)
    r = calc.cumulative(now=200)
    (hang,) = calc.hangs(now=200)
    assert hang.ended_by == "restart" and hang.end == 120.0
    # recovery outranks the hang: nothing of it is left as HANG
    assert r.badput_seconds.get(B.HANG, 0.0) == pytest.approx(0.0)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] > 0


def test_an_open_hang_grows_with_the_query_time():
    calc = Calculator()
    calc.add(_hang_run(end_kind=None))
    (hang,) = calc.hangs(now=70)
    assert hang.ended_by == "open" and hang.end is None and hang.seconds == pytest.approx(63.0)


class _Mono:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _watched(settings=HangSettings(min_seconds=30.0, factor=10.0)):
    clock, mono = FakeClock(1000.0), _Mono()
    store = MemoryStore()
    rec = Recorder("w", store, clock=clock, hang_detection=False)
    dog = HangWatchdog(rec, settings, monotonic=mono, wait=lambda s: True)
    rec._writer.watchdog = dog
    return rec, store, clock, mono, dog


def _step(rec, clock, mono, k, seconds=1.0):
    rec.record_step_start_time(k)
    rec.flush()
    clock.advance(seconds)
    mono.t += seconds


def test_under_asynchronous_dispatch_the_expected_step_is_timed_from_sync_points():
    """Steps dispatched 1 ms apart, each group of 10 synced (a step end of the last
    step) 2 s after its first dispatch: the expected step is 0.2 s (the groups'
    shares), not the 1 ms between dispatches; so with factor 5 and min 0.5 s the
    threshold is 1 s and the 2 s wait at each sync point is no hang."""
    rec, store, clock, mono, dog = _watched(HangSettings(factor=5, min_seconds=0.5))
    rec.record_job_start_time()
    for group in range(3):
        for k in range(10 * group, 10 * group + 10):
            _step(rec, clock, mono, k, seconds=0.001)
        clock.advance(2.0 - 0.01)  # the last dispatch returns; the block ends 2 s in
        mono.t += 2.0 - 0.01
        rec.record_step_end_time(10 * group + 9)
        rec.flush()
    assert dog.expected_step_seconds() == pytest.approx(0.2, rel=1e-6)
    assert dog.threshold() == pytest.approx(1.0, rel=1e-6)
    # without step ends (no sync point) the dispatches are all it has
    rec2, _, clock2, mono2, dog2 = _watched(HangSettings(factor=5, min_seconds=0.5))
    rec2.record_job_start_time()
    for k in range(30):
        _step(rec2, clock2, mono2, k, seconds=0.001)
    assert dog2.expected_step_seconds() == pytest.approx(0.001, rel=1e-6)


def test_watchdog_detects_a_silence_longer_than_the_threshold_and_its_end():
    seen = []
    rec, store, clock, mono, dog = _watched(HangSettings(min_seconds=30.0, on_hang=seen.append))
    rec.record_job_start_time()
    for k in range(20):
        _step(rec, clock, mono, k)
    assert dog.expected_step_seconds() == pytest.approx(1.0)
    assert dog.threshold() == 30.0   # max(10 x 1 s, 30 s)
    mono.t += 28.0                   # 29 s since step 19 was observed
    assert dog.check() is None       # not yet
    mono.t += 2.0
    clock.advance(31.0)
    hang = dog.check()
    assert hang is not None and hang["step"] == 19 and dog.check() is None  # once
    assert seen and seen[0]["last_progress_time"] == hang["last_progress_time"]
    _step(rec, clock, mono, 20)      # progress again: the hang ends
    rec.flush()
    kinds = [e.kind for e in store.read("w")[0]]
    assert kinds.count(Kind.HANG) == 1 and kinds.count(Kind.HANG_END) == 1
    calc = Calculator("w", store)
    calc.refresh()
    (h,) = calc.hangs()
    assert h.ended_by == "progress" and h.step == 19


@pytest.mark.parametrize("phase", ["save", "eval", "prep"])
def test_no_hang_inside_long_checkpoints_evaluations_or_preparation(phase):
    rec, store, clock, mono, dog = _watched()
    rec.record_job_start_time()
    for k in range(5):
        _step(rec, clock, mono, k)
    start, end = {"save": (rec.record_checkpoint_save_start_time,
                           rec.record_checkpoint_save_end_time),
                  "eval": (lambda: rec.record_custom_badput_event_start_time(None, "eval"),
                           lambda: rec.record_custom_badput_event_end_time(None, "eval")),
                  "prep": (rec.record_training_preparation_start_time,
                           rec.record_training_preparation_end_time)}[phase]
    start()
    rec.flush()
    mono.t += 1000.0
    assert dog.check() is None
    end()
    _step(rec, clock, mono, 5)
    assert dog.check() is None
    assert Kind.HANG not in [e.kind for e in store.read("w")[0]]


def test_no_hang_before_two_steps_or_after_the_job_ended():
    rec, store, clock, mono, dog = _watched()
    rec.record_job_start_time()
    _step(rec, clock, mono, 0)
    mono.t += 10_000
    assert dog.check() is None       # one step: a long compile is not a hang
    _step(rec, clock, mono, 1)
    rec.record_job_end_time()
    rec.flush()
    mono.t += 10_000
    assert dog.check() is None


def test_a_writer_held_up_by_the_store_is_not_a_hang():
    rec, store, clock, mono, dog = _watched()
    rec.record_job_start_time()
    for k in range(5):
        _step(rec, clock, mono, k)
    mono.t += 100.0
    # (ticket, kind, time, step, extra, write time, process index): waiting in memory
    rec._ring.memory.append((next(rec._ring.tickets), int(Kind.STEP_START), clock() + 50, 5,
                             None, clock(), 0))  # not drained
    assert dog.check() is None


_HUNG = textwrap.dedent("""
    import sys, threading, time
    from goodput_core import Recorder
    from goodput_core.record.watchdog import HangSettings
    store, block = sys.argv[1], float(sys.argv[2])
    rec = Recorder("hung", store, flush_interval_s=0.02,
                   hang_detection=HangSettings(factor=10, min_seconds=0.5,
                                               check_interval_s=0.05))
    lock = threading.Lock()
    rec.record_job_start_time()
    for step in range(30):
        rec.record_step_start_time(step)
        if step == 10:           # a save 2x the threshold, then 0.1 s before the next step:
            rec.record_checkpoint_save_start_time(step)     # no hang (timed from its end)
            time.sleep(1.0)
            rec.record_checkpoint_save_end_time(step)
            time.sleep(0.1)
        if step == 20:
            lock.acquire()
            threading.Timer(block, lock.release).start()
            lock.acquire()       # the step blocks here, like a stuck collective
            lock.release()
        time.sleep(0.01)
    rec.record_step_end_time(29)
    rec.record_job_end_time()
    rec.close()
""")


def test_a_real_process_whose_step_blocks_on_a_lock(tmp_path):
    store = f"sqlite:///{tmp_path / 'h.sqlite'}"
    block = 3.0
    out = subprocess.run([sys.executable, "-c", _HUNG, store, str(block)], capture_output=True,
                         text=True, timeout=120, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert "looks hung" in out.stderr
    calc = Calculator("hung", store)
    calc.refresh()
    (hang,) = calc.hangs()
    assert hang.step == 20 and hang.ended_by == "progress"
    # Detected within threshold + one check interval (+ the writer's interval) of
    # the block's start, and the span matches the block to within one expected step.
    assert hang.detected - hang.last_progress < 0.5 + 10 * hang_expected(hang, calc) + 0.5
    blocked = hang.end - hang.last_progress
    assert block - 0.5 < blocked < block + 1.0
    assert abs(hang.seconds - (blocked - hang_expected(hang, calc))) < 1e-6
    assert "acquire" in hang.stack or "_HUNG" in hang.stack or "<string>" in hang.stack
    r = calc.cumulative()
    assert r.badput_seconds[B.HANG] == pytest.approx(hang.seconds, abs=0.05)
    # the save at step 10 raised no hang (the only one is step 20's) and kept its time
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == pytest.approx(1.0, abs=0.2)


def hang_expected(hang, calc):
    return hang.start - hang.last_progress


def test_a_real_run_without_hangs_records_none(tmp_path):
    store = f"sqlite:///{tmp_path / 'ok.sqlite'}"
    out = subprocess.run([sys.executable, "-c", _HUNG, store, "0"], capture_output=True,
                         text=True, timeout=120, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    calc = Calculator("ok", store)
    calc.refresh()
    assert calc.hangs() == [] and "looks hung" not in out.stderr


# ------------------------------------------------ defaults and the environment
def test_default_threshold_is_ten_steps_but_never_under_two_minutes_and_a_warning_names_it(
        caplog):
    """docs/insights.md: ``max(10 x expected step time, 120 s)``, then one warning."""
    rec, store, clock, mono, dog = _watched(HangSettings())
    rec.record_job_start_time()
    for k in range(20):
        _step(rec, clock, mono, k)          # 1 s steps: 10 x 1 s < 120 s
    assert dog.threshold() == 120.0
    rec, store, clock, mono, dog = _watched(HangSettings())
    rec.record_job_start_time()
    for k in range(20):
        _step(rec, clock, mono, k, seconds=30.0)  # 30 s steps: 10 x 30 s > 120 s
    assert dog.threshold() == pytest.approx(300.0)
    mono.t += 269.0                  # 299 s since step 19 was observed (_step added 30)
    assert dog.check() is None
    mono.t += 2.0
    clock.advance(271.0)
    with caplog.at_level("WARNING", logger="goodput"):
        assert dog.check() is not None
    (warning,) = [r for r in caplog.records if "looks hung" in r.getMessage()]
    message = warning.getMessage()
    assert "'w'" in message and "step 19" in message and "for 301 s" in message


def test_the_environment_switches_the_watchdog_and_sets_its_numbers(monkeypatch):
    monkeypatch.setenv("GOODPUT_HANG_DETECTION", "0")
    assert Recorder("env-off", MemoryStore())._writer.watchdog is None
    monkeypatch.setenv("GOODPUT_HANG_DETECTION", "1")
    monkeypatch.setenv("GOODPUT_HANG_FACTOR", "4")
    monkeypatch.setenv("GOODPUT_HANG_MIN_SECONDS", "45")
    dog = Recorder("env-on", MemoryStore())._writer.watchdog
    assert dog is not None and (dog.settings.factor, dog.settings.min_seconds) == (4.0, 45.0)
    monkeypatch.setenv("GOODPUT_HANG_FACTOR", "often")
    with pytest.raises(ValueError, match="GOODPUT_HANG_FACTOR"):
        Recorder("env-bad", MemoryStore())
    monkeypatch.delenv("GOODPUT_HANG_DETECTION")
    monkeypatch.delenv("GOODPUT_HANG_FACTOR")
    monkeypatch.delenv("GOODPUT_HANG_MIN_SECONDS")
    dog = Recorder("env-default", MemoryStore())._writer.watchdog
    assert (dog.settings.factor, dog.settings.min_seconds) == (10.0, 120.0)
