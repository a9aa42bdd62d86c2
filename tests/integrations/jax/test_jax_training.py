"""A real Flax/optax training loop: adapters on vs off give identical results."""

from __future__ import annotations

import signal
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
flax_linen = pytest.importorskip("flax.linen")
optax = pytest.importorskip("optax")

import jax.numpy as jnp  # noqa: E402

import goodput_integrations.jax as gjax  # noqa: E402


class MLP(flax_linen.Module):
    @flax_linen.compact
    def __call__(self, x):
        x = flax_linen.relu(flax_linen.Dense(32)(x))
        return flax_linen.Dense(1)(x)


def batches(n, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        x = rng.normal(size=(16, 8)).astype(np.float32)
        yield x, x.sum(axis=1, keepdims=True)


def train(steps, instrument_with=None):
    """Trains from a fixed seed; returns (params, losses)."""
    model = MLP()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8)))
    tx = optax.adam(1e-2)
    opt_state = tx.init(params)

    def loss_fn(p, x, y):
        return jnp.mean((model.apply(p, x) - y) ** 2)

    def step(p, o, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, o = tx.update(grads, o, p)
        return optax.apply_updates(p, updates), o, loss

    step = jax.jit(step)
    data = batches(steps)
    if instrument_with is not None:
        step = gjax.train_step(step)
        data = gjax.instrument_iterator(data)
    losses = []
    for x, y in data:
        params, opt_state, loss = step(params, opt_state, x, y)
        losses.append(float(loss))
    return params, losses


def test_adapters_on_and_off_train_identically(rec):
    params_off, losses_off = train(12)
    with gjax.instrumented(rec.recorder, sync_every=3):
        params_on, losses_on = train(12, instrument_with=rec.recorder)
    assert losses_on == losses_off
    leaves_off, tree_off = jax.tree_util.tree_flatten(params_off)
    leaves_on, tree_on = jax.tree_util.tree_flatten(params_on)
    assert tree_on == tree_off
    for a, b in zip(leaves_off, leaves_on):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert losses_on[-1] < losses_on[0]  # it did train
    assert [p["step_count"] for p in rec.with_key("step_start_time")] == list(range(12))
    assert [p["step_count"] for p in rec.with_key("step_end_time")] == [2, 5, 8, 11]
    assert len(rec.with_key("data_loading_start_time")) == 12
    assert rec.with_key("program_startup_start_time")  # the step compiled while on


def test_uninstrument_restores_hooks(rec):
    hook_before = sys.excepthook
    handler_before = signal.getsignal(signal.SIGTERM)
    adapter = gjax.instrument(rec.recorder)
    assert sys.excepthook != hook_before
    assert signal.getsignal(signal.SIGTERM) != handler_before
    adapter.uninstrument()
    assert sys.excepthook is hook_before
    assert signal.getsignal(signal.SIGTERM) == handler_before


def test_hooks_installed_on_top_of_ours_are_left_alone(rec):
    original = sys.excepthook
    gjax.instrument(rec.recorder)
    ours = sys.excepthook

    def someone_elses(*exc_info):
        return ours(*exc_info)

    sys.excepthook = someone_elses
    try:
        gjax.uninstrument()
        assert sys.excepthook is someone_elses  # not clobbered; ours falls through
    finally:
        sys.excepthook = original
