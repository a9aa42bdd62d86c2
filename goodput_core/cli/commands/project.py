"""``goodput project RUN [--hosts N] [--interval S] [--simulate] [--json]``: the
expected ETTR of the run at another scale or checkpoint interval, from its
measured failure rate, restart overhead, save cost and interval (the model:
:mod:`goodput_core.queries.projection`)."""

from __future__ import annotations

import json
import time

from goodput_core.cli import CliError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.cli.commands.report import open_run
from goodput_core.cli.timespec import format_duration
from goodput_core.queries.projection import project, simulate
from goodput_core.text import printable

__all__ = ["add_arguments", "run"]

_MODEL = ("model: a stretch of Δt seconds of work then a C-second save completes with "
          "probability exp(-λ(Δt + C)), λ = hosts x r; a failure loses the stretch and "
          "costs u0; E[ETTR] = Δt·λ / (exp(λ·u0)·(exp(λ(Δt + C)) - 1)). Meta's first order: "
          "(1 - N·r·(u0 + Δt/2)) / (1 + C/Δt).")


def add_arguments(parser) -> None:
    parser.add_argument("run", help="run (job) name")
    add_store_argument(parser)
    parser.add_argument("--hosts", type=int, metavar="N", help="project to N hosts "
                        "(default: the run's num_processes, else 1)")
    parser.add_argument("--interval", type=float, metavar="S",
                        help="project to a checkpoint every S seconds (default: the measured)")
    parser.add_argument("--simulate", action="store_true",
                        help="also play the same model by Monte-Carlo (a check of the formula)")
    parser.add_argument("--json", action="store_true", help="JSON for scripts")


def run(args) -> int:
    calc, store = open_run(args.run, args.store)
    try:
        try:
            p = project(calc, time.time(), hosts=args.hosts, interval_s=args.interval)
        except ValueError as exc:
            raise CliError(str(exc))
    finally:
        store.close()
    out = p.to_json()
    out["model"] = _MODEL
    if p.available and args.simulate:
        out["simulated_projected"] = simulate(
            p.hosts_projected, p.rate_per_host_hour, p.restart_seconds, p.save_seconds,
            p.interval_seconds, work_s=max(200 * p.interval_seconds, 1e6))
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    if not p.available:
        print(printable(f"{args.run}: no projection: {p.reason}"))
        return 0
    lines = [
        f"Run {args.run}: {p.failures} failures in {p.runtime_hours:.3g} h on "
        f"{p.current_hosts} hosts: r = {p.rate_per_host_hour:.3g} per host-hour"
        + (f"   ({p.reason})" if p.reason else ""),
        f"  restart overhead u0 {format_duration(p.restart_seconds)}, save cost C "
        f"{format_duration(p.save_seconds)}, interval now "
        f"{format_duration(p.current_interval_seconds)}",
        f"  model ETTR now      {100 * p.ettr_now:6.2f} %   (first order "
        f"{100 * p.first_order_now:.2f} %; the model's: failures, restarts and saves only)",
        f"  measured goodput    {100 * p.measured_goodput:6.2f} %   (the run's, every bucket: "
        f"goodput report)",
        f"  model ETTR at {p.hosts_projected} hosts, every "
        f"{format_duration(p.interval_seconds)}: {100 * p.ettr_projected:.2f} %   "
        f"(first order {100 * p.first_order_projected:.2f} %)",
    ]
    if "simulated_projected" in out:
        lines.append(f"  simulated           {100 * out['simulated_projected']:6.2f} %")
    lines.append("  " + _MODEL)
    print("\n".join(printable(line) for line in lines))
    return 0
