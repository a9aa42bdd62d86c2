"""``goodput export RUN [--store URL] [-o FILE.jsonl] [--meta]``: a run as JSON lines.

One reference-format payload per line (ml-goodput-measurement reads them as
they are); ``--meta`` adds the writer metadata under ``_writer``, which
``goodput import`` restores. A file is written under a temporary name and
renamed when complete, so an interrupted export never leaves half a file
under the requested name. The temporary file is created in the target's
directory with ``O_EXCL`` and a random name (:func:`tempfile.mkstemp`, mode
0600), so a file or symlink planted at a predictable name is never followed
or overwritten. ``-o -`` (the default) writes to stdout. The format:
:mod:`goodput_core.cli.commands.transfer`.
"""

from __future__ import annotations

import itertools
import sys

from goodput_core.cli import CliError, CliIOError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.cli.commands.transfer import (
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
        if args.output == "-":  # a closed pipe (`| head`): goodput_core.cli reports it
            write_batches(pages, sys.stdout, args.meta, progress)
            return 0
        n = _write_file(args.output, pages, args.meta, progress)
    finally:
        store.close()
    print(f"exported {n} events of {args.run!r} from {store.url} to {args.output}",
          file=sys.stderr)
    return 0


def _write_file(path: str, pages, meta: bool, progress) -> int:
    """Writes the pages to a fresh temporary file beside ``path``, then renames it."""
    from goodput_core.files import replaced_atomically

    try:
        with replaced_atomically(path) as out:
            return write_batches(pages, out, meta, progress)
    except OSError as exc:
        raise CliIOError(f"cannot write {path}: {exc.strerror or exc}") from exc
