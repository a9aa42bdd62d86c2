"""``goodput events RUN``: the recorded events of a run, one JSON payload per line.

The payloads are in the reference's Cloud Logging format; ``--meta`` adds the
writer metadata (process index, host, pid, attempt, sequence, write time)
under a ``_writer`` key.
"""

from __future__ import annotations

import json
import math
import sys

from goodput_core.cli import CliError
from goodput_core.commands.common import add_store_argument
from goodput_core.events import to_payload
from goodput_core.stores import open_store


def add_arguments(parser) -> None:
    parser.add_argument("run", help="run (job) name")
    add_store_argument(parser)
    parser.add_argument("--meta", action="store_true", help="include writer metadata")


def _writer(e) -> dict:
    return {"process_index": e.process_index, "host": e.host, "pid": e.pid,
            "attempt": e.attempt, "seq": e.seq,
            "write_time": None if math.isnan(e.write_time) else e.write_time}


def run(args) -> int:
    store = open_store(args.store, create=False)
    events, _ = store.read(args.run)
    if not events and args.run not in store.runs():
        raise CliError(f"no run named {args.run!r} in {store.url} (see: goodput runs)")
    out = sys.stdout
    for e in events:
        payload = to_payload(e)
        if args.meta:
            payload["_writer"] = _writer(e)
        out.write(json.dumps(payload) + "\n")
    return 0
