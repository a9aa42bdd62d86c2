"""The hang watchdog's false-positive rate under realistic conditions.

Each scenario is a training loop in a fresh process with a real ``Recorder``
(an SQLite store in a temporary directory), the real watchdog thread with its
default check interval, and tight settings (factor 10, minimum 0.5 s: the
threshold is 0.5 s against ~10 ms steps, far tighter than the defaults' 120 s,
so that any false alarm shows up in seconds instead of hours). The loop never
hangs, so every ``hang`` event recorded is a false positive. Steps are a fake
workload (a sleep of the step time, so that many runs fit on a small machine):

* ``jitter``: 3,000 steps of 10 ms +-50 % (uniform);
* ``contention``: the same with two busy processes spinning beside it;
* ``long phases``: the same, and every 100 steps a checkpoint save or an
  evaluation (alternately) of 1.5 s (3x the threshold), followed by 0.3 s
  (60 % of the threshold) before the next step;
* ``recompiles``: the same, and every 150 steps a compile of 1.5 s recorded as
  a program-startup span, followed by 0.3 s before the next step.

Jitter comes from ``random.Random(seed)`` per scenario, so a run is
reproducible up to the machine's scheduling. ``--baseline REF`` runs the
same scenarios on the tree of git commit REF (``git archive``, put first on
``PYTHONPATH``) in the same run.

    python benchmarks/bench_watchdog.py [--steps 3000] [--baseline fb5520a]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Dict, List, Optional

from _machine import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_LOOP = r"""
import json, os, random, sys, tempfile, time
import goodput_core
assert os.path.dirname(os.path.dirname(goodput_core.__file__)) == os.environ["PYTHONPATH"]
from goodput_core import Calculator, Recorder
from goodput_core.record.watchdog import HangSettings

scenario, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "w.sqlite").lstrip("/")
rec = Recorder("w", store, flush_interval_s=0.1,
               hang_detection=HangSettings(factor=10.0, min_seconds=0.5))
rng = random.Random(seed)
STEP, PHASE, GAP = 0.010, 1.5, 0.3
phases = 0
rec.record_job_start_time()
t0 = time.perf_counter()
for k in range(steps):
    rec.record_step_start_time(k)
    time.sleep(STEP * rng.uniform(0.5, 1.5))
    if scenario == "long phases" and k % 100 == 99:
        if (k // 100) % 2:
            rec.record_checkpoint_save_start_time(k)
            time.sleep(PHASE)
            rec.record_checkpoint_save_end_time(k)
        else:
            rec.record_custom_badput_event_start_time(None, "eval")
            time.sleep(PHASE)
            rec.record_custom_badput_event_end_time(None, "eval")
        time.sleep(GAP)
        phases += 1
    elif scenario == "recompiles" and k % 150 == 149:
        rec.record_program_startup_start_time()
        time.sleep(PHASE)
        rec.record_program_startup_end_time()
        time.sleep(GAP)
        phases += 1
rec.record_step_end_time(steps - 1)
rec.record_job_end_time()
wall = time.perf_counter() - t0
dog = rec._writer.watchdog
threshold = dog.threshold() if dog is not None else None
rec.close()
calc = Calculator("w", store)
calc.refresh()
print(json.dumps({"hangs": len(calc.hangs()), "steps": steps, "phases": phases,
                  "wall_s": wall, "threshold_s": threshold}))
"""

SCENARIOS = ("jitter", "contention", "long phases", "recompiles")


def _baseline_tree(ref: str, into: str) -> str:
    """The tree of commit ``ref`` unpacked under ``into``."""
    archive = os.path.join(into, "tree.tar")
    subprocess.run(["git", "-C", ROOT, "archive", "-o", archive, ref], check=True)
    tree = os.path.join(into, "tree")
    with tarfile.open(archive) as tar:
        tar.extractall(tree)
    return tree


def _run(scenario: str, steps: int, seed: int, tree: str) -> Dict[str, float]:
    busy = []
    if scenario == "contention":
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(2)]
    try:
        env = dict(os.environ, PYTHONPATH=tree)
        # cwd elsewhere: ``-c`` puts the working directory first on sys.path
        out = subprocess.run([sys.executable, "-c", _LOOP, scenario, str(steps), str(seed)],
                             env=env, capture_output=True, text=True, check=True, timeout=900,
                             cwd=tempfile.gettempdir())
    finally:
        for p in busy:
            p.kill()
            p.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", default=None, help="a git ref to compare with")
    args = parser.parse_args(argv)
    print(machine())
    print("load average at start:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"now": ROOT}
        if args.baseline:
            trees = {args.baseline: _baseline_tree(args.baseline, tmp), "now": ROOT}
        for i, scenario in enumerate(SCENARIOS):
            for name, tree in trees.items():
                r = _run(scenario, args.steps, args.seed + i, tree)
                print(f"{scenario:12s} {name:8s} false hangs {r['hangs']:3d} over {r['steps']} "
                      f"steps, {r['phases']} phases, {r['wall_s']:.1f} s "
                      f"(threshold {r['threshold_s']:.2f} s)", flush=True)
    print("load average at end:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t:.0f} s")
