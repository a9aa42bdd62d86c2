"""The two restarts of issue 40 that once lost a whole attempt, as real
processes (spawned) recording through the public :class:`Recorder`, with
heartbeats on (1 s) or off.

* :func:`play_overlap`: the old process (pod A) runs steps 0..19 of 1 s from
  ``t0`` (a fake clock, so the truth is exact), records a SIGTERM at
  ``t0 + 20``, flushes, and lives on 4 s shutting down, a heartbeat each
  second, while the new process (pod B) starts 1 s after the SIGTERM,
  records steps 20..39 and a job end at ``t0 + 41``. The two write into the
  store at the same time (B starts once A's SIGTERM is stored; A's shutdown
  heartbeats wait for B's job start).
* :func:`play_explicit`: a crash and a restart recorded with explicit past
  times (a launcher backfilling the OS process start, a replay) by two
  processes on the real clock: their heartbeats are stamped now, some
  thousand seconds after every explicit time. A: job start ``T``, steps
  0..14 at ``T + 1 + 1.5 k``, a crash at ``T + 25.2``; B (started once A's
  events are stored, while A still beats): job start ``T + 40``, steps
  10..24 at ``T + 42 + 2 (k - 10)``, job end ``T + 72``.

Nothing here sleeps on wall-clock time: the processes wait on each other.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from unittest import mock

from goodput_core import Recorder
from tests.support.fake_clock import FakeClock

WAIT_S = 120  # a bound on each wait, never a sleep


def _recorder(store: str, run: str, pod: str, clock, heartbeat_s: float) -> Recorder:
    with mock.patch("socket.gethostname", return_value=pod):  # two pods, two hosts
        return Recorder(run, store, clock=clock, hang_detection=False,
                        heartbeat_seconds=heartbeat_s)


def _old_pod(store, run, t0, heartbeat_s, sigterm_stored, new_started):
    clock = FakeClock(t0)
    rec = _recorder(store, run, "pod-a", clock, heartbeat_s)
    rec.record_job_start_time()
    for k in range(20):
        with rec.step(k):
            clock.advance(1.0)
    rec.record_disruption("sigterm")
    assert rec.flush(WAIT_S)
    sigterm_stored.set()
    assert new_started.wait(WAIT_S)
    for _ in range(4):  # shutting down: alive, beating, while B trains
        clock.advance(1.0)
        assert rec.flush(WAIT_S)  # a due heartbeat is written before the fence
    rec.close(WAIT_S)


def _new_pod(store, run, t0, heartbeat_s, new_started):
    clock = FakeClock(t0 + 21.0)  # 1 s after the SIGTERM
    rec = _recorder(store, run, "pod-b", clock, heartbeat_s)
    rec.record_job_start_time()
    assert rec.flush(WAIT_S)
    new_started.set()
    for k in range(20, 40):
        with rec.step(k):
            clock.advance(1.0)
    rec.record_job_end_time()
    rec.close(WAIT_S)


def _explicit_old(store, run, t, heartbeat_s, stored, done):
    rec = _recorder(store, run, "pod-a", time.time, heartbeat_s)
    rec.record_job_start_time(t)
    for k in range(15):
        rec.record_step_start_time(k, t + 1.0 + 1.5 * k)
    rec.record_disruption("crash", t + 25.2)
    assert rec.flush(WAIT_S)
    stored.set()
    assert done.wait(WAIT_S)  # alive (heartbeats stamped now) while B records
    rec.close(WAIT_S)


def _explicit_new(store, run, t, heartbeat_s, done):
    rec = _recorder(store, run, "pod-b", time.time, heartbeat_s)
    rec.record_job_start_time(t + 40.0)
    for k in range(10, 25):
        rec.record_step_start_time(k, t + 42.0 + 2.0 * (k - 10))
    rec.record_job_end_time(t + 72.0)
    assert rec.flush(WAIT_S)
    done.set()
    rec.close(WAIT_S)


def _run(*targets) -> None:
    procs = [mp.get_context("spawn").Process(target=f, args=a) for f, a in targets]
    for p in procs:
        p.start()
    for p in procs:
        p.join(WAIT_S)
        assert p.exitcode == 0, f"{p.name} exited {p.exitcode}"


def play_overlap(store: str, run: str, t0: float, heartbeat_s: float) -> None:
    ctx = mp.get_context("spawn")
    sigterm_stored, new_started = ctx.Event(), ctx.Event()
    old = ctx.Process(target=_old_pod, args=(store, run, t0, heartbeat_s, sigterm_stored,
                                             new_started))
    old.start()
    assert sigterm_stored.wait(WAIT_S)
    _run((_new_pod, (store, run, t0, heartbeat_s, new_started)))
    old.join(WAIT_S)
    assert old.exitcode == 0


def play_explicit(store: str, run: str, t: float, heartbeat_s: float) -> None:
    ctx = mp.get_context("spawn")
    stored, done = ctx.Event(), ctx.Event()
    old = ctx.Process(target=_explicit_old, args=(store, run, t, heartbeat_s, stored, done))
    old.start()
    assert stored.wait(WAIT_S)
    _run((_explicit_new, (store, run, t, heartbeat_s, done)))
    old.join(WAIT_S)
    assert old.exitcode == 0
