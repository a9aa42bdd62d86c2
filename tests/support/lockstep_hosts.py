"""One host of a synchronous multi-host job, as a real process (spawned).

Every host records the same run with the README's loop: ``with rec.step(k):``
around a blocking ``with rec.data_loading():`` of 0.25 s and 0.75 s of
compute. Times come from a fake clock advanced by the workload, so the
truth is known exactly; the hosts step together through a barrier, so their
writes really interleave in the store. Like a JAX host, each records its job
start before it knows its index (under the default 0), then takes its index.
"""

from __future__ import annotations

import threading

from goodput_core import Recorder
from tests.support.fake_clock import FakeClock

LOAD_S, COMPUTE_S = 0.25, 0.75


def lockstep_host(store: str, run: str, index: int, barrier, first: int, steps: int,
                  t0: float, hang_at=None, ready=None) -> None:
    """Records ``steps`` steps from ``first`` starting at ``t0``; at step
    ``hang_at`` (if given) stops after the step's load, flushes, puts its
    index on ``ready`` and waits to be killed."""
    clock = FakeClock(t0)
    rec = Recorder(run, store, clock=clock, hang_detection=False)
    rec.record_job_start_time()
    rec.process_index = index  # known only now, as with jax.distributed
    for step in range(first, first + steps):
        barrier.wait(timeout=60)  # synchronous training: the hosts step together
        if step == hang_at:
            rec.record_step_start_time(step)
            with rec.data_loading():
                clock.advance(LOAD_S)
            rec.flush(30)
            ready.put(index)
            threading.Event().wait()  # until SIGKILL: a host that died mid-step
        with rec.step(step):
            with rec.data_loading():
                clock.advance(LOAD_S)
            clock.advance(COMPUTE_S)
    rec.record_job_end_time()
    rec.close(30)
