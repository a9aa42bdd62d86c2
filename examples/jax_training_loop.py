"""A complete JAX training loop instrumented for goodput (runs on CPU).

    pip install 'goodput-core[jax]'
    python examples/jax_training_loop.py --store /tmp/goodput.sqlite --run my-run \\
        --ckpt-dir /tmp/my-run-ckpt
    goodput report my-run --store /tmp/goodput.sqlite

Run it again with the same arguments and it resumes from its last checkpoint:
``start_step`` comes from the restore, which happens *before* the step
function is decorated, so the recorded step numbers continue where the
checkpoint left off (a step recorded twice is what the calculator counts as
progress lost to a restart).

What each line records is said next to it; tests/integrations/jax/
test_example_loop.py runs this file.
"""

from __future__ import annotations

import argparse
import os

from goodput_core import Recorder


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="store URL or sqlite path")
    p.add_argument("--run", required=True, help="run name (the same for every attempt)")
    p.add_argument("--ckpt-dir", required=True, help="Orbax checkpoint directory")
    p.add_argument("--steps", type=int, default=60, help="train steps 0..N-1 in all")
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--stop-at", type=int, default=None,
                   help="stop (cleanly) before this step, to resume later")
    return p.parse_args(argv)


def batches(first_step, features=16, batch_size=64):
    """An endless input pipeline; batch k depends only on k (a resume replays it)."""
    import numpy as np

    k = first_step
    while True:
        rng = np.random.default_rng(k)
        x = rng.standard_normal((batch_size, features), dtype=np.float32)
        yield x, x.sum(axis=1, keepdims=True)
        k += 1


def main(argv=None):
    args = parse_args(argv)
    rec = Recorder(args.run, args.store)
    with rec.job():  # job start now; job end on success, a disruption on an exception
        with rec.training_preparation():  # imports, model, checkpoint manager, restore
            import jax
            import jax.numpy as jnp
            import optax
            import orbax.checkpoint as ocp

            from goodput_integrations import jax as gjax, orbax as gorbax

            # accelerator init (first backend use), compiles, SIGTERM, metadata
            gjax.instrument(rec, sync_every=10)
            tx = optax.sgd(0.05)
            params = {"w": jnp.zeros((16, 1)), "b": jnp.zeros((1,))}
            state = {"params": params, "opt_state": tx.init(params)}
            # Orbax save/restore blocking time from the manager's own statistics
            manager = gorbax.goodput_checkpoint_manager(
                os.path.abspath(args.ckpt_dir), ocp.CheckpointManagerOptions(max_to_keep=2),
                recorder=rec)
            # Restore first: start_step is the number of steps already done.
            start_step = 0
            latest = manager.latest_step()
            if latest is not None:
                abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, state)
                state = manager.restore(latest, args=ocp.args.StandardRestore(abstract))
                start_step = int(latest)

        def step_fn(state, batch):
            x, y = batch

            def loss_fn(p):
                return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

            loss, grads = jax.value_and_grad(loss_fn)(state["params"])
            updates, opt_state = tx.update(grads, state["opt_state"])
            return {"params": optax.apply_updates(state["params"], updates),
                    "opt_state": opt_state}, loss

        # Then decorate: each call is the next step, numbered from start_step
        # (start = dispatch; an end every sync_every steps).
        train_step = gjax.train_step(jax.jit(step_fn), first_step=start_step)
        # data-loading spans around next(), and the input stalls inside them
        data = gjax.instrument_iterator(batches(start_step))
        last = args.steps if args.stop_at is None else min(args.steps, args.stop_at)
        loss = None
        for step in range(start_step, last):
            state, loss = train_step(state, next(data))
            if (step + 1) % args.save_every == 0 or step + 1 == last:
                manager.save(step + 1, args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
        manager.close()
        gjax.uninstrument()
        if loss is not None:
            print(f"steps {start_step}..{last - 1} done, loss {float(loss):.4f}")
    rec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
