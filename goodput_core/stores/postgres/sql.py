"""The PostgreSQL store's URL handling and SQL text (no driver import here).

URL: any ``postgresql://`` (or ``postgres://``) connection URI that libpq
accepts, or a libpq keyword DSN (``host=H port=P dbname=D user=U password=PW``),
handed to the driver as it is: ``postgresql://USER:PASSWORD@HOST:PORT/DB``,
a Unix socket directory (``postgresql://USER@/DB?host=/run/postgresql``),
``postgresql://`` or ``postgresql:///DB`` with the ``PG*`` environment
variables, several hosts for failover (``postgresql://h1:5432,h2:5432/DB``),
``?service=NAME`` (``PGSERVICEFILE``), ``passfile``, ``sslmode``,
``sslrootcert``... Only our own parameter, ``schema`` (the PostgreSQL schema
that holds the tables, default ``goodput``), is taken out first. The password
never leaves this module in clear: :func:`goodput_core.redact.redact`
replaces it (in the user part and in a ``password=`` parameter) in every URL
we show, and :attr:`PostgresUrl.secrets` lists what to scrub from a driver's
message.

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
    chunks  (run_id, last_id, first_id, n, cols BYTEA, extra_ids, extras)
            -- packed copies of each run's settled events, added by the first
            -- writer that opens a database without them (postgres_chunks)

A batch is written by binary ``COPY`` into a temporary staging table created
inside the batch's transaction (dropped at its commit), then moved into
``events`` by one ``INSERT ... ON CONFLICT DO NOTHING``. Nothing outlives a
transaction on the server (no session temp table, prepared statement, session
advisory lock or ``SET``), so a transaction-pooling pgbouncer in front works.

``extra`` is the same strict JSON text as the SQLite store's. Times are
``DOUBLE PRECISION``, which keeps NaN as it is.
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Tuple
from urllib.parse import unquote, urlsplit

from goodput_core.redact import is_keyword_dsn, keyword_dsn, redact, remember, secrets_of
from goodput_core.stores.postgres.names import NAMES
__all__ = ["SCHEMA_VERSION", "DEFAULT_SCHEMA", "PostgresUrl", "parse_url", "statements"]

SCHEMA_VERSION = 1
DEFAULT_SCHEMA = "goodput"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


class PostgresUrl(NamedTuple):
    """A store URL taken apart: what libpq gets, our schema, what we show."""

    conninfo: str  #: the URL (or keyword DSN) for libpq: as given, less ``schema``
    schema: str  #: the PostgreSQL schema of the tables
    redacted: str  #: the URL with any password replaced by ``***``
    secrets: Tuple[str, ...]  #: passwords in the URL, to scrub from messages


def _join(parts) -> str:
    """urlunsplit, but keeping ``//`` with an empty host (``postgresql:///db``)."""
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{parts.path}{query}"


def _quote_keyword(value: str) -> str:
    """A keyword DSN value as libpq reads it back (quoted when needed)."""
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _parse_keywords(dsn: str) -> Tuple[str, str]:
    """(the DSN less our ``schema`` keyword, the schema) of a keyword DSN."""
    schema, kept = DEFAULT_SCHEMA, []
    for key, value in keyword_dsn(dsn) or ():
        if key == "schema":
            schema = value
        else:
            kept.append(f"{key}={_quote_keyword(value)}")
    return " ".join(kept), schema


def parse_url(url: str) -> PostgresUrl:
    """Takes our ``schema`` out of a store URL or libpq keyword DSN
    (``host=H dbname=D ... [schema=S]``); the rest is left to libpq. The
    URL's secrets are remembered by :mod:`goodput_core.redact` (scrubbed
    from every later message, the driver's included).

    Raises:
      ValueError: not a postgresql:// URL or keyword DSN, or a bad schema name.
    """
    secrets = secrets_of(url)
    remember(*secrets)
    redacted = redact(url)
    if is_keyword_dsn(url):
        conninfo, schema = _parse_keywords(url)
    else:
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ValueError(f"store URL {redacted!r} is malformed ({redact(exc)})") from None
        if parts.scheme not in NAMES:
            raise ValueError(f"store URL {redacted!r} is not a postgresql:// URL (e.g. "
                             "postgresql://USER:PASSWORD@HOST:PORT/DATABASE)")
        schema, kept = DEFAULT_SCHEMA, []
        for pair in (parts.query.split("&") if parts.query else []):
            key, _, value = pair.partition("=")
            if unquote(key) == "schema":
                schema = unquote(value)
            else:
                kept.append(pair)  # as written: libpq decodes it
        conninfo = _join(parts._replace(query="&".join(kept), fragment=""))
    if not _NAME.match(schema):
        raise ValueError(f"store URL {redacted!r}: schema {schema!r} is not a plain SQL "
                         "name (letters, digits, _ and $, at most 63)")
    return PostgresUrl(conninfo, schema, redacted, secrets)


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
        "schema_tables": "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s"
                         " ORDER BY tablename",
        "events_table": f"{s}.events",
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
        # A batch goes by binary COPY into a staging table of its own transaction
        # (dropped at commit: behind a transaction-pooling pgbouncer the next
        # transaction may run on another server session), then into events in one
        # statement that skips (writer, seq) pairs already stored.
        "stage": "CREATE TEMP TABLE goodput_stage (run_id INTEGER,"
                 " writer_id INTEGER, seq BIGINT, kind INTEGER, time DOUBLE PRECISION,"
                 " step BIGINT, extra TEXT, write_time DOUBLE PRECISION)"
                 " ON COMMIT DROP",
        "copy": "COPY goodput_stage FROM STDIN (FORMAT BINARY)",
        "insert": f"INSERT INTO {s}.events (run_id, writer_id, seq, kind, time, step, extra,"
                  " write_time) SELECT * FROM goodput_stage"
                  " ON CONFLICT (writer_id, seq) WHERE seq > 0 DO NOTHING",
        "select": f"SELECT kind, time, step, extra, writer_id, seq, write_time, id"
                  f" FROM {s}.events WHERE run_id = %s AND id > %s ORDER BY id LIMIT %s",
        "run_id": f"SELECT run_id FROM {s}.runs WHERE name = %s",
        "runs": f"SELECT name FROM {s}.runs ORDER BY run_id",
        "run_versions": f"SELECT r.name, coalesce((SELECT max(e.id) FROM {s}.events e"
                        f" WHERE e.run_id = r.run_id), 0) FROM {s}.runs r ORDER BY r.run_id",
    }
