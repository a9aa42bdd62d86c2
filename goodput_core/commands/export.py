"""``goodput export RUN [--store URL] [-o FILE.jsonl] [--meta]``: a run as JSON lines.

One reference-format payload per line (ml-goodput-measurement reads them as
they are); ``--meta`` adds the writer metadata under ``_writer``, which
``goodput import`` restores. A file is written under a temporary name and
renamed when complete, so an interrupted export never leaves half a file
under the requested name. ``-o -`` (the default) writes to stdout. The format:
:mod:`goodput_core.commands.transfer`.
"""

from __future__ import annotations

import itertools
import os
import sys

from goodput_core.cli import CliError
from goodput_core.commands.common import add_store_argument
from goodput_core.commands.transfer import (
    add_common_arguments, page_size, progress_bar, read_store, write_batches)
from goodput_core.stores import open_store

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    add_common_arguments(parser)
    add_store_argument(parser)
    parser.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="the JSONL file to write (replaced when complete); '-': stdout")
    parser.add_argument("--meta", action="store_true",
                        help="include writer metadata under a '_writer' key")


def run(args) -> int:
    page = page_size(args)
    store = open_store(args.store, create=False)
    try:
        batches = read_store(store, args.run, page)
        first = next(batches, None)
        # Checked before any file is created: a typo must not leave an empty export.
        if first is None and args.run not in store.runs():
            raise CliError(f"no run named {args.run!r} in {store.url} (see: goodput runs)")
        pages = itertools.chain([first] if first else [], batches)
        progress = progress_bar(args, f"export {args.run}")
        if args.output == "-":
            try:
                write_batches(pages, sys.stdout, args.meta, progress)
            except BrokenPipeError:  # `goodput export RUN | head`: the reader has enough
                # Python's own flush of stdout at exit would fail again: point it at devnull.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        tmp = f"{args.output}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8", newline="\n") as out:
                n = write_batches(pages, out, args.meta, progress)
            os.replace(tmp, args.output)
        except OSError as exc:
            raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    finally:
        store.close()
    print(f"exported {n} events of {args.run!r} from {store.url} to {args.output}",
          file=sys.stderr)
    return 0
