"""What keeping the step times sorted costs a monitor cycle at 10 M steps.

A monitor's ideal step time (mean at or below median + 3·MAD) comes from the
step times kept sorted (``queries/sorted_times.py``). Each cycle adds its
new steps' times and replaces the few a restart or a step end changed. This
times that update and the ideal step time over ``--steps`` lognormal step
times, per cycle of ``--new`` new times (drawn from the same distribution:
each lands at a random place in the order, the worst case for the blocks)
and ``--replaced`` replaced ones, against the one-shot
:func:`~goodput_core.queries.step_stats.ideal_step_time` and against one
sorted array updated with ``numpy.insert`` (what a cycle did before).

    python benchmarks/bench_sorted_times.py [--steps 10000000] [--new 1000]
                                            [--replaced 30] [--cycles 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from _machine import machine
from goodput_core.queries.sorted_times import SortedTimes
from goodput_core.queries.step_stats import ideal_step_time


def _median_ms(fn, cycles: int) -> float:
    costs = []
    for _ in range(cycles):
        t0 = time.process_time()
        fn()
        costs.append(time.process_time() - t0)
    return statistics.median(costs) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10_000_000)
    ap.add_argument("--new", type=int, default=1000)
    ap.add_argument("--replaced", type=int, default=30)
    ap.add_argument("--cycles", type=int, default=30)
    args = ap.parse_args()
    print(machine())
    print(f"load average at start: {os.getloadavg()}")
    rng = np.random.default_rng(7)
    times = rng.lognormal(0.0, 0.2, args.steps)
    kept = SortedTimes()
    kept.reset(times)
    flat = np.sort(times)
    held = times[: args.cycles * args.replaced].reshape(args.cycles, args.replaced)
    cycle = iter(range(10 ** 9))

    def blocks() -> None:  # one cycle: the update and the ideal step time
        i = next(cycle) % args.cycles
        kept.update(held[i], rng.lognormal(0.0, 0.2, args.new + args.replaced))
        kept.ideal()

    def one_array() -> None:  # the same with one sorted array (np.insert: O(n) copies)
        nonlocal flat
        new = np.sort(rng.lognormal(0.0, 0.2, args.new))
        flat = np.insert(flat, np.searchsorted(flat, new), new)

    blocks_ms = _median_ms(blocks, args.cycles)
    array_ms = _median_ms(one_array, args.cycles)
    one_shot_ms = _median_ms(lambda: ideal_step_time(times), 5)
    print(f"{args.steps:,} step times, {args.new:,} new and {args.replaced} replaced per cycle:")
    print(f"  sorted blocks, update + ideal step time: {blocks_ms:.2f} ms per cycle (median)")
    print(f"  one sorted array, np.insert of the new times only: {array_ms:.2f} ms")
    print(f"  one-shot ideal_step_time (two partitions): {one_shot_ms:.1f} ms")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
