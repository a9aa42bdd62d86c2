"""The PostgreSQL store's URL schemes, the first canonical (its own module:
both the package's ``SCHEME`` and :mod:`.sql` read it, and neither imports
the other)."""

NAMES = ("postgresql", "postgres")
