"""One attempt of a job for test_jax_preempted_in_compile.py (run as a script).

Usage: python preempt_child.py STORE RUN MODE
  MODE ``compile``: SIGTERM arrives while the train step compiles (ahead of
  time, before any step), as a preemption would; ``train``: three steps.
"""

from __future__ import annotations

import os
import signal
import sys


def main(store: str, run: str, mode: str) -> None:
    from goodput_core import Recorder

    rec = Recorder(run, store)
    rec.record_job_start_time()
    import jax
    import jax.numpy as jnp

    import goodput_integrations.jax as gjax

    gjax.instrument(rec)
    jax.devices()
    step = jax.jit(lambda x, b: x * 0.5 + b)
    x = jnp.ones((4,))
    if mode == "compile":
        def preempt(name, duration, **kwargs):
            if "backend_compile" in name:
                os.kill(os.getpid(), signal.SIGTERM)  # handled once compile returns

        jax.monitoring.register_event_duration_secs_listener(preempt)
        step.lower(x, 0.0).compile()
        sys.exit(3)  # not reached: the default SIGTERM action ends the process
    train_step = gjax.train_step(step)
    for batch in gjax.instrument_iterator([1.0, 2.0, 3.0]):
        x = train_step(x, batch)
    jax.block_until_ready(x)
    rec.record_job_end_time()
    rec.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
