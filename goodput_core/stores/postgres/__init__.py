"""The PostgreSQL store: :class:`PostgresStore` in :mod:`.store`, its URL and DDL
(:mod:`.sql`), connections (:mod:`.connect`), reads (:mod:`.read`) and the
column pages of reads (:mod:`.columns`)."""

__all__ = ["PostgresStore"]


def __getattr__(name):
    # Imported on first use: the store needs psycopg (the 'postgres' extra), while
    # checking a URL (.sql) must work without it.
    if name == "PostgresStore":
        from goodput_core.stores.postgres.store import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
