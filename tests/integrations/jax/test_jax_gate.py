"""Process-0-only writing, per-host mode, and the lazy decision."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import goodput_integrations.jax as gjax
from goodput_integrations.jax.gate import ProcessGate


def run_a_bit(adapter_recorder, **options):
    gjax.instrument(adapter_recorder, **options)

    @gjax.train_step
    @jax.jit
    def gated_fn(v):
        return v + 3

    for b in gjax.instrument_iterator([jnp.ones(2), jnp.ones(2)]):
        gated_fn(b)
    gjax.uninstrument()


def test_only_process_zero_writes_by_default(rec, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda *a, **k: 1)
    run_a_bit(rec.recorder)
    assert rec.payloads() == []


def test_process_zero_writes(rec, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda *a, **k: 0)
    run_a_bit(rec.recorder)
    kinds = {k for p in rec.payloads() for k in p}
    assert {"step_start_time", "data_loading_start_time", "metadata_time"} <= kinds


def test_per_host_mode_writes_everywhere_with_the_process_index(rec, monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda *a, **k: 3)
    run_a_bit(rec.recorder, per_host=True)
    records = rec.records()
    assert [r.step for r in records if r.extra is None and r.step is not None] == [0, 1]
    assert {r.process_index for r in records} == {3}
    assert rec.recorder.process_index == 3


class Sink:
    def __init__(self):
        self.calls = []
        self.process_index = 0

    def record(self, *args):
        self.calls.append(args)


def test_gate_buffers_until_it_can_ask_then_replays_in_order():
    answers = iter([None, None, 0])
    decided = []
    sink = Sink()
    gate = ProcessGate(sink, process_index=lambda: next(answers), on_decided=decided.append)
    gate.submit(sink.record, "a")
    gate.submit(sink.record, "b")
    assert sink.calls == [] and gate.decision is None
    gate.submit(sink.record, "c")
    assert sink.calls == [("a",), ("b",), ("c",)]
    assert decided == [True]
    gate.submit(sink.record, "d")  # fast path: no more index reads
    assert sink.calls[-1] == ("d",)


def test_gate_drops_buffered_events_on_other_processes():
    answers = iter([None, 2])
    sink = Sink()
    gate = ProcessGate(sink, process_index=lambda: next(answers))
    gate.submit(sink.record, "a")
    gate.submit(sink.record, "b")
    gate.submit(sink.record, "c")  # no more reads of the index once decided
    assert sink.calls == [] and gate.decision is False and gate.process_index == 2


def test_gate_per_host_sets_the_recorder_index():
    sink = Sink()
    gate = ProcessGate(sink, per_host=True, process_index=lambda: 5)
    gate.submit(sink.record, "a")
    assert sink.calls == [("a",)] and sink.process_index == 5


def test_gate_survives_a_failing_index_probe():
    sink = Sink()

    def broken():
        raise RuntimeError("no backend")

    gate = ProcessGate(sink, process_index=broken)
    gate.submit(sink.record, "a")
    assert gate.decision is None and sink.calls == []


def test_metadata_describes_the_run(rec):
    gjax.instrument(rec.recorder)
    meta = rec.with_key("metadata_time")
    assert len(meta) == 1
    m = meta[0]
    assert m["framework"] == "jax"
    assert m["framework_version"] == jax.__version__
    assert m["num_devices"] == jax.device_count()
    assert m["num_processes"] == jax.process_count()
    assert m["device_kind"] == jax.devices()[0].device_kind
    for key in ("jaxlib_version", "flax_version", "orbax_version"):
        assert key in m


def test_flops_per_step_and_peak_table(rec):
    adapter = gjax.instrument(rec.recorder)

    @jax.jit
    def matmul(a, b):
        return a @ b

    a = jnp.ones((8, 16))
    b = jnp.ones((16, 4))
    flops = adapter.record_flops(matmul, a, b)
    assert flops == pytest.approx(2 * 8 * 16 * 4, rel=0.5)
    assert gjax.flops_per_step(lambda x: x * 2, a) > 0  # plain functions are jitted
    recorded = [p for p in rec.with_key("metadata_time") if "flops_per_step" in p]
    assert recorded and recorded[0]["flops_per_step"] == flops
    assert gjax.peak_flops_per_device("TPU v5 lite") == 197e12
    assert gjax.peak_flops_per_device("NVIDIA H100 80GB HBM3") == 989e12
    assert gjax.peak_flops_per_device("cpu") is None
