"""Diagnostics with real JAX on CPU: run metadata, metrics, profile capture
and program goodput (MFU) from XLA's FLOP count."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import goodput_integrations.jax as gjax
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.diagnostics import RunContext
from goodput_integrations.jax import metadata as jmeta
from goodput_integrations.jax import profiling
from goodput_integrations.jax.profiling import ProfileCapture

ROOT = Path(__file__).resolve().parents[3]


def calc_of(rec, now=None):
    assert rec.recorder.flush(10)
    calc = Calculator(rec.run, rec.url, clock=(lambda: now) if now else time.time)
    calc.refresh()
    return calc


# --------------------------------------------------------------- metadata
def test_run_metadata_records_flags_devices_slices_and_hosts(rec, monkeypatch):
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()  # XLA has parsed its flags already
    # a valid flag with the default value: harmless if XLA were to read it
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    with RunContext(rec.recorder, providers=[jmeta.run_metadata], configs={"lr": 0.1}):
        pass
    m = calc_of(rec).metadata()
    assert m["framework"] == "jax" and m["framework_version"] == jax.__version__
    assert m["device_kind"] == jax.devices()[0].device_kind
    assert m["num_devices"] == jax.device_count()
    assert m["num_hosts"] == jax.process_count() == 1
    assert m["num_slices"] == 1  # CPU devices have no slice_index
    assert m["xla_flags"] == "--xla_force_host_platform_device_count=1"
    assert m["jax_config"]["jax_enable_x64"] is jax.config.values["jax_enable_x64"]
    assert m["jax_config"]["jax_platforms"] == jax.config.values["jax_platforms"]
    assert set(m["jax_config"]) <= set(jmeta.JAX_CONFIG_FLAGS)
    assert m["configs"] == {"lr": 0.1}


def test_slices_are_counted_from_slice_index(monkeypatch):
    class Dev:
        device_kind, platform = "TPU v5 lite", "tpu"

        def __init__(self, s, p):
            self.slice_index, self.process_index = s, p

    devs = [Dev(s, p) for s in (0, 1) for p in (2 * s, 2 * s + 1)]
    monkeypatch.setattr(jax, "devices", lambda *a: devs)
    m = jmeta.run_metadata()
    assert (m["num_slices"], m["num_hosts"]) == (2, 4)
    assert m["peak_flops_per_device"] == 197e12


# ---------------------------------------------------------------- metrics
def test_recorded_metrics_are_queryable(rec):
    @jax.jit
    def step(w, x):
        loss = jnp.mean((x @ w) ** 2)
        return w - 0.1 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w), loss

    w, x = jnp.ones((4, 1)), jnp.ones((8, 4)) / 4
    losses = []
    for i in range(3):
        w, loss = step(w, x)
        losses.append(float(loss))
        rec.recorder.record_metric("loss", loss, step=i)
    steps, times, values = calc_of(rec).metrics("loss")
    assert steps.tolist() == [0, 1, 2]
    assert values.tolist() == pytest.approx(losses)
    assert losses[2] < losses[0]


# -------------------------------------------------------------- profiling
def xplanes(path):
    return glob.glob(os.path.join(str(path), "plugins", "profile", "*", "*.xplane.pb"))


def test_profile_session_writes_a_trace_on_the_chosen_process(tmp_path):
    prof = ProfileCapture(tmp_path, run_name="my run/1", process_index=0)
    with prof.session() as path:
        (jnp.ones((32, 32)) @ jnp.ones((32, 32))).block_until_ready()
    assert path == os.path.join(str(tmp_path), "my_run_1-0000")
    assert len(xplanes(path)) == 1
    assert prof.sessions == [path] and prof.active is None


def test_other_processes_do_not_capture_but_keep_the_session_ids(tmp_path, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda *a, **k: 1)
    host1 = ProfileCapture(tmp_path, run_name="r")             # default: process 0 only
    host0 = ProfileCapture(tmp_path, run_name="r", process_index=lambda: 0)
    assert host1.start() is None and host1.stop() is None
    assert host0.start() == os.path.join(str(tmp_path), "r-0000")
    assert host0.stop() is not None
    assert host1.next_session_id() == host0.next_session_id() == "r-0001"
    assert os.listdir(tmp_path) == ["r-0000"]
    everyone = ProfileCapture(tmp_path / "all", process_indices=None)
    assert everyone.start("given id") == os.path.join(str(tmp_path / "all"), "given_id")
    everyone.stop()


def test_decorator_on_step_and_failures_never_raise(tmp_path):
    prof = ProfileCapture(tmp_path, run_name="d", process_index=0)

    @prof.session()
    def evaluate():
        return float(jnp.sum(jnp.ones(8)))

    assert evaluate() == 8.0 and evaluate() == 8.0
    assert sorted(os.listdir(tmp_path)) == ["d-0000", "d-0001"]
    for step in range(6):
        prof.on_step(step, start_step=2, num_steps=2)
    assert len(prof.sessions) == 3 and xplanes(prof.sessions[-1])
    # a profile started by someone else: start fails quietly, nothing to stop
    jax.profiler.start_trace(str(tmp_path / "other"))
    try:
        assert prof.start() is None and prof.stop() is None
    finally:
        jax.profiler.stop_trace()
    # a session is already running: the nested start is refused
    assert prof.start() is not None and prof.start() is None
    assert prof.stop() is not None


def test_profiler_server_only_on_chosen_processes(monkeypatch):
    calls = []
    monkeypatch.setattr(jax.profiler, "start_server", lambda port: calls.append(port))
    assert profiling.start_server(9999, process_index=1) is None and calls == []

    def boom(port):
        raise RuntimeError("port in use")

    monkeypatch.setattr(jax.profiler, "start_server", boom)
    assert profiling.start_server(9999, process_index=0) is None  # logged, not raised
    profiling.stop_server()  # nothing started: no-op


# --------------------------------------------------------- program goodput
M, N, K = 64, 32, 16


def test_mfu_from_a_jitted_matmul(rec):
    @jax.jit
    def matmul(a, b):
        return a @ b

    a, b = jnp.ones((M, K)), jnp.ones((K, N))
    flops = jmeta.flops_per_step(matmul, a, b)
    assert flops == 2 * M * N * K  # XLA counts a multiply-add as 2 FLOPs
    r = rec.recorder
    r.record_job_start_time(1000.0)
    for i in range(10):  # ten steps of 0.5 s
        r.record_step_start_time(i, 1001.0 + 0.5 * i)
    r.record_job_end_time(1006.0)
    assert gjax.record_flops(r, matmul, a, b) == flops
    calc = calc_of(rec, now=2000.0)
    assert calc.metadata()["num_devices"] == 1
    assert calc.program_goodput() is None  # CPU: no peak FLOP/s in the table
    g = calc.program_goodput(peak_flops=1e9)
    # 10 steps in 5 productive s = 2 steps/s; MFU = 65536 · 2 / (1e9 · 1)
    assert g.steps_per_second == pytest.approx(2.0)
    assert g.mfu == pytest.approx(2 * M * N * K * 2 / 1e9)
    assert g.runtime_goodput == pytest.approx(5 / 6)
    assert g.ml_productivity_goodput == pytest.approx(g.mfu * 5 / 6)


def test_sharded_step_flops_are_summed_over_devices(tmp_path):
    """XLA's cost analysis of a program sharded over 4 devices is per device."""
    code = textwrap.dedent(f"""
        import json, jax, jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        from goodput_integrations.jax import metadata as jmeta
        mesh = jax.make_mesh((4,), ("x",))
        a = jax.device_put(jnp.ones(({M * 4}, {K})), NamedSharding(mesh, P("x", None)))
        b = jnp.ones(({K}, {N}))
        f = jax.jit(lambda a, b: a @ b)
        print(json.dumps({{"total": jmeta.flops_per_step(f, a, b),
                          "per_device": jmeta.flops_per_step(f, a, b, per_device=True),
                          "meta": jmeta.run_metadata()}}))
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
               XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["total"] == 2 * (M * 4) * N * K
    assert out["per_device"] == out["total"] / 4
    assert out["meta"]["num_devices"] == 4
    assert out["meta"]["xla_flags"] == "--xla_force_host_platform_device_count=4"
