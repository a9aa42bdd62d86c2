"""``goodput incidents RUN [--store URL] [--json]``: every disruption of a run
with its cause, who saw it, time to detect, to restart and to the first step,
the progress lost, and the run's MTBF, MTTR and badput by cause and by host
(:mod:`goodput_core.queries.incidents`)."""

from __future__ import annotations

import json
import time

from goodput_core.cli.commands.common import add_store_argument
from goodput_core.cli.commands.report import open_run
from goodput_core.cli.commands.report_lifecycle import incidents_table
from goodput_core.queries.incidents import incidents
from goodput_core.text import printable

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    parser.add_argument("run", help="run (job) name")
    add_store_argument(parser)
    parser.add_argument("--json", action="store_true", help="JSON for scripts")


def run(args) -> int:
    calc, store = open_run(args.run, args.store)
    try:
        summary = incidents(calc, time.time()).to_json()
    finally:
        store.close()
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    elif not summary["incidents"]:
        print(printable(f"{args.run}: no incidents (no disruption, and the run did not stop)"))
    else:
        print("\n".join(printable(line) for line in incidents_table(summary)))
    return 0
