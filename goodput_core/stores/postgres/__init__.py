"""The PostgreSQL store: :class:`PostgresStore` in :mod:`.store`, its URL and DDL
(:mod:`.sql`), connections (:mod:`.connect`), reads (:mod:`.read`) and the
column pages of reads (:mod:`.columns`). :data:`SCHEME`: its URLs
(``postgresql://``, ``postgres://``, a libpq keyword DSN), for the registry
(:mod:`goodput_core.stores.schemes`)."""

from goodput_core.redact import is_keyword_dsn
from goodput_core.stores.base import Store, StoreError, StoreScheme, importable
from goodput_core.stores.postgres.names import NAMES

__all__ = ["PostgresStore", "SCHEME"]


def __getattr__(name):
    # Imported on first use: the store needs psycopg (the 'postgres' extra), while
    # checking a URL (.sql) must work without it.
    if name == "PostgresStore":
        from goodput_core.stores.postgres.store import PostgresStore  # lazy: psycopg, on first use

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check(url: str, rest: str, writer: bool) -> None:
    # lazy: only a PostgreSQL URL needs it (import goodput_core stays light)
    from goodput_core.stores.postgres.sql import parse_url

    try:
        parse_url(url)
    except ValueError as exc:  # the message shows the URL without its password
        raise StoreError(str(exc)) from None
    if not importable("psycopg"):
        raise StoreError("the postgresql store needs the 'postgres' extra: "
                         "pip install 'goodput-core[postgres]'")


def _open(url: str, rest: str, create: bool) -> Store:
    from goodput_core.stores.postgres.store import PostgresStore  # lazy: psycopg, on first use

    return PostgresStore(url)


SCHEME = StoreScheme(NAMES, _check, _open, bare=is_keyword_dsn,
                     exit_watcher=True)
