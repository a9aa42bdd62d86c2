"""Input stalls under asynchronous dispatch, on real JAX (CPU).

The README's loop (``instrument_iterator`` + ``@train_step``) with three
loaders: a starved one (each ``next()`` far longer than the device step), a
prefetching one that runs ahead in a background thread, and one whose loads
are shorter than the device step. Loaders spend real time (that is the
workload); no assertion compares against a sleep's length: the starved
loop's reported stall is compared with the wall time the test itself
measured around its ``next()`` calls, with generous bounds.
"""

from __future__ import annotations

import queue
import threading
import time

import jax
import jax.numpy as jnp
import pytest

import goodput_integrations.jax as gjax
from goodput_core.timeline.buckets import BadputType as B
from goodput_core.queries.calculator import Calculator

N_STEPS = 16


@jax.jit
def tiny_step(x, batch):
    return x * 0.5 + batch  # well under a millisecond on CPU


@jax.jit
def heavy_step(x, batch):
    for _ in range(4):  # tens of milliseconds on CPU
        x = jnp.tanh(x @ x) + batch
    return x


def heavy_state():
    x = jnp.ones((512, 512)) / 512
    jax.block_until_ready(heavy_step(x, jnp.float32(0)))  # compiled before the loop
    return x


def starved(n, cost):
    """A synchronous loader whose every batch takes ``cost`` seconds (I/O-like)."""
    for i in range(n):
        time.sleep(cost)
        yield jnp.float32(i)


def prefetched(n, cost):
    """The same loader run ahead by a background thread (a prefetch queue)."""
    q: "queue.Queue" = queue.Queue(maxsize=4)

    def produce():
        for batch in starved(n, cost):
            q.put(batch)
        q.put(None)

    threading.Thread(target=produce, daemon=True).start()
    while (batch := q.get()) is not None:
        yield batch


def run_loop(rec, step_fn, x, batches, *, decorate_loader=False, n=N_STEPS):
    """The README loop; returns (calculator result, seconds spent in next() as
    measured around each call, first load's recorded seconds)."""
    with gjax.instrumented(rec.recorder) as adapter:
        rec.recorder.record_job_start_time()
        train_step = gjax.train_step(step_fn)
        if decorate_loader:
            it = iter(batches)
            load = gjax.timed_load_batch(lambda: next(it))
        else:
            data = gjax.instrument_iterator(batches)
            load = data.__next__
        waited = 0.0
        for _ in range(n):
            t = time.perf_counter()
            batch = load()
            waited += time.perf_counter() - t
            x = train_step(x, batch)
        jax.block_until_ready(x)
        assert adapter.stalls.flush(10)
        rec.recorder.record_job_end_time()
    rec.recorder.flush(10)
    calc = Calculator(rec.run, rec.url)
    calc.refresh()
    pays = rec.payloads()
    first = next(p for p in pays if "data_loading_start_time" in p)["data_loading_start_time"]
    first_end = next(p for p in pays if "data_loading_end_time" in p)["data_loading_end_time"]
    return calc.cumulative(), waited, first_end - first


def stalled(result, first_load):
    """Sync data loading after the first load (which precedes every step)."""
    return result.badput_seconds[B.DATA_LOADING_SYNC] - first_load


@pytest.mark.parametrize("decorate_loader", [False, True],
                         ids=["instrument_iterator", "timed_load_batch"])
def test_a_starved_loop_reports_its_stall(rec, decorate_loader):
    x = jnp.ones((8,))
    result, waited, first = run_loop(rec, tiny_step, x, starved(N_STEPS, 0.03),
                                     decorate_loader=decorate_loader)
    # the device step is far shorter than a load: the device idled nearly the
    # whole time the loop waited for batches
    assert stalled(result, first) == pytest.approx(waited - first, rel=0.25, abs=0.1)
    assert result.goodput < 50


def test_a_loader_running_ahead_in_a_thread_reports_no_stall(rec):
    x = heavy_state()
    result, waited, first = run_loop(rec, heavy_step, x, prefetched(N_STEPS, 0.002))
    assert stalled(result, first) == pytest.approx(0.0, abs=0.1)


def test_loads_shorter_than_the_device_step_report_no_stall(rec):
    x = heavy_state()
    result, waited, first = run_loop(rec, heavy_step, x, starved(N_STEPS, 0.002))
    assert stalled(result, first) == pytest.approx(0.0, abs=0.1)


def test_stall_spans_lie_inside_their_loads(rec):
    x = jnp.ones((8,))
    run_loop(rec, tiny_step, x, starved(6, 0.02), n=6)
    pays = rec.payloads()
    loads = list(zip([p["data_loading_start_time"] for p in pays if "data_loading_start_time" in p],
                     [p["data_loading_end_time"] for p in pays if "data_loading_end_time" in p]))
    stalls = list(zip([p["input_stall_start_time"] for p in pays if "input_stall_start_time" in p],
                      [p["input_stall_end_time"] for p in pays if "input_stall_end_time" in p]))
    # the first load precedes every step: not observed; each later one stalls
    assert len(stalls) == len(loads) - 1 == 5
    for (s, e), (a, b) in zip(sorted(stalls), sorted(loads)[1:]):
        assert a <= s < e and e == b


def test_without_tracked_steps_nothing_is_observed(rec):
    with gjax.instrumented(rec.recorder):
        for _ in gjax.instrument_iterator(starved(3, 0.0)):
            pass
    assert rec.with_key("data_loading_start_time")
    assert not rec.with_key("input_stall_start_time")


def test_input_stalls_can_be_switched_off(rec):
    with gjax.instrumented(rec.recorder, input_stalls=False):
        step = gjax.train_step(tiny_step)
        x = jnp.ones((8,))
        for batch in gjax.instrument_iterator(starved(3, 0.0)):
            x = step(x, batch)
    assert not rec.with_key("input_stall_start_time")


# ------------------------------------- MaxText's and AXLearn's data-loading events
def observed_loop(record_load, record_step, n=12, cost=0.03):
    """A starved loop whose loads and steps are recorded by another adapter's
    calls; the JAX adapter (recording nothing itself) tracks the step function.
    Returns the seconds spent loading after the first load, as measured here."""
    from goodput_core.record.recorder import NULL_RECORDER

    waited = 0.0
    with gjax.instrumented(NULL_RECORDER):
        step_fn = gjax.train_step(tiny_step)
        x, it = jnp.ones((8,)), starved(n, cost)
        for k in range(n):
            t = time.perf_counter()
            with record_load():
                batch = next(it)
            waited += (time.perf_counter() - t) if k else 0.0
            with record_step(k):
                x = step_fn(x, batch)
        jax.block_until_ready(x)
        assert gjax.active_adapter().stalls.flush(10)
    return waited


def stalls_of(url, run):
    from goodput_core import open_store
    from goodput_core.events import Kind

    events, _ = open_store(url).read(run)
    starts = sorted(e.time for e in events if e.kind == Kind.INPUT_STALL_START)
    ends = sorted(e.time for e in events if e.kind == Kind.INPUT_STALL_END)
    return sum(e - s for s, e in zip(starts, ends))


def test_maxtext_data_loading_events_record_input_stalls(tmp_path):
    import types
    import uuid

    from goodput_core import flush_all
    from goodput_integrations import maxtext as mt

    config = types.SimpleNamespace(
        run_name=f"mt-{uuid.uuid4().hex[:6]}", base_output_directory=str(tmp_path),
        enable_goodput_recording=True, monitor_goodput=False, enable_gcp_goodput_metrics=False,
        goodput_store=f"memory://stalls-{uuid.uuid4().hex}", _goodput_process_index=0)
    recorder = mt.create_goodput_recorder(config)
    with mt.maybe_record_goodput(recorder, mt.GoodputEvent.JOB):
        waited = observed_loop(
            lambda: mt.maybe_record_goodput(recorder, mt.GoodputEvent.DATA_LOADING),
            lambda k: mt.maybe_record_goodput(recorder, mt.GoodputEvent.STEP, k))
    assert flush_all(10)
    assert stalls_of(config.goodput_store, config.run_name) == pytest.approx(
        waited, rel=0.25, abs=0.1)


def test_axlearn_data_loading_events_record_input_stalls(tmp_path, monkeypatch):
    import contextlib
    import uuid

    from goodput_integrations import axlearn as gax

    monkeypatch.setattr(gax.GoodputSuiteRecorder, "_hook_process_index", 0)
    run, url = f"ax-{uuid.uuid4().hex[:6]}", f"memory://stalls-{uuid.uuid4().hex}"
    rec = gax.initialize(["--recorder_type=goodput_integrations.axlearn:goodput_suite",
                          f"--recorder_spec=name={run}", f"--recorder_spec=store={url}",
                          f"--recorder_spec=upload_dir={tmp_path}",
                          "--recorder_spec=enable_gcp_goodput_metrics=false",
                          "--recorder_spec=enable_gcp_step_deviation_metrics=false"])

    @contextlib.contextmanager
    def legacy_load():  # the legacy API: two separate events
        rec.record(gax.Event.START_DATA_LOADING)
        yield
        rec.record(gax.Event.END_DATA_LOADING)

    rec.record(gax.Event.START_JOB)
    waited = observed_loop(legacy_load,
                           lambda k: rec.record_event(gax.EventType.STEP, k))
    rec.record(gax.Event.END_JOB)
    assert rec.flush(10)
    assert stalls_of(url, run) == pytest.approx(waited, rel=0.25, abs=0.1)


@jax.jit
def rounds_step(x, batch, rounds):
    """``rounds`` chained matmuls: a step whose device work the caller chooses."""
    return jax.lax.fori_loop(0, rounds, lambda _, y: jnp.tanh(y @ y) + batch, x)


def test_a_device_bound_stretch_stops_measuring_until_the_loop_starves(rec):
    """After QUIET_LOADS loads that end with the device busy, the watcher thread
    is no longer handed steps; the first load during which the device finished
    turns it back on (that one load is not measured: never over-reported).

    Independent of the machine's speed and load: one long step (about 2 s of
    device work, sized by timing a short one here) is queued first and every
    later step waits on it, so each quick load ends with the device busy
    whatever the loop's pace; the first slow load itself waits for the device
    to finish, so "the device finished during this load" is certain rather
    than a race between a sleep and a matmul. Only the loads after it are
    compared with the wall time measured around them."""
    from goodput_integrations.jax.stalls import QUIET_LOADS

    x = heavy_state()
    t = time.perf_counter()
    jax.block_until_ready(rounds_step(x, jnp.float32(0), 4))
    per_round = max((time.perf_counter() - t) / 4, 1e-4)
    long_rounds = int(2.0 / per_round) + 1
    with gjax.instrumented(rec.recorder) as adapter:
        step = gjax.train_step(rounds_step)
        data = gjax.instrument_iterator(starved(10 ** 6, 0.0))
        x = step(x, next(data), long_rounds)        # the device is busy from here ...
        for _ in range(QUIET_LOADS + 4):             # ... through every quick load
            x = step(x, next(data), 1)
        assert not adapter.stalls.measuring
        x = step(x, next(data), 1)  # the device is still busy when the slow loads begin
        latest = [x]

        def slow_loads(n, cost):
            for i in range(n):
                if i == 0:
                    jax.block_until_ready(latest[0])  # the device finishes during this load
                time.sleep(cost)
                yield jnp.float32(i)

        slow = gjax.instrument_iterator(slow_loads(6, 0.15))
        waited = 0.0
        for i in range(6):
            t = time.perf_counter()
            batch = next(slow)
            if i > 0:   # the first load is the unmeasured one
                waited += time.perf_counter() - t
            x = step(x, batch, 1)
            latest[0] = x
        jax.block_until_ready(x)
        assert adapter.stalls.flush(10)
        assert adapter.stalls.measuring and adapter.stalls.unmeasured == 1
    stalls = rec.with_key("input_stall_start_time")
    ends = rec.with_key("input_stall_end_time")
    got = sum(e["input_stall_end_time"] - s["input_stall_start_time"]
              for s, e in zip(stalls, ends))
    # the device idled most of each later slow load (a one-round step against
    # a 0.15 s load); the first one went unmeasured and is not in `waited`
    assert 0.3 * waited <= got <= waited


# ---------------------------------------------- what the watch keeps alive
def test_the_watch_keeps_no_output_alive_that_the_loop_dropped(rec):
    """A loop that replaces the step's outputs by something else (an EMA, an
    eval, a reshard) must not pay for a second copy of its state: the watch
    holds weak references only."""
    import gc
    import weakref

    with gjax.instrumented(rec.recorder) as adapter:
        step = gjax.train_step(tiny_step)
        out = step(jnp.ones((1024,)), jnp.float32(1))
        jax.block_until_ready(out)
        ref = weakref.ref(out)
        out = out + 1  # the loop keeps only a transformed copy
        gc.collect()
        assert ref() is None
        # nothing left to observe: the next load records no stall and is not
        # counted as measured either
        batch = next(gjax.instrument_iterator(starved(1, 0.0)))
        assert adapter.stalls.flush(10)
        del batch
    assert not rec.with_key("input_stall_start_time")
    assert rec.with_key("data_loading_start_time")


def test_outputs_kept_by_the_loop_are_observed(rec):
    """The same loop keeping the outputs: its load after the (finished) step is
    a stall, from the load's start."""
    with gjax.instrumented(rec.recorder) as adapter:
        step = gjax.train_step(tiny_step)
        out = step(jnp.ones((1024,)), jnp.float32(1))
        jax.block_until_ready(out)
        next(gjax.instrument_iterator(starved(1, 0.0)))
        assert adapter.stalls.flush(10)
    (load,) = rec.with_key("data_loading_start_time")
    (stall,) = rec.with_key("input_stall_start_time")
    assert stall["input_stall_start_time"] == load["data_loading_start_time"]
    del out
