"""The compiled loop calls (goodput_core/record/_native.c, record/native.py)
store what the Python one-frame calls store, hand them every other case, and
wrap a step function and an iterator as the Python wrappers do.

Where the extension is not built these tests skip (test_native_built.py
fails then where ``REQUIRE_NATIVE=1``, as make test and make test-torch set it).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import types

import pytest

from goodput_core import Recorder
from goodput_core.events import Kind
from goodput_core.record import native
from tests.core.record.test_hot_calls import Ticks, stored

if native.module() is None:
    pytest.skip("the compiled loop calls are not built here", allow_module_level=True)

_native = native.module()


def compile_callback():
    """Stands for the adapter's torch.compile callback (compared by identity)."""


class Hooks:
    """The adapter parts a Loop calls: late hooks, a kept load's record, a failure log."""

    def __init__(self):
        self.lazy_calls = 0
        self.errors = []
        self.compile_spans = types.SimpleNamespace(_registered_in=None)
        self.stalls = []

    def lazy(self):
        self.lazy_calls += 1

    def loop(self, rec, every=10):
        def record_stall(t0, t1):  # as integrations/base/spans.py's
            self.stalls.append((t0, t1))
            rec.record_input_stall_start_time(t0)
            rec.record_input_stall_end_time(t1)

        return native.native_loop(
            rec, every=every, lazy=self.lazy, compile_spans=self.compile_spans,
            start_cb=compile_callback, record_stall=record_stall,
            on_error=lambda what, msg, exc: self.errors.append((what, exc)))


def test_the_loop_stores_what_the_python_calls_store_around_the_ring(tmp_path):
    path = str(tmp_path / "s.sqlite")
    hot = Recorder("c", path, clock=Ticks(), queue_size=64, process_index=5)
    ref = Recorder("py", path, clock=Ticks(), queue_size=64, process_index=5)
    loop = Hooks().loop(hot)
    assert loop is not None
    slots = hot._ring.slots
    for i in range(2 * slots):  # three slots a step: every alignment against the ring's end
        t0 = 2_000.0 + i
        loop.loaded(t0)  # reads the clock once (the load's end)
        loop.start(i)  # and once (the step's start): one write of three slots
        ref._record_stall_then_step(t0, ref._clock(), i)
        loop.end(i, i + 1, "auto")  # every 10th
        if (i + 1) % 10 == 0:
            ref.record_step_end_time(i)
        loop.end(i, i + 1, 7 if i % 2 else None)
        if i % 2 and (i + 1) % 7 == 0:
            ref.record_step_end_time(i)
        if i % 9 == 0:
            assert hot.flush(30) and ref.flush(30)
    assert loop.last_step == 2 * slots - 1
    assert hot.flush(30) and ref.flush(30)
    got, want = stored(path, "c"), stored(path, "py")
    assert len(got) > 6 * slots and got == want
    assert hot.stats()["dropped"] == 0 and hot.stats()["overflowed"] == 0
    assert hot.progress_thread == threading.get_ident()


def test_a_load_kept_is_taken_or_written_at_the_next_load(tmp_path):
    rec = Recorder("keep", str(tmp_path / "s.sqlite"), clock=Ticks())
    hooks = Hooks()
    loop = hooks.loop(rec)
    assert loop.take() is None
    loop.loaded(10.0)
    assert loop.take() == (10.0, 1_001.0) and loop.take() is None
    loop.loaded(20.0)
    loop.loaded(30.0)  # the first has no step after it: written now
    assert hooks.stalls == [(20.0, 1_002.0)]
    loop.start(0)
    assert rec.flush(30)
    kinds = [(Kind(k).name, t, s) for k, t, s, _, _ in stored(str(tmp_path / "s.sqlite"),
                                                                 "keep")]
    assert kinds[:4] == [("INPUT_STALL_START", 20.0, None), ("INPUT_STALL_END", 1_002.0, None),
                         ("INPUT_STALL_START", 30.0, None), ("INPUT_STALL_END", 1_003.0, None)]
    assert kinds[4][0] == "STEP_START" and kinds[4][1] > 1_003.0 and len(kinds) == 5


def test_every_other_case_goes_the_python_way(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("odd", path, clock=Ticks())
    loop = Hooks().loop(rec)
    loop.start(2 ** 63)  # not a 64-bit step: the recorder's call
    loop.loaded(5.0)
    loop.start(True)  # a bool is not a plain int either
    ring = rec._ring
    ring.freed -= ring.slots + 1  # as if the writer were a whole ring behind
    loop.start(1)
    loop.end(1, 10, "auto")
    ring.freed += ring.slots + 1
    loop.start(2)
    assert rec.stats()["overflowed"] == 2  # the step and its end: past the ring's room
    # the recorder's own call rejects both steps (counted, said once), and
    # writes the load kept before the second
    assert rec.stats()["rejected"] == {"step_start": 2}
    assert rec.flush(30)
    assert [(Kind(k).name, s) for k, _, s, _, _ in stored(path, "odd")] == [
        ("INPUT_STALL_START", None), ("INPUT_STALL_END", None),
        ("STEP_START", 1), ("STEP_END", 1), ("STEP_START", 2)]
    loop.loaded(6.0)
    ring.freed -= ring.slots + 1
    loop.start(3)  # the load and the step: the producer writes all three
    ring.freed += ring.slots + 1
    assert rec.stats()["overflowed"] == 5 and rec.flush(30)
    assert [(Kind(k).name, s) for k, _, s, _, _ in stored(path, "odd")][-3:] == [
        ("INPUT_STALL_START", None), ("INPUT_STALL_END", None), ("STEP_START", 3)]


def test_a_clock_that_fails_and_a_closed_recorder_are_counted_as_the_python_ones(tmp_path):
    class Flaky(Ticks):
        bad = False

        def __call__(self):
            if self.bad:
                self.bad = False
                return "not a float"
            return super().__call__()

    clock = Flaky()
    rec = Recorder("clock", str(tmp_path / "s.sqlite"), clock=clock)
    loop = Hooks().loop(rec)
    loop.start(1)
    clock.bad = True
    loop.start(2)  # no float for the loop: the recorder's call reads the clock again
    assert rec.stats()["rejected"] == {}
    clock.bad = True
    with pytest.raises(ValueError):
        loop.loaded(0.0)  # Loop.loaded, called directly, says it
    assert rec.flush(30)
    rec2 = Recorder("closed", str(tmp_path / "s.sqlite"), clock=Ticks())
    loop2 = Hooks().loop(rec2)
    loop2.start(1)
    rec2.close()
    dropped = rec2.stats()["dropped"]
    loop2.start(2)
    loop2.end(2, 10, "auto")
    assert rec2.stats()["dropped"] == dropped + 2
    assert [s for _, _, s, _, _ in stored(str(tmp_path / "s.sqlite"), "closed")] == [1]
    assert [s for _, _, s, _, _ in stored(str(tmp_path / "s.sqlite"), "clock")] == [1, 2]


def test_no_loop_where_it_does_not_apply(tmp_path, monkeypatch):
    hooks = Hooks()
    assert hooks.loop(Recorder("mem", "memory://mem")) is None  # no journal

    class Mine(Recorder):
        def record_step_start_time(self, step, start_time=None):
            super().record_step_start_time(step, start_time)

    assert hooks.loop(Mine("sub", str(tmp_path / "a.sqlite"))) is None  # an override
    closed = Recorder("closed", str(tmp_path / "b.sqlite"))
    closed.close()
    assert hooks.loop(closed) is None
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert native.module() is None
    assert hooks.loop(Recorder("off", str(tmp_path / "c.sqlite"))) is None


def test_late_hooks_run_at_the_first_step_after_an_import_and_after_a_reset(tmp_path):
    rec = Recorder("late", str(tmp_path / "s.sqlite"), clock=Ticks())
    hooks = Hooks()
    loop = hooks.loop(rec)
    loop.start(0)
    assert hooks.lazy_calls == 1  # the first step looks
    loop.start(1)
    assert hooks.lazy_calls == 1
    sys.modules["_goodput_test_late_import"] = types.ModuleType("_goodput_test_late_import")
    try:
        loop.start(2)
        assert hooks.lazy_calls == 2
    finally:
        del sys.modules["_goodput_test_late_import"]
    loop.start(3)  # the size changed back: looked once more
    assert hooks.lazy_calls == 3
    # our compile callback registered (in a list the loop reads after each look),
    # then no longer the last of it (torch._dynamo.reset(), another callback)
    hooks.compile_spans._registered_in = [compile_callback]
    sys.modules["_goodput_test_late_import"] = types.ModuleType("_goodput_test_late_import")
    try:
        loop.start(4)
        assert hooks.lazy_calls == 4
        loop.start(5)
        assert hooks.lazy_calls == 4
        hooks.compile_spans._registered_in.append(print)
        loop.start(6)
        assert hooks.lazy_calls == 5
    finally:
        del sys.modules["_goodput_test_late_import"]


class FakeAdapter:
    """What the compiled wrappers read of an adapter."""

    def __init__(self, loop):
        self.active = True
        self.native_loop = loop


def _wrapped(loop, fn, *, bound=True, sync_every="auto", first_step=0):
    slow_calls = []
    counter = _native.Counter(first_step)
    adapter = FakeAdapter(loop)
    slot = types.SimpleNamespace(current=None if bound else adapter)

    @functools.wraps(fn)
    def slow(*args, **kwargs):
        slow_calls.append(counter.next_step)
        counter.next_step += 1
        return fn(*args, **kwargs)

    steps = _native.Steps(slow=slow, func=fn, counter=counter,
                          adapter=adapter if bound else None, slot=slot,
                          sync_every=sync_every)
    functools.update_wrapper(steps, fn)
    steps.counter = counter
    return steps, adapter, slot, slow_calls


def test_the_step_wrapper_records_each_call_and_binds_as_a_function(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("steps", path, clock=Ticks())
    loop = Hooks().loop(rec, every=2)

    def step_fn(x, *, scale=1):
        """A step."""
        if scale == 0:
            raise ZeroDivisionError("scale 0")
        return x * scale

    steps, adapter, slot, slow_calls = _wrapped(loop, step_fn, bound=False, first_step=4)
    assert steps.__name__ == "step_fn" and steps.__doc__ == "A step."
    assert steps.__wrapped__ is step_fn
    assert steps(3, scale=2) == 6 and steps(1) == 1  # steps 4, 5: the end of the 2nd
    steps.counter.next_step = 10  # resumed from a checkpoint
    with pytest.raises(ZeroDivisionError):
        steps(1, scale=0)  # step 10: its start, no end; the error is the caller's
    assert steps(2) == 2  # step 11: the 8th call counted from 4, an end
    assert slow_calls == []

    class Model:
        def __init__(self):
            self.seen = []

        def forward(self, x):
            self.seen.append(x)
            return x

    method, *_ = _wrapped(loop, Model.forward)
    Model.step = method
    model = Model()
    assert model.step(7) == 7 and model.seen == [7]  # bound as a function is
    assert Model.__dict__["step"].__get__(None, Model) is method
    adapter.active = False  # off (adapters say so: adapters_changed()): the Python way
    native.adapters_changed()
    steps(1)
    assert slow_calls == [12]
    adapter.active = True
    slot.current = None
    native.adapters_changed()  # the slot changed: looked up again
    steps(1)
    assert slow_calls == [12, 13]
    assert rec.flush(30)
    assert [(Kind(k).name, s) for k, _, s, _, _ in stored(path, "steps")] == [
        ("STEP_START", 4), ("STEP_START", 5), ("STEP_END", 5), ("STEP_START", 10),
        ("STEP_START", 11), ("STEP_END", 11), ("STEP_START", 0)]
    assert loop.last_step == 0


def test_a_counter_that_is_not_a_plain_int_goes_the_python_way(tmp_path):
    rec = Recorder("odd-counter", str(tmp_path / "s.sqlite"), clock=Ticks())
    steps, _, _, slow_calls = _wrapped(Hooks().loop(rec), lambda: None)
    steps.counter.next_step = 2.5
    steps()
    assert slow_calls == [2.5]
    with pytest.raises(ValueError):  # as int("x")
        _native.Counter("x")


def test_the_loader_wrapper_times_each_batch_and_forwards_attributes(tmp_path):
    path = str(tmp_path / "s.sqlite")
    rec = Recorder("loads", path, clock=Ticks())
    hooks = Hooks()
    loop = hooks.loop(rec)
    adapter = FakeAdapter(loop)

    class Source:
        def __init__(self):
            self.it = iter([1, 2, 3])
            self.state = "s0"

        def __iter__(self):
            return self

        def __next__(self):
            return next(self.it)

    source = Source()

    class Slow:
        def __init__(self):
            self.nexts = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.nexts += 1
            return next(source)

        def __getattr__(self, name):
            return getattr(source, name)

    slow = Slow()
    loads = _native.Loads(it=source, slow=slow, adapter=adapter,
                          slot=types.SimpleNamespace(current=None))
    assert iter(loads) is loads and loads.state == "s0"
    assert next(loads) == 1
    assert loop.take() == (1_001.0, 1_002.0)
    adapter.active = False
    native.adapters_changed()
    assert next(loads) == 2 and slow.nexts == 1
    adapter.active = True
    native.adapters_changed()
    assert next(loads) == 3 and loop.take() == (1_003.0, 1_004.0)
    with pytest.raises(StopIteration):
        next(loads)
    assert loop.take() is None  # the end of the data is no load


def test_a_sigkill_loses_no_step_start_the_loop_returned(tmp_path):
    # quality P14 / R17 for the compiled writes: children record each step's
    # start (with a load's stall) through a Loop and say it after the call
    # returned; each is killed with SIGKILL mid-loop (in a write, a drain, a
    # commit); a reader then delivers their journals: every start said is
    # stored once, its stall before it
    import signal
    import subprocess

    from goodput_core.stores import open_store
    from tests.support.killed_recorder import NATIVE_ENV, ROOT, run_and_kill, stored_keys

    url = "sqlite:///" + str(tmp_path / "killed.sqlite").lstrip("/")
    spill = str(tmp_path / "spill")
    env = dict(os.environ, GOODPUT_SPILL_DIR=spill, GOODPUT_HEARTBEAT_SECONDS="0",
               **{NATIVE_ENV: "1"})
    plans = [("k0", 40, 0.005), ("k1", 900, 0.5), ("k2", 300, 0.05), ("k3", 1500, 0.2)]
    said = {}
    for seed, (run, lines, interval) in enumerate(plans):
        said[run], status = run_and_kill(url, run, lines, interval, env, seed=seed)
        assert status == -signal.SIGKILL
    reader = subprocess.run([sys.executable, "-m", "goodput_core.cli", "runs", "--store", url],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert reader.returncode == 0, reader.stderr
    store = open_store(url)
    for run, lines, _ in plans:
        events, _ = store.read(run)
        starts = [key for key in stored_keys(events) if key[0] == "s"]
        printed = [key for key in said[run] if key[0] == "s"]
        assert len(printed) >= lines // 2  # the child recorded (some lines are c/m)
        assert starts[:len(printed)] == printed and len(starts) <= len(printed) + 1, run
        kinds = [Kind(e.kind).name for e in events]
        at = [i for i, k in enumerate(kinds) if k == "STEP_START"]
        assert all(kinds[i - 2:i] == ["INPUT_STALL_START", "INPUT_STALL_END"] for i in at), run

