"""What system metrics (``log_system_metrics``) cost: CPU of the sampler
thread per sample and as a share of one core at the SDK's 10 s interval,
and what a training thread pays meanwhile.

Rows (each a median over 7 repeats):

* ``sample``: one sample of this machine's sources (psutil on a CPU
  machine; NVML/libtpu where present), recorded into a memory store - the
  sampler thread's CPU time (``time.thread_time``), 200 samples back to
  back (the wait returns at once);
* ``share of one core at 10 s``: that CPU time over 10 s;
* ``training loop``: 2,000,000 additions on the main thread with the
  sampler sampling as fast as it can beside it vs without it (the worst
  case for the GIL: at 10 s the sampler is asleep almost always), as a
  ratio of the median wall times.

    python benchmarks/bench_system_metrics.py
"""

from __future__ import annotations

import statistics
import time

from _machine import machine
from goodput_core import Recorder
from goodput_core.compat.mldiagnostics.system_metrics import SystemMetrics
from goodput_core.stores.memory import MemoryStore

SAMPLES = 200
REPEATS = 7
LOOP = 2_000_000


def _burst(n: int):
    """A wait that lets the sampler sample ``n`` times back to back."""
    left = [n]

    def wait(_seconds: float) -> bool:
        left[0] -= 1
        return left[0] < 0
    return wait


def per_sample_cpu() -> float:
    rec = Recorder("bench-sys", MemoryStore(), queue_size=100_000)
    sampler = SystemMetrics(rec, interval_s=10, wait=_burst(SAMPLES)).start()
    sampler.thread.join()
    stats = sampler.stats()
    rec.close()
    return stats["cpu_seconds"] / max(stats["samples"], 1), stats["sources"]


def loop() -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(LOOP):
        x += i
    return time.perf_counter() - t0


def loop_beside_sampler() -> float:
    rec = Recorder("bench-sys-loop", MemoryStore(), queue_size=1_000_000)
    sampler = SystemMetrics(rec, interval_s=10, wait=lambda s: False).start()
    try:
        return loop()
    finally:
        sampler.stop(10)
        rec.close()


def main():
    print("machine:", machine())
    cpu = []
    for _ in range(REPEATS):
        seconds, sources = per_sample_cpu()
        cpu.append(seconds)
    med = statistics.median(cpu)
    print(f"sources: {', '.join(sources)}")
    print(f"sample: median {1e3 * med:.3f} ms of CPU (min {1e3 * min(cpu):.3f}, "
          f"max {1e3 * max(cpu):.3f})")
    print(f"share of one core at 10 s: {100 * med / 10:.5f} %")
    base, beside = [], []
    for _ in range(REPEATS):
        base.append(loop())
        beside.append(loop_beside_sampler())
    b, s = statistics.median(base), statistics.median(beside)
    print(f"training loop: {b:.3f} s alone, {s:.3f} s beside a sampler sampling back to back "
          f"(ratio {s / b:.3f})")


if __name__ == "__main__":
    main()
