"""One attempt of the demo job: a small Flax MLP trained on CPU with Orbax.

Usage (normally started by ``goodput demo`` or
:mod:`goodput_core.cli.demo_attempts`)::

    python -m goodput_integrations.demo.train --store S --run R --workdir D \\
        [--steps 240] [--save-every 20] [--crash-at K] [--flush-every N] ...

What it records (every adapter on): job start at process start; training
preparation (framework imports, model and optimizer, checkpoint manager,
restore); accelerator init (the JAX adapter times the first ``jax.devices()``);
compiles (``jax.monitoring``); every ``next()`` of the data iterator; every
step (start at dispatch, end every ``--sync-every`` steps); Orbax save and
restore statistics through our ``CheckpointManager`` logger and the async
commit durations; an ``eval`` custom badput event every ``--eval-every``
steps; FLOPs per step and run metadata; the loss as a metric; job end.

A checkpoint saved after step ``k`` has Orbax step ``k + 1`` (the number of
steps done), so a restart resumes at exactly that step number and the
calculator sees the steps after it redone (wasted progress). Batches depend
only on the step number: a restart replays the same data.

``--crash-at K`` kills the process with SIGKILL right after step ``K`` was
dispatched (a real crash: no job end, no ``atexit``, nothing else runs),
unless the attempt resumed past K. Nothing is flushed first: every event
recorded before the kill is in the recorder's journal, which the next attempt
delivers (the R1 test kills attempts from outside, unannounced). Progress goes
to stdout (see :mod:`goodput_integrations.demo`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any, List, Optional

from goodput_core import Recorder
from goodput_core.cli.demo_attempts import PROTOCOL_PREFIX

__all__ = ["main", "parse_args"]


def say(event: str, **fields: Any) -> None:
    """Writes one protocol line and flushes stdout (the parent reads it live)."""
    sys.stdout.write(PROTOCOL_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m goodput_integrations.demo.train",
                                description="one attempt of the goodput demo job")
    p.add_argument("--store", required=True, help="store URL or sqlite path")
    p.add_argument("--run", required=True, help="run (job) name")
    p.add_argument("--workdir", required=True, help="checkpoint directory")
    p.add_argument("--steps", type=int, default=240, help="train steps 0..N-1")
    p.add_argument("--save-every", type=int, default=20, help="checkpoint every N steps")
    p.add_argument("--crash-at", type=int, default=None, help="SIGKILL itself after this step")
    p.add_argument("--eval-every", type=int, default=80, help="eval every N steps (0: never)")
    p.add_argument("--sync-every", type=int, default=1,
                   help="wait for the step result (and record a step end) every N steps; "
                        "on CPU, dispatch runs ahead and step times are honest only at 1")
    p.add_argument("--flush-every", type=int, default=0,
                   help="flush the recorder every N steps and report it (0: never)")
    p.add_argument("--sync-checkpoints", action="store_true",
                   help="save synchronously: a step reported saved is on disk")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name in ("steps", "save_every", "sync_every", "batch_size", "features", "hidden"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def batch_for(step: int, batch_size: int, features: int, seed: int):
    """The batch of ``step``: a function of the step only (restarts replay it).

    A noisy non-linear regression target, so the loss keeps falling for a while.
    """
    import numpy as np

    rng = np.random.default_rng((seed, step))  # held-out eval batch: a step never trained
    x = rng.standard_normal((batch_size, features), dtype=np.float32)
    y = np.sin(x[:, : features // 2].sum(axis=1, keepdims=True)) + 0.1 * np.cos(
        x[:, features // 2:]).sum(axis=1, keepdims=True)
    return x, y.astype(np.float32)


def batches(first: int, last: int, args: argparse.Namespace):
    for k in range(first, last):
        yield batch_for(k, args.batch_size, args.features, args.seed)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    rec = Recorder(args.run, args.store)
    # Job start first: imports and backend start-up are the job's time too.
    rec.record_job_start_time()
    say("attempt", attempt=rec.attempt, pid=os.getpid(), steps=args.steps)
    with rec.training_preparation():
        import jax
        import jax.numpy as jnp
        import optax
        import orbax.checkpoint as ocp
        from flax import linen as nn

        # lazy: timed as training preparation, after the job start
        import goodput_integrations.jax as gjax
        import goodput_integrations.orbax as gorbax

        adapter = gjax.instrument(rec, sync_every=args.sync_every)
        gorbax.instrument(rec)  # async commit durations as metrics
        jax.devices()  # the backend starts here: the adapter times it (tpu_init)

        class MLP(nn.Module):
            hidden: int

            @nn.compact
            def __call__(self, x):
                x = nn.gelu(nn.Dense(self.hidden)(x))
                x = nn.gelu(nn.Dense(self.hidden)(x))
                return nn.Dense(1)(x)

        model = MLP(args.hidden)
        tx = optax.adam(1e-3)
        params = model.init(jax.random.PRNGKey(args.seed), jnp.zeros((1, args.features)))
        state = {"params": params, "opt_state": tx.init(params)}

        def loss_fn(p, x, y):
            return jnp.mean((model.apply(p, x) - y) ** 2)

        def step_fn(s, batch):
            x, y = batch
            loss, grads = jax.value_and_grad(loss_fn)(s["params"], x, y)
            updates, opt_state = tx.update(grads, s["opt_state"], s["params"])
            return {"params": optax.apply_updates(s["params"], updates),
                    "opt_state": opt_state}, loss

        # cleanup_tmp_directories: a crash mid-save leaves a temporary directory
        # (never a half checkpoint: Orbax renames it into place when complete).
        options = ocp.CheckpointManagerOptions(
            max_to_keep=2, cleanup_tmp_directories=True,
            enable_async_checkpointing=not args.sync_checkpoints)
        manager = gorbax.goodput_checkpoint_manager(
            os.path.abspath(args.workdir), options, recorder=rec)
        start = 0
        latest = manager.latest_step()
        if latest is not None:
            abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, state)
            state = manager.restore(latest, args=ocp.args.StandardRestore(abstract))
            start = int(latest)
            say("restored", step=start)

    # No buffer donation: an async save may still be reading the last state.
    jitted = jax.jit(step_fn)
    train_step = gjax.train_step(jitted, first_step=start)
    eval_batch = batch_for(10**9, args.batch_size, args.features, args.seed)
    eval_loss = jax.jit(loss_fn)
    data = gjax.instrument_iterator(batches(start, args.steps, args))
    flopped = False
    loss = None
    synced = True
    for k in range(start, args.steps):
        batch = next(data)
        state, loss = train_step(state, batch)
        synced = (k + 1 - start) % args.sync_every == 0
        if synced:  # the adapter already waited for this step: reading it is free
            rec.record_metric("loss", float(loss), step=k)
        # after the step's events were recorded (its end too, when synced)
        say("step", step=k, time=time.time(), **({"loss": float(loss)} if synced else {}))
        if not flopped:  # once the step exists: XLA's cost analysis (metadata)
            flopped = True
            adapter.record_flops(jitted, state, batch)
        if args.eval_every and (k + 1) % args.eval_every == 0:
            with rec.custom_badput_event("eval"):
                value = float(eval_loss(state["params"], *eval_batch))
            rec.record_metric("eval_loss", value, step=k)
        if (k + 1) % args.save_every == 0 and k + 1 < args.steps:
            manager.save(k + 1, args=ocp.args.StandardSave(state))
            say("saved", step=k + 1)
        if args.flush_every and (k + 1 - start) % args.flush_every == 0 and rec.flush(30):
            stats = rec.stats()  # own: this attempt's events (not those it delivered for others)
            say("flushed", written=stats["written"], own=stats["written"] - stats["spill_delivered"])
        if args.crash_at is not None and k == args.crash_at:
            say("crash", step=k)  # no flush first: what was recorded is in the journal
            os.kill(os.getpid(), signal.SIGKILL)
    if not synced:  # the last step's true end (the adapter records ends only at syncs)
        jax.block_until_ready(state)
        adapter.step_ended(args.steps - 1)
    if args.steps > start:  # the final state too: a later attempt finds nothing to do
        manager.save(args.steps, args=ocp.args.StandardSave(state), force=True)
    manager.wait_until_finished()
    manager.close()
    final_loss = float(loss) if loss is not None else None
    gjax.uninstrument()
    gorbax.uninstrument()
    rec.record_job_end_time()
    ok = rec.close(30)
    say("done", step=args.steps, loss=final_loss, written=rec.stats()["written"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
