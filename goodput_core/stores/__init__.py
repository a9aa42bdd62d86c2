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

Store URLs are shown through :func:`goodput_core.redact.redact` only (no
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

from goodput_core.redact import is_keyword_dsn, redact
from goodput_core.stores.base import Cursor, Store, StoreError

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
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = ("postgresql", url) if is_keyword_dsn(url) else ("sqlite", url)
    if scheme == "sqlite" and not rest:
        raise StoreError(f"store URL {url!r} names no file: use sqlite:///path/to/file.sqlite")
    if scheme == "sqlite":
        _, readonly = sqlite_location(url)
        if readonly and writer:
            raise StoreError(f"store URL {url!r} asks for mode=ro: a recorder and the "
                             "commands that change a store need it writable")
    elif scheme == "cloud-logging":
        from goodput_core.stores.cloud_logging import wire

        project, _, log = rest.partition("/")
        if not project or not log or "/" in log:
            raise StoreError(
                f"store URL {redact(url)!r} is not cloud-logging://PROJECT/LOG_NAME")
        try:
            wire.validate_names(project, log)
        except ValueError as exc:  # a malformed project id or log name
            raise StoreError(f"store URL {redact(url)!r}: {exc}") from exc
        if not _importable("google.cloud.logging_v2"):
            raise StoreError("the cloud-logging store needs the 'gcp' extra: "
                             "pip install 'goodput-core[gcp]'")
    elif scheme in _POSTGRES:
        from goodput_core.stores.postgres.sql import parse_url

        try:
            parse_url(url)
        except ValueError as exc:  # the message shows the URL without its password
            raise StoreError(str(exc)) from None
        if not _importable("psycopg"):
            raise StoreError("the postgresql store needs the 'postgres' extra: "
                             "pip install 'goodput-core[postgres]'")
    elif scheme != "memory":
        raise StoreError(f"unknown store scheme {redact(scheme)!r} in {redact(url)!r}: use "
                         "sqlite://, memory://, cloud-logging:// or postgresql://")
    return url, scheme, rest


_POSTGRES = ("postgresql", "postgres")
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


def canonical_store_url(url: str) -> str:
    """The URL an opened store will report as its ``url`` (no I/O): a sqlite
    path made absolute as :class:`~goodput_core.stores.sqlite.SqliteStore`
    does (its parameters dropped); other URLs as they are, a password
    replaced by ``***``."""
    url = str(url)
    scheme, sep, _ = url.partition("://")
    if (scheme == "sqlite" and sep) or not (sep or is_keyword_dsn(url)):
        try:
            path, _ = sqlite_location(url)
        except StoreError:
            return redact(url)
        return "sqlite:///" + os.path.abspath(path).lstrip("/")
    return redact(url)


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


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
    url, scheme, rest = check_store_url(url, writer=create)
    if scheme == "memory":
        from goodput_core.stores.memory import open_named

        return open_named(rest)
    if scheme == "sqlite":
        from goodput_core.stores.sqlite import SqliteStore

        path, _ = sqlite_location(url)
        if not create and not os.path.exists(path):
            raise StoreError(f"no goodput store at {path!r}: record a run first or pass "
                             "--store with the path of an existing store")
        return SqliteStore(path, readonly=not create)
    if scheme in _POSTGRES:
        from goodput_core.stores.postgres import PostgresStore

        return PostgresStore(url)
    project, _, log = rest.partition("/")
    try:
        from goodput_core.stores.cloud_logging import CloudLoggingStore
    except ImportError as exc:
        raise StoreError(
            f"the cloud-logging store needs the 'gcp' extra: pip install 'goodput-core[gcp]' ({exc})"
        ) from exc
    try:
        return CloudLoggingStore(project=project, log_name=log)
    except ValueError as exc:  # a malformed project id or log name
        raise StoreError(f"store URL {redact(url)!r}: {exc}") from exc
