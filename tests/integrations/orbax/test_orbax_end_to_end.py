"""Both adapters on a real loop, read back by the calculator."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
import pytest

import goodput_integrations.jax as gjax
import goodput_integrations.orbax as gorbax
import goodput_core.timeline.buckets as buckets
import goodput_core.queries.calculator as calculator


def test_compile_and_checkpoint_time_land_in_their_buckets(orec, tmp_path):
    rec = orec.recorder
    rec.record_job_start_time()
    with gjax.instrumented(rec, sync_every=1):
        manager = gorbax.goodput_checkpoint_manager(
            tmp_path / "ckpt", ocp.CheckpointManagerOptions(max_to_keep=1), recorder=rec)

        @gjax.train_step
        @jax.jit
        def e2e_step(w, x):
            return w - 0.1 * jnp.tanh(w * x)

        w = jnp.ones(16)
        data = gjax.instrument_iterator(jnp.full((n,), 0.5) for n in [16] * 6 + [32] * 6)
        for i, x in enumerate(data):
            w = e2e_step(w if w.shape == x.shape else jnp.ones(x.shape), x)
            if i % 4 == 3:
                manager.save(i, args=ocp.args.StandardSave({"w": w}))
        manager.wait_until_finished()
        manager.close()
    rec.record_job_end_time()
    assert rec.flush(10)

    calc = calculator.Calculator(orec.run, orec.url)
    calc.refresh()
    result = calc.cumulative()
    bad = result.badput_seconds
    assert result.productive_seconds > 0
    assert bad[buckets.BadputType.PROGRAM_STARTUP] > 0  # first compile + the re-compile
    assert bad[buckets.BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] > 0
    assert result.disruptions == 0
    assert result.max_productive_step == 11
    total = result.productive_seconds + sum(
        v for k, v in bad.items() if k != buckets.BadputType.DATA_LOADING_ASYNC)
    assert total == pytest.approx(result.total_seconds, rel=1e-9, abs=1e-9)
