"""``goodput backup STORE DEST``: a consistent copy of an embedded store, while writers run.

The copy holds every event committed before the backup started (SQLite's
online backup reads one snapshot) and is one self-contained file, 0600,
written under a temporary name beside DEST and renamed when complete.
"""

from __future__ import annotations

import os
import sys

from goodput_core.cli import CliError, CliIOError
from goodput_core.redact import redact
from goodput_core.stores import check_store_url, sqlite_location
from goodput_core.stores.sqlite import SCHEME as SQLITE
from goodput_core.stores.sqlite.admin import backup

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    parser.add_argument("store", metavar="STORE", help="the embedded store (sqlite path or URL)")
    parser.add_argument("dest", metavar="DEST", help="the file to write (replaced when complete)")


def sqlite_path(store: str, other: str = "back up a PostgreSQL store with pg_dump",
                *, writer: bool = False) -> str:
    """The file of an embedded store URL or path; other stores are refused
    (``other``: what to do instead), and so is a ``?mode=ro`` URL for a ``writer``."""
    _, scheme, _ = check_store_url(store, writer=writer)
    if scheme not in SQLITE.names:
        raise CliError(f"{redact(store)!r} is not an embedded (sqlite) store; {other}")
    path, _ = sqlite_location(store)
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise CliError(f"no goodput store at {path!r}")
    return path


def run(args) -> int:
    path = sqlite_path(args.store)
    try:
        runs = backup(path, args.dest)
    except OSError as exc:
        raise CliIOError(f"cannot write {args.dest}: {exc.strerror or exc}") from None
    print(f"backed up {path} to {args.dest}: {runs} runs", file=sys.stderr)
    return 0
