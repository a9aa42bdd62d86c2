"""An observer's tail (semantics rule 13) as real processes recording through
the public :class:`Recorder` (``multiprocessing`` spawn targets), as the
MaxText watcher (goodput_integrations/maxtext/whole_process.py) records one:

* :func:`train`: the training process, index 0, times from ``t0``: job start
  ``t0``, S0..S4 at ``t0 + 1 .. t0 + 5``, stored; then (once told) S5..S8 at
  ``t0 + 6 .. t0 + 9``, a job end at ``t0 + 10``, and it exits;
* :func:`observe`: another process on the same host (its own pid and
  recorder, index 0), started after the training process exited: the custom
  badput ``shutdown`` from ``t0 + 10`` to ``t0 + 13`` and a job end at
  ``t0 + 13``, and it exits.

Nothing here sleeps on wall-clock time: the processes wait on events.
"""

from __future__ import annotations

import multiprocessing as mp

from goodput_core import Recorder
from tests.support.fake_clock import FakeClock

WAIT_S = 120  # a bound on each wait, never a sleep


def train(store: str, run: str, t0: float, heartbeat_s: float, half_stored, go_on) -> None:
    clock = FakeClock(t0)
    rec = Recorder(run, store, process_index=0, clock=clock, hang_detection=False,
                   heartbeat_seconds=heartbeat_s)
    rec.record_job_start_time()
    for k in range(9):
        clock.t = t0 + 1.0 + k
        rec.record_step_start_time(k)
        if k == 4:
            assert rec.flush(WAIT_S)
            half_stored.set()
            assert go_on.wait(WAIT_S)
    clock.t = t0 + 10.0
    rec.record_job_end_time()
    assert rec.close(WAIT_S)


def observe(store: str, run: str, t0: float, heartbeat_s: float) -> None:
    clock = FakeClock(t0 + 10.0)
    rec = Recorder(run, store, process_index=0, clock=clock, hang_detection=False,
                   heartbeat_seconds=heartbeat_s)
    rec.record_custom_badput_event_start_time(t0 + 10.0, "shutdown")
    clock.t = t0 + 13.0
    rec.record_custom_badput_event_end_time(t0 + 13.0, "shutdown")
    rec.record_job_end_time(t0 + 13.0)
    assert rec.close(WAIT_S)


def spawn(target, *args) -> "mp.process.BaseProcess":
    """Starts ``target(*args)`` in a spawned process."""
    p = mp.get_context("spawn").Process(target=target, args=args)
    p.start()
    return p


def joined(p) -> None:
    """Waits for ``p`` (bounded) and checks it exited cleanly."""
    p.join(WAIT_S)
    assert p.exitcode == 0, f"{p.name} exited {p.exitcode}"


def events() -> tuple:
    """Two events of the spawn context (half stored, go on)."""
    ctx = mp.get_context("spawn")
    return ctx.Event(), ctx.Event()
