"""Event stores, chosen by URL.

========================================  =====================================
URL                                        store
========================================  =====================================
``sqlite:///abs/path.sqlite``              embedded SQLite file (the default)
``sqlite://relative/path.sqlite``          same, relative to the working dir
``/some/path.sqlite`` or ``x.sqlite``      a bare path means sqlite
``memory://NAME``                          in-process, shared by NAME
``cloud-logging://PROJECT/LOG``            Google Cloud Logging (multi-host)
``postgresql://USER:PW@HOST:PORT/DB``      PostgreSQL (multi-host, any cluster;
                                           ``?schema=NAME``, also ``postgres://``)
``host=H dbname=D user=U password=PW``     PostgreSQL, as a libpq keyword DSN
``sqlite:///path.sqlite?mode=ro``          read-only (refused for writers)
========================================  =====================================

Each backend declares its URLs (:mod:`goodput_core.stores.schemes`, the
registry). Store URLs are shown through :func:`goodput_core.redact.redact` only (no
password in any message). A ``sqlite://`` URL's query is parsed, never part
of the file name: only ``mode=ro`` is understood; any other parameter is refused.
A bare ``keyword=value ...`` string naming a libpq keyword is a PostgreSQL DSN,
never a file: a file whose name looks like one is given as ``sqlite:///path``.

The default store is ``$GOODPUT_STORE`` when set, else the sqlite file
``$XDG_DATA_HOME/goodput/goodput.sqlite`` (``~/.local/share/goodput/...``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Tuple, Union

from goodput_core.redact import redact
from goodput_core.stores import schemes
from goodput_core.stores.base import Cursor, Store, StoreError
# re-exported: a sqlite URL's file, asked by the CLI's sqlite commands
from goodput_core.stores.sqlite.location import sqlite_location

__all__ = ["Store", "StoreError", "Cursor", "open_store", "check_store_url", "default_store_url",
           "canonical_store_url", "sqlite_location"]

STORE_ENV = "GOODPUT_STORE"


def default_store_url() -> str:
    """The store used when none is given: ``$GOODPUT_STORE`` or the user data dir."""
    env = os.environ.get(STORE_ENV)
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return "sqlite:///" + os.path.join(base, "goodput", "goodput.sqlite").lstrip("/")


def check_store_url(url: Union[str, os.PathLike, None] = None, *,
                    writer: bool = False) -> Tuple[str, str, str]:
    """Validates a store URL without opening anything (no I/O, no client import).

    Args:
      url: a store URL, a filesystem path (sqlite), a libpq keyword DSN
        (``host=H dbname=D ...``: PostgreSQL), or None for
        :func:`default_store_url`.
      writer: the URL is for writing: a ``sqlite://...?mode=ro`` is refused.

    Returns:
      ``(url, scheme, rest)``: the URL as text, its scheme (``postgresql``
      for a keyword DSN) and what follows ``://`` (the DSN itself).

    Raises:
      StoreError: the URL is malformed, its scheme unknown, a ``sqlite://``
        parameter is not understood, or its store's extra is not installed.
        No message shows a password (:func:`goodput_core.redact.redact`).
    """
    if url is None:
        url = default_store_url()
    url = os.fspath(url)
    if not isinstance(url, str) or not url.strip():
        raise StoreError(f"empty store URL {url!r}")
    scheme, name, rest = schemes.scheme_of(url)
    if scheme is None:
        raise StoreError(f"unknown store scheme {redact(name)!r} in {redact(url)!r}: use "
                         f"{schemes.known()}")
    scheme.check(url, rest, writer)
    return url, name, rest


def canonical_store_url(url: str) -> str:
    """The URL an opened store will report as its ``url`` (no I/O): a sqlite
    path made absolute as :class:`~goodput_core.stores.sqlite.SqliteStore`
    does (its parameters dropped); other URLs as they are, a password
    replaced by ``***``."""
    url = str(url)
    scheme = schemes.scheme_of(url)[0]
    return redact(url) if scheme is None else scheme.canonical(url)


def open_store(url: Union[str, os.PathLike, Store, None] = None, *, create: bool = True) -> Store:
    """Opens the store named by ``url`` (see the module docstring).

    Args:
      url: a store URL, a filesystem path (sqlite), an already open Store
        (returned as is), or None for :func:`default_store_url`.
      create: False for readers: a sqlite file that does not exist is an
        error instead of a new empty store (a mistyped path must not look
        like a store without runs), and an existing one is opened read-only
        (so a store the user may read but not write can be read).

    Raises:
      StoreError: the URL is malformed, its scheme unknown, the path
        unusable, or ``create`` with a ``sqlite://...?mode=ro`` URL.
    """
    if isinstance(url, Store):
        return url
    url, _, rest = check_store_url(url, writer=create)
    scheme = schemes.scheme_of(url)[0]
    return scheme.open(url, rest, create)
