"""One process of a real ``jax.distributed`` job on CPU (gloo collectives).

Run as ``python distributed_child.py STORE RUN INDEX N PORT PER_HOST SLOW LOAD_S STEPS
[FIRST_S]``:
instrumented as the README shows (``with rec.job(), gjax.instrumented(rec,
per_host=...)``, the job start recorded before ``jax.distributed`` knows the
index); every step ends with a barrier across the processes (synchronous
training); the loader of process ``SLOW`` takes 3x ``LOAD_S`` (a controlled
sleep: the workload, not a timing check). With ``FIRST_S``, every host
compiles its step and the step's collective ahead (as an ahead-of-time
compiled job does) and process ``SLOW``'s first batch takes ``FIRST_S`` (a
first load filling buffers). Exits 3 when gloo is unavailable.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    store, run, index, n, port, per_host, slow, load_s, steps = sys.argv[1:10]
    index, n, port, steps = int(index), int(n), int(port), int(steps)
    first_s = float(sys.argv[10]) if len(sys.argv) > 10 else None
    import jax

    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception as exc:  # an older or trimmed jaxlib
        print(f"gloo unavailable: {exc}", file=sys.stderr)
        return 3
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    from goodput_core import Recorder
    from goodput_integrations import jax as gjax

    delay = float(load_s) * (3 if index == int(slow) else 1)

    def loader(batch):
        first = first_s if first_s is not None and index == int(slow) else delay
        time.sleep(first)  # the first batch
        yield batch if batch is not None else jnp.ones((8,))
        while True:
            time.sleep(delay)  # reading a batch: the workload
            yield batch if batch is not None else jnp.ones((8,))

    rec = Recorder(run, store)
    with rec.job(), gjax.instrumented(rec, per_host=per_host == "1"):
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n,
                                   process_id=index, initialization_timeout=60)
        step = jax.jit(lambda s, b: s + b.sum())
        state, batch = jnp.zeros(()), None
        if first_s is not None:  # compiled ahead: step 0 holds no compile
            batch = jnp.ones((8,))
            step(state, batch).block_until_ready()
            multihost_utils.sync_global_devices("warm-up")
        batches = gjax.instrument_iterator(loader(batch))
        train_step = gjax.train_step(step)
        for _ in range(steps):
            state = train_step(state, next(batches))
            multihost_utils.sync_global_devices("step")  # every host waits for the slowest
        state.block_until_ready()
    rec.close(30)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
