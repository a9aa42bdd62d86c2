"""Where an embedded store's URL or bare path leads (no I/O, no sqlite import)."""

from __future__ import annotations

import os
from typing import Tuple

from goodput_core.redact import redact
from goodput_core.stores.base import StoreError

__all__ = ["sqlite_location", "canonical_url", "may_write"]

#: The parameters a ``sqlite://`` URL may carry, and the values each may take.
_SQLITE_PARAMETERS = {"mode": ("ro",)}


def sqlite_location(url: str) -> Tuple[str, bool]:
    """``(path, read only)`` of an embedded store's URL or bare path (no I/O).

    A ``sqlite://`` URL's query is parsed, never part of the file name: its
    only parameter is ``mode=ro`` (open read-only; refused for writers). A
    bare path is taken literally (a file name with ``?`` in it is written
    as a path, not as a URL). ``~`` is expanded; the path is not made absolute.

    Raises:
      StoreError: an unknown parameter or value.
    """
    url = os.fspath(url)
    if not url.startswith("sqlite://"):
        return os.path.expanduser(url), False
    rest = url[len("sqlite://"):]
    path, _, query = rest.partition("?")
    readonly = False
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        if value not in _SQLITE_PARAMETERS.get(key, ()):
            raise StoreError(
                f"store URL {redact(url)!r}: the parameter {redact(pair)!r} is not understood "
                "(a sqlite:// URL takes only mode=ro; a file name with '?' in it is given "
                "as a plain path)")
        readonly = True
    if not path:
        raise StoreError(f"store URL {redact(url)!r} names no file: use "
                         "sqlite:///path/to/file.sqlite")
    if path.startswith("//"):  # sqlite:////x: POSIX keeps a leading "//"; one is meant
        path = "/" + path.lstrip("/")
    return os.path.expanduser(path), readonly


def canonical_url(url: str) -> str:
    """The URL a :class:`~goodput_core.stores.sqlite.SqliteStore` reports for
    ``url``: the path made absolute, its parameters dropped (a URL that is
    not understood: redacted as it is)."""
    try:
        path, _ = sqlite_location(url)
    except StoreError:
        return redact(url)
    return "sqlite:///" + os.path.abspath(path).lstrip("/")


def may_write(url: str) -> bool:
    """False when this user may not write the file (or make it): a reader that
    may not write leaves spilled events to a writer."""
    path = canonical_url(url)[len("sqlite://"):]
    return not ((os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK))
                or not os.access(os.path.dirname(path), os.W_OK | os.X_OK))
