"""The goodput test suite (a package so that ``tests.support`` is importable)."""
