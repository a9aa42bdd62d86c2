"""Data-loading spans around next(), and step numbering/timing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import goodput_integrations.jax as gjax
from goodput_integrations.jax import JaxAdapter


def load_pairs(payloads):
    starts = [p["data_loading_start_time"] for p in payloads if "data_loading_start_time" in p]
    ends = [p["data_loading_end_time"] for p in payloads if "data_loading_end_time" in p]
    return list(zip(starts, ends))


class SlowIterator:
    """An iterator that advances a fake clock while producing each batch."""

    def __init__(self, clock, n, cost):
        self.clock, self.n, self.cost, self.i = clock, n, cost, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        self.clock.t += self.cost  # "loading" takes `cost` seconds
        return self.i

    def get_state(self):
        return {"i": self.i}


def test_next_is_timed_and_stop_iteration_is_not_a_batch(rec_fake_clock, fake_clock):
    gjax.instrument(rec_fake_clock.recorder)
    fake_clock.tick = 0.0
    it = gjax.instrument_iterator(SlowIterator(fake_clock, 3, cost=2.5))
    assert list(it) == [1, 2, 3]
    with pytest.raises(StopIteration):
        next(it)
    pairs = load_pairs(rec_fake_clock.payloads())
    assert len(pairs) == 3  # the exhausted next() calls record nothing
    assert [end - start for start, end in pairs] == [2.5, 2.5, 2.5]


def test_wrapper_forwards_iterator_attributes(rec):
    gjax.instrument(rec.recorder)
    inner = SlowIterator(type("C", (), {"t": 0.0})(), 2, cost=0)
    it = gjax.instrument_iterator(inner)
    next(it)
    assert it.get_state() == {"i": 1}
    assert it.wrapped is inner
    assert iter(it) is it


def test_iterables_are_accepted_and_errors_are_not_batches(rec):
    gjax.instrument(rec.recorder)
    assert list(gjax.instrument_iterator([1, 2])) == [1, 2]

    def broken():
        yield 1
        raise OSError("disk gone")

    it = gjax.instrument_iterator(broken())
    next(it)
    with pytest.raises(OSError):
        next(it)
    assert len(load_pairs(rec.payloads())) == 3


def test_load_batch_decorator(rec_fake_clock, fake_clock):
    gjax.instrument(rec_fake_clock.recorder)
    source = iter(range(2))

    @gjax.timed_load_batch
    def load_batch():
        return next(source)

    assert load_batch() == 0 and load_batch() == 1
    with pytest.raises(StopIteration):
        load_batch()
    assert len(load_pairs(rec_fake_clock.payloads())) == 2
    assert load_batch.__name__ == "load_batch"


def test_not_instrumented_means_pass_through(rec):
    it = gjax.instrument_iterator([1, 2, 3])

    @gjax.train_step
    def step(v):
        return v

    assert [step(b) for b in it] == [1, 2, 3]
    assert step.counter.next_step == 3  # numbering continues while off
    gjax.instrument(rec.recorder)
    step(4)
    assert [p["step_count"] for p in rec.with_key("step_start_time")] == [3]
    assert rec.with_key("data_loading_start_time") == []


def test_step_numbering_first_step_and_resume(rec):
    gjax.instrument(rec.recorder)

    @gjax.train_step(first_step=10)
    def step(v):
        return v + 1

    for i in range(3):
        assert step(i) == i + 1
    step.counter.next_step = 5  # e.g. restored an older checkpoint
    step(0)
    starts = rec.with_key("step_start_time")
    assert [p["step_count"] for p in starts] == [10, 11, 12, 5]
    assert rec.with_key("step_end_time") == []  # no sync: no honest end


def test_sync_every_blocks_and_records_ends(rec, monkeypatch):
    blocked = []
    real_block = jax.block_until_ready
    monkeypatch.setattr(jax, "block_until_ready", lambda x: blocked.append(x) or real_block(x))
    gjax.instrument(rec.recorder, sync_every=2)

    @gjax.train_step
    @jax.jit
    def sync_step(v):
        return v * 2

    for _ in range(5):
        sync_step(jnp.ones(3))
    assert len(blocked) == 2
    ends = rec.with_key("step_end_time")
    assert [p["step_count"] for p in ends] == [1, 3]
    starts = {p["step_count"]: p["step_start_time"] for p in rec.with_key("step_start_time")}
    for p in ends:
        assert p["step_end_time"] >= starts[p["step_count"]]


def test_a_decorator_sync_every_overrides_the_adapter(rec):
    gjax.instrument(rec.recorder, sync_every=100)

    @gjax.train_step(sync_every=1)
    def step(v):
        return v

    step(jnp.ones(1))
    step(jnp.ones(1))
    assert [p["step_count"] for p in rec.with_key("step_end_time")] == [0, 1]


def test_a_step_that_raises_records_no_end(rec):
    gjax.instrument(rec.recorder, sync_every=1)

    @gjax.train_step
    def step():
        raise FloatingPointError("nan loss")

    with pytest.raises(FloatingPointError):
        step()
    assert len(rec.with_key("step_start_time")) == 1
    assert rec.with_key("step_end_time") == []


def test_adapter_step_context_manager_and_bound_wrappers(rec):
    with JaxAdapter(rec.recorder) as adapter:
        with adapter.step(0):
            pass
        with pytest.raises(KeyError):
            with adapter.step(1):
                raise KeyError("x")
        bound = adapter.train_step(lambda: None, first_step=7)
        bound()
        assert list(adapter.wrap_iterator([1])) == [1]
        assert adapter.load_batch(lambda: 3)() == 3
    assert [p["step_count"] for p in rec.with_key("step_start_time")] == [0, 1, 7]
    assert [p["step_count"] for p in rec.with_key("step_end_time")] == [0]
    assert len(load_pairs(rec.payloads())) == 2
    bound()  # the adapter is off now: falls through, records nothing
    assert len(rec.with_key("step_start_time")) == 3


def test_bad_sync_every_on_the_decorator():
    with pytest.raises(ValueError):
        gjax.train_step(sync_every=0)


def test_a_broken_clock_breaks_nothing(rec):
    def broken_clock():
        raise OSError("clock gone")

    gjax.instrument(rec.recorder, clock=broken_clock, sync_every=1)

    @gjax.train_step
    def step(v):
        return v * 2

    assert [step(b) for b in gjax.instrument_iterator([1, 2])] == [2, 4]
    assert gjax.timed_load_batch(lambda: 5)() == 5
    assert rec.with_key("data_loading_start_time") == []


def test_the_null_recorder_is_accepted():
    from goodput_core import NULL_RECORDER

    with gjax.instrumented(NULL_RECORDER, sync_every=1) as adapter:
        step = gjax.train_step(lambda v: v)
        assert [step(b) for b in gjax.instrument_iterator([1, 2])] == [1, 2]
        assert adapter.active
