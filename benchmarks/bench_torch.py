"""P15: a PyTorch loop of ~1 ms steps with the PyTorch adapter (and an in-process monitor) on vs off.

The loop: a small MLP (forward, backward, SGD step) on the CPU, one thread,
fed by a real ``DataLoader`` (batches made ahead, in the loop's process: a
worker's hand-over would cost more than the step), sized so that a step
takes about a millisecond. "On" runs do what the README shows:
``with rec.job(), gtorch.instrumented(rec):``, the loader wrapped with
``gtorch.instrument_loader``, the step with ``gtorch.train_step`` (a step
start and end per step, and each load, on the CPU, as its input stall: four
events a step into the default embedded SQLite store through the writer
thread),
and a ``Monitor`` on a thread of the same process (one cycle a second by
default here, ``--monitor-interval``; the Monitor's own default is 30 s;
TensorBoard files). "Off" runs are the same loop, bare.

Runs alternate off/on (interleaved, so drift in the machine's speed hits
both sides alike). The P15 figure is the ratio of the median loop times
(each run's wall time over its steps, loads included); the per-step median
ratio (the step function alone) and the spread of per-pair ratios are printed
too, with the cost of the recording calls per step measured on their own and
inside the loop (the step call and ``next()``, on against off).

    python benchmarks/bench_torch.py [--pairs 10] [--steps 3000] [--hidden 96]
    python benchmarks/bench_torch.py --parts --steps 2000   # where the "on" time goes
    python benchmarks/bench_torch.py --blocks 500           # the same in 10-step blocks
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import machine  # noqa: E402
from goodput_core import Recorder  # noqa: E402
import goodput_integrations.torch as gtorch  # noqa: E402


class Batches(torch.utils.data.Dataset):
    """Whole batches made ahead (a load costs the DataLoader's own work only)."""

    def __init__(self, n, features):
        self.x = torch.randn(n, 32, features, generator=torch.Generator().manual_seed(0))
        self.y = (self.x.sum(dim=2) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, k):
        return self.x[k], self.y[k]


def _others_cpu() -> float:
    """CPU seconds of the threads other than this one (the writer, the watchdog,
    the monitor's thread): one_run returns theirs per step, during the loop."""
    return time.process_time() - time.thread_time()


def mlp_step(hidden: int):
    """The step function: a small MLP's forward, backward and SGD step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step_fn(x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step_fn


def one_run(on: bool, steps: int, hidden: int, store: str, tb: str, with_monitor: bool = True,
            recorder=None, monitor_interval: float = 1.0):
    step_fn = mlp_step(hidden)

    loader = torch.utils.data.DataLoader(Batches(steps, 64), batch_size=None)
    step_times, load_times = [], []
    pc = time.perf_counter

    def loop(it, step):
        for _ in range(steps):
            a = pc()
            x, y = next(it)
            b = pc()
            step(x, y)
            step_times.append(pc() - b)
            load_times.append(b - a)

    if not on:
        it = iter(loader)
        t0, c0 = pc(), _others_cpu()
        loop(it, step_fn)
        total = pc() - t0
        return total, step_times, load_times, (_others_cpu() - c0) / steps
    from goodput_core.exporters.tensorboard import TensorBoardExporter
    from goodput_core.monitor import Monitor

    run = f"bench-{uuid.uuid4().hex[:8]}"
    rec = Recorder(run, store) if recorder is None else recorder(run)
    with rec.job(), gtorch.instrumented(rec):
        monitor = None
        if with_monitor:
            monitor = Monitor(run, store, [TensorBoardExporter(os.path.join(tb, run))],
                              interval_s=monitor_interval, recorder=rec, process=False)
            monitor.start()
        train_step = gtorch.train_step(step_fn)
        it = iter(gtorch.instrument_loader(loader))
        t0, c0 = pc(), _others_cpu()
        loop(it, train_step)
        total = pc() - t0
        others = (_others_cpu() - c0) / steps
        if monitor is not None:
            monitor.stop()
    rec.close()
    return total, step_times, load_times, others


def hook_cost(n: int = 20000) -> float:
    """Seconds per step of our code alone: a step start and end and a load (its
    input stall), recorded into memory through the adapter (no model, no loader)."""
    rec = Recorder(f"hooks-{uuid.uuid4().hex[:6]}", f"memory://bench-{uuid.uuid4().hex}")
    with gtorch.instrumented(rec):
        step = gtorch.train_step(lambda: None)
        it = iter(gtorch.instrument_loader(range(n)))
        t0 = time.perf_counter()
        for _ in it:
            step()
        cost = (time.perf_counter() - t0) / n
    rec.close()
    return cost


def parts(pairs: int, steps: int, hidden: int, store: str, tb: str) -> None:
    """The adapter switched on in parts, interleaved (no monitor): where the
    "on" loop's extra time goes."""
    from goodput_core import NULL_RECORDER

    def no_drain(run):  # the writer never wakes during the loop (< half a ring of events)
        return Recorder(run, store, flush_interval_s=3600)

    variants = {
        "off": None,
        "hooks (NULL_RECORDER)": lambda run: NULL_RECORDER,
        "memory:// (ring in memory, writer)": lambda run: Recorder(run, f"memory://{run}"),
        "sqlite, writer asleep (journal only)": no_drain,
        "sqlite (journal, writer, store)": lambda run: Recorder(run, store),
    }
    loops = {name: [] for name in variants}
    others = {name: [] for name in variants}
    step_t = {name: [] for name in variants}
    load_t = {name: [] for name in variants}
    names = list(variants)
    for i in range(pairs):
        for name in names[i % len(names):] + names[:i % len(names)]:
            make = variants[name]
            total, st, ld, cpu = one_run(make is not None, steps, hidden, store, tb, False,
                                         make)
            loops[name].append(total)
            others[name].append(cpu)
            step_t[name].extend(st)
            load_t[name].extend(ld)
    off = statistics.median(loops["off"])
    s_off, l_off = statistics.median(step_t["off"]), statistics.median(load_t["off"])
    print(f"parts, {pairs} rounds x {steps} steps, interleaved; medians:")
    for name in names:
        loop = statistics.median(loops[name])
        print(f"  {name:38s} loop {loop / steps * 1e3:.3f} ms/step, x{loop / off:.4f}; "
              f"in the loop: step call {(statistics.median(step_t[name]) - s_off) * 1e6:+.1f} "
              f"us, next() {(statistics.median(load_t[name]) - l_off) * 1e6:+.1f} us; other "
              f"threads' CPU {statistics.median(others[name]) * 1e6:.1f} us/step")


def blocks(cycles: int, hidden: int, store: str, block: int = 10) -> None:
    """Variants of the recording in one process, interleaved in blocks of
    ``block`` steps (the VM's speed moves by tens of percent over seconds;
    blocks a few milliseconds apart see the same speed): the median cost per
    step of each over the bare loop. No monitor (it cannot be switched per
    block); the writer runs throughout (its cost lands on every block)."""
    import itertools
    import mmap
    from goodput_core.record import journal as jr
    from goodput_core.record.native import adapters_changed

    step_fn = mlp_step(hidden)

    names = ["off", "hooks, every end", "adapter (default)", "floor"]
    loader = torch.utils.data.DataLoader(Batches(block * cycles * len(names) + 8, 64),
                                         batch_size=None)
    clock, buf, pack = time.time, mmap.mmap(-1, 1 << 20), jr.PLAIN_TRIPLE.pack_into
    tickets = itertools.count()

    class Stamped:  # floor: the load's two clock reads, kept for the step's write
        def __init__(self, it):
            self.it, self.stall = it, (0.0, 0.0)

        def __iter__(self):
            return self

        def __next__(self):
            t0 = clock()
            batch = next(self.it)
            self.stall = (t0, clock())
            return batch

    stamped = Stamped(iter(loader))

    def floor_step(x, y):  # one clock read and one 3-slot pack, into a private buffer
        t, n = clock(), next(tickets)
        t0, t1 = stamped.stall
        pack(buf, (n % 2048) << 7, n, 28, t0, 0, t, 0, n, n, 29, t1, 0, t, 0, n,
             n, 259, t, n, t, 0, n)
        return step_fn(x, y)

    rec = Recorder(f"blocks-{uuid.uuid4().hex[:6]}", store)
    pc = time.perf_counter
    with rec.job(), gtorch.instrumented(rec) as adapter:
        every_end = gtorch.train_step(step_fn, sync_every=1)
        default = gtorch.train_step(step_fn)
        timed = iter(gtorch.instrument_loader(loader))
        for _ in range(3):
            default(*next(timed))
        fast = (adapter.fast_steps, adapter.fast_load, adapter.native_loop)
        bare, none = iter(loader), (None, None, None)
        variants = {"off": (bare, step_fn, none),
                    "hooks, every end": (timed, every_end, none),
                    "adapter (default)": (timed, default, fast),
                    "floor": (stamped, floor_step, none)}
        times = {name: [] for name in names}
        for c in range(cycles):
            for name in names[c % len(names):] + names[:c % len(names)]:
                it, step, (adapter.fast_steps, adapter.fast_load,
                           adapter.native_loop) = variants[name]
                adapters_changed()  # the compiled wrappers look for the loop again
                t0 = pc()
                for _ in range(block):
                    x, y = next(it)
                    step(x, y)
                times[name].append(pc() - t0)
            adapter.flush_pending()
        adapter.fast_steps, adapter.fast_load, adapter.native_loop = fast
    rec.close()
    off = statistics.median(times["off"]) / block
    print(f"blocks: {cycles} cycles of {block}-step blocks per variant, interleaved; off "
          f"{off * 1e3:.3f} ms/step (median block)")
    for name in names[1:]:
        more = statistics.median([(a - b) / block for a, b in zip(times[name], times["off"])])
        print(f"  {name:18s} {more * 1e6:+6.1f} us/step over off (median of adjacent blocks), "
              f"x{1 + more / off:.4f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--hidden", type=int, default=96)
    p.add_argument("--no-monitor", action="store_true", help="the adapter alone")
    p.add_argument("--monitor-interval", type=float, default=1.0, metavar="S",
                   help="the monitor's cycle (default 1 s: 30x the Monitor's own default; "
                   "each cycle costs the process ~10-25 ms of CPU at this run size)")
    p.add_argument("--blocks", type=int, default=0, metavar="CYCLES",
                   help="variants in one process interleaved in 10-step blocks (off, the "
                   "hooks with every step end, the adapter as it runs by default, the floor "
                   "of one durable write a step); no monitor")
    p.add_argument("--parts", action="store_true", help="the adapter in parts (hooks only, "
                   "memory store, journal with the writer asleep, all), no monitor; --steps "
                   "at most 2,000 keeps the sleeping writer's events under half a ring")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(machine(), f"torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    print(f"recording calls per step (step start and end, the load's stall, into memory): "
          f"{hook_cost() * 1e6:.1f} us")
    tmp = tempfile.mkdtemp(prefix="bench-torch-")
    store, tb = os.path.join(tmp, "g.sqlite"), os.path.join(tmp, "tb")
    one_run(False, 300, args.hidden, store, tb)  # warm-up: imports, allocator
    one_run(True, 300, args.hidden, store, tb)
    if args.blocks:
        blocks(args.blocks, args.hidden, store)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return
    if args.parts:
        parts(args.pairs, args.steps, args.hidden, store, tb)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return
    loops = {False: [], True: []}
    others = {False: [], True: []}
    steps = {False: [], True: []}
    loads = {False: [], True: []}
    pairs = []
    for i in range(args.pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {}
        for on in order:
            total, st, ld, cpu = one_run(on, args.steps, args.hidden, store, tb,
                                         not args.no_monitor,
                                         monitor_interval=args.monitor_interval)
            loops[on].append(total)
            others[on].append(cpu)
            steps[on].extend(st)
            loads[on].extend(ld)
            got[on] = total
        pairs.append(got[True] / got[False])
    off, on = statistics.median(loops[False]), statistics.median(loops[True])
    print(f"median step (step function alone): off {statistics.median(steps[False]) * 1e3:.3f} ms"
          f", on {statistics.median(steps[True]) * 1e3:.3f} ms, ratio "
          f"{statistics.median(steps[True]) / statistics.median(steps[False]):.4f}")
    more = {k: (statistics.median(v[True]) - statistics.median(v[False])) * 1e6
            for k, v in (("step", steps), ("load", loads))}
    print(f"in the loop, per step: the step call {more['step']:+.1f} us, next() "
          f"{more['load']:+.1f} us (medians, on - off: the adapter's hooks in the loop's cold "
          f"caches, and what its threads took from the loop)")
    print(f"median loop over {args.steps} steps: off {off:.3f} s "
          f"({off / args.steps * 1e3:.3f} ms/step), on {on:.3f} s; P15 ratio {on / off:.4f}")
    print(f"per-pair ratios: min {min(pairs):.4f}, median {statistics.median(pairs):.4f}, "
          f"max {max(pairs):.4f}; fastest runs: {min(loops[True]) / min(loops[False]):.4f}")
    print(f"other threads' CPU during the loop, per step (medians): off "
          f"{statistics.median(others[False]) * 1e6:.1f} us, on "
          f"{statistics.median(others[True]) * 1e6:.1f} us (the writer, the watchdog"
          f"{'' if args.no_monitor else ', the monitor'})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
