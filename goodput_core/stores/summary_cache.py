"""A private local cache of run summaries (:mod:`goodput_core.queries.summaries`).

One SQLite file per user, ``$XDG_CACHE_HOME/goodput/summaries.sqlite``
(``~/.cache/goodput/...``; ``GOODPUT_SUMMARY_CACHE`` names another file, or
``off`` turns the cache off), created 0600 in a 0700 directory. Rows are
keyed by (store URL, run) and hold the version of the run they reflect; the
reader decides whether a row is still good. Notes keep what a store needs
between listings besides summaries (Cloud Logging: its index of the log). Every failure of the cache (a
read-only home, a corrupt file, a lock held too long) makes it answer nothing
and take nothing: a listing is then computed without it, never broken by it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional

__all__ = ["SummaryCache", "default_path"]

logger = logging.getLogger(__name__)
_ENV = "GOODPUT_SUMMARY_CACHE"
_SCHEMA = ("CREATE TABLE IF NOT EXISTS summaries (store TEXT NOT NULL, run TEXT NOT NULL,"
           " format INTEGER NOT NULL, version TEXT NOT NULL, summary TEXT NOT NULL,"
           " PRIMARY KEY (store, run))")
# what a store keeps between listings besides summaries (Cloud Logging: its log index)
_NOTES = ("CREATE TABLE IF NOT EXISTS notes (store TEXT NOT NULL, key TEXT NOT NULL,"
          " value TEXT NOT NULL, PRIMARY KEY (store, key))")
_CHUNK = 500  # runs per IN (...) query (SQLite's variable limit is far above)


def default_path() -> Optional[str]:
    """The cache file (None when ``GOODPUT_SUMMARY_CACHE=off``)."""
    env = os.environ.get(_ENV)
    if env is not None and env.strip().lower() in ("off", "0", "none", ""):
        return None
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "goodput", "summaries.sqlite")


class SummaryCache:
    """Summaries by (store URL, run), each with the run version it reflects.

    Args:
      path: the cache file (created 0600 when missing; its directory 0700).
    """

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._conn: Optional[sqlite3.Connection] = None
        self._broken = False

    @classmethod
    def open_default(cls) -> Optional["SummaryCache"]:
        """The user's cache, or None when it is turned off."""
        path = default_path()
        return None if path is None else cls(path)

    def _connect(self) -> Optional[sqlite3.Connection]:
        if self._broken:
            return None
        if self._conn is None:
            try:
                os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
                if not os.path.lexists(self.path):
                    fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                 0o600)
                    os.close(fd)
                elif os.path.islink(self.path):
                    raise OSError(f"{self.path} is a symbolic link")
                conn = sqlite3.connect(self.path, timeout=2.0, check_same_thread=False)
                conn.execute(_SCHEMA)
                conn.execute(_NOTES)
                conn.commit()
                self._conn = conn
            except (OSError, sqlite3.Error) as exc:
                self._broken = True
                logger.debug("goodput: run-summary cache %s unavailable: %s", self.path, exc)
                return None
        return self._conn

    def get(self, store: str, fmt: int, runs: Iterable[str]) -> Dict[str, Dict[str, Any]]:
        """``{run: summary dict}`` cached for ``store`` in format ``fmt`` (each
        dict has the ``version`` it reflects)."""
        names = list(runs)
        out: Dict[str, Any] = {}
        with self._lock:
            conn = self._connect()
            if conn is None:
                return out
            try:
                for i in range(0, len(names), _CHUNK):
                    part = names[i:i + _CHUNK]
                    marks = ",".join("?" * len(part))
                    for run, version, text in conn.execute(
                            f"SELECT run, version, summary FROM summaries WHERE store = ? AND "
                            f"format = ? AND run IN ({marks})", (store, fmt, *part)):
                        d = json.loads(text)
                        if isinstance(d, dict) and json.dumps(d.get("version")) == version:
                            out[run] = d
            except (sqlite3.Error, ValueError, TypeError) as exc:
                logger.debug("goodput: run-summary cache read failed: %s", exc)
                return {}
        return out

    def put(self, store: str, fmt: int, summaries: List[Dict[str, Any]]) -> None:
        """Keeps ``summaries`` (dicts with ``run`` and ``version``) for ``store``."""
        self._write("INSERT OR REPLACE INTO summaries VALUES (?, ?, ?, ?, ?)",
                    lambda: [(store, d["run"], fmt, json.dumps(d["version"]), json.dumps(d))
                             for d in summaries])

    def _write(self, sql: str, rows: Callable[[], List[tuple]]) -> None:
        """Runs ``sql`` over ``rows()`` in one transaction (a failure is logged only)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return
            try:
                with conn:
                    conn.executemany(sql, rows())
            except (sqlite3.Error, ValueError, TypeError) as exc:
                logger.debug("goodput: run-summary cache write failed: %s", exc)

    def get_note(self, store: str, key: str) -> Any:
        """The JSON value kept under ``key`` for ``store`` (None: none)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return None
            try:
                row = conn.execute("SELECT value FROM notes WHERE store = ? AND key = ?",
                                   (store, key)).fetchone()
                return None if row is None else json.loads(row[0])
            except (sqlite3.Error, ValueError) as exc:
                logger.debug("goodput: run-summary cache read failed: %s", exc)
                return None

    def put_note(self, store: str, key: str, value: Any) -> None:
        """Keeps a JSON ``value`` under ``key`` for ``store``."""
        self._write("INSERT OR REPLACE INTO notes VALUES (?, ?, ?)",
                    lambda: [(store, key, json.dumps(value))])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
