"""PostgreSQL as an event store (``postgresql://USER:PASSWORD@HOST:PORT/DB``).

The distributed store for multi-host jobs off Google Cloud (GPU clusters under
Slurm or Kubernetes, other clouds, on premises): every host of a job writes
to one database that the team already runs. Needs the ``postgres`` extra
(``pip install 'goodput-core[postgres]'``, the psycopg 3 driver); nothing is
imported unless this store is used. URL and schema:
:mod:`goodput_core.stores.postgres_sql`.

Writes never wait for the network: :meth:`PostgresStore.append` encodes the
events and queues them; one background thread inserts them in batches (one
transaction and one multi-row ``INSERT ... SELECT unnest(...)`` per batch).
When the server is unreachable (restart, network, failover) the batch is
retried with exponential backoff; memory holds ``max_buffer`` events at most
and the rest waits in a local spill file, delivered in order once the server
answers again (the same buffer and sender as the Cloud Logging store). Each
event carries its writer's id and sequence number, unique in the table, so a
batch resent after a lost reply is stored once.

Reads are paged by the event id. Writers of one run take turns through a
transaction-scoped advisory lock, so the ids of a run grow in commit order
and an incremental reader never skips a batch that commits late.

A batch the server rejects for its content (a value PostgreSQL cannot hold)
is inserted event by event: only the bad events are dropped and counted
(``stats()["rejected"]``). A refusal that is not about the content (a
read-only server, ``INSERT`` revoked, tables missing, out of connection
slots: :func:`refusal_is_outage`) is an outage: the batch is kept and retried.

Security: every value is a bound parameter; the only name inlined into SQL is
the schema, checked against a plain-identifier pattern and quoted. The
password appears in no message, log line or ``url`` attribute.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import threading
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg

from goodput_core.events import EventRecord
from goodput_core.stores.background import QueuedStoreMixin
from goodput_core.stores.base import Cursor, Store, StoreError
from goodput_core.stores.cloud_logging_spill import spill_tag
from goodput_core.stores.columns import EventPage
from goodput_core.stores.postgres_columns import column_statements, read_page
from goodput_core.stores.postgres_sql import SCHEMA_VERSION, parse_url, statements
from goodput_core.stores.sqlite_json import dumps as _dumps

__all__ = ["PostgresStore", "default_spill_dir"]

logger = logging.getLogger("goodput")

_PAGE = 10_000
_COLUMN_PAGE = 262_144
_STAGE_TYPES = ["int4", "int4", "int8", "int4", "float8", "int8", "text", "float8"]
_NAN = math.nan
#: Failures of the connection itself: retried (the data waits), never dropped.
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError, OSError)


def default_spill_dir() -> str:
    """``$XDG_CACHE_HOME/goodput/postgres-spill`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "goodput", "postgres-spill")


#: SQLSTATE classes and codes that say the server cannot take writes now, not
#: that one event is wrong: connection (08), transaction rollback (40),
#: resources such as too many connections (53), object not available (55),
#: operator intervention such as a shutdown (57), system errors (58), invalid
#: authorization (28), read-only transaction (25006: a standby, a failover,
#: ``default_transaction_read_only``), permission denied (42501), a table or
#: schema that is missing (42P01, 3F000).
_OUTAGE_CLASSES = ("08", "28", "40", "53", "55", "57", "58")
_OUTAGE_CODES = ("25006", "42501", "42P01", "3F000")
_MISSING = ("42P01", "3F000")  # undefined table, invalid schema name


def refusal_is_outage(exc: BaseException) -> bool:
    """True when the server refused a write for a reason that is not the
    content of the events (see :data:`_OUTAGE_CODES`): the batch is kept and
    retried, never dropped as bad content."""
    if isinstance(exc, _TRANSIENT):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state[:2] in _OUTAGE_CLASSES or state in _OUTAGE_CODES


def _one_line(exc: BaseException) -> str:
    """The server's message on one line (libpq repeats the host; keep the FATAL part)."""
    text = " ".join(str(exc).split())
    return text.partition("failed: ")[2] or text


def _encode(event: EventRecord) -> Dict[str, Any]:
    """One event as a JSON-able spill entry (``extra`` already as its stored JSON text)."""
    row = list(event)
    if row[4] is not None:
        row[4] = _dumps(row[4])
    return {"e": row}


class PostgresStore(QueuedStoreMixin, Store):
    """Events in a PostgreSQL database, shared by every host of a job.

    Args:
      url: ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE[?schema=NAME]``.
      batch_size: events per insert transaction at most.
      flush_interval_s: how long a partial batch waits for more events.
      spill_dir: where events beyond ``max_buffer`` wait during an outage
        (default :func:`default_spill_dir`).
      max_buffer: events held in memory at most while the server is away.
      connect_timeout_s: how long opening a connection may take.
      sleep: ``sleep(seconds)`` between write retries (inject in tests).
      backoff_initial_s, backoff_max_s: the retry delay doubles from the
        first to the second (+-20 % jitter).

    Raises:
      StoreError: malformed URL, server unreachable, authentication failed,
        no such database, or a schema written by a newer goodput version.
    """

    def __init__(self, url: str, *, batch_size: int = 10_000, flush_interval_s: float = 0.2,
                 spill_dir: Optional[str] = None, max_buffer: int = 100_000,
                 connect_timeout_s: float = 5.0,
                 sleep: Optional[Callable[[float], Any]] = None,
                 backoff_initial_s: float = 0.2, backoff_max_s: float = 30.0):
        try:
            self._conninfo, self.schema, self.url = parse_url(url)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        if batch_size < 1 or max_buffer < 1:
            raise StoreError("batch_size and max_buffer must be >= 1")
        self._sql = statements(self.schema)
        self._sql.update(column_statements(f'"{self.schema}"'))
        self._lock_ns = zlib.crc32(self.schema.encode()) & 0x7FFFFFFF
        self._connect_timeout = max(1, int(math.ceil(connect_timeout_s)))
        self._local = threading.local()
        self._run_ids: Dict[str, int] = {}
        self._writer_ids: Dict[Tuple[int, str, int, str], int] = {}
        self._writers: Dict[int, Tuple[int, str, int, str]] = {}
        self._ids_lock = threading.Lock()
        self.skipped: Dict[str, int] = collections.Counter()
        conn = self._connection()  # fails here, at start-up, with a one-line error
        self._ensure_schema(conn)
        self._start_sending(
            spill_dir=spill_dir or default_spill_dir(), required=("e",),
            # One tag per server, database and schema (no password): a later
            # process writing there adopts and delivers what an earlier one left.
            spill_tag=spill_tag(self._conninfo.rpartition("@")[2].partition("?")[0],
                                self.schema),
            max_buffer=int(max_buffer), batch_size=int(batch_size),
            flush_interval_s=float(flush_interval_s), sleep=sleep,
            backoff=(float(backoff_initial_s), float(backoff_max_s)), transient=_TRANSIENT)

    # ----------------------------------------------------------- connections
    def _connect(self) -> "psycopg.Connection":
        try:
            return psycopg.connect(self._conninfo, autocommit=True,
                                   connect_timeout=self._connect_timeout,
                                   application_name="goodput")
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.url}: {_one_line(exc)}") from None

    def _connection(self) -> "psycopg.Connection":
        """This thread's connection (opened on first use in each thread and process)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid() \
                and not conn.closed:
            return conn
        conn = self._connect()
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            try:
                conn.close()
            except Exception:
                pass

    def _ensure_schema(self, conn) -> None:
        try:
            with conn.transaction():
                # Several hosts may open a fresh database at once: one creates.
                conn.execute(self._sql["lock_run"], (self._lock_ns, 0))
                exists = conn.execute(self._sql["has_meta"],
                                      (f'"{self.schema}".meta',)).fetchone()[0]
                if not exists:
                    conn.execute(self._sql["create"])
                row = conn.execute(self._sql["version"]).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot set up the goodput tables in {self.url}: "
                             f"{_one_line(exc)}") from None
        version = row[0] if row else None
        if version is None or not str(version).isdigit() or int(version) != SCHEMA_VERSION:
            raise StoreError(
                f"{self.url} has goodput store schema version {version}, not the "
                f"{SCHEMA_VERSION} this version understands: upgrade goodput-core or use "
                "another schema (?schema=NAME)")

    # ----------------------------------------------------------- writes
    def append(self, batch: Sequence[EventRecord]) -> None:
        """Queues events for insertion and returns at once (no network I/O).

        An event that cannot be encoded (a cyclic ``extra``) is counted in
        ``stats()["rejected"]`` and dropped rather than failing the batch.

        Raises:
          OSError: the spill file cannot be written (the caller retries).
        """
        entries = []
        for event in batch:
            try:
                entries.append(_encode(event))
            except Exception:
                self._rejected += 1
        self._queue(entries)

    def _ids(self, conn, rows: List[list]) -> Tuple[Dict[str, int], Dict[tuple, int]]:
        """Run and writer ids of a batch, created when new (ids never change)."""
        runs = [r for r in dict.fromkeys(e[0] for e in rows) if r not in self._run_ids]
        writers = [w for w in dict.fromkeys(tuple(e[5:9]) for e in rows)
                   if w not in self._writer_ids]
        if runs:
            conn.execute(self._sql["add_runs"], (runs,))
            with self._ids_lock:
                self._run_ids.update(conn.execute(self._sql["run_ids"], (runs,)).fetchall())
        if writers:
            cols = [list(c) for c in zip(*writers)]
            conn.execute(self._sql["add_writers"], cols)
            found = conn.execute(self._sql["writer_ids"], cols).fetchall()
            with self._ids_lock:
                for pi, host, pid, att, wid in found:
                    self._writer_ids[(pi, host, pid, att)] = wid
        return self._run_ids, self._writer_ids

    def _insert(self, conn, rows: List[list]) -> None:
        """One transaction: binary ``COPY`` into a staging table, then one insert
        that skips (writer, seq) pairs already stored (COPY alone cannot)."""
        run_ids, writer_ids = self._ids(conn, rows)
        if getattr(self._local, "staged", None) is not conn:
            conn.execute(self._sql["stage"])
            self._local.staged = conn
        with conn.transaction():
            for run_id in sorted({run_ids[r[0]] for r in rows}):  # sorted: no deadlock
                conn.execute(self._sql["lock_run"], (self._lock_ns, run_id))
            with conn.cursor().copy(self._sql["copy"]) as copy:
                copy.set_types(_STAGE_TYPES)
                for r, kind, t, step, extra, pi, host, pid, att, seq, wt in rows:
                    copy.write_row((run_ids[r], writer_ids[(pi, host, pid, att)], seq, kind,
                                    t, step, extra, wt))
            conn.execute(self._sql["insert"])

    def _send(self, entries: List[Dict[str, Any]]) -> None:
        """Inserts one batch in one transaction (runs on the sender thread)."""
        rows = [e["e"] for e in entries if isinstance(e, dict) and isinstance(e.get("e"), list)
                and len(e["e"]) == 11]
        self._rejected += len(entries) - len(rows)
        if not rows:
            return
        try:
            self._insert(self._connection(), rows)
        except StoreError:
            raise  # could not connect: retried by the sender
        except _TRANSIENT:
            self._drop_connection()  # a broken connection is not reused
            raise
        except (psycopg.Error, ValueError, TypeError, UnicodeError, OverflowError) as exc:
            if refusal_is_outage(exc):  # read-only, permission, missing table: retried
                self._drop_connection()
                if getattr(exc, "sqlstate", None) in _MISSING:
                    self._recreate_tables()
                raise
            # The content was refused: isolate the bad events, keep the rest.
            logger.warning("goodput: %s refused a batch (%s); inserting it event by event",
                           self.url, _one_line(exc))
            self._insert_one_by_one(rows)

    def _recreate_tables(self) -> None:
        """The tables went away under a live writer (dropped, restored from an
        old dump): forget the ids they held and create them again, so that the
        retry stores the batch (a failure here is retried with it)."""
        with self._ids_lock:
            self._run_ids.clear()
            self._writer_ids.clear()
            self._writers.clear()
        try:
            self._ensure_schema(self._connection())
        except StoreError as exc:
            logger.warning("goodput: cannot create the goodput tables in %s again: %s",
                           self.url, exc)

    def _insert_one_by_one(self, rows: List[list]) -> None:
        conn = self._connection()
        for row in rows:
            try:
                self._insert(conn, [row])
            except _TRANSIENT:
                self._drop_connection()
                raise  # the whole batch is retried later; inserted rows are deduplicated
            except (psycopg.Error, ValueError, TypeError, UnicodeError, OverflowError) as exc:
                if refusal_is_outage(exc):
                    self._drop_connection()
                    raise
                self._rejected += 1

    def _release(self) -> None:
        self._drop_connection()

    # ----------------------------------------------------------- reads
    def _query(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``fn(conn)``; a connection broken by a server restart is reopened once."""
        for attempt in (0, 1):
            conn = self._connection()
            try:
                return fn(conn)
            except _TRANSIENT as exc:
                self._drop_connection()
                if attempt:
                    raise StoreError(f"reading {self.url} failed: {_one_line(exc)}") from None
            except psycopg.Error as exc:
                raise StoreError(f"reading {self.url} failed: {_one_line(exc)}") from None

    def _writer(self, conn, writer_id: int) -> Tuple[int, str, int, str]:
        found = self._writers.get(writer_id)
        if found is None:
            with self._ids_lock:
                for wid, *meta in conn.execute(self._sql["all_writers"]).fetchall():
                    self._writers[wid] = tuple(meta)
            found = self._writers.setdefault(writer_id, (0, "", 0, ""))
        return found

    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        """Events of ``run`` with an id greater than ``since``, in commit order.

        Args:
          run: the run name.
          since: a cursor from an earlier read (the last id read), or None.
          limit: at most this many events (None: all).

        Returns:
          (events, cursor): the id of the last event returned, or ``since``.

        Raises:
          StoreError: the server cannot be reached or refused the query.
        """
        if limit is not None and limit <= 0:
            return [], since
        return self._query(lambda conn: self._select(conn, run, since, limit))

    def read_columns(self, run: str, since: Cursor = None,
                     limit: Optional[int] = None) -> Tuple[EventPage, Cursor]:
        """As :meth:`read`, but the events as numpy columns (no Python object
        per event; :mod:`goodput_core.stores.postgres_columns`): what the
        engine reads."""
        if limit is not None and limit <= 0:
            return EventPage.empty(run), since
        return self._query(lambda conn: self._select_columns(conn, run, since, limit))

    def _select_columns(self, conn, run: str, since: Cursor, limit: Optional[int]):
        row = conn.execute(self._sql["run_id"], (run,)).fetchone()
        if row is None:
            return EventPage.empty(run), since
        last = 0 if since is None else int(since)
        pages: List[EventPage] = []
        left = limit
        while True:  # pages of _COLUMN_PAGE, so that the COPY buffer stays bounded
            n = _COLUMN_PAGE if left is None else min(_COLUMN_PAGE, left)
            page, last = read_page(conn, self._sql, run, row[0], last, n,
                                   lambda wid: self._writer(conn, wid), self.skipped)
            pages.append(page)
            left = None if left is None else left - len(page)
            if len(page) < n or left == 0:
                break
        page = pages[0] if len(pages) == 1 else EventPage.concat(run, pages)
        return page, (last if len(page) else since)

    def _select(self, conn, run: str, since: Cursor, limit: Optional[int]):
        row = conn.execute(self._sql["run_id"], (run,)).fetchone()
        if row is None:
            return [], since
        run_id, last = row[0], (0 if since is None else int(since))
        out: List[EventRecord] = []
        loads = json.loads
        writers: Dict[int, Tuple[int, str, int, str]] = {}
        while limit is None or len(out) < limit:
            page = _PAGE if limit is None else min(_PAGE, limit - len(out))
            rows = conn.execute(self._sql["select"], (run_id, last, page),
                                binary=True).fetchall()
            for kind, t, step, extra, wid, seq, wt, eid in rows:
                try:
                    payload = None if extra is None else loads(extra)
                except ValueError:
                    self.skipped["bad_extra"] += 1
                    payload = None
                meta = writers.get(wid)
                if meta is None:
                    meta = writers[wid] = self._writer(conn, wid)
                out.append(EventRecord(run, kind, _NAN if t is None else t, step, payload,
                                       *meta, seq, _NAN if wt is None else wt))
            if rows:
                last = rows[-1][7]
            if len(rows) < page:
                break
        return out, (last if out else since)

    def runs(self) -> List[str]:
        """Names of the runs in this store, oldest first."""
        return self._query(lambda conn: [r[0] for r in conn.execute(self._sql["runs"])])

    def _forget_connections(self) -> None:
        # The parent's connections are left alone (closing one here would end the
        # parent's session; psycopg does not close them on collection either).
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"
