"""What the in-process monitor costs a training loop, and what a monitor cycle costs.

Part 1, the training loop (each trial a fresh interpreter): a pure-Python
loop of ``--steps`` steps of ~1 ms of CPU work each, ``with rec.step(k)``
into the default store (``GOODPUT_STORE``: a copy of a prepared store), with
the README's monitor on or off::

    Monitor(run, None, [TensorBoardExporter(dir), PrometheusExporter(0)],
            interval_s=1, rolling_windows=(3600,), recorder=rec)

(``interval_s=1``: the interval of the issue that reported the slowdown; a
shorter one only makes the monitor process busier) and ``/metrics`` scraped
every 5 s by this script from outside. The run has a history of ``--history``
events (0: a fresh run; else a long run resumed: bench_calculator's workload
of 100 restarts, the new attempt continuing its steps). On and off are
interleaved, ``--repeats`` times each; per trial: the loop's wall time, the
99th percentile step and the worst step. Reported: medians, the loop time
ratio on/off and worst stall minus the off-trials' worst (the noise).
``--mode thread`` runs the monitor on a thread of the training process
instead (``process=False``), the way it ran before. Each trial also reports
what other jobs on the machine disturb less than wall times: the training
thread's CPU time and its run-queue wait (``/proc/thread-self/schedstat``),
the monitor process's CPU seconds and memory, the WAL's size. ``--priority
idle nice`` runs the monitor process at each (``GOODPUT_MONITOR_PRIORITY``),
``--cpu N`` pins a trial to one CPU, ``--baseline DIR`` interleaves trials of
another checkout's monitor, ``--keep DIR`` reuses generated histories.

Part 2, a monitor cycle's CPU time (``time.process_time`` of the whole
process around ``run_once``, the exporters' threads included): the same
monitor in-process over the same history, ``--cycles`` cycles each after
1,000 new steps; the first cycle (reading the history once) is reported
apart, the median of the others is the steady cost.

    python benchmarks/bench_monitor.py [--history 0 1000000 2000000] [--steps 20000]
                                       [--repeats 3] [--cycles 10] [--mode process]
                                       [--priority idle] [--cpu N] [--baseline DIR]
                                       [--keep DIR] [--trials] [--no-loop | --no-cycles]

Part 2 also reports the memory the monitor holds per recorded step (P7: RSS
after the cycles less RSS before its first read, and the timeline's arrays).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Optional

from _machine import machine, median

PRIORITY_ENV = "GOODPUT_MONITOR_PRIORITY"  # goodput_core.monitor.priority.ENV
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BATCH = 10_000

TRAINER = r"""
import json, os, sys, time
from goodput_core import Recorder
RUN, steps, first, on, tb, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "on", sys.argv[5], sys.argv[6]
pc = time.perf_counter

def work(n):  # ~1 ms of pure-Python CPU work (calibrated below)
    s = 0
    for i in range(n):
        s += i * i
    return s

def timed(n):
    t0 = pc(); work(n); return pc() - t0

n = int(20_000 * 0.001 / min(timed(20_000) for _ in range(20)))  # the fastest: no preemption
rec = Recorder(RUN)
rec.record_job_start_time()
# On and off alike: the store's opening on the writer thread (imports, schema) is
# neither the monitor's nor the loop's (as bench_p9).
rec.flush(30)
monitor = None
if on:
    from goodput_core.monitor import Monitor
    from goodput_core.exporters.tensorboard import TensorBoardExporter
    from goodput_core.exporters.prometheus import PrometheusExporter
    prom = PrometheusExporter(0)
    t0 = pc()
    monitor = Monitor(RUN, None, [TensorBoardExporter(tb), prom], interval_s=1,
                      rolling_windows=(3600,), recorder=rec, process=(mode == "process"))
    monitor.start()
    start_ms = (pc() - t0) * 1e3
    print(json.dumps({"url": prom.url}), flush=True)
def schedstat():  # this thread: (ns on a CPU, ns waiting runnable for one)
    with open("/proc/thread-self/schedstat") as f:
        return [int(x) for x in f.read().split()[:2]]

def child_mem(pid):  # the monitor process's resident and peak resident MiB
    try:
        with open(f"/proc/{pid}/status") as f:
            kb = {l.split(":")[0]: int(l.split()[1]) for l in f if l.startswith(("VmRSS", "VmHWM"))}
        return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024
    except (OSError, TypeError, KeyError):
        return None, None

def child_cpu(pid):  # the monitor process's CPU seconds (all its threads)
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError):
        return None

durations = []
wal = os.environ["GOODPUT_STORE"][len("sqlite:///"):] + "-wal"
s0, c0, p0 = schedstat(), time.thread_time(), time.process_time()
t_loop = pc()
for k in range(first, first + steps):
    t0 = pc()
    with rec.step(k):
        work(n)
    durations.append(pc() - t0)
loop = pc() - t_loop
s1, c1, p1 = schedstat(), time.thread_time(), time.process_time()
probe = {"thread_cpu": c1 - c0, "other_threads_cpu": (p1 - p0) - (c1 - c0),
         "runq_wait": (s1[1] - s0[1]) / 1e9,
         "wal_mb": os.path.getsize(wal) / 2**20 if os.path.exists(wal) else 0.0,
         "child_cpu": child_cpu(monitor.process_id) if monitor is not None else None}
if monitor is not None:
    probe["child_rss_mb"], probe["child_peak_mb"] = child_mem(monitor.process_id)
rec.record_job_end_time()
ok = monitor.stop(30) if monitor is not None else None
rec.close(30)
durations.sort()
print(json.dumps({"loop": loop, "p99": durations[int(0.99 * len(durations))],
                  "worst": durations[-1], "median": durations[len(durations) // 2],
                  "stop_ok": ok, "start_ms": start_ms if on else None, **probe}), flush=True)
"""


def build_history(path: str, n: int) -> int:
    """A store holding ``n`` events of the run (bench_calculator's workload);
    returns the next step number."""
    from bench_calculator import RUN, stream
    from goodput_core.stores.sqlite import SqliteStore

    store = SqliteStore(path)
    last = -1
    if n:
        events = stream(n)
        while True:
            batch = list(itertools.islice(events, _BATCH))
            if not batch:
                break
            last = max([last] + [e.step for e in batch if e.step is not None])
            store.append(batch)
    store.close()
    return last + 1


def _fresh_copy(store: str, copy: str) -> str:
    """A copy of ``store`` at ``copy``, without an earlier copy's log beside it."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(copy + suffix):
            os.remove(copy + suffix)
    shutil.copyfile(store, copy)
    return copy


def _history(path: str, n: int, keep: Optional[str]) -> int:
    """:func:`build_history`, or the kept one (its next step number beside it)."""
    marker = path + ".next"
    if keep and os.path.exists(marker):
        with open(marker) as f:
            return int(f.read())
    first = build_history(path, n)
    if keep:
        with open(marker, "w") as f:
            f.write(str(first))
    return first


def _scraper(url: str, stop: threading.Event, period: float = 5.0) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while not stop.wait(period):
        try:
            with opener.open(url, timeout=10) as resp:
                resp.read()
        except OSError:
            pass


def trial(store: str, work_dir: str, steps: int, first: int, on: bool, mode: str,
          priority: str, cpu: Optional[int] = None, root: str = ROOT) -> dict:
    """One training run in a fresh interpreter, on a fresh copy of the store
    (on CPU ``cpu`` only, with its monitor process, when given)."""
    from bench_calculator import RUN

    copy = _fresh_copy(store, os.path.join(work_dir, "trial.sqlite"))
    tb = tempfile.mkdtemp(dir=work_dir)
    env = dict(os.environ, GOODPUT_STORE=f"sqlite:///{copy}", PYTHONPATH=root,
               **{PRIORITY_ENV: priority})
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, RUN, str(steps), str(first),
                             "on" if on else "off", tb, mode],
                            stdout=subprocess.PIPE, text=True, env=env, preexec_fn=pin)
    stop = threading.Event()
    scraper = None
    result = None
    for line in proc.stdout:
        msg = json.loads(line)
        if "url" in msg:
            scraper = threading.Thread(target=_scraper, args=(msg["url"], stop), daemon=True)
            scraper.start()
        else:
            result = msg
    proc.wait()
    stop.set()
    shutil.rmtree(tb, ignore_errors=True)
    if result is None:
        raise RuntimeError(f"trial failed (exit {proc.returncode})")
    return result


def loop_part(store: str, work_dir: str, first: int, args) -> None:
    """Off and on interleaved (on once per ``--priority``), ``--repeats`` times."""
    runs = {"off": [], **{p: [] for p in args.priority}}
    if args.baseline:
        runs["baseline"] = []
    for _ in range(args.repeats):
        for label in runs:  # interleaved: all see the same machine state
            root = args.baseline if label == "baseline" else ROOT
            runs[label].append(trial(store, work_dir, args.steps, first, label != "off",
                                     args.mode, label, args.cpu, root))
    off = runs.pop("off")
    for label, on in runs.items():
        if label == "baseline":
            print(f"  -- the monitor of {args.baseline}")
        elif len(runs) > 1:
            print(f"  -- the monitor process at priority {label!r} ({PRIORITY_ENV})")
        _report_pairs(on, off, args.trials)


def _report_pairs(on: list, off: list, trials: bool) -> None:
    ratio = median([a["loop"] / b["loop"] for a, b in zip(on, off)])
    noise = median([r["worst"] for r in off])
    print(f"  loop time on/off: {ratio:.3f}  (median of pairs; on {median([r['loop'] for r in on]):.2f} s,"
          f" off {median([r['loop'] for r in off]):.2f} s)   [target <= 1.02]")
    print(f"  step median on/off: {median([r['median'] for r in on]) * 1e3:.2f} / "
          f"{median([r['median'] for r in off]) * 1e3:.2f} ms")
    print(f"  step p99 on/off: {median([r['p99'] for r in on]) * 1e3:.2f} / "
          f"{median([r['p99'] for r in off]) * 1e3:.2f} ms")
    print(f"  worst step on/off: {median([r['worst'] for r in on]) * 1e3:.1f} / "
          f"{noise * 1e3:.1f} ms; above the off noise: "
          f"{(median([r['worst'] for r in on]) - noise) * 1e3:.1f} ms   [target <= 10 ms]")
    # figures the machine's other jobs disturb less than wall times: where the loop's time went
    for key, label in (("thread_cpu", "training thread CPU"),
                       ("runq_wait", "training thread waiting for a CPU (run queue)"),
                       ("other_threads_cpu", "other threads of the training process, CPU")):
        print(f"  {label} on/off: {median([r[key] for r in on]):.3f} / "
              f"{median([r[key] for r in off]):.3f} s")
    print(f"  run-queue wait added (median of pairs): "
          f"{median([a['runq_wait'] - b['runq_wait'] for a, b in zip(on, off)]):.3f} s;"
          f" monitor process CPU during the loop: {median([r['child_cpu'] or 0 for r in on]):.2f} s;"
          f" WAL at the loop's end on/off: {median([r['wal_mb'] for r in on]):.1f} / "
          f"{median([r['wal_mb'] for r in off]):.1f} MiB")
    print(f"  monitor process memory at the loop's end: {median([r['child_rss_mb'] or 0 for r in on]):.0f}"
          f" MiB resident, {median([r['child_peak_mb'] or 0 for r in on]):.0f} MiB peak")
    if trials:
        for label, rs in (("off", off), ("on", on)):
            for r in rs:
                print(f"    {label}: " + " ".join(f"{k}={v:.3f}" for k, v in r.items()
                                                  if isinstance(v, float)))
    print(f"  Monitor(...) + start() on the caller's thread: "
          f"{median([r['start_ms'] for r in on]):.2f} ms; stop ok: {[r['stop_ok'] for r in on]}")


def cycle_part(store: str, work_dir: str, first: int, cycles: int) -> float:
    """Median CPU seconds of a steady monitor cycle (1,000 new steps each)."""
    from bench_calculator import RUN
    from goodput_core.exporters.prometheus import PrometheusExporter
    from goodput_core.exporters.tensorboard import TensorBoardExporter
    from goodput_core.monitor import Monitor
    from goodput_core.record.recorder import Recorder

    copy = _fresh_copy(store, os.path.join(work_dir, "cycles.sqlite"))
    url = f"sqlite:///{copy}"
    now = [time.time()]
    rec = Recorder(RUN, url, clock=lambda: now[0])
    rec.record_job_start_time()
    tb = tempfile.mkdtemp(dir=work_dir)
    m = Monitor(RUN, url, [TensorBoardExporter(tb), PrometheusExporter(0)], interval_s=1,
                rolling_windows=(3600,), recorder=rec, process=False)
    rss0 = _rss_mib()  # before the monitor reads anything
    step, costs, first_cost = first, [], None
    for i in range(cycles + 1):
        for _ in range(1000):
            now[0] += 0.001
            rec.record_step_start_time(step)
            step += 1
        assert rec.flush(60)
        c0, w0 = time.process_time(), time.perf_counter()
        m.run_once()
        m.wait_idle(60)
        cost = (time.process_time() - c0, time.perf_counter() - w0)
        if i == 0:
            first_cost = cost
        else:
            costs.append(cost)
    rss1, tl = _rss_mib(), m.calculator.timeline
    m.stop(30, skip_final_flush=True)
    rec.close(30)
    cpu = median([c for c, _ in costs])
    print(f"  monitor cycle: first {first_cost[0] * 1e3:.0f} ms CPU ({first_cost[1] * 1e3:.0f} ms"
          f" wall); then median {cpu * 1e3:.1f} ms CPU ({median([w for _, w in costs]) * 1e3:.1f}"
          f" ms wall) per cycle of 1,000 new steps")
    steps = len(tl.tables["step_start"])
    print(f"  memory held (P7) after the cycles: {(rss1 - rss0) * 2 ** 20 / steps:.0f} bytes per"
          f" recorded step (RSS {rss0:.0f} -> {rss1:.0f} MiB, {steps:,} steps), of which the"
          f" timeline's arrays {tl.nbytes / steps:.0f}   [target <= 100]")
    return cpu


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, nargs="+", default=[0, 1_000_000, 2_000_000])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--mode", choices=("process", "thread"), default="process")
    ap.add_argument("--priority", nargs="+", default=["idle"], choices=("idle", "nice"),
                    help="the monitor process's priority (several: each is a trial of its own)")
    ap.add_argument("--cpu", type=int, default=None,
                    help="pin the training process and its monitor process to this one CPU "
                         "(what the monitor takes then comes out of the loop's time)")
    ap.add_argument("--keep", metavar="DIR", help="keep the generated histories in DIR and "
                    "reuse them (30,300,000 events: 10 M steps, 1.4 GB, ~2 min to build)")
    ap.add_argument("--baseline", metavar="DIR", help="also run the monitor of another "
                    "checkout (e.g. `git worktree add DIR main`), interleaved with these trials")
    ap.add_argument("--trials", action="store_true", help="print every trial's figures")
    ap.add_argument("--no-loop", action="store_true", help="only the cycle CPU part")
    ap.add_argument("--no-cycles", action="store_true", help="only the training loop part")
    args = ap.parse_args()
    print(machine())
    print(f"load average at start: {os.getloadavg()}")
    work_dir = tempfile.mkdtemp(prefix="bench-monitor-")
    cpu = {}
    try:
        for n in args.history:
            store = os.path.join(args.keep or work_dir, f"history-{n}.sqlite")
            first = _history(store, n, args.keep)
            print(f"[history {n:,} events; monitor in a {args.mode}]")
            if not args.no_loop:
                loop_part(store, work_dir, first, args)
            if not args.no_cycles:
                cpu[n] = cycle_part(store, work_dir, first, args.cycles)
            if not args.keep:
                os.remove(store)
        if 0 in cpu:
            for n, c in cpu.items():
                if n:
                    print(f"cycle CPU at {n:,} events of history / fresh: {c / cpu[0]:.2f}"
                          f"   [target <= 2]")
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
