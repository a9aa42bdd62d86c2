"""``goodput demo``: the README's main job.

Records a small synthetic run (see :mod:`goodput_core.synthetic`) to the
embedded store and shows what was recorded, then a goodput report when the
calculator is available.
"""

from __future__ import annotations

import collections
import os
import time

from goodput_core.commands.common import add_store_argument
from goodput_core.events import Kind
from goodput_core.recorder import Recorder
from goodput_core.synthetic import SyntheticJob, record_synthetic_job


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--run", default=None, help="run name (default: demo-<time>)")


def run(args) -> int:
    run_name = args.run or time.strftime("demo-%Y%m%d-%H%M%S")
    rec = Recorder(run_name, args.store)
    job = SyntheticJob()
    played = record_synthetic_job(rec, time.time() - 120.0, job)
    if not rec.flush(30):
        print("goodput demo: error: could not write to the store", flush=True)
        return 1
    events, _ = rec._store.read(run_name)
    counts = collections.Counter(Kind(e.kind).name.lower() for e in events)
    print(f"Recorded run {run_name!r}: {len(events)} events in {rec._store.url}")
    for name, n in sorted(counts.items()):
        print(f"  {name:<26} {n:>5}")
    print(f"Played: a crash at step {job.crash_at_step}, restart from step "
          f"{played['restart_step']}, {played['end'] - played['start']:.1f} s of job time.")
    print(f"See the events: goodput events {run_name}"
          + (f" --store {args.store}" if args.store else ""))
    rec.close()
    return 0
