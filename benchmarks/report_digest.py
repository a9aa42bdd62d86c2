"""The no-behaviour-change check of a refactoring: a digest of ``goodput report --json``.

Writes bench_calculator's workload (steps with an overlapped load, a custom
event every 100 steps, 100 restarts) with fixed timestamps and a final job end
(so no figure depends on the wall clock) into a fresh embedded store, through
the tree on ``sys.path``, then runs ``goodput report RUN --json`` on it twice
with ``time.time`` fixed and prints the SHA-256 of the output (and its size).
Run it on two trees and compare the lines::

    PYTHONPATH=/path/to/other/tree python benchmarks/report_digest.py --events 1000000
    python benchmarks/report_digest.py --events 1000000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys

sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

from bench_calculator import RUN, stream  # noqa: E402


# ``goodput`` with the wall clock stopped (the report's query_time is "now")
_FIXED_CLOCK = ("import sys, time; time.time = lambda: 1800000000.0; "
                "from goodput_core.cli import main; sys.exit(main(sys.argv[1:]))")


def write(path: str, n_events: int) -> None:
    from goodput_core.events import EventRecord, Kind
    from goodput_core.stores.sqlite import SqliteStore

    store = SqliteStore(path)
    batch, last = [], 0.0
    for event in stream(n_events):
        batch.append(event)
        last = max(last, event[2])
        if len(batch) == 10_000:
            store.append(batch)
            batch = []
    batch.append(EventRecord(RUN, int(Kind.JOB_END), last + 1.0))
    store.append(batch)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dir", default="/tmp/goodput-report-digest",
                        help="a folder for the store, emptied first and removed after (the "
                             "report names the store, so both trees must use the same path)")
    parser.add_argument("--out", default=None, help="also write the report here")
    args = parser.parse_args()
    import goodput_core

    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    path = os.path.join(args.dir, "goodput.db")
    try:
        write(path, args.events)
        digests = set()
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", _FIXED_CLOCK, "report", RUN,
                                  "--store", path, "--json"], capture_output=True, check=True,
                                 env=dict(os.environ, TZ="UTC")).stdout
            digests.add((hashlib.sha256(out).hexdigest(), len(out)))
        if args.out:
            with open(args.out, "wb") as f:
                f.write(out)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(f"{os.path.dirname(goodput_core.__file__)} events={args.events} "
          f"report --json: {sorted(digests)}")


if __name__ == "__main__":
    main()
