"""Every documented rule of hang detection pinned (docs/insights.md, "Hang
detection"; docs/semantics.md rule 8's table): which phases suspend it, what
counts as progress, the expected step time, the check interval and the
detection latency, and how a hang's span is counted against phases and
restarts. Clocks are injected; nothing sleeps. Each test names the mutation
it was checked against (the rule broken by hand, the test failing)."""

from __future__ import annotations

import os
import re

import pytest

from goodput_core import Calculator, Recorder
from goodput_core.events import EventRecord, Kind
from goodput_core.record.watchdog import HangSettings, HangWatchdog
from goodput_core.stores.memory import MemoryStore
from goodput_core.timeline.buckets import IDLE, PRIORITY, PRODUCTIVE
from goodput_core.timeline.buckets import BadputType as B
from tests.support.fake_clock import FakeClock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class _Mono:
    """The watchdog's monotonic clock, moved by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _watched(settings):
    clock, mono = FakeClock(1000.0), _Mono()
    store = MemoryStore()
    rec = Recorder("w", store, clock=clock, hang_detection=False)
    dog = HangWatchdog(rec, settings, monotonic=mono, wait=lambda s: True)
    rec._writer.watchdog = dog  # the writer shows it every batch it drains (flush)
    return rec, store, clock, mono, dog


def _advance(clock, mono, seconds):
    clock.advance(seconds)
    mono.t += seconds


def _steps(rec, clock, mono, durations, first=0):
    """Steps of the given durations; each start is drained (seen) at once."""
    for k, seconds in enumerate(durations, start=first):
        rec.record_step_start_time(k)
        rec.flush()
        _advance(clock, mono, seconds)
    return first + len(durations)


def _kinds(store):
    return [e.kind for e in store.read("w")[0]]


# ------------------------------------------------------------ progress and phases
def test_the_silence_after_a_long_save_is_timed_from_the_save_end():
    """The reported defect: 4 s saves, then 0.6 s before the next step.

    0.1 s steps, factor 10, minimum 0.5 s: threshold max(10 x 0.1, 0.5) = 1.0 s.
    Timed from the save's end the gap is 0.6 s < 1.0 s: no hang. Timed from the
    last step (the old rule) it is 4.6 s: a hang after every save.
    Mutation killed: phase ends not counted as progress (7-8 false hangs).
    """
    rec, store, clock, mono, dog = _watched(HangSettings(factor=10.0, min_seconds=0.5))
    rec.record_job_start_time()
    k = 0
    for _ in range(8):
        k = _steps(rec, clock, mono, [0.1] * 10, first=k)
        rec.record_checkpoint_save_start_time(k)
        rec.flush()
        _advance(clock, mono, 4.0)
        assert dog.check() is None          # inside the save: suspended
        rec.record_checkpoint_save_end_time(k)
        rec.flush()
        for _ in range(3):                   # looks three times in the 0.6 s gap
            _advance(clock, mono, 0.2)
            assert dog.check() is None
    _steps(rec, clock, mono, [0.1], first=k)
    rec.record_job_end_time()
    rec.flush()
    assert dog.threshold() == pytest.approx(1.0)
    assert Kind.HANG not in _kinds(store)
    calc = Calculator("w", store)
    calc.refresh()
    r = calc.cumulative()
    # 8 saves x 4 s each, whole: no hang took any of it.
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == pytest.approx(32.0)
    assert r.badput_seconds.get(B.HANG, 0.0) == 0.0


@pytest.mark.parametrize("phase", ["save", "restore", "eval", "compile"])
def test_a_hang_after_a_phase_starts_its_span_after_the_phase(phase):
    """5 steps of 1 s (expected step 1 s), threshold max(10 x 1, 5) = 10 s; a 40 s
    phase, then silence. 9 s after the phase's end: nothing; 11 s after: a hang
    whose last progress is the phase's end. Steps resume 20 s after the end.
    Hand-derived: the span is [end + 1, end + 20) = 19 s of HANG and the phase
    keeps its 40 s. Mutation killed: phase ends not progress (the hang would be
    declared at once, last progress = the last step, the phase's time HANG)."""
    rec, store, clock, mono, dog = _watched(HangSettings(factor=10.0, min_seconds=5.0))
    rec.record_job_start_time()
    k = _steps(rec, clock, mono, [1.0] * 5)
    start, end, bucket = {
        "save": (rec.record_checkpoint_save_start_time, rec.record_checkpoint_save_end_time,
                 B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME),
        "restore": (rec.record_checkpoint_restore_start_time,
                    rec.record_checkpoint_restore_end_time,
                    B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME),
        "eval": (lambda: rec.record_custom_badput_event_start_time(None, "eval"),
                 lambda: rec.record_custom_badput_event_end_time(None, "eval"),
                 B.CUSTOM_BADPUT_EVENTS),
        "compile": (rec.record_program_startup_start_time, rec.record_program_startup_end_time,
                    B.PROGRAM_STARTUP)}[phase]
    start()
    rec.flush()
    _advance(clock, mono, 40.0)
    end()
    rec.flush()
    phase_end = clock()
    _advance(clock, mono, 9.0)
    assert dog.check() is None
    _advance(clock, mono, 2.0)
    hang = dog.check()
    assert hang is not None and hang["last_progress_time"] == pytest.approx(phase_end)
    _advance(clock, mono, 9.0)
    _steps(rec, clock, mono, [1.0], first=k)   # progress at phase_end + 20: the hang ends
    rec.record_job_end_time()
    rec.flush()
    calc = Calculator("w", store)
    calc.refresh()
    (h,) = calc.hangs()
    assert (h.start, h.end) == (pytest.approx(phase_end + 1.0), pytest.approx(phase_end + 20.0))
    r = calc.cumulative()
    assert r.badput_seconds[B.HANG] == pytest.approx(19.0)
    assert r.badput_seconds[bucket] == pytest.approx(40.0)


@pytest.mark.parametrize("phase", ["compile", "restore", "loading"])
def test_a_phase_held_open_suspends_detection_but_data_loading_is_not_a_phase(phase):
    """A compile or restore open for 1000 s (threshold 30 s) is not a hang; a
    load that never returns is. Mutations killed: compile/restore dropped from
    the watchdog's phases (a false hang); data loading added to them (a stuck
    loader never reported)."""
    rec, store, clock, mono, dog = _watched(HangSettings(factor=10.0, min_seconds=30.0))
    rec.record_job_start_time()
    _steps(rec, clock, mono, [1.0] * 5)
    {"compile": rec.record_program_startup_start_time,
     "restore": rec.record_checkpoint_restore_start_time,
     "loading": rec.record_data_loading_start_time}[phase]()
    rec.flush()
    _advance(clock, mono, 1000.0)
    hang = dog.check()
    if phase == "loading":
        assert hang is not None and hang["step"] == 4
    else:
        assert hang is None


# ------------------------------------------------------------ expected step time
def test_below_ten_timed_steps_the_expected_step_is_the_longest_so_far():
    """Irregular steps 1, 3, 2, 1.5 s (4 timed): expected = the longest, 3 s, not
    the last (1.5 s) nor the mean (1.875 s); threshold max(10 x 3, 5) = 30 s.
    Mutations killed: last step or mean step as the expectation (threshold 15 s
    or 18.75 s: the check at 29 s would fire)."""
    rec, store, clock, mono, dog = _watched(HangSettings(factor=10.0, min_seconds=5.0))
    rec.record_job_start_time()
    _steps(rec, clock, mono, [1.0, 3.0, 2.0, 1.5])
    rec.record_step_start_time(4)          # the 5th start times the 1.5 s step
    rec.flush()
    assert dog.expected_step_seconds() == pytest.approx(3.0)
    assert dog.threshold() == pytest.approx(30.0)
    _advance(clock, mono, 29.0)
    assert dog.check() is None
    _advance(clock, mono, 2.0)
    assert dog.check() is not None


def test_from_ten_timed_steps_the_expected_step_is_the_ideal_step_time():
    """Nine 1 s steps and one 4 s step (10 timed): median 1, MAD 0, so the ideal
    step time (mean at or below median + 3 MAD) is 1 s, not the longest 4 s.
    With one 1 s step fewer (9 timed) it is still the longest, 4 s.
    Mutation killed: the boundary moved (9 or 11) or the ideal rule replaced by
    the longest step."""
    rec, store, clock, mono, dog = _watched(HangSettings(factor=10.0, min_seconds=5.0))
    rec.record_job_start_time()
    _steps(rec, clock, mono, [1.0] * 8 + [4.0])
    rec.record_step_start_time(9)
    rec.flush()
    assert dog.expected_step_seconds() == pytest.approx(4.0)   # 9 timed: longest
    _advance(clock, mono, 1.0)
    rec.record_step_start_time(10)
    rec.flush()
    assert dog.expected_step_seconds() == pytest.approx(1.0)   # 10 timed: ideal
    assert dog.threshold() == pytest.approx(10.0)


# ------------------------------------------------------------ interval and latency
@pytest.mark.parametrize("step,interval", [(1.0, 7.5), (30.0, 10.0), (0.01, 0.125)])
def test_the_check_interval_is_a_quarter_of_the_threshold_up_to_ten_seconds(step, interval):
    """min(10 s, threshold / 4): 1 s steps, minimum 30 s -> threshold 30 s, 7.5 s;
    30 s steps -> threshold 300 s, capped at 10 s; 0.01 s steps, minimum 0.5 s ->
    0.5 s, 0.125 s. Mutation killed: threshold / 2, or no 10 s cap."""
    rec, store, clock, mono, dog = _watched(
        HangSettings(factor=10.0, min_seconds=30.0 if step >= 1 else 0.5))
    rec.record_job_start_time()
    _steps(rec, clock, mono, [step] * 5)
    assert dog._interval() == pytest.approx(interval)
    assert HangWatchdog(rec, HangSettings(check_interval_s=2.0))._interval() == 2.0


def test_detection_latency_is_at_most_threshold_plus_drain_plus_one_interval():
    """The documented bound: declared between ``threshold`` and ``threshold +
    flush interval + check interval`` after the last progress was recorded.

    1 s steps, threshold 30 s, check interval 7.5 s. The last step start is
    recorded at t0 and drained 0.5 s later (the writer's flush interval), then
    the watchdog's own loop runs with an injected wait that moves both clocks:
    checks at 7.5, 15, 22.5 and 30 s after the drain; the 4th sees 30 s >= 30 s,
    so the hang is recorded at t0 + 0.5 + 30 = t0 + 30.5 s, inside
    [30, 30 + 0.5 + 7.5]. Mutation killed: a longer interval (threshold / 2:
    checks at 15, 30 s, waits != 7.5) or staleness from a later time."""
    rec, store, clock, mono, dog = _watched(HangSettings(factor=10.0, min_seconds=30.0))
    rec.record_job_start_time()
    k = _steps(rec, clock, mono, [1.0] * 5)
    t0 = clock()
    rec.record_step_start_time(k)         # the last progress, recorded at t0 ...
    _advance(clock, mono, 0.5)
    rec.flush()                            # ... seen by the writer 0.5 s later
    waits = []

    def wait(seconds):
        waits.append(seconds)
        _advance(clock, mono, seconds)
        return dog.hangs > 0 or len(waits) > 20

    dog._user_wait = wait
    dog._loop()
    assert waits[:4] == [7.5] * 4 and dog.hangs == 1
    rec.flush()
    (hang,) = [e for e in store.read("w")[0] if e.kind == Kind.HANG]
    latency = hang.time - t0               # 0.5 s drain + 30 s
    assert latency == pytest.approx(30.5)
    assert 30.0 <= latency <= 30.0 + 0.5 + 7.5


# ------------------------------------------------------------ counting
def _ev(kind, t, step=None, extra=None):
    return EventRecord("r", int(kind), float(t), step, extra)


def _steps_then_hang():
    """Job start 0; steps 0..5 at 1..6 s; a hang detected at 50 s whose last
    progress is 6 s (expected 1 s: its span starts at 7 s)."""
    ev = [_ev(Kind.JOB_START, 0)] + [_ev(Kind.STEP_START, 1 + k, k) for k in range(6)]
    ev.append(_ev(Kind.HANG, 50, 5, {"last_progress_time": 6.0, "expected_step_seconds": 1.0,
                                     "hang_stack": "thread MainThread:\n  train.py:9 step"}))
    return ev


@pytest.mark.parametrize("kinds,bucket", [
    ((Kind.CHECKPOINT_SAVE_START, Kind.CHECKPOINT_SAVE_END), B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME),
    ((Kind.CHECKPOINT_RESTORE_START, Kind.CHECKPOINT_RESTORE_END),
     B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME),
    ((Kind.CUSTOM_BADPUT_START, Kind.CUSTOM_BADPUT_END), B.CUSTOM_BADPUT_EVENTS),
    ((Kind.PROGRAM_STARTUP_START, Kind.PROGRAM_STARTUP_END), B.PROGRAM_STARTUP),
])
def test_a_hang_span_never_takes_a_phases_time(kinds, bucket):
    """A hang span [7, 100) (as an older watchdog recorded it, from the last
    step) over a phase [6, 10) inside step 5's span [6, 100).

    Hand-derived: the phase keeps [6, 10) = 4 s; HANG = 93 - 3 (the phase's
    [7, 10)) = 90 s; productive [1, 6) + [100, 101) = 6 s (rule 6 may move a part
    of it to program startup); OTHER [0, 1) = 1 s;
    total 101 s. Mutation killed: HANG above the phases in PRIORITY (the old
    order: phase 1 s, HANG 93 s)."""
    extra = {"custom_badput_event_type": "eval"} if bucket is B.CUSTOM_BADPUT_EVENTS else None
    ev = _steps_then_hang() + [_ev(kinds[0], 6.0, 5, extra), _ev(kinds[1], 10.0, 5, extra),
                               _ev(Kind.HANG_END, 100), _ev(Kind.STEP_START, 100, 6),
                               _ev(Kind.STEP_END, 101, 6), _ev(Kind.JOB_END, 101)]
    calc = Calculator()
    calc.add(sorted(ev, key=lambda e: e.time))
    r = calc.cumulative(now=200)
    assert r.badput_seconds[bucket] == pytest.approx(4.0)
    assert r.badput_seconds[B.HANG] == pytest.approx(90.0)
    # Rule 6's first-step heuristic (off with an explicit compile span) may move
    # part of step 0's productive second to PROGRAM_STARTUP: count them together.
    heuristic = r.badput_seconds[B.PROGRAM_STARTUP] - (4.0 if bucket is B.PROGRAM_STARTUP else 0.0)
    assert r.productive_seconds + heuristic == pytest.approx(6.0)
    assert r.badput_seconds[B.OTHER] == pytest.approx(1.0)
    assert r.total_seconds == pytest.approx(101.0)


@pytest.mark.parametrize("hang_end", [100.0, None])
def test_a_hang_ended_by_a_crash_and_restart_is_recovery(hang_end):
    """The hang [7, ...) of step 5, a SIGKILL disruption at 80 s, a restart at
    120 s from step 4 (steps 4, 5 at 121, 122; job end 123).

    Hand-derived: recovery = disruption to restart = [80, 120) = 40 s; wasted =
    the spans of steps >= 4 of the crashed attempt, [5, 80) = 75 s; productive
    [1, 5) + [121, 123) = 6 s; OTHER [0, 1) + [120, 121) = 2 s; total 123 s; no
    HANG at all. With a hang_end at 100 s the hang's span [7, 100) overlaps both
    wasted progress and recovery, so the priority decides. Mutation killed:
    HANG above recovery (HANG 20 s, recovery 20 s). Without a hang_end the
    hang is ended by the restart (``ended_by='restart'``, end 120 s)."""
    ev = _steps_then_hang() + [_ev(Kind.DISRUPTION, 80, None, {"disruption_cause": "sigkill"})]
    if hang_end is not None:
        ev.append(_ev(Kind.HANG_END, hang_end))
    ev += [_ev(Kind.JOB_START, 120), _ev(Kind.STEP_START, 121, 4), _ev(Kind.STEP_START, 122, 5),
           _ev(Kind.STEP_END, 123, 5), _ev(Kind.JOB_END, 123)]
    calc = Calculator()
    calc.add(ev)
    r = calc.cumulative(now=200)
    assert r.badput_seconds.get(B.HANG, 0.0) == pytest.approx(0.0)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(40.0)
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(75.0)
    assert r.productive_seconds == pytest.approx(6.0)
    assert r.badput_seconds[B.OTHER] == pytest.approx(2.0)
    assert r.total_seconds == pytest.approx(123.0)
    (hang,) = calc.hangs(now=200)
    if hang_end is None:
        assert (hang.ended_by, hang.end) == ("restart", 120.0)
    else:
        assert (hang.ended_by, hang.end) == ("progress", 100.0)


# ------------------------------------------------------------ one priority table
_NAMES = {IDLE: "IDLE", PRODUCTIVE: "PRODUCTIVE"}


def test_the_docs_priority_table_is_the_one_the_engine_paints():
    """docs/semantics.md rule 8 lists buckets.PRIORITY row for row, and the order
    itself is pinned (changing it changes user-visible numbers). Mutation
    killed: any reordering of PRIORITY or of the docs table."""
    with open(os.path.join(ROOT, "docs", "semantics.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Rule 8")[1].split("## Rule 9")[0]
    rows = re.findall(r"^\| (\d+) \| `([A-Z_]+)`", section, re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    engine = [_NAMES.get(c) or B(c).name for c in PRIORITY]
    assert [name for _, name in rows] == engine
    assert engine == [
        "IDLE", "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "WASTED_PROGRESS_FROM_DISRUPTION",
        "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
        "CUSTOM_BADPUT_EVENTS", "PROGRAM_STARTUP", "ELASTIC_REINITIALIZATION",
        "ELASTIC_SCALE_UP", "ELASTIC_SLICE_DOWN", "TPU_INITIALIZATION", "TRAINING_PREP", "HANG",
        "DATA_LOADING_SYNC", "PRODUCTIVE", "OTHER"]


def test_a_compile_recorded_when_it_ends_closes_the_hang_it_caused():
    """The JAX adapter records a compile only when it ends, with its start time:
    a re-compilation longer than the threshold is first declared a hang, then
    the compile span arrives. 1 s steps (step 4 from t0 - 1), threshold 10 s;
    the compile runs [t0, t0 + 25); the hang is declared at t0 + 11 (12 s after
    step 4's start was seen) with its span from t0 (last progress + 1 s); the
    compile span arrives at t0 + 25. Its start (t0) is progress but earlier than
    the detection, so the hang ends at the detection, t0 + 11 (an end before it
    would match no hang); the compile keeps its 25 s (HANG is below
    PROGRAM_STARTUP), so HANG is 0 s.
    Mutation killed: hang_end stamped with the compile's start time (the hang
    then has no end, ``ended_by='open'``)."""
    rec, store, clock, mono, dog = _watched(HangSettings(factor=10.0, min_seconds=5.0))
    rec.record_job_start_time()
    k = _steps(rec, clock, mono, [1.0] * 5)
    t0 = clock()
    _advance(clock, mono, 11.0)
    assert dog.check() is not None
    _advance(clock, mono, 14.0)
    rec.record_program_startup_start_time(t0)          # recorded late, with its start
    rec.record_program_startup_end_time(t0 + 25.0)
    _steps(rec, clock, mono, [1.0], first=k)
    rec.record_job_end_time()
    rec.flush()
    calc = Calculator("w", store)
    calc.refresh()
    (h,) = calc.hangs()
    assert h.ended_by == "progress" and h.end == pytest.approx(t0 + 11.0)
    r = calc.cumulative()
    assert r.badput_seconds[B.PROGRAM_STARTUP] == pytest.approx(25.0)
    assert r.badput_seconds.get(B.HANG, 0.0) == pytest.approx(0.0)
