"""The PyTorch adapter on a real GPU: step times and input stalls against CUDA events.

Prepared for a machine with CUDA (the suite never needs it; figures go in
benchmarks/README.md). Three checks, one process, a few minutes:

1. **Step times, sync_every=1 and 100.** An MLP large enough to keep the GPU
   busy ~5-20 ms a step trains for ``--steps`` steps with the adapter on;
   CUDA events recorded before and after every step's kernels give the GPU's
   own step times. Recorded step times (the calculator's, from the events the
   adapter wrote) are compared with the events' per step (sync_every=1) and
   over each 100-step block (sync_every=100): the medians and the worst
   relative error are printed. Expected: within a few percent (launch gaps).
2. **Input stalls on a starved loader.** The same model fed by a loader that
   sleeps ``--load-ms`` per batch on the training thread (more than a step):
   the GPU idles in each load for (load - remaining GPU work). The idle time
   per load is measured from the events (the previous step's end event to
   the next step's start event, both on the GPU clock) and compared with the
   recorded ``input_stall`` spans. Expected: stalls within ~1 ms per load of
   the GPU's idle time, never above it.
3. **Accelerator init.** The first CUDA init is recorded as a ``tpu_init``
   span (its length printed).

    python benchmarks/gpu_torch_check.py [--steps 300] [--load-ms 30] [--hidden 4096]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

import torch

from goodput_core import Calculator, Recorder, open_store
from goodput_core.events import Kind
import goodput_integrations.torch as gtorch


def _model(hidden: int):
    return torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(hidden, hidden),
                                                                torch.nn.ReLU())]).cuda()


def _timed_step(model, opt, batch, marks) -> None:
    """One training step between two CUDA events (the GPU's own clock)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    opt.zero_grad(set_to_none=True)
    model(batch).square().mean().backward()
    opt.step()
    end.record()
    marks.append((start, end))


def _events(store: str, run: str, kind: Kind):
    events, _ = open_store(store).read(run)
    return [e for e in events if e.kind == kind]


def step_times(args, sync_every: int) -> None:
    store, run = f"memory://gpu-{uuid.uuid4().hex}", f"steps-{sync_every}"
    rec = Recorder(run, store)
    with rec.job(), gtorch.instrumented(rec, sync_every=sync_every) as adapter:
        model = _model(args.hidden)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(args.batch, args.hidden, device="cuda")
        marks = []
        step = gtorch.train_step(lambda: _timed_step(model, opt, x, marks))
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        assert adapter.on_cuda
    rec.flush(30)
    gpu = [s.elapsed_time(e) / 1e3 for s, e in marks]
    calc = Calculator(run, store)
    calc.refresh()
    recorded = calc.step_stats().step_times
    n = min(len(gpu), len(recorded))
    if sync_every == 1:
        errors = [abs(recorded[i] - gpu[i]) / gpu[i] for i in range(1, n)]
    else:  # blocks of sync_every steps: the time between two sync points
        blocks = [(sum(recorded[i:i + sync_every]), sum(gpu[i:i + sync_every]))
                  for i in range(sync_every, n - sync_every + 1, sync_every)]
        errors = [abs(r - g) / g for r, g in blocks]
    print(f"sync_every={sync_every}: median step GPU {statistics.median(gpu) * 1e3:.3f} ms, "
          f"recorded {statistics.median(recorded) * 1e3:.3f} ms; relative error median "
          f"{statistics.median(errors):.4f}, worst {max(errors):.4f} ({len(errors)} compared)")
    inits = _events(store, run, Kind.TPU_INIT_END)
    starts = _events(store, run, Kind.TPU_INIT_START)
    if inits:
        print(f"  first CUDA init recorded: {inits[0].time - starts[0].time:.3f} s")


def input_stalls(args) -> None:
    store, run = f"memory://gpu-{uuid.uuid4().hex}", "stalls"
    rec = Recorder(run, store)
    with rec.job(), gtorch.instrumented(rec, sync_every=None, device="cuda"):
        model = _model(args.hidden)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(args.batch, args.hidden, device="cuda")

        def batches():
            for _ in range(args.steps):
                time.sleep(args.load_ms / 1e3)  # a starved loader, on the training thread
                yield x

        marks = []
        step = gtorch.train_step(lambda batch: _timed_step(model, opt, batch, marks))
        for batch in gtorch.instrument_loader(batches()):
            step(batch)
        torch.cuda.synchronize()
        adapter = gtorch.active_adapter()
        if adapter is not None and adapter.stalls is not None:
            adapter.stalls.flush(30)
    rec.flush(30)
    # the GPU's idle time between step k's end and step k+1's start (its own clock)
    idle = [marks[k][1].elapsed_time(marks[k + 1][0]) / 1e3 for k in range(len(marks) - 1)]
    starts = [e.time for e in _events(store, run, Kind.INPUT_STALL_START)]
    ends = [e.time for e in _events(store, run, Kind.INPUT_STALL_END)]
    stalls = [b - a for a, b in zip(starts, ends)][-len(idle):]
    diffs = [s - i for s, i in zip(stalls, idle)]
    print(f"input stalls: {len(stalls)} recorded, GPU idle per load median "
          f"{statistics.median(idle) * 1e3:.3f} ms, recorded stall median "
          f"{statistics.median(stalls) * 1e3:.3f} ms; recorded - idle: median "
          f"{statistics.median(diffs) * 1e3:+.3f} ms, min {min(diffs) * 1e3:+.3f} ms, "
          f"max {max(diffs) * 1e3:+.3f} ms")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--load-ms", type=float, default=30.0)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU")
        return 2
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}")
    step_times(args, 1)
    step_times(args, 100)
    input_stalls(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
