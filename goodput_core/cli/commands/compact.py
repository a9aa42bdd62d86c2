"""``goodput compact [STORE]``: pack a store's runs into chunks (and rebuild an embedded one).

An embedded store: packs every run's full chunks of rows, folds the
write-ahead log into the file and rebuilds it (``VACUUM``), so the file is as
small as it gets and holds everything on its own. Writers may run meanwhile
(they wait for the rebuild, which takes the write lock while it runs).

A PostgreSQL store: packs every run's full chunks of settled events that no
writer packed (a run written before chunks existed, or by a writer that did
not pack), one chunk per transaction under the run's lock, so writers may run
meanwhile, then analyzes the tables
(:mod:`goodput_core.stores.postgres.admin`).
"""

from __future__ import annotations

import sys

from goodput_core.cli.commands.backup import sqlite_path
from goodput_core.stores import check_store_url, default_store_url, open_store
from goodput_core.stores.postgres import SCHEME as POSTGRES
from goodput_core.stores.sqlite import admin as sqlite_admin

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    parser.add_argument("store", metavar="STORE", nargs="?", default=None,
                        help="the store: an embedded one or a postgresql:// URL (default: "
                             "$GOODPUT_STORE or the user data dir)")


def run(args) -> int:
    url, scheme, _ = check_store_url(args.store or default_store_url(), writer=True)
    if scheme in POSTGRES.names:  # postgresql://, postgres:// or a keyword DSN
        return _compact_postgres(url)
    path = sqlite_path(url, writer=True)
    before, after = sqlite_admin.compact(path)
    print(f"compacted {path}: {before:,} -> {after:,} bytes", file=sys.stderr)
    return 0


def _compact_postgres(url: str) -> int:
    from goodput_core.stores.postgres.admin import compact  # lazy: psycopg, PostgreSQL only

    store = open_store(url)
    try:
        done = compact(store)
    finally:
        store.close()
    print(f"compacted {store.url}: {done['events']:,} events packed into {done['chunks']:,} "
          f"chunks in {done['runs']:,} runs", file=sys.stderr)
    return 0
