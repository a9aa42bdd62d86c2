"""The embedded SQLite store (the default): :class:`SqliteStore` in :mod:`.store`,
its read and write paths (:mod:`.read`, :mod:`.write`), the packed chunks of old
rows (:mod:`.chunks`), fork safety (:mod:`.fork`) and the file's maintenance
(:mod:`.admin`: backup, compact, run management)."""

__all__ = ["SqliteStore"]


def __getattr__(name):
    # Imported on first use: the store needs numpy (chunks), while the deferred
    # store imports .fork at ``import goodput_core``, which must stay light.
    if name == "SqliteStore":
        from goodput_core.stores.sqlite.store import SqliteStore

        return SqliteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
