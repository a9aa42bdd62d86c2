"""P5: a real Flax training loop on CPU with every adapter on, vs off.

The same jitted Flax MLP (optax Adam) trains on the same batches, with an
Orbax CheckpointManager saving asynchronously every ``--save-every`` steps.
"On" runs switch on everything we offer: the JAX adapter (compile listeners,
accelerator-init patch, SIGTERM/excepthook, metadata), the data-iterator
wrapper, the train-step decorator, the Orbax statistics logger and the Orbax
async-save metrics, recording to an embedded sqlite store through the
background writer, as in real use. "Off" runs use the bare objects.

Runs alternate off/on (interleaved, so drift in the machine's speed hits both
sides alike). Two figures per run:

* step time: each step is timed with a ``block_until_ready`` (the same in
  both modes), median over the run's steps;
* loop time: the same loop without a per-step sync (async dispatch as in
  real training), total wall time over the steps.

The P5 figure is the ratio of the median step times (every step of every
"on" run vs every step of every "off" run); the spread of per-pair ratios
and the ratio of the fastest runs are printed to show how noisy the machine
was. The hook cost per step (our code alone, on the caller's thread) is
printed first: divided by the step time it is the overhead a quiet machine
would show.

    python benchmarks/bench_adapters.py [--pairs 12] [--steps 100] [--hidden 1024 ...]
        [--no-input-stalls]   # "on" without the input-stall readiness checks
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from flax import linen as nn  # noqa: E402

from _machine import machine  # noqa: E402
from goodput_core import Recorder  # noqa: E402
import goodput_integrations.jax as gjax  # noqa: E402
import goodput_integrations.orbax as gorbax  # noqa: E402


class MLP(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x):
        for _ in range(2):
            x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(10)(x)


def build(hidden, batch, features):
    """A jitted train step, its initial state and a batch pool (same for every run)."""
    model = MLP(hidden)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, features)))
    tx = optax.adam(1e-3)

    def loss_fn(p, x, y):
        logits = model.apply(p, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def step(state, x, y):
        p, o = state
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, o = tx.update(grads, o, p)
        return (optax.apply_updates(p, updates), o), loss

    rng = np.random.default_rng(0)
    pool = [(rng.normal(size=(batch, features)).astype(np.float32),
             rng.integers(0, 10, size=(batch,)).astype(np.int32)) for _ in range(16)]
    state = (params, tx.init(params))
    jax.block_until_ready(step(state, *pool[0]))  # compile once, outside the timings
    return step, state, pool


def batches(pool, n):
    for i in range(n):
        yield pool[i % len(pool)]


INPUT_STALLS = True  # --no-input-stalls: "on" runs without the readiness checks


def run(on, step, state, pool, steps, save_every, sync_each_step, workdir, store):
    """One training run; returns per-step seconds (sync) or [total seconds] (async)."""
    ckpt_dir = os.path.join(workdir, uuid.uuid4().hex)
    data = batches(pool, steps)
    rec = adapter = monitoring = None
    if on:
        rec = Recorder(f"bench-{uuid.uuid4().hex[:8]}", store)
        adapter = gjax.instrument(rec, input_stalls=INPUT_STALLS)
        monitoring = gorbax.instrument(rec)
        rec.record_job_start_time()
        manager = gorbax.goodput_checkpoint_manager(
            ckpt_dir, ocp.CheckpointManagerOptions(max_to_keep=1), recorder=rec)
        data = gjax.instrument_iterator(data)
        step = gjax.train_step(step)
    else:
        manager = ocp.CheckpointManager(ckpt_dir, options=ocp.CheckpointManagerOptions(max_to_keep=1))
    times = []
    pc = time.perf_counter
    t_start = pc()
    for i, (x, y) in enumerate(data):
        t0 = pc()
        state, loss = step(state, x, y)
        if sync_each_step:
            jax.block_until_ready(loss)
            times.append(pc() - t0)
        if save_every and i and i % save_every == 0:
            manager.save(i, args=ocp.args.StandardSave(state[0]))
    jax.block_until_ready(state)
    total = pc() - t_start
    manager.wait_until_finished()
    manager.close()
    if on:
        rec.record_job_end_time()
        monitoring.uninstrument()
        adapter.uninstrument()
        rec.close()
    return times if sync_each_step else [total]


def hook_cost(step, state, pool, n=20_000):
    """Per-step cost of the step decorator + iterator wrapper, on the caller's thread.

    The step function is replaced by a no-op so that only our code is timed;
    min over 5 repeats (the least disturbed measurement).
    """
    with tempfile.TemporaryDirectory() as workdir:
        rec = Recorder("hook-cost", "sqlite:///" + os.path.join(workdir, "h.sqlite").lstrip("/"))
        with gjax.instrumented(rec, input_stalls=INPUT_STALLS):
            noop = gjax.train_step(lambda *a: None)
            best = float("inf")
            for _ in range(5):
                it = gjax.instrument_iterator(batches(pool, n))
                t0 = time.perf_counter()
                for x, y in it:
                    noop(state, x, y)
                best = min(best, (time.perf_counter() - t0) / n)
            raw = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for x, y in batches(pool, n):
                    pass
                raw = min(raw, (time.perf_counter() - t0) / n)
        rec.close()
    print(f"hook cost per step (step decorator + iterator wrapper, 4 events): "
          f"{(best - raw) * 1e6:.2f} us")


def alternating(step, state, pool, steps, runs, workdir, store):
    """In-situ cost on the caller's thread: instrumented and bare steps alternate.

    Everything is on (listeners, writer thread, patches); even steps go
    through the step decorator and the iterator wrapper, odd steps through
    the bare function and iterator. Load bursts from other processes hit
    both halves alike, so the difference is our per-step code alone.
    """
    per = {True: [], False: []}
    pc = time.perf_counter
    for _ in range(runs):
        rec = Recorder(f"alt-{uuid.uuid4().hex[:8]}", store)
        with gjax.instrumented(rec, input_stalls=INPUT_STALLS):
            wrapped_step = gjax.train_step(step)
            wrapped_it = gjax.instrument_iterator(batches(pool, steps))
            bare_it = batches(pool, steps)
            for i in range(steps):
                on = i % 2 == 0
                t0 = pc()
                x, y = next(wrapped_it if on else bare_it)
                state, loss = (wrapped_step if on else step)(state, x, y)
                jax.block_until_ready(loss)
                per[on].append(pc() - t0)
        rec.close()
    on, off = statistics.median(per[True]), statistics.median(per[False])
    print(f"alternating steps, everything on (caller-thread cost only): off {off * 1e3:.3f} ms, "
          f"on {on * 1e3:.3f} ms ({len(per[True])} steps each); ratio on/off {on / off:.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Defaults: a ~20 ms step on a 2-core CPU. Our cost per step is fixed
    # (tens of microseconds in situ), so smaller models show a larger ratio:
    # try --hidden 512 --batch 128 --features 256 (~2 ms steps) for the worst case.
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--features", type=int, default=512)
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--no-input-stalls", action="store_true")
    args = ap.parse_args(argv)
    global INPUT_STALLS
    INPUT_STALLS = not args.no_input_stalls

    print(f"machine: {machine()}; jax {jax.__version__}, devices {jax.devices()}")
    step, state, pool = build(args.hidden, args.batch, args.features)
    hook_cost(step, state, pool)
    with tempfile.TemporaryDirectory() as workdir:
        store = "sqlite:///" + os.path.join(workdir, "bench.sqlite").lstrip("/")
        alternating(step, state, pool, args.steps, args.pairs, workdir, store)
        for sync in (True, False):
            # one unmeasured pair warms caches, Orbax's first-save set-up and the store
            for on in (False, True):
                run(on, step, state, pool, args.steps, args.save_every, sync, workdir, store)
            ratios, offs, ons = [], [], []
            pooled = {False: [], True: []}
            for k in range(args.pairs):
                pair = {}
                # ABBA order: whichever side runs first in a pair alternates
                for on in ((False, True) if k % 2 == 0 else (True, False)):
                    t = run(on, step, state, pool, args.steps, args.save_every, sync,
                            workdir, store)
                    pair[on] = statistics.median(t)
                    pooled[on].extend(t)
                offs.append(pair[False])
                ons.append(pair[True])
                ratios.append(pair[True] / pair[False])
            unit = 1e3 if sync else 1.0
            label = "median step time (sync each step)" if sync else \
                f"loop time, {args.steps} steps (async dispatch)"
            suffix = "ms" if sync else "s"
            # P5 figure: median step time over every step of every run, on
            # vs off. Also shown: the spread of per-pair ratios (how noisy the
            # machine was) and the ratio of the fastest runs (the least
            # disturbed run of each side).
            med_off = statistics.median(pooled[False])
            med_on = statistics.median(pooled[True])
            what = f"{len(pooled[False])} steps each" if sync else f"{args.pairs} runs each"
            print(f"{label}: off {med_off * unit:.3f} {suffix}, on {med_on * unit:.3f} "
                  f"{suffix} ({what}); ratio on/off {med_on / med_off:.4f}; per-pair ratios: "
                  f"median {statistics.median(ratios):.4f}, min {min(ratios):.4f}, "
                  f"max {max(ratios):.4f} over {args.pairs} interleaved pairs; "
                  f"fastest run on/off {min(ons) / min(offs):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
