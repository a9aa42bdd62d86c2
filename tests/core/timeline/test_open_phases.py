"""Phases still open at the query time are their bucket up to it (semantics.md
rule 14): reads in the middle of a save, an evaluation and a hang, through a
real recorder on a fake clock, by a calculator and by a monitor whose
exporters (Prometheus scraped over HTTP, TensorBoard files read back, the
console line) agree with ``hangs()`` at every instant. Every expected number
is derived by hand in the comments."""

from __future__ import annotations

import io
import uuid

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.events import Kind
from goodput_core.exporters.console import ConsoleExporter
from goodput_core.exporters.prometheus import PrometheusExporter
from goodput_core.exporters.tensorboard import TensorBoardExporter
from goodput_core.monitor import Monitor
from goodput_core.stores.memory import MemoryStore
from goodput_core.timeline.buckets import BadputType as B
from tests.support.event_builders import calc_of, ev
from tests.support.fake_clock import FakeClock
from tests.support.prometheus_scrape import scrape
from tests.support.tfevents import read_scalars

T0 = 1_700_000_000.0
SAVE = B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME


def _two_steps():
    """Job start at T0; steps 0 and 1 of 1 s each from T0 + 1 (step 1 ends
    with its step end at T0 + 3): productive 2 s, OTHER [T0, T0 + 1) 1 s.
    Returns the recorder, its store and clock."""
    clock = FakeClock(T0)
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("open", store, clock=clock, strict=True, hang_detection=False)
    rec.record_job_start_time()
    clock.advance(1)
    for k in range(2):
        with rec.step(k):
            clock.advance(1)
    return rec, store, clock


def _read(store, clock):
    calc = Calculator("open", store, clock=clock)
    calc.refresh()
    return calc, calc.cumulative()


@pytest.mark.parametrize("phase", ["save", "eval"])
def test_reads_in_the_middle_of_an_open_save_or_evaluation_equal_the_elapsed_phase(phase):
    rec, store, clock = _two_steps()
    block = rec.checkpoint_save(2) if phase == "save" else rec.custom_badput_event("eval")
    with block:  # starts at T0 + 3
        for elapsed in (0.5, 5.0, 30.0):
            clock.t = T0 + 3 + elapsed
            rec.flush()  # the writer's lag: a phase is seen once its start is stored
            _, r = _read(store, clock)
            # total = 3 + elapsed; the open phase holds [T0 + 3, now): elapsed
            got = r.badput_seconds[SAVE] if phase == "save" else r.custom_badput_seconds["EVAL"]
            assert got == pytest.approx(elapsed)
            assert r.total_seconds == pytest.approx(3.0 + elapsed)
            assert r.productive_seconds == pytest.approx(2.0)
            assert r.badput_seconds[B.OTHER] == pytest.approx(1.0)  # only before step 0
    clock.t = T0 + 40
    rec.flush()
    _, r = _read(store, clock)
    # ended at T0 + 33: 30 s of the phase, and [T0 + 33, T0 + 40) is OTHER again
    got = r.badput_seconds[SAVE] if phase == "save" else r.custom_badput_seconds["EVAL"]
    assert got == pytest.approx(30.0)
    assert r.badput_seconds[B.OTHER] == pytest.approx(1.0 + 7.0)
    rec.close()


def _hang(rec, clock):
    """What the watchdog records when step 1's successor never starts: last
    progress T0 + 3 (step 1's end), expected step 1 s, detected at T0 + 20.
    The hang's span starts at T0 + 4."""
    clock.t = T0 + 20
    rec.record(Kind.HANG, None, 1, last_progress_time=T0 + 3, expected_step_seconds=1.0,
               hang_stack="thread MainThread:\n  train.py:9 step")


def test_reads_in_the_middle_of_a_hang_equal_the_elapsed_hang_in_every_view(tmp_path):
    rec, store, clock = _two_steps()
    _hang(rec, clock)
    rec.flush()
    prom = PrometheusExporter(0)
    out = io.StringIO()
    tb_dir = tmp_path / "tb"
    monitor = Monitor("open", store, [prom, ConsoleExporter(out), TensorBoardExporter(str(tb_dir))],
                      clock=clock, include_step_deviation=False)
    try:
        for now in (T0 + 20, T0 + 34, T0 + 64):
            clock.t = now
            snap = monitor.run_once()
            elapsed = now - (T0 + 4)
            # the HANG bucket, hangs() and the snapshot's hang seconds: [T0 + 4, now)
            assert snap.cumulative.badput_seconds[B.HANG] == pytest.approx(elapsed)
            assert snap.hang_seconds == pytest.approx(elapsed)
            (h,) = monitor.calculator.hangs(now)
            assert h.end is None and h.seconds == pytest.approx(elapsed)
            # [T0 + 3, T0 + 4): the expected end of the step that hung, OTHER
            assert snap.cumulative.badput_seconds[B.OTHER] == pytest.approx(1.0 + 1.0)
            got = scrape(prom.url)
            assert got[("goodput_hang_seconds", frozenset({("run", "open")}))] \
                == pytest.approx(elapsed)
            assert got[("goodput_badput_seconds", frozenset({("bucket", "HANG"), ("run", "open")}))] \
                == pytest.approx(elapsed)
            assert f"HUNG hang_seconds={elapsed:.0f}s" in out.getvalue().splitlines()[-1]
    finally:
        monitor.stop(10)
        rec.close()
    scalars = read_scalars(str(tb_dir / "goodput"))
    hang_s = [v for _, v, _ in scalars["insights/hang_seconds"]]
    # badput/hang is in percent of total (now - T0); TensorBoard keeps float32
    hang_pct = [v for _, v, _ in scalars["badput/hang"]]
    for (now, s, pct) in zip((T0 + 20, T0 + 34, T0 + 64), hang_s, hang_pct):
        assert s == pytest.approx(now - T0 - 4, rel=1e-6)
        assert pct == pytest.approx(100 * (now - T0 - 4) / (now - T0), rel=1e-5)


def test_a_monitor_reading_during_a_30_s_save_shows_save_time_growing():
    rec, store, clock = _two_steps()
    prom = PrometheusExporter(0)
    monitor = Monitor("open", store, [prom], clock=clock, include_step_deviation=False)
    seen = []
    try:
        with rec.checkpoint_save(2):  # T0 + 3 .. T0 + 33
            for elapsed in (10, 20, 30):
                clock.t = T0 + 3 + elapsed
                rec.flush()
                monitor.run_once()
                seen.append(scrape(prom.url)[("goodput_badput_seconds",
                                              frozenset({("bucket", SAVE.name), ("run", "open")}))])
    finally:
        monitor.stop(10)
        rec.close()
    assert seen == pytest.approx([10.0, 20.0, 30.0])


K = Kind


@pytest.mark.parametrize("start,bucket", [
    (K.TPU_INIT_START, B.TPU_INITIALIZATION),
    (K.TRAINING_PREP_START, B.TRAINING_PREP),
    (K.PROGRAM_STARTUP_START, B.PROGRAM_STARTUP),
    (K.DATA_LOADING_START, B.DATA_LOADING_SYNC),  # a load outside steps blocks
    (K.CHECKPOINT_RESTORE_START, B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME),
])
def test_every_kind_of_open_phase_before_the_first_step_is_its_bucket(start, bucket):
    # job start 0, the phase starts at 2 and is still open at 10
    c = calc_of([ev(K.JOB_START, 0), ev(start, 2)], now=10)
    r = c.cumulative()
    assert r.badput_seconds[bucket] == pytest.approx(8.0)
    assert r.badput_seconds[B.OTHER] == pytest.approx(2.0)


def test_an_open_phase_keeps_the_usual_priority():
    # steps 0, 1 at 0, 10; an eval opened at 12 and a save opened at 15
    # (never ended), read at 20: the open step [10, 20) holds eval [12, 15)
    # and save [15, 20) (save outranks custom events, rule 8); [10, 12) is
    # the open step's own time: OTHER (rule 3)
    events = [ev(K.JOB_START, 0), ev(K.STEP_START, 0, 0), ev(K.STEP_START, 10, 1),
              ev(K.CUSTOM_BADPUT_START, 12, custom_badput_event_type="eval"),
              ev(K.CHECKPOINT_SAVE_START, 15, 1)]
    r = calc_of(events, now=20).cumulative()
    assert r.badput_seconds[SAVE] == pytest.approx(5.0)
    assert r.custom_badput_seconds["EVAL"] == pytest.approx(3.0)
    assert r.badput_seconds[B.OTHER] == pytest.approx(2.0)
    assert r.productive_seconds == pytest.approx(10.0)


def test_an_open_phase_ends_at_the_next_step_start():
    # a save opened at 12 in step 1 whose end was lost: step 2 starts at 14,
    # so the save is [12, 14); steps go on to 30 (job end)
    events = [ev(K.JOB_START, 0), *[ev(K.STEP_START, 10 * k, k) for k in range(2)],
              ev(K.CHECKPOINT_SAVE_START, 12, 1), ev(K.STEP_START, 14, 2),
              ev(K.STEP_START, 20, 3), ev(K.JOB_END, 30)]
    r = calc_of(events, now=100).cumulative()
    assert r.badput_seconds[SAVE] == pytest.approx(2.0)
    # spans [0,10) [10,14) minus 2 s of save, [14,20) [20,30): 10 + 2 + 6 + 10
    assert r.productive_seconds + r.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(28.0)


def test_the_seconds_of_hangs_add_up_to_the_hang_bucket_at_every_instant():
    # steps 0..5 at 1..6; a hang detected at 50 (last progress 6, expected 1:
    # it starts at 7), a SIGKILL-like crash with a disruption at 80, restart at
    # 120 from step 4: the hung step 5 is redone, so the hang's time is wasted
    # progress (outranks HANG): its seconds and the bucket are 0 once restarted
    hang = ev(K.HANG, 50, 5, last_progress_time=6.0, expected_step_seconds=1.0)
    before = [ev(K.JOB_START, 0), *[ev(K.STEP_START, 1 + k, k) for k in range(6)], hang]
    after = [ev(K.DISRUPTION, 80, disruption_cause="sigkill"), ev(K.JOB_START, 120),
             ev(K.STEP_START, 121, 4), ev(K.STEP_START, 122, 5), ev(K.JOB_END, 123)]
    for events, now, want in ((before, 60, 53.0), (before + after, 200, 0.0)):
        c = calc_of(events, now=now)
        r = c.cumulative()
        (h,) = c.hangs()
        assert h.seconds == pytest.approx(want)
        assert r.badput_seconds.get(B.HANG, 0.0) == pytest.approx(want)
    assert h.ended_by == "restart" and (h.start, h.end) == (7.0, 120.0)
