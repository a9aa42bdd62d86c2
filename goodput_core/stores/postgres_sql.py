"""The PostgreSQL store's URL handling and SQL text (no driver import here).

URL: ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE[?schema=NAME&...]`` (or
``postgres://``). ``schema`` names the PostgreSQL schema that holds the
tables (default ``goodput``); every other query parameter (``sslmode``,
``connect_timeout``, ...) goes to libpq as it is. The password never leaves
this module in clear: :func:`redact` replaces it in every URL we show.

Schema (version :data:`SCHEMA_VERSION`, kept in ``meta``)::

    meta    (key TEXT PRIMARY KEY, value TEXT)
    runs    (run_id SERIAL PRIMARY KEY, name TEXT UNIQUE)
    writers (writer_id SERIAL PRIMARY KEY, process_index BIGINT, host TEXT,
             pid BIGINT, attempt TEXT, UNIQUE (process_index, host, pid, attempt))
    events  (id BIGSERIAL PRIMARY KEY,     -- the read cursor
             run_id, writer_id, seq BIGINT, kind INTEGER, time DOUBLE PRECISION,
             step BIGINT, extra TEXT, write_time DOUBLE PRECISION)
    INDEX  events (run_id, id)
    UNIQUE events (writer_id, seq) WHERE seq > 0   -- a resent batch is stored once

A batch is written by binary ``COPY`` into a session's temporary staging
table, then moved into ``events`` by one ``INSERT ... ON CONFLICT DO NOTHING``.

``extra`` is the same strict JSON text as the SQLite store's. Times are
``DOUBLE PRECISION``, which keeps NaN as it is.
"""

from __future__ import annotations

import re
from typing import Dict, Tuple
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = ["SCHEMA_VERSION", "DEFAULT_SCHEMA", "parse_url", "redact", "statements"]

SCHEMA_VERSION = 1
DEFAULT_SCHEMA = "goodput"
_SCHEMES = ("postgresql", "postgres")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def parse_url(url: str) -> Tuple[str, str, str]:
    """Splits a store URL into (libpq conninfo URL, schema name, redacted URL).

    Raises:
      ValueError: not a postgresql:// URL, no database, or a bad schema name.
    """
    redacted = redact(url)
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        parts.port  # noqa: B018 - raises ValueError on a non-numeric port
    except ValueError as exc:
        raise ValueError(f"store URL {redacted!r} is malformed ({exc})") from None
    if parts.scheme not in _SCHEMES:
        raise ValueError(f"store URL {redacted!r} is not postgresql://USER:PASSWORD@HOST/DB")
    if not parts.hostname or not parts.path.strip("/"):
        raise ValueError(f"store URL {redacted!r} names no host or no database: use "
                         "postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    params: Dict[str, str] = {}
    schema = DEFAULT_SCHEMA
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            params[key] = value
    if not _NAME.match(schema):
        raise ValueError(f"store URL {redacted!r}: schema {schema!r} is not a plain SQL "
                         "name (letters, digits, _ and $, at most 63)")
    conninfo = urlunsplit(("postgresql", parts.netloc, quote(parts.path, safe="/%"),
                           urlencode(params), ""))
    return conninfo, schema, redacted


def statements(schema: str) -> Dict[str, str]:
    """The SQL statements of the store, with ``schema`` (already validated) inlined.

    The schema name is checked against a plain-identifier pattern by
    :func:`parse_url` and double-quoted here; every value is a parameter.
    """
    s = f'"{schema}"'
    return {
        "create": "\n".join([
            f"CREATE SCHEMA IF NOT EXISTS {s};",
            f"CREATE TABLE IF NOT EXISTS {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
            f"CREATE TABLE IF NOT EXISTS {s}.runs (run_id SERIAL PRIMARY KEY,"
            " name TEXT NOT NULL UNIQUE);",
            f"CREATE TABLE IF NOT EXISTS {s}.writers (writer_id SERIAL PRIMARY KEY,"
            " process_index BIGINT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL,"
            " attempt TEXT NOT NULL, UNIQUE (process_index, host, pid, attempt));",
            f"CREATE TABLE IF NOT EXISTS {s}.events (id BIGSERIAL PRIMARY KEY,"
            " run_id INTEGER NOT NULL, writer_id INTEGER NOT NULL, seq BIGINT NOT NULL,"
            " kind INTEGER NOT NULL, time DOUBLE PRECISION, step BIGINT, extra TEXT,"
            " write_time DOUBLE PRECISION);",
            f"CREATE INDEX IF NOT EXISTS events_run ON {s}.events (run_id, id);",
            f"CREATE UNIQUE INDEX IF NOT EXISTS events_writer_seq ON {s}.events"
            " (writer_id, seq) WHERE seq > 0;",
            f"INSERT INTO {s}.meta VALUES ('schema_version', '{SCHEMA_VERSION}')"
            " ON CONFLICT (key) DO NOTHING;",
        ]),
        "has_meta": "SELECT to_regclass(%s) IS NOT NULL",
        "version": f"SELECT value FROM {s}.meta WHERE key = 'schema_version'",
        "add_runs": f"INSERT INTO {s}.runs (name) SELECT unnest(%s::text[])"
                    " ON CONFLICT (name) DO NOTHING",
        "run_ids": f"SELECT name, run_id FROM {s}.runs WHERE name = ANY(%s::text[])",
        "add_writers": f"INSERT INTO {s}.writers (process_index, host, pid, attempt)"
                       " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[],"
                       " %s::text[]) ON CONFLICT DO NOTHING",
        "writer_ids": f"SELECT process_index, host, pid, attempt, writer_id FROM {s}.writers"
                      " WHERE (process_index, host, pid, attempt) IN (SELECT * FROM"
                      " unnest(%s::bigint[], %s::text[], %s::bigint[], %s::text[]))",
        "all_writers": f"SELECT writer_id, process_index, host, pid, attempt FROM {s}.writers",
        # Writers of one run take turns (a transaction-scoped advisory lock per run),
        # so ids of a run grow in commit order and a reader's cursor never skips a
        # batch that commits later with a smaller id.
        "lock_run": "SELECT pg_advisory_xact_lock(%s, %s)",
        # A batch goes by binary COPY into a per-session staging table, then into
        # events in one statement that skips (writer, seq) pairs already stored.
        "stage": "CREATE TEMP TABLE IF NOT EXISTS goodput_stage (run_id INTEGER,"
                 " writer_id INTEGER, seq BIGINT, kind INTEGER, time DOUBLE PRECISION,"
                 " step BIGINT, extra TEXT, write_time DOUBLE PRECISION)"
                 " ON COMMIT DELETE ROWS",
        "copy": "COPY goodput_stage FROM STDIN (FORMAT BINARY)",
        "insert": f"INSERT INTO {s}.events (run_id, writer_id, seq, kind, time, step, extra,"
                  " write_time) SELECT * FROM goodput_stage"
                  " ON CONFLICT (writer_id, seq) WHERE seq > 0 DO NOTHING",
        "select": f"SELECT kind, time, step, extra, writer_id, seq, write_time, id"
                  f" FROM {s}.events WHERE run_id = %s AND id > %s ORDER BY id LIMIT %s",
        "run_id": f"SELECT run_id FROM {s}.runs WHERE name = %s",
        "runs": f"SELECT name FROM {s}.runs ORDER BY run_id",
    }
