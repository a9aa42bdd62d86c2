"""``goodput import-scheduler slurm JOBID --run RUN`` / ``kubernetes NAME --run RUN``:
adds a job's scheduling times (submissions, requeues, grants) to a run, from
``sacct --json --duplicates -j JOBID`` (run here, or ``--input FILE``) or from
``kubectl get events -o json`` output (``--input FILE``, ``-`` for stdin).
Parsing: :mod:`goodput_core.record.schedulers`. Importing twice stores the
same times again, which the engine counts once (duplicates are dropped)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from goodput_core.cli import CliError, CliIOError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.record.recorder import Recorder
from goodput_core.record.schedulers import (
    SchedulerFormatError, parse_k8s_events, parse_sacct_json, record_schedule)
from goodput_core.stores import open_store

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    parser.add_argument("scheduler", choices=("slurm", "kubernetes"))
    parser.add_argument("job", metavar="JOB", help="the Slurm job id, or the Job/JobSet name")
    parser.add_argument("--run", required=True, help="the run (job name) to add the times to")
    add_store_argument(parser)
    parser.add_argument("--input", metavar="FILE", help="read the scheduler's JSON from FILE "
                        "('-': stdin) instead of running sacct")


def _read(args) -> str:
    if args.input == "-":
        return sys.stdin.read()
    if args.input:
        try:
            with open(args.input, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            raise CliIOError(f"cannot read {args.input}: {exc.strerror or exc}") from None
    if args.scheduler == "kubernetes":
        raise CliError("kubernetes: give the events with --input FILE "
                       "(kubectl get events -o json > FILE)")
    if shutil.which("sacct") is None:
        raise CliError("sacct is not on PATH: run this on a Slurm login node, or give "
                       "--input FILE (sacct --json --duplicates -j JOBID > FILE)")
    p = subprocess.run(["sacct", "--json", "--duplicates", "-j", str(args.job)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise CliError(f"sacct failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return p.stdout


def run(args) -> int:
    text = _read(args)
    try:
        times = (parse_sacct_json(text, args.job) if args.scheduler == "slurm"
                 else parse_k8s_events(text, args.job))
    except SchedulerFormatError as exc:
        raise CliError(str(exc)) from None
    store = open_store(args.store)
    rec = Recorder(args.run, store, strict=True)
    try:
        n = record_schedule(rec, times)
        if not rec.flush(60):
            raise CliIOError(f"could not store the scheduling times in {store.url}")
    finally:
        rec.close(10)
        store.close()
    subs = sum(1 for k, _ in times if k == "submitted")
    print(f"added {n} scheduling times to {args.run!r} ({subs} submissions, "
          f"{n - subs} grants) in {store.url}", file=sys.stderr)
    return 0
