"""The recorder's writer thread: its CPU per event, and how long it holds the GIL.

The training thread records four plain events a step (a load's start and
end, a step's start and end) in bursts of 1,000 steps, then sleeps 50 ms
(``--paced``: one step every ~1 ms, the step a sleep, as P15's loop whose
ops release the GIL: the writer then wakes on its flush interval and finds
~2,000 events); the writer thread drains the journal into the default
embedded SQLite store.
Every microsecond the writer holds the GIL is taken from a training loop
whose ops release and re-take it constantly, so the figures are:

* the CPU of every thread but the recording one, per event (the writer,
  the watchdog: what recording costs besides the calls themselves);
* the recording calls' own CPU per event, on the training thread;
* the writer's drains: events per drain and the longest drain's CPU time;
* a probe thread that sleeps 1 ms in a loop while the training thread
  sleeps between bursts: how late it wakes (p99, max). It needs the GIL to wake, so a long
  stretch the writer holds it shows here (bounded by the interpreter's
  switch interval, ``sys.getswitchinterval()``, unless one C call holds it
  longer).

Each run is a fresh process. ``--base DIR`` runs the same measurement with
another tree's ``goodput_core`` too (``DIR`` on ``PYTHONPATH``, holding
``goodput_core``), alternating, so that both sides share the machine's
minutes::

    git archive <commit> | tar -x -C /tmp/base/src
    mkdir -p /tmp/base/path && ln -s /tmp/base/src/goodput_core /tmp/base/path/
    python benchmarks/bench_writer.py --base /tmp/base/path [--events 400000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r'''
import json, os, statistics, sys, tempfile, threading, time
from goodput_core import Recorder
from goodput_core.record import writer as writer_module

steps, paced = int(sys.argv[1]), sys.argv[2] == "paced"
drains = []  # (events written, thread CPU seconds) per drain that wrote
_drain = writer_module.Writer._drain


def timed_drain(self, *args, **kwargs):
    before, c0 = self.appender.written, time.thread_time()
    try:
        return _drain(self, *args, **kwargs)
    finally:
        if self.appender.written > before:
            drains.append((self.appender.written - before, time.thread_time() - c0))


writer_module.Writer._drain = timed_drain
d = tempfile.mkdtemp()
rec = Recorder("w", store="sqlite:///" + os.path.join(d, "g.db"))
rec.record_job_start_time()
rec.flush(30)
idle = threading.Event()
late = []
stop = False


def probe():
    while not stop:
        if not idle.is_set():
            idle.wait(0.1)
            continue
        t = time.perf_counter()
        time.sleep(0.001)
        if idle.is_set():
            late.append(time.perf_counter() - t - 0.001)


threading.Thread(target=probe, daemon=True).start()
c0, m0 = time.process_time(), time.thread_time()
main_cpu = 0.0
i = 0
while i < steps and not paced:
    a = time.thread_time()
    for _ in range(1000):
        rec.record_data_loading_start_time(); rec.record_data_loading_end_time()
        rec.record_step_start_time(i); rec.record_step_end_time(i)
        i += 1
    main_cpu += time.thread_time() - a
    idle.set()
    time.sleep(0.05)
    idle.clear()
while i < steps:  # paced: a 1 ms step's events, the step a sleep (a loop whose ops release the GIL)
    a = time.thread_time()
    rec.record_data_loading_start_time(); rec.record_data_loading_end_time()
    rec.record_step_start_time(i)
    main_cpu += time.thread_time() - a
    time.sleep(0.0007)
    a = time.thread_time()
    rec.record_step_end_time(i)
    main_cpu += time.thread_time() - a
    i += 1
assert rec.flush(60)
c1, m1 = time.process_time(), time.thread_time()
stop = True
events = 4 * steps
assert rec.stats()["written"] == events + 1, rec.stats()  # every event stored (and the job start)
late.sort()
drains = drains[1:]  # not the job start's
print(json.dumps({
    "others_us": ((c1 - c0) - (m1 - m0)) / events * 1e6,
    "record_us": main_cpu / events * 1e6,
    "events_per_drain": statistics.median(n for n, _ in drains) if drains else None,
    "longest_drain_ms": max(c for _, c in drains) * 1e3 if drains else None,
    "probe_p99_ms": late[int(0.99 * (len(late) - 1))] * 1e3 if late else None,
    "probe_max_ms": late[-1] * 1e3 if late else None,
    "written": rec.stats()["written"], "dropped": rec.stats()["dropped"],
}))
'''


def one(steps: int, path: str = "", paced: bool = False) -> dict:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _CHILD, str(steps),
                          "paced" if paced else "bursts"], env=env, cwd="/",
                         capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--base", default="", help="a PYTHONPATH entry holding another "
                        "tree's goodput_core, measured alternately")
    parser.add_argument("--paced", action="store_true", help="steps of ~1 ms (a sleep, as "
                        "ops that release the GIL) instead of bursts: the writer wakes on its "
                        "interval, as in P15; --events 12000 is a 3 s run")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    from _machine import machine  # noqa: E402

    sides = {"this tree": ""}
    if args.base:
        sides = {"base": os.path.abspath(args.base), "this tree": ""}
    runs = {name: [] for name in sides}
    print(machine())
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for _ in range(args.repeats):
        for name, path in sides.items():
            runs[name].append(one(args.events // 4, path, args.paced))
    print(f"load average after: {os.getloadavg()[0]:.2f}; switch interval "
          f"{sys.getswitchinterval() * 1e3:g} ms; {args.events} events a run "
          f"({'1 ms steps' if args.paced else 'bursts of 1,000 steps'}), medians of "
          f"{args.repeats} runs")
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]
               if all(r[k] is not None for r in rs)}
        nan = float("nan")
        print(f"{name:10s}: writer and other threads {med['others_us']:.2f} us/event "
              f"(runs {min(r['others_us'] for r in rs):.2f}-{max(r['others_us'] for r in rs):.2f}); "
              f"record calls {med['record_us']:.2f} us/event; "
              f"{med.get('events_per_drain', nan):.0f} events a drain, longest drain "
              f"{med.get('longest_drain_ms', nan):.1f} ms CPU; probe late p99 "
              f"{med.get('probe_p99_ms', nan):.2f} ms, max "
              f"{med.get('probe_max_ms', nan):.2f} ms; dropped {med['dropped']:.0f}")
    if args.base:
        ratio = statistics.median(runs["base"][i]["others_us"] / runs["this tree"][i]["others_us"]
                                  for i in range(args.repeats))
        print(f"writer CPU per event, base / this tree: x{ratio:.1f} (median of pairs)")


if __name__ == "__main__":
    main()
