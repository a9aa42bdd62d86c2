"""A run recorded by every host of a job (quality bar P13): the report and a monitor's refresh.

Each host is a real process writing through the public API,
``Recorder(run, store, process_index=i)``: a job start, then per step a step
start and an input stall (0.1 s into the step; 0.05 s, the last host's 3×
longer: the straggler every step waits for), steps 1 s apart on the recorder's
clock (a simulated clock from a fixed epoch: the run is the same every time it
is built, and the lead's heartbeats follow the steps). Hosts are started
``--batch`` at a time (256 processes at once would not fit this machine) and
the store is cached in ``--cache`` (built once per shape and store kind).

``report`` times ``goodput report RUN --store URL --json`` as a process (wall time
and peak RSS of the command alone, ``_machine.run_measured``), over the run and
over a store holding only process 0's stream of the same shape (what P13 compares
with), medians of ``--repeats``.

``refresh`` keeps a ``Calculator(run, store)`` refreshed (cold once), then
``--repeats`` times appends one new step of every host (a step start and a stall,
each host's own writer metadata and next sequence numbers, through
``store.append``) and times ``refresh()`` + ``cumulative()`` (wall and CPU
time), then ``hosts()``: medians. ``--store postgres`` does the same on a throwaway PostgreSQL server
(``--via-pgbouncer``: the hosts write through pgbouncer).

    python benchmarks/bench_many_hosts.py report --hosts 64 --steps 20000
    python benchmarks/bench_many_hosts.py refresh --hosts 256 --steps 50000
    python benchmarks/bench_many_hosts.py report --hosts 64 --steps 20000 --store postgres
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

from _machine import machine, run_measured  # noqa: E402

RUN = "hosts"
T0 = 1_700_000_000.0
STALL, SLOW = 0.05, 3.0

_HOST = r"""
import json, sys
sys.path.insert(0, {root!r})
from goodput_core import Recorder
url, index, steps, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
sim = [{t0!r}]
rec = Recorder({run!r}, url, process_index=index, clock=lambda: sim[0], hang_detection=False,
               queue_size=3 * steps + 16)
stall = {stall!r} * ({slow!r} if last else 1.0)
rec.record_job_start_time(sim[0])
for k in range(steps):
    t = {t0!r} + 1.0 + k
    sim[0] = t
    rec.record_step_start_time(k, t)
    rec.record_input_stall_start_time(t + 0.1)
    rec.record_input_stall_end_time(t + 0.1 + stall)
assert rec.flush(3600), rec.stats()
print(json.dumps({{"index": index, "host": rec._host, "pid": rec._pid, "attempt": rec.attempt,
                  "seq": 3 * steps + 1, "stall": stall}}))
"""


def _host_script() -> str:
    return _HOST.format(root=ROOT, t0=T0, run=RUN, stall=STALL, slow=SLOW)


def build(url: str, hosts: int, steps: int, batch: int, only: int = -1) -> list:
    """Writes the run (``only`` >= 0: that host alone); returns each host's writer metadata."""
    script, out = _host_script(), []
    indices = [only] if only >= 0 else list(range(hosts))
    t = time.perf_counter()
    for lo in range(0, len(indices), batch):
        procs = [subprocess.Popen([sys.executable, "-c", script, url, str(i), str(steps),
                                   "1" if i == hosts - 1 else "0"], stdout=subprocess.PIPE,
                                  text=True) for i in indices[lo:lo + batch]]
        for p in procs:
            text, _ = p.communicate()
            if p.returncode:
                raise SystemExit(f"host process failed ({p.returncode})")
            out.append(json.loads(text))
        done = min(lo + batch, len(indices))
        print(f"  built {done}/{len(indices)} hosts ({time.perf_counter() - t:.0f} s)",
              file=sys.stderr)
    return out


class Stores:
    """Where the cached runs live (``--cache``), one file or database per shape."""

    def __init__(self, args):
        self.args = args
        self.server = None
        os.makedirs(args.cache, exist_ok=True)

    def _meta_path(self, name: str) -> str:
        return os.path.join(self.args.cache, name + ".json")

    def url(self, hosts: int, steps: int, only0: bool) -> str:
        name = f"{'lead' if only0 else 'run'}-{hosts}x{steps}"
        if self.args.store == "sqlite":
            return "sqlite:///" + os.path.join(self.args.cache, name + ".sqlite")
        return self._pg_url(name)

    def _pg_url(self, name: str) -> str:
        if self.server is None:
            self.server = _cached_postgres(os.path.join(self.args.cache, "pg"))
        db = name.replace("-", "_")
        if not os.path.exists(self._meta_path("postgres-" + name)):
            try:
                self.server.create_database(db)
            except Exception:  # (built before, its metadata lost: start over)
                pass
        url = self.server.url(db)
        if self.args.via_pgbouncer:
            url = self._bouncer().url(db)
        return url

    def _bouncer(self):
        if getattr(self, "bouncer", None) is None:
            from tests.support.pgbouncer_server import Pgbouncer

            self.bouncer = Pgbouncer(self.server, pool_size=8)
            self.bouncer.start()
        return self.bouncer

    def get(self, hosts: int, steps: int, only0: bool = False):
        """``(url, writers)`` of a cached run, built first when missing."""
        name = f"{self.args.store}-{'lead' if only0 else 'run'}-{hosts}x{steps}"
        url = self.url(hosts, steps, only0)
        meta = self._meta_path(name)
        if not os.path.exists(meta):
            print(f"building {name} ...", file=sys.stderr)
            writers = build(url, hosts, steps, self.args.batch, 0 if only0 else -1)
            with open(meta, "w") as f:
                json.dump(writers, f)
        with open(meta) as f:
            return url, json.load(f)

    def close(self):
        if getattr(self, "bouncer", None) is not None:
            self.bouncer.stop()
        if self.server is not None:
            self.server.stop()


def _env(code: str) -> dict:
    """The environment of a command measuring the code in ``code`` (a checkout's root)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = code + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _cached_postgres(root: str):
    """A PostgreSQL server whose cluster lives in ``root`` (made the first
    time, kept for the next runs: the runs built into it are cached too),
    started on a free port."""
    import shutil
    import socket

    from tests.support.postgres_server import PostgresServer

    if not os.path.exists(os.path.join(root, "data")):
        made = PostgresServer()
        shutil.move(made.root, root)
    srv = PostgresServer.__new__(PostgresServer)
    srv.bindir = PostgresServer.__init__.__globals__["find_bindir"]()
    srv.root, srv.data = root, os.path.join(root, "data")
    srv._as_postgres = os.geteuid() == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        srv.port = sock.getsockname()[1]
    with open(os.path.join(srv.data, "postgresql.conf"), "a") as f:  # (the last line wins)
        f.write(f"\nport = {srv.port}\nunix_socket_directories = '{root}'\n"
                "shared_buffers = 256MB\n")
    srv.start()
    return srv


def _report(url: str, repeats: int, code: str = ROOT):
    walls, rss, cpus = [], [], []
    for _ in range(repeats):
        wall, code_, cpu, mib, err = run_measured(
            ["-m", "goodput_core.cli", "report", RUN, "--store", url, "--json"],
            stdout=subprocess.DEVNULL, cwd=code, env=_env(code))
        if code_:
            raise SystemExit(f"goodput report failed: {err[-2000:]}")
        walls.append(wall)
        rss.append(mib)
        cpus.append(cpu)
    return statistics.median(walls), statistics.median(rss), statistics.median(cpus)


def cmd_report(args, stores: Stores) -> None:
    url, _ = stores.get(args.hosts, args.steps)
    lead_url, _ = stores.get(args.hosts, args.steps, only0=True)
    events = args.hosts * (3 * args.steps + 1)
    print(f"{args.store}, {args.hosts} hosts x {args.steps} steps ({events:,} host events), "
          f"medians of {args.repeats}:")
    for label, code in [("this code", ROOT)] + ([("baseline", args.baseline)]
                                                if args.baseline else []):
        lead = _report(lead_url, args.repeats, code)
        every = _report(url, args.repeats, code)
        print(f"  {label}: process 0's stream alone: report {lead[0]:.2f} s (CPU {lead[2]:.2f} s), "
              f"{lead[1]:.0f} MiB")
        print(f"  {label}: every host:               report {every[0]:.2f} s (CPU {every[2]:.2f} s), "
              f"{every[1]:.0f} MiB (x{every[0] / lead[0]:.2f} time, x{every[2] / lead[2]:.2f} CPU, "
              f"x{every[1] / lead[1]:.2f} memory)")


def _append_step(store, writers, step: int, now_seq: dict) -> None:
    from goodput_core.events import EventRecord, Kind

    batch = []
    t = T0 + 1.0 + step
    for w in writers:
        key = (w["host"], w["pid"])
        seq = now_seq.get(key, w["seq"])
        for kind, when in ((Kind.STEP_START, t), (Kind.INPUT_STALL_START, t + 0.1),
                           (Kind.INPUT_STALL_END, t + 0.1 + w["stall"])):
            seq += 1
            batch.append(EventRecord(RUN, int(kind), when, step if kind == Kind.STEP_START else None,
                                     None, w["index"], w["host"], w["pid"], w["attempt"], seq, when))
        now_seq[key] = seq
    store.append(batch)


def cmd_refresh(args, stores: Stores) -> None:
    from goodput_core.queries.calculator import Calculator
    from goodput_core.stores import open_store

    url, writers = stores.get(args.hosts, args.steps)
    # appended steps change the cached run: work on a copy of it
    if args.store == "sqlite":
        import shutil

        src = url[len("sqlite:///"):]
        dst = src + ".refresh"
        shutil.copyfile(src, dst)
        url = "sqlite:///" + dst
    else:
        import psycopg

        db = f"run_{args.hosts}x{args.steps}"
        with psycopg.connect(stores.server.url("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db}_refresh")
            conn.execute(f"CREATE DATABASE {db}_refresh TEMPLATE {db}")
        url = stores.server.url(db + "_refresh")
        if args.via_pgbouncer:
            url = stores._bouncer().url(db + "_refresh")
    store = open_store(url)
    t = time.perf_counter()
    calc = Calculator(RUN, url)
    calc.refresh()
    r = calc.cumulative()
    cold = time.perf_counter() - t
    t = time.perf_counter()
    calc.hosts()
    cold_hosts = time.perf_counter() - t
    print(f"{args.store}, {args.hosts} hosts x {args.steps} steps: cold refresh + cumulative "
          f"{cold:.2f} s, hosts() {cold_hosts:.2f} s (goodput {r.goodput:.4f})")
    seqs: dict = {}
    refresh, hosts, cpu = [], [], []
    for i in range(args.repeats):
        _append_step(store, writers, args.steps + i, seqs)
        t, c = time.perf_counter(), time.process_time()
        n = calc.refresh()
        calc.cumulative()
        refresh.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        t = time.perf_counter()
        calc.hosts()
        hosts.append(time.perf_counter() - t)
        assert n == 3 * len(writers), n
    # (the CPU time of the same cycle: what a loaded machine inflates less)
    print(f"  one new step from every host ({3 * len(writers)} events): refresh + cumulative "
          f"{1e3 * statistics.median(refresh):.1f} ms (CPU {1e3 * statistics.median(cpu):.1f} ms), "
          f"hosts() {1e3 * statistics.median(hosts):.1f} ms (medians of {args.repeats})")
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("build", "report", "refresh"))
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8, help="host processes at once when building")
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--via-pgbouncer", action="store_true",
                    help="postgres: the hosts write (and the reads go) through pgbouncer")
    ap.add_argument("--baseline", metavar="DIR",
                    help="report: also measure the code in DIR (a checkout's root), same run")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                    "goodput-bench-many-hosts"))
    args = ap.parse_args()
    print("machine:", machine(), "| load average", os.getloadavg())
    stores = Stores(args)
    try:
        if args.what == "build":
            stores.get(args.hosts, args.steps)
            stores.get(args.hosts, args.steps, only0=True)
        elif args.what == "report":
            cmd_report(args, stores)
        else:
            cmd_refresh(args, stores)
    finally:
        stores.close()


if __name__ == "__main__":
    main()
