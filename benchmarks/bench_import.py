"""P6: the time ``import goodput_core`` takes in a fresh interpreter, and what it pulls in.

Each sample is a new ``python -c`` process that measures its own import with
``time.perf_counter`` (interpreter start-up excluded). Compared in the same run
with ``import ml_goodput_measurement`` when it is installed.

    python benchmarks/bench_import.py
"""

from __future__ import annotations

import json
import subprocess
import sys

from _machine import machine, median

FORBIDDEN = ("jax", "flax", "orbax", "tensorflow", "torch", "google.cloud", "tensorboardX",
             "prometheus_client", "matplotlib", "grpc")
PROBE = """
import sys, time, json
t0 = time.perf_counter()
import {mod}
dt = time.perf_counter() - t0
bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden} or m.startswith('google.cloud'))
print(json.dumps([dt, bad]))
"""


def sample(mod: str, repeats: int = 15):
    times, bad = [], []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", PROBE.format(mod=mod, forbidden=FORBIDDEN)],
                             capture_output=True, text=True, check=True).stdout
        dt, bad = json.loads(out)
        times.append(dt)
    return median(times), bad


def main():
    print("machine:", machine())
    ours, bad = sample("goodput_core")
    print(f"import goodput_core: median {ours * 1000:.1f} ms; heavy modules pulled in: {bad or 'none'}")
    try:
        ref, ref_bad = sample("ml_goodput_measurement", repeats=5)
    except subprocess.CalledProcessError:
        print("reference not installed: skipped")
        return
    print(f"import ml_goodput_measurement: median {ref * 1000:.1f} ms "
          f"(pulls in {len(ref_bad)} heavy modules); ratio {ref / ours:.0f}x")


if __name__ == "__main__":
    main()
