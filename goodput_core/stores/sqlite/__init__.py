"""The embedded SQLite store (the default): :class:`SqliteStore` in :mod:`.store`,
its read and write paths (:mod:`.read`, :mod:`.write`), the packed chunks of old
rows (:mod:`.chunks`), fork safety (:mod:`.fork`), the file's maintenance
(:mod:`.admin`: backup, compact, run management) and where a URL leads
(:mod:`.location`). :data:`SCHEME`: its URLs (``sqlite://``, a bare path), for
the registry (:mod:`goodput_core.stores.schemes`)."""

import os

from goodput_core.stores.base import Store, StoreError, StoreScheme
from goodput_core.stores.sqlite.location import canonical_url, may_write, sqlite_location

__all__ = ["SqliteStore", "SCHEME"]


def __getattr__(name):
    # Imported on first use: the store needs numpy (chunks), while the deferred
    # store imports .fork at ``import goodput_core``, which must stay light.
    if name == "SqliteStore":
        from goodput_core.stores.sqlite.store import SqliteStore  # lazy: numpy, on first use

        return SqliteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check(url: str, rest: str, writer: bool) -> None:
    if not rest:
        raise StoreError(f"store URL {url!r} names no file: use sqlite:///path/to/file.sqlite")
    _, readonly = sqlite_location(url)
    if readonly and writer:
        raise StoreError(f"store URL {url!r} asks for mode=ro: a recorder and the "
                         "commands that change a store need it writable")


def _open(url: str, rest: str, create: bool) -> Store:
    from goodput_core.stores.sqlite.store import SqliteStore  # lazy: numpy, on first use

    path, _ = sqlite_location(url)
    if not create and not os.path.exists(path):
        raise StoreError(f"no goodput store at {path!r}: record a run first or pass "
                         "--store with the path of an existing store")
    return SqliteStore(path, readonly=not create)


def _refuses_content(error: BaseException) -> bool:
    """An error SQLite raised about the data itself: a constraint, a value too
    big, a type it cannot bind (the store's StoreError wraps it)."""
    import sqlite3  # only after a failed append

    cause = error.__cause__
    if isinstance(cause, sqlite3.ProgrammingError) and "binding parameter" in str(cause):
        return True  # a value of a type SQLite cannot bind: the event's own
    return isinstance(cause, (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError))


SCHEME = StoreScheme(("sqlite",), _check, _open, canonical=canonical_url,
                     elsewhere=canonical_url, may_write=may_write, exit_watcher=True,
                     refuses_content=_refuses_content)
