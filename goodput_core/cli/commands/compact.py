"""``goodput compact [STORE]``: pack, checkpoint and rebuild an embedded store.

Packs every run's full chunks of rows, folds the write-ahead log into the
file and rebuilds it (``VACUUM``), so the file is as small as it gets and
holds everything on its own. Writers may run meanwhile (they wait for the
rebuild, which takes the write lock while it runs).
"""

from __future__ import annotations

import sys

from goodput_core.cli.commands.backup import sqlite_path

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    parser.add_argument("store", metavar="STORE", nargs="?", default=None,
                        help="the embedded store (default: $GOODPUT_STORE or the user data dir)")


def run(args) -> int:
    from goodput_core.stores import default_store_url
    from goodput_core.stores.sqlite.admin import compact

    path = sqlite_path(args.store or default_store_url())
    before, after = compact(path)
    print(f"compacted {path}: {before:,} -> {after:,} bytes", file=sys.stderr)
    return 0
