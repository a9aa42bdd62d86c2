"""``goodput runs``: list the runs in a store (``--summary``: with each run's state,
goodput, total time, restarts and last activity, served from run summaries;
``--state``: with each run's state, ``running``, ``ended`` or ``stopped at T
(cause)``, read from every run; ``--group G``: one run group, with goodput, total
time, disruptions, last step and state; see ``commands.compare``). ``goodput
runs delete RUN`` and ``goodput runs rename OLD NEW``: see ``commands.runs_manage``."""

from __future__ import annotations

import argparse
import json
import time

from goodput_core.cli.commands.common import add_store_argument
from goodput_core.stores import open_store
from goodput_core.text import printable
from goodput_core.cli.commands.runs_manage import manage
from goodput_core.cli.timespec import format_duration, format_time


def add_arguments(parser) -> None:
    parser.add_argument("action", nargs="?", choices=("delete", "rename"), default=None,
                        help="delete RUN, or rename OLD NEW (embedded store; asks first)")
    parser.add_argument("names", nargs="*", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--yes", action="store_true",
                        help="delete or rename without asking (needed without a terminal)")
    add_store_argument(parser)
    parser.add_argument("--group", default=None, metavar="G",
                        help="only the runs of run group G, with goodput, total time, "
                             "disruptions and last step")
    parser.add_argument("--state", action="store_true",
                        help="each run's state: running, ended or 'stopped at T (cause)' "
                             "(reads every run)")
    parser.add_argument("--summary", action="store_true",
                        help="each run's state, goodput, total time, restarts and last "
                             "activity (kept in a private cache while a run does not change)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object: {store, runs} (with --state: runs are "
                             "{run, state} objects; with --group: see compare.py)")


def run(args) -> int:
    if args.action is not None:
        return manage(args)
    store = open_store(args.store, create=False)
    if args.group is not None:
        # lazy: the calculators' modules: only runs --group compares
        from goodput_core.cli.commands.compare import list_group

        return list_group(store, args.group, as_json=args.json)
    if args.summary:
        return _with_summaries(store, args.json)
    if args.state:
        return _with_states(store, args.json)
    if args.json:
        print(json.dumps({"store": store.url, "runs": store.runs()}))
        return 0
    for name in store.runs():
        print(printable(name))  # a name is user data: no raw terminal escapes
    return 0


def _with_summaries(store, as_json: bool) -> int:
    """Every run with its summary (:mod:`goodput_core.queries.summaries`), newest
    activity first."""
    # lazy: numpy: only runs --summary reads the summaries
    from goodput_core.queries.summaries import run_summaries

    rows = run_summaries(store)
    rows.sort(key=lambda s: -(s.last_activity if s.last_activity is not None else -1e300))
    if as_json:
        print(json.dumps({"store": store.url, "runs": [s.to_json() for s in rows]},
                         allow_nan=False))
        return 0
    width = max([len("run")] + [len(s.run) for s in rows])
    print(f"{'run':<{width}}  {'goodput':>8}  {'total':>10}  {'restarts':>8}  "
          f"{'last activity':<20}  state")
    for s in rows:
        group = f"  [{s.group}]" if s.group else ""
        print(printable(f"{s.run:<{width}}  {s.goodput:7.2f}%  "
                        f"{format_duration(s.total_seconds):>10}  {s.disruptions:>8}  "
                        f"{format_time(s.last_activity) if s.last_activity else '-':<20}  "
                        f"{s.state_text}{group}"))


def _with_states(store, as_json: bool) -> int:
    """Every run with its state at the time of the command (rule 15)."""
    # lazy: the calculators' modules: only runs --state reads every run
    from goodput_core.cli.commands.report import state_line, state_report
    from goodput_core.queries.calculator import Calculator

    now = time.time()
    rows = []
    for name in store.runs():
        calc = Calculator(name, store)
        calc.refresh()
        rows.append({"run": name, "state": state_report(calc.state(now))})
    if as_json:
        print(json.dumps({"store": store.url, "runs": rows}, allow_nan=False))
        return 0
    width = max([len("run")] + [len(r["run"]) for r in rows])
    for r in rows:
        print(printable(f"{r['run']:<{width}}  {state_line(r['state'])}"))
    return 0
