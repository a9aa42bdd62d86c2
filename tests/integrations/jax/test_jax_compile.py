"""Compile spans from jax.monitoring: first call, re-compilation, cache hits, safety."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import pytest
from jax._src import monitoring as jax_monitoring

import goodput_integrations.jax as gjax
from goodput_integrations.jax import JaxAdapter

PHASES = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration")


def spans(payloads, name):
    """(start, end, fun_name) of program-startup pairs whose fun_name mentions ``name``."""
    out, open_start = [], {}
    for p in payloads:
        fun = p.get("fun_name", "")
        if name not in fun:
            continue
        if "program_startup_start_time" in p:
            open_start[fun] = p["program_startup_start_time"]
        elif "program_startup_end_time" in p:
            out.append((open_start.pop(fun), p["program_startup_end_time"], fun))
    return out


def listener_counts():
    return (len(jax_monitoring.get_event_time_span_listeners()),
            len(jax_monitoring.get_event_duration_listeners()))


def test_first_call_records_one_span_per_compile_phase(rec):
    gjax.instrument(rec.recorder)
    x = jnp.ones(7)

    def first_call_fn(v):
        return jnp.sin(v) * 2

    jax.jit(first_call_fn)(x).block_until_ready()
    got = spans(rec.payloads(), "first_call_fn")
    # trace ("first_call_fn"), lowering and backend compile ("jit(first_call_fn)")
    assert len(got) == 3
    assert {fun for _, _, fun in got} == {"first_call_fn", "jit(first_call_fn)"}
    for start, end, _ in got:
        assert 0 <= end - start < 60
    starts = [s for s, _, _ in got]
    assert starts == sorted(starts)  # trace, then lower, then compile


def test_cache_hits_record_nothing(rec):
    gjax.instrument(rec.recorder)

    @jax.jit
    def cached_fn(v):
        return v + 1

    x = jnp.ones(5)
    cached_fn(x).block_until_ready()
    before = len(spans(rec.payloads(), "cached_fn"))
    for _ in range(5):
        cached_fn(x).block_until_ready()
    assert len(spans(rec.payloads(), "cached_fn")) == before == 3


def test_recompilation_after_training_started_is_recorded_where_it_happened(rec):
    gjax.instrument(rec.recorder)

    @gjax.train_step
    @jax.jit
    def reshaping_step(v):
        return (v * 3).sum()

    for n in (4, 4, 4, 9, 9):  # shapes change at step 3
        reshaping_step(jnp.ones(n)).block_until_ready()
    payloads = rec.payloads()
    got = spans(payloads, "reshaping_step")
    assert len(got) == 6  # two compiles, three phases each
    step_starts = {p["step_count"]: p["step_start_time"] for p in payloads
                   if "step_start_time" in p}
    assert sorted(step_starts) == [0, 1, 2, 3, 4]
    first, second = got[:3], got[3:]
    assert all(step_starts[0] <= s and e <= step_starts[1] for s, e, _ in first)
    # the re-compilation lies inside step 3 (dispatch of step 3 .. step 4)
    assert all(step_starts[3] <= s and e <= step_starts[4] for s, e, _ in second)


def test_uninstrument_unregisters_and_later_compiles_record_nothing(rec):
    counts = listener_counts()
    adapter = gjax.instrument(rec.recorder)
    assert listener_counts() != counts
    gjax.uninstrument()
    assert not adapter.active
    assert listener_counts() == counts
    jax.jit(lambda v: v * 5 - 1)(jnp.ones(3)).block_until_ready()
    assert rec.with_key("program_startup_start_time") == []


def test_instrument_twice_does_not_double_register(rec):
    counts = listener_counts()
    a1 = gjax.instrument(rec.recorder)
    after_one = listener_counts()
    a2 = gjax.instrument(rec.recorder)
    a1.instrument()
    assert a1 is a2
    assert listener_counts() == after_one

    def once_fn(v):
        return v - 2

    jax.jit(once_fn)(jnp.ones(3)).block_until_ready()
    assert len(spans(rec.payloads(), "once_fn")) == 3
    gjax.uninstrument()
    gjax.uninstrument()
    assert listener_counts() == counts


def test_adapter_context_manager_and_clear_event_listeners(rec):
    counts = listener_counts()
    with JaxAdapter(rec.recorder) as adapter:
        assert adapter.active
        assert gjax.active_adapter() is adapter
    assert listener_counts() == counts
    assert gjax.active_adapter() is None


class ExplodingRecorder:
    """Every record call raises (a broken store, a strict recorder misused...)."""

    run = "exploding"
    process_index = 0

    def __getattr__(self, name):
        if name.startswith("record"):
            def boom(*args, **kwargs):
                raise RuntimeError("recorder exploded")
            return boom
        raise AttributeError(name)

    def flush(self, timeout=None):
        raise RuntimeError("flush exploded")


def test_a_raising_recorder_does_not_break_jit_or_steps():
    gjax.instrument(ExplodingRecorder())

    @gjax.train_step
    @jax.jit
    def robust_fn(v):
        return v * 7

    batches = gjax.instrument_iterator([jnp.ones(2), jnp.ones(3)])
    outs = [robust_fn(b) for b in batches]
    assert [float(o.sum()) for o in outs] == [14.0, 21.0]


def test_compiles_on_other_threads_are_ignored_unless_asked(rec):
    gjax.instrument(rec.recorder)

    def background_fn(v):
        return v / 3

    t = threading.Thread(target=lambda: jax.jit(background_fn)(jnp.ones(3)).block_until_ready())
    t.start()
    t.join()
    assert spans(rec.payloads(), "background_fn") == []

    gjax.instrument(rec.recorder, compile_on_any_thread=True)

    def background_fn2(v):
        return v / 4

    t = threading.Thread(target=lambda: jax.jit(background_fn2)(jnp.ones(3)).block_until_ready())
    t.start()
    t.join()
    assert len(spans(rec.payloads(), "background_fn2")) == 3


def test_uninstrument_after_clear_event_listeners_does_not_raise(rec):
    adapter = gjax.instrument(rec.recorder)
    ours = {id(cb) for _, cb in adapter._listeners._handles}
    saved = (jax_monitoring.get_event_time_span_listeners(),
             jax_monitoring.get_event_duration_listeners())
    jax.monitoring.clear_event_listeners()
    try:
        adapter.uninstrument()  # our handles are gone already: no AssertionError
    finally:  # give the other listeners of this process back
        for cb in saved[0]:
            if id(cb) not in ours:
                jax.monitoring.register_event_time_span_listener(cb)
        for cb in saved[1]:
            if id(cb) not in ours:
                jax.monitoring.register_event_duration_secs_listener(cb)
    assert not adapter.active


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_bad_sync_every_is_rejected(rec, bad):
    with pytest.raises(ValueError):
        JaxAdapter(rec.recorder, sync_every=bad)
