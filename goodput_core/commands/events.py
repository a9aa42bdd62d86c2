"""``goodput events RUN``: the recorded events of a run, one JSON payload per line.

The payloads are in the reference's Cloud Logging format; ``--meta`` adds the
writer metadata (process index, host, pid, attempt, sequence, write time)
under a ``_writer`` key.
"""

from __future__ import annotations

import itertools
import sys

from goodput_core.cli import CliError
from goodput_core.commands.common import add_store_argument
from goodput_core.commands.transfer import read_store, write_batches
from goodput_core.stores import open_store

_PAGE = 10_000


def add_arguments(parser) -> None:
    parser.add_argument("run", help="run (job) name")
    add_store_argument(parser)
    parser.add_argument("--meta", action="store_true", help="include writer metadata")


def run(args) -> int:
    store = open_store(args.store, create=False)
    pages = read_store(store, args.run, _PAGE)  # streamed: memory does not grow with the run
    first = next(pages, None)
    if first is None and args.run not in store.runs():
        raise CliError(f"no run named {args.run!r} in {store.url} (see: goodput runs)")
    write_batches(itertools.chain([first] if first else [], pages), sys.stdout, args.meta, None)
    return 0
