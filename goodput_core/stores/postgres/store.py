"""PostgreSQL as an event store (any ``postgresql://`` URL libpq accepts).

The distributed store for multi-host jobs off Google Cloud (GPU clusters under
Slurm or Kubernetes, other clouds, on premises): every host of a job writes
to one database that the team already runs. Needs the ``postgres`` extra
(``pip install 'goodput-core[postgres]'``, the psycopg 3 driver); nothing is
imported unless this store is used. URL and schema:
:mod:`goodput_core.stores.postgres.sql`; connections:
:mod:`goodput_core.stores.postgres.connect`.

Writes never wait for the network: :meth:`PostgresStore.append` encodes the
events and queues them; one background thread inserts them in batches (one
transaction per batch). Every store of a process writing to one server shares
one connection, opened for a burst of batches and closed when no batch waits,
so an idle process holds none; a refused connection ("too many clients") is
retried after a jittered, growing delay while the events wait.
When the server is unreachable (restart, network, failover) the batch is
retried with exponential backoff; memory holds ``max_buffer`` events at most
and the rest waits in a local spill file, delivered in order once the server
answers again (the same buffer and sender as the Cloud Logging store). Each
event carries its writer's id and sequence number, unique in the table, so a
batch resent after a lost reply is stored once.

Reads (on the reading thread's own connection) are paged by the event id.
Writers of one run take turns through a
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

import logging
import math
import os
import threading
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import psycopg

from goodput_core.events import EventRecord, Kind
from goodput_core.stores.background import QueuedStore, SendQueue
from goodput_core.stores.base import Cursor, StoreError
from goodput_core.stores.columns import EventPage
from goodput_core.stores.spill_buffer import spill_tag
from goodput_core.stores.postgres.chunks import (
    CHUNK_EVENTS, TAIL_EVENTS, chunk_statements, pack)
from goodput_core.stores.postgres.columns import column_statements
from goodput_core.stores.postgres.connect import (
    connect, describe, is_content_error, is_overload, slot_for)
from goodput_core.stores.postgres.read import Chunking, PostgresReader
from goodput_core.stores.postgres.sql import SCHEMA_VERSION, parse_url, statements
from goodput_core.stores.strict_json import dumps as _dumps

__all__ = ["PostgresStore", "default_spill_dir", "refusal_is_outage"]

logger = logging.getLogger("goodput")

_STAGE_TYPES = ["int4", "int4", "int8", "int4", "float8", "int8", "text", "float8"]
#: Failures of the connection itself: retried (the data waits), never dropped.
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError, OSError)


def default_spill_dir() -> str:
    """``$XDG_CACHE_HOME/goodput/postgres-spill`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "goodput", "postgres-spill")


def _destination(target: Dict[str, Any]) -> str:
    """Where a URL leads, without its password (the spill file's tag)."""
    keys = ("host", "hostaddr", "port", "dbname", "user", "service")
    env = {k: os.environ.get(v, "") for k, v in zip(keys, ("PGHOST", "PGHOSTADDR", "PGPORT",
                                                            "PGDATABASE", "PGUSER", "PGSERVICE"))}
    return " ".join(f"{k}={target.get(k) or env[k]}" for k in keys)


_JOB_END = int(Kind.JOB_END)
_MISSING = ("42P01", "3F000")  # undefined table, invalid schema name


def refusal_is_outage(exc: BaseException) -> bool:
    """True when the server refused a write for a reason that is not the
    content of the events (a connection cut, a read-only server, ``INSERT``
    revoked, tables missing, out of connection slots, a restart): the batch is
    kept and retried, never dropped as bad content. Only a data exception, an
    integrity violation, a program limit or a value the driver cannot encode is
    about the content (:func:`~goodput_core.stores.postgres.connect.is_content_error`)."""
    return not is_content_error(exc)


def _encode(event: EventRecord) -> Dict[str, Any]:
    """One event as a JSON-able spill entry (``extra`` already as its stored JSON text)."""
    row = list(event)
    if row[4] is not None:
        row[4] = _dumps(row[4])
    return {"e": row}


class PostgresStore(QueuedStore):
    """Events in a PostgreSQL database, shared by every host of a job.

    Args:
      url: a ``postgresql://`` URL as libpq takes it (``[?schema=NAME]`` is ours).
      batch_size: events per insert transaction at most.
      flush_interval_s: how long a partial batch waits for more events (each
        batch burst opens a connection: longer means fewer connections).
      spill_dir: where events beyond ``max_buffer`` wait during an outage
        (default :func:`default_spill_dir`).
      max_buffer: events held in memory at most while the server is away.
      connect_timeout_s: how long opening a connection may take.
      sleep: ``sleep(seconds)`` between write retries (inject in tests).
      backoff_initial_s, backoff_max_s: the retry delay doubles from the
        first to the second (+-20 % jitter); so does the process's delay
        before connecting again after a failed attempt (full jitter).
      chunk_events: events per packed chunk this writer makes (0: none;
        :mod:`goodput_core.stores.postgres.chunks`).
      tail_events: a batch holding a run's job end also packs the run's
        events after its last full chunk, if at least this many (0: never).

    Raises:
      StoreError: malformed URL, server unreachable, authentication failed,
        no such database, or a schema written by a newer goodput version. A
        server that is full ("too many clients") or starting up is no error:
        the tables are then checked before the first batch.
    """

    def __init__(self, url: str, *, batch_size: int = 10_000, flush_interval_s: float = 1.0,
                 spill_dir: Optional[str] = None, max_buffer: int = 100_000,
                 connect_timeout_s: float = 5.0,
                 sleep: Optional[Callable[[float], Any]] = None,
                 backoff_initial_s: float = 0.2, backoff_max_s: float = 30.0,
                 chunk_events: int = CHUNK_EVENTS, tail_events: int = TAIL_EVENTS):
        try:
            parsed = parse_url(url)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        self._conninfo, self.schema, self.url = parsed.conninfo, parsed.schema, parsed.redacted
        self._secrets = parsed.secrets
        try:
            from psycopg.conninfo import conninfo_to_dict

            target = conninfo_to_dict(self._conninfo)
        except psycopg.Error as exc:  # an unknown parameter, a malformed URL
            raise StoreError(f"store URL {self.url}: {describe(exc, self._secrets)}") from None
        if batch_size < 1 or max_buffer < 1:
            raise StoreError("batch_size and max_buffer must be >= 1")
        self._sql = statements(self.schema)
        self._sql.update(column_statements(f'"{self.schema}"'))
        self._sql.update(chunk_statements(f'"{self.schema}"'))
        # what the reads and the writes know of the packed chunks (both use it)
        self._chunking = Chunking(max(0, int(chunk_events)))
        self._tail_events = max(0, int(tail_events))
        self._packing_refused = ""  # why this writer does not pack, until said
        self._lock_ns = zlib.crc32(self.schema.encode()) & 0x7FFFFFFF
        self._connect_timeout = max(1, int(math.ceil(connect_timeout_s)))
        self._run_ids: Dict[str, int] = {}
        self._writer_ids: Dict[Tuple[int, str, int, str], int] = {}
        self._ids_lock = threading.Lock()
        # the store has its reader (its own connection per thread; stores/postgres/read.py)
        self._reader = PostgresReader(self.url, self._secrets, self._sql, self._connect,
                                      self._chunking)
        #: Rows skipped by reads, per reason.
        self.skipped = self._reader.skipped
        self._batch_size = int(batch_size)
        self._connect_backoff = (float(backoff_initial_s), float(backoff_max_s))
        self._slot = slot_for(self._conninfo, self._connect, self._connect_backoff)
        self._schema_checked = False
        try:  # fails here, at start-up, with a one-line error
            with self._slot.lease(gated=False) as conn:
                self._ensure_schema(conn)
        except StoreError as exc:
            if not getattr(exc, "overload", False):
                raise
            if not getattr(exc, "held_back", False):  # said once per process, not per store
                logger.warning("goodput: %s; the goodput tables are checked before the "
                               "first batch", exc)
        # the store has its send queue (stores/background.py): append hands entries to it
        self._sending = SendQueue(
            self.url, self._send, release=self._release,
            forget_connections=self._forget_connections,
            spill_dir=spill_dir or default_spill_dir(), required=("e",),
            # One tag per destination (no password): a later process writing
            # there adopts and delivers what an earlier one left.
            spill_tag=spill_tag(_destination(target), self.schema),
            max_buffer=int(max_buffer), batch_size=self._batch_size,
            flush_interval_s=float(flush_interval_s), sleep=sleep,
            backoff=(float(backoff_initial_s), float(backoff_max_s)),
            transient=_TRANSIENT + (StoreError,))
        self._sending.start()

    # ----------------------------------------------------------- connections
    def _connect(self) -> "psycopg.Connection":
        try:
            return connect(self._conninfo, timeout_s=self._connect_timeout)
        except psycopg.Error as exc:
            error = StoreError(f"cannot connect to {self.url}: {describe(exc, self._secrets)}")
            error.overload = is_overload(exc)
            raise error from None

    def _ensure_schema(self, conn) -> None:
        if self._schema_checked:
            return
        try:
            with conn.transaction():
                # Several hosts may open a fresh database at once: one creates.
                conn.execute(self._sql["lock_run"], (self._lock_ns, 0))
                exists = conn.execute(self._sql["has_meta"],
                                      (f'"{self.schema}".meta',)).fetchone()[0]
                if not exists:
                    self._refuse_foreign(conn)  # raises: the transaction rolls back
                    conn.execute(self._sql["create"])
                row = conn.execute(self._sql["version"]).fetchone()
                version = row[0] if row else None
                if version is None or not str(version).isdigit() or \
                        int(version) != SCHEMA_VERSION:  # nothing added to a newer schema
                    raise StoreError(
                        f"{self.url} has goodput store schema version {version}, not the "
                        f"{SCHEMA_VERSION} this version understands: upgrade goodput-core or "
                        "use another schema (?schema=NAME)")
                if self._chunking.chunk_events:
                    self._create_chunks(conn)
        except _TRANSIENT:
            raise  # the connection broke: the caller drops it and retries
        except psycopg.Error as exc:
            raise StoreError(f"cannot set up the goodput tables in {self.url}: "
                             f"{describe(exc, self._secrets)}") from None
        self._schema_checked = True

    def _refuse_foreign(self, conn) -> None:
        """goodput creates its tables only in a schema of its own: one that
        holds other tables (another application's, ``?schema=public``) is refused."""
        others = [r[0] for r in conn.execute(self._sql["schema_tables"], (self.schema,))]
        if others:
            shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
            raise StoreError(
                f"{self.url}: the schema {self.schema!r} holds other tables ({shown}) and no "
                "goodput store: goodput creates its tables only in a schema of its own "
                "(?schema=NAME; the default is goodput)")

    def _create_chunks(self, conn) -> None:
        """Adds the packed chunks' table to a database made before it existed
        (inside the schema check's transaction and lock). A role that may not
        create it writes rows only, as before (said at its first batch: a
        store opened only to read has nothing to say)."""
        try:
            with conn.transaction():  # a savepoint: a refusal leaves the check going
                if not conn.execute(self._sql["has_meta"],
                                    (self._sql["chunks_table"],)).fetchone()[0]:
                    conn.execute(self._sql["create_chunks"])
            self._chunking.has_table = True
        except _TRANSIENT:
            raise
        except psycopg.Error as exc:
            self._no_packing(exc, at_first_batch=True)

    def _no_packing(self, exc: BaseException, at_first_batch: bool = False) -> None:
        self._chunking.chunk_events = 0
        self._packing_refused = (f"goodput: {self.url}: this writer does not pack chunks "
                                 f"({describe(exc, self._secrets)}); reads of its runs "
                                 "are slower")
        if not at_first_batch:
            self._say_no_packing()

    def _say_no_packing(self) -> None:
        if self._packing_refused:
            logger.warning("%s", self._packing_refused)
            self._packing_refused = ""

    def _pack(self, conn, run_ids: Sequence[int], ended: Set[int]) -> None:
        """Packs what is due in the runs of a batch, inside its transaction
        (:func:`~goodput_core.stores.postgres.chunks.pack`): full chunks, and
        the rest of the ``ended`` runs (the batch holds their job end); a
        refusal is no reason to lose the batch: this writer stops packing."""
        try:
            with conn.transaction():
                for run_id in run_ids:
                    pack(conn, self._sql, run_id, self._chunking.chunk_events,
                         self._tail_events if run_id in ended else 0)
        except psycopg.errors.QueryCanceled:
            return  # a statement_timeout: the batch goes in, the next one packs
        except _TRANSIENT:
            raise
        except psycopg.Error as exc:
            if getattr(exc, "sqlstate", None) in _MISSING:
                raise  # the tables went away: an outage (see _send)
            self._no_packing(exc)

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
                self._sending.rejected += 1
        self._sending.put(entries)

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
        with conn.transaction():
            conn.execute(self._sql["stage"])
            batch_runs = sorted({run_ids[r[0]] for r in rows})
            for run_id in batch_runs:  # sorted: no deadlock
                conn.execute(self._sql["lock_run"], (self._lock_ns, run_id))
            with conn.cursor().copy(self._sql["copy"]) as copy:
                copy.set_types(_STAGE_TYPES)
                for r, kind, t, step, extra, pi, host, pid, att, seq, wt in rows:
                    copy.write_row((run_ids[r], writer_ids[(pi, host, pid, att)], seq, kind,
                                    t, step, extra, wt))
            conn.execute(self._sql["insert"])
            if self._chunking.chunk_events and self._chunking.has_table:
                self._pack(conn, batch_runs, {run_ids[r[0]] for r in rows if r[1] == _JOB_END})
            self._say_no_packing()

    def _send(self, entries: List[Dict[str, Any]]) -> None:
        """Inserts one batch in one transaction (runs on the sender thread)."""
        rows = [e["e"] for e in entries if isinstance(e, dict) and isinstance(e.get("e"), list)
                and len(e["e"]) == 11]
        self._sending.rejected += len(entries) - len(rows)
        if not rows:
            return

        def more() -> bool:  # another full batch is ready: keep the connection for it
            return len(self._sending.sender.buffer) - len(entries) >= self._batch_size

        # Could not connect (StoreError) or the connection broke (_TRANSIENT):
        # the slot closes it and the sender retries the batch later.
        with self._slot.lease(more) as conn:
            self._ensure_schema(conn)
            try:
                self._insert(conn, rows)
            except Exception as exc:
                if refusal_is_outage(exc):  # read-only, permission, missing table, restart
                    if getattr(exc, "sqlstate", None) in _MISSING:
                        self._forget_tables()
                    raise  # the moment, not the events: the whole batch is retried
                # The content was refused: isolate the bad events, keep the rest.
                logger.warning("goodput: %s refused a batch (%s); inserting it event by "
                               "event", self.url, describe(exc, self._secrets))
                self._insert_one_by_one(conn, rows)

    def _forget_tables(self) -> None:
        """The tables went away under a live writer (dropped, restored from an
        old dump): forget the ids they held; the retry creates them again
        (:meth:`_ensure_schema` runs before the next batch)."""
        with self._ids_lock:
            self._run_ids.clear()
            self._writer_ids.clear()
        self._reader.forget_writers()
        self._schema_checked = self._chunking.has_table = False

    def _insert_one_by_one(self, conn, rows: List[list]) -> None:
        for row in rows:
            try:
                self._insert(conn, [row])
            except Exception as exc:
                if refusal_is_outage(exc):
                    raise  # the whole batch is retried later; inserted rows are deduplicated
                self._sending.rejected += 1

    def _release(self) -> None:
        self._reader.drop_connection()  # the reading connection of this thread

    def _forget_connections(self) -> None:
        # The parent's connections are left alone (closing one here would end the
        # parent's session; psycopg does not close them on collection either). The
        # writing slot is per process: the child's first batch makes its own.
        self._reader.forget_connections()
        self._slot = slot_for(self._conninfo, self._connect, self._connect_backoff)

    # ----------------------------------------------------------- reads (the reader's)
    #: ``read_columns`` takes ``writers=True`` (each row's writer and sequence number)
    columns_with_writers = True

    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        """:meth:`Store.read <goodput_core.stores.base.Store.read>`, in commit order
        (the cursor is the last event id read).

        Raises:
          StoreError: the server cannot be reached or refused the query.
        """
        return self._reader.read(run, since, limit)

    def read_columns(self, run: str, since: Cursor = None, limit: Optional[int] = None,
                     writers: bool = False) -> Tuple[EventPage, Cursor]:
        """As :meth:`read`, but the events as numpy columns (no Python object
        per event; :mod:`goodput_core.stores.postgres.columns`): what the
        engine reads. ``writers``: each row's writer and sequence number too
        (``EventPage.writer``, ``seq``, ``writer_keys``)."""
        return self._reader.read_columns(run, since, limit, writers)

    def runs(self) -> List[str]:
        """Names of the runs in this store, oldest first."""
        return self._reader.runs()

    def run_versions(self) -> Dict[str, int]:
        """Each run's version, oldest run first: its largest event id (one index
        look-up per run; run summaries use it to tell a changed run)."""
        return self._reader.run_versions()

    def stats(self) -> Dict[str, Any]:
        """The sender's counters, plus this process's connection attempts to the
        server (``connections``: opened, refused, held_back; shared by its stores)."""
        out = super().stats()
        out["connections"] = dict(self._slot.counts)
        return out

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"
