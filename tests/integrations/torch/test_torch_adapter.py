"""The PyTorch adapter in-process, on real torch (CPU): what each hook records,
that instrument/uninstrument put everything back, and that no hook raises
into the training loop."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torch.distributed.checkpoint as dcp  # noqa: E402

from goodput_core.events import Kind  # noqa: E402
from goodput_integrations import torch as gtorch  # noqa: E402
from goodput_integrations.torch import _probe  # noqa: E402
from tests.integrations.torch.conftest import ROOT, child_env  # noqa: E402


def _pairs(rec, start, end):
    """``[(t0, t1)]`` of the start/end events of one kind, in order."""
    events = rec.records()
    starts = [e.time for e in events if Kind(e.kind).name == start]
    ends = [e.time for e in events if Kind(e.kind).name == end]
    assert len(starts) == len(ends)
    return list(zip(starts, ends))


def test_steps_on_the_cpu_end_at_their_return_and_loads_are_stalls(rec):
    seen = []
    with gtorch.instrumented(rec.recorder) as adapter:
        loader = gtorch.instrument_loader(torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.arange(6.0)), batch_size=2))
        assert len(loader) == 3 and loader.batch_size == 2  # the loader's own attributes

        @gtorch.train_step(first_step=7, sync_every=1)  # every end (default: every 10th)
        def step(batch):
            seen.append(batch)
            return batch[0].sum()

        for batch in loader:
            step(batch)
        assert adapter.on_cuda is False
    names = rec.names()
    steps = [(Kind(e.kind).name, e.step) for e in rec.records() if Kind(e.kind).name.startswith("STEP")]
    assert steps == [("STEP_START", 7), ("STEP_END", 7), ("STEP_START", 8), ("STEP_END", 8),
                     ("STEP_START", 9), ("STEP_END", 9)]
    # iter() (worker start-up) and three next(): each a load, all of it an
    # input stall, recorded as the stall alone (four events a step in all);
    # the end of the epoch (StopIteration) is not a load
    stalls = _pairs(rec, "INPUT_STALL_START", "INPUT_STALL_END")
    assert len(stalls) == 4 and all(t0 <= t1 for t0, t1 in stalls)
    assert "DATA_LOADING_START" not in names and "BLOCKING_LOAD_START" not in names
    # the run's metadata, the stalls and the steps, nothing else
    assert sorted(names) == sorted(["METADATA"] + ["INPUT_STALL_START", "INPUT_STALL_END"] * 4
                                   + ["STEP_START", "STEP_END"] * 3)
    # each load lies between the step before it and the step after it
    times = [(Kind(e.kind).name, e.time) for e in rec.records() if e.kind != Kind.METADATA]
    order = [n for n, _ in sorted(times, key=lambda nt: nt[1])]
    assert order == [n for n, _ in times]
    assert step.counter.next_step == 10 and len(seen) == 3


def _cpu_loop_events(tmp_path, run, fast, native=True, monkeypatch=None):
    """A CPU loop of 40 steps into a durable SQLite store, through the adapter's
    fast paths (compiled, or ``native=False`` the Python ones) or (``fast=False``)
    its hooks alone: the stored (kind, step)s."""
    from goodput_core import Recorder, open_store
    from goodput_core.record.native import NATIVE_ENV

    if monkeypatch is not None:  # read as the wrappers and the adapter's loop are made
        monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
    store = str(tmp_path / "loop.sqlite")
    recorder = Recorder(run, store)
    with recorder.job(), gtorch.instrumented(recorder) as adapter:
        if not fast:
            adapter._set_fast_paths = lambda: None
        loader = gtorch.instrument_loader(torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.arange(80.0)), batch_size=2))
        step = gtorch.train_step(lambda batch: batch[0].sum())
        for batch in loader:
            step(batch)
        paths = (adapter.fast_steps is not None, adapter.fast_load is not None,
                 adapter.native_loop is not None)
    assert recorder.flush(30)
    recorder.close()
    events, _ = open_store(store).read(run)
    kinds = [(Kind(e.kind).name, e.step) for e in events if e.kind != Kind.METADATA]
    times = [e.time for e in events if e.kind != Kind.METADATA]
    return paths, kinds, times


@pytest.mark.parametrize("native", [True, False], ids=["compiled", "python"])
def test_the_cpu_fast_paths_store_what_the_hooks_store(tmp_path, native, monkeypatch):
    # from the second step on, the wrapper and the loader record through the
    # adapter's direct calls: the compiled loop calls where built (the test
    # fails where REQUIRE_NATIVE=1 and they are not), else the
    # recorder's one-frame step and stall calls
    from goodput_core.record.native import module

    if native and module() is None:
        assert os.environ.get("REQUIRE_NATIVE") != "1", "not built"
        pytest.skip("the compiled loop calls are not built here")
    fast_paths, fast, fast_times = _cpu_loop_events(tmp_path, "fast", True, native, monkeypatch)
    hook_paths, hooks, _ = _cpu_loop_events(tmp_path, "hooks", False, native, monkeypatch)
    assert fast_paths == (True, True, native) and hook_paths == (False, False, False)
    assert fast == hooks
    assert fast.count(("INPUT_STALL_START", None)) == 41  # iter() and 40 loads
    # by default a step end every 10th step on the CPU (each return is a sync
    # point; the spans between two step starts hold the steps either way)
    assert [k for k in fast if k[0].startswith("STEP")] == [
        e for k in range(40) for e in [("STEP_START", k)] + [("STEP_END", k)] * (k % 10 == 9)]
    # each load's stall, then the step it fed
    assert fast[:6] == [("JOB_START", None)] + [  # iter(), then the first load
        ("INPUT_STALL_START", None), ("INPUT_STALL_END", None)] * 2 + [("STEP_START", 0)]
    assert fast[-5:] == [("INPUT_STALL_START", None), ("INPUT_STALL_END", None),
                         ("STEP_START", 39), ("STEP_END", 39), ("JOB_END", None)]
    assert fast_times == sorted(fast_times)  # each event where it happened, in order


def test_a_load_that_no_step_follows_is_recorded_all_the_same(rec):
    # on the fast path a load's stall waits for the next step's start (one
    # journal write for both); a second load, uninstrument() or a disruption
    # records it without one
    with gtorch.instrumented(rec.recorder) as adapter:
        it = iter(gtorch.instrument_loader(list(range(10))))
        step = gtorch.train_step(lambda b: b)
        step(next(it))
        step(next(it))
        assert adapter.fast_load is not None
        # so far iter() and the two loads
        assert len(_pairs(rec, "INPUT_STALL_START", "INPUT_STALL_END")) == 3
        next(it)
        next(it)  # the first of these two: recorded now
        assert len(_pairs(rec, "INPUT_STALL_START", "INPUT_STALL_END")) == 4
        step(next(it))  # the second and the third with this step's start
        assert len(_pairs(rec, "INPUT_STALL_START", "INPUT_STALL_END")) == 6
        next(it)  # leaves instrumented() with no step after it
    assert len(_pairs(rec, "INPUT_STALL_START", "INPUT_STALL_END")) == 7
    with gtorch.instrumented(rec.recorder) as adapter:
        it = iter(gtorch.instrument_loader(list(range(10))))
        step = gtorch.train_step(lambda b: b)
        step(next(it))
        step(next(it))
        next(it)
        adapter._hooks._record("sigterm")  # what the SIGTERM handler records
    stalls = _pairs(rec, "INPUT_STALL_START", "INPUT_STALL_END")
    disruption = [e.time for e in rec.records() if Kind(e.kind).name == "DISRUPTION"]
    assert len(stalls) == 7 + 4 and disruption and stalls[-1][1] <= disruption[0]


def test_torch_compile_compiles_and_recompiles_are_program_startup(rec):
    torch._dynamo.reset()
    with gtorch.instrumented(rec.recorder) as adapter:
        fn = torch.compile(lambda x: (x * 2).sum(), backend="eager", dynamic=False)
        step = gtorch.train_step(fn, sync_every=1)  # each step's end
        step(torch.ones(3))
        step(torch.ones(3))  # cached: no compile
        torch._dynamo.reset()  # clears every callback: the next step registers ours again
        step(torch.ones(5))
    spans = _pairs(rec, "PROGRAM_STARTUP_START", "PROGRAM_STARTUP_END")
    assert len(spans) == 2 and adapter._compile.compiles == {"DYNAMO": 2}
    names = [e.extra.get("fun_name") for e in rec.records() if Kind(e.kind).name == "PROGRAM_STARTUP_START"]
    assert all(n.startswith("torch.compile ") for n in names)
    # each compile lies inside the step that triggered it
    starts = [e.time for e in rec.records() if Kind(e.kind).name == "STEP_START"]
    ends = [e.time for e in rec.records() if Kind(e.kind).name == "STEP_END"]
    assert starts[0] <= spans[0][0] <= spans[0][1] <= ends[0]
    assert starts[2] <= spans[1][0] <= spans[1][1] <= ends[2]


def test_uninstrument_puts_back_compile_init_and_dcp_hooks(rec):
    from torch._dynamo.callback import callback_handler
    from torch.distributed.checkpoint import logger as dcp_logger

    before = (torch.compile, torch.distributed.init_process_group,
              list(callback_handler.start_callbacks), list(dcp_logger._dcp_logger.handlers))
    adapter = gtorch.instrument(rec.recorder)
    assert gtorch.instrument(rec.recorder) is adapter  # idempotent
    assert torch.distributed.init_process_group is not before[1]
    assert len(callback_handler.start_callbacks) == len(before[2]) + 1
    assert len(dcp_logger._dcp_logger.handlers) == len(before[3]) + 1
    gtorch.uninstrument()
    gtorch.uninstrument()
    after = (torch.compile, torch.distributed.init_process_group,
             list(callback_handler.start_callbacks), list(dcp_logger._dcp_logger.handlers))
    assert after == before


def test_dcp_save_async_save_and_load_are_checkpoint_spans(rec, tmp_path):
    state = {"w": torch.arange(1000.0)}
    with gtorch.instrumented(rec.recorder):
        step = gtorch.train_step(lambda: None, first_step=41)
        step()
        dcp.save(state, checkpoint_id=str(tmp_path / "a"))
        future = dcp.async_save(state, checkpoint_id=str(tmp_path / "b"))
        future.result()  # the background write: not the loop's time, not recorded
        target = {"w": torch.zeros(1000)}
        dcp.load(target, checkpoint_id=str(tmp_path / "a"))
    assert torch.equal(target["w"], state["w"])
    saves = [e for e in rec.records() if Kind(e.kind).name == "CHECKPOINT_SAVE_START"]
    assert [e.step for e in saves] == [41, 41]  # the last step started
    assert len(_pairs(rec, "CHECKPOINT_SAVE_START", "CHECKPOINT_SAVE_END")) == 2
    assert len(_pairs(rec, "CHECKPOINT_RESTORE_START", "CHECKPOINT_RESTORE_END")) == 1


def test_torch_save_and_load_wrappers(rec, tmp_path):
    path = str(tmp_path / "ckpt.pt")
    gtorch.save({"a": torch.ones(2)}, path)  # not instrumented: nothing recorded, still saved
    with gtorch.instrumented(rec.recorder):
        gtorch.save({"a": torch.ones(3)}, path, step=5)
        loaded = gtorch.load(path, step=5)
    assert loaded["a"].shape == (3,)
    assert [e.step for e in rec.records() if Kind(e.kind).name == "CHECKPOINT_SAVE_START"] == [5]
    assert [e.step for e in rec.records() if Kind(e.kind).name == "CHECKPOINT_RESTORE_END"] == [5]


def test_a_failing_recorder_never_raises_into_the_loop(tmp_path):
    class Broken:
        clock = staticmethod(lambda: 1.0)

        def __getattr__(self, name):
            if name.startswith("record_") or name == "flush":
                def fail(*a, **k):
                    raise RuntimeError("store on fire")
                return fail
            raise AttributeError(name)

    with gtorch.instrumented(Broken()):
        loader = gtorch.instrument_loader([torch.ones(1), torch.ones(1)])
        step = gtorch.train_step(lambda b: b * 2)
        out = [step(b) for b in loader]
        dcp.save({"w": torch.ones(2)}, checkpoint_id=str(tmp_path / "c"))
        torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    assert len(out) == 2


def test_ranks_wait_for_the_process_group_and_only_rank_0_writes(rec, monkeypatch):
    # a 1-process group started by init_process_group: WORLD_SIZE says 2 and
    # RANK is unset, so the rank is unknown until the group exists
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    assert _probe.process_index() is None
    with gtorch.instrumented(rec.recorder) as adapter:
        step = gtorch.train_step(lambda: None)
        step()  # buffered: nobody knows yet whether this process writes
        assert adapter.gate.decision is None
        monkeypatch.setenv("WORLD_SIZE", "1")
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(_free_port()))
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        try:
            assert adapter.gate.decision is True
            step()
        finally:
            torch.distributed.destroy_process_group()
    names = rec.names()
    assert names.count("STEP_START") == 2  # the buffered one replayed, in order
    assert names.count("TPU_INIT_START") == 1 and "METADATA" in names
    meta = {}
    for e in rec.records():
        if Kind(e.kind).name == "METADATA":
            meta.update(e.extra)
    assert meta["framework"] == "pytorch" and meta["backend"] == "gloo"
    assert meta["num_processes"] == 1 and meta["device_kind"] == "cpu"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_non_zero_rank_writes_only_per_host_with_its_index(rec, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with gtorch.instrumented(rec.recorder):
        gtorch.train_step(lambda: None)()
    assert "STEP_START" not in rec.names()
    with gtorch.instrumented(rec.recorder, per_host=True):
        gtorch.train_step(lambda: None)()
    steps = [e for e in rec.records() if Kind(e.kind).name == "STEP_START"]
    assert len(steps) == 1 and rec.recorder.process_index == 3


@pytest.mark.parametrize("how", ["sigterm", "exception"])
def test_disruptions_from_sigterm_and_uncaught_exceptions(tmp_path, how):
    store = str(tmp_path / "g.sqlite")
    code = f"""
import os, signal, sys
from goodput_core import Recorder
from goodput_integrations import torch as gtorch
rec = Recorder("d", {store!r})
rec.record_job_start_time()
gtorch.instrument(rec)
gtorch.train_step(lambda: None)()
if {how!r} == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
raise ValueError("boom")
"""
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == (-15 if how == "sigterm" else 1), done.stderr[-2000:]
    from goodput_core import open_store

    events, _ = open_store(store).read("d")
    causes = [e.extra["disruption_cause"] for e in events if Kind(e.kind).name == "DISRUPTION"]
    assert causes == (["sigterm"] if how == "sigterm" else ["exception:ValueError"])


def test_crash_inside_instrumented_reaches_the_store_before_a_sigterm(tmp_path):
    """torchrun stops the surviving ranks with SIGTERM right after one failed:
    the disruption rec.job() records as the exception leaves must be stored
    although SIGTERM's default action ends the process at once (the adapter's
    hooks linger after a crash and flush first). Here the SIGTERM comes from
    an excepthook installed before the adapter's: the moment the exception
    has left every block, before the writer thread ran."""
    store = str(tmp_path / "g.sqlite")
    code = f"""
import os, signal, sys
from goodput_core import Recorder
from goodput_integrations import torch as gtorch
sys.excepthook = lambda *exc: os.kill(os.getpid(), signal.SIGTERM)
rec = Recorder("c", {store!r})
with rec.job(), gtorch.instrumented(rec):
    gtorch.train_step(lambda: None)()
    raise RuntimeError("peer gone")
"""
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -15, done.stderr[-2000:]
    from goodput_core import open_store

    events, _ = open_store(store).read("c")
    causes = [e.extra["disruption_cause"] for e in events if Kind(e.kind).name == "DISRUPTION"]
    assert causes == ["exception:RuntimeError"], done.stderr[-2000:]


def test_without_torch_the_package_imports_and_the_adapter_says_why(tmp_path):
    code = """
import sys
sys.modules['torch'] = None   # torch cannot be imported in this process
import goodput_integrations.torch as gtorch
from goodput_integrations import AdapterUnavailable
assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]
try:
    gtorch.instrument(object())
except AdapterUnavailable as exc:
    print('unavailable:', exc)
"""
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "unavailable: the PyTorch adapter needs torch" in done.stdout


def test_importing_the_adapter_does_not_import_torch():
    code = ("import sys, goodput_integrations.torch; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_elastic_run_name(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    assert gtorch.elastic_run_name("llama") == "llama-abc"
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert gtorch.elastic_run_name("llama") == "llama"
    with pytest.raises(ValueError):
        gtorch.elastic_run_name("")
    assert os.environ.get("TORCHELASTIC_RUN_ID") is None
