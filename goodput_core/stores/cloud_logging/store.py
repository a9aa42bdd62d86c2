"""Google Cloud Logging as an event store (``cloud-logging://PROJECT/LOG``).

The distributed store for multi-host jobs on Google Cloud. Entries use the
payload format of ``ml-goodput-measurement``, so either library reads the
other's logs (see :mod:`goodput_core.stores.cloud_logging.wire` for the entry
layout and the queries).

Writes never wait for the network: :meth:`CloudLoggingStore.append` turns the
events into entries and queues them; one background thread sends them in
batches, one ``WriteLogEntries`` RPC per batch. When the service fails
(``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``INTERNAL``, ``RESOURCE_EXHAUSTED``,
connection refused, ...) the batch is retried with exponential backoff; memory
holds ``max_buffer`` entries at most and the rest waits in a local spill file
(:mod:`goodput_core.stores.spill_buffer`), replayed in order once the
service answers. Deterministic insert ids make a resent batch harmless.

Reads use ``ListLogEntries`` with an escaped filter, ascending, paged, and
resume strictly after a ``(timestamp, insertId)`` cursor; a first read looks
back ``lookback`` (7 days, the reference's default retention window).

The RPCs go through the generated ``LoggingServiceV2Client`` with
``retry=None``: its built-in retry sleeps up to 60 s of real time inside the
call, which would hide outages from our backoff (and from tests' clocks).

Known limits: an incremental reader whose cursor already passed an entry's
timestamp does not see that entry if it arrives later (entries delayed by an
outage keep their write time); a fresh read (``since=None``) does. Cloud
Logging string comparisons ignore case, so ``jsonPayload.job_name="Run"``
also matches ``run``: such entries are dropped here and counted as
``skipped["other_run"]``.
"""

from __future__ import annotations

import collections
import datetime as _dt
import logging
import random
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import google.api.monitored_resource_pb2 as _mr_pb2
from google.api_core import exceptions as _gexc
from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client
from google.cloud.logging_v2.types import ListLogEntriesRequest, WriteLogEntriesRequest

from goodput_core.events import EventRecord
from goodput_core.stores.cloud_logging import wire
from goodput_core.stores.background import QueuedStore, SendQueue
from goodput_core.stores.base import Cursor, StoreError
from goodput_core.stores.spill_buffer import default_spill_dir, spill_tag

__all__ = ["CloudLoggingStore", "TRANSIENT_ERRORS"]

logger = logging.getLogger("goodput")

_INFO = 200  # google.logging.type.LogSeverity.INFO
_WriteRequestPB = WriteLogEntriesRequest.pb()
_ListRequestPB = ListLogEntriesRequest.pb()

#: Errors retried with backoff (gRPC UNAVAILABLE also covers connection refused).
TRANSIENT_ERRORS = (
    _gexc.ServiceUnavailable, _gexc.DeadlineExceeded, _gexc.InternalServerError,
    _gexc.ResourceExhausted, _gexc.Aborted, _gexc.Unknown, ConnectionError, TimeoutError,
)


def _resource_pb(project: str, resource: Any):
    """The monitored resource, always explicit: without one the client library
    probes the GCE metadata server (up to ~10 s off Google Cloud)."""
    if resource is None:
        return _mr_pb2.MonitoredResource(type="global", labels={"project_id": project})
    if isinstance(resource, dict):
        rtype, labels = resource.get("type"), resource.get("labels") or {}
    else:  # google.cloud.logging.Resource or any object with type/labels
        rtype, labels = getattr(resource, "type", None), getattr(resource, "labels", None) or {}
    if not isinstance(rtype, str) or not rtype:
        raise ValueError(f"resource needs a 'type', got {resource!r}")
    return _mr_pb2.MonitoredResource(type=rtype, labels={str(k): str(v) for k, v in labels.items()})


class CloudLoggingStore(QueuedStore):
    """Events as Google Cloud Logging entries, written in the background.

    Args:
      project: the Google Cloud project id.
      log_name: the log id (the reference's ``logger_name``).
      client: a ``LoggingServiceV2Client`` (or an object with its
        ``write_log_entries`` / ``list_log_entries``); None builds one from
        ``credentials`` and ``client_options``.
      client_options: e.g. ``{"api_endpoint": "localhost:8443"}``.
      credentials: google-auth credentials; None = application default.
      resource: the monitored resource, a dict ``{"type": ..., "labels": {...}}``
        or a ``google.cloud.logging.Resource``; default ``global``.
      batch_size: entries per ``WriteLogEntries`` call.
      flush_interval_s: how long a partial batch waits for more entries.
      spill_dir: where entries beyond ``max_buffer`` wait during an outage
        (default ``~/.cache/goodput/cloud-logging-spill``).
      max_buffer: entries held in memory at most.
      lookback: how far back a first read (no cursor) and :meth:`runs` look.
      sleep: ``sleep(seconds)`` used between retries (inject in tests);
        default: an interruptible wait.
      clock: POSIX time now (look-back bound; timestamps of events without a
        write time).
      page_size: entries per ``ListLogEntries`` page (the service caps it at 1000).
      rpc_timeout_s: deadline of one RPC.
      backoff_initial_s, backoff_max_s: the retry delay doubles from the first
        to the second (each with +-20 % jitter).
      read_attempts: tries of one read page on transient errors.

    Raises:
      ValueError: a malformed project id, log name, resource or number.
      StoreError: no client could be built (e.g. no credentials found).
    """

    def __init__(self, project: str, log_name: str, *, client: Any = None,
                 client_options: Any = None, credentials: Any = None, resource: Any = None,
                 batch_size: int = 500, flush_interval_s: float = 1.0,
                 spill_dir: Optional[str] = None, max_buffer: int = 10_000,
                 lookback: _dt.timedelta = _dt.timedelta(days=7),
                 sleep: Optional[Callable[[float], Any]] = None,
                 clock: Callable[[], float] = time.time, page_size: int = 1000,
                 rpc_timeout_s: float = 30.0, backoff_initial_s: float = 0.5,
                 backoff_max_s: float = 60.0, read_attempts: int = 4):
        wire.validate_names(project, log_name)
        if batch_size < 1 or max_buffer < 1 or page_size < 1 or read_attempts < 1:
            raise ValueError("batch_size, max_buffer, page_size and read_attempts must be >= 1")
        self.project, self.log_name = project, log_name
        self.url = f"cloud-logging://{project}/{log_name}"
        self._log_path = f"projects/{project}/logs/{log_name}"
        self._resource = _resource_pb(project, resource)
        self._batch_size, self._interval = int(batch_size), float(flush_interval_s)
        self._max_buffer, self._page_size = int(max_buffer), min(int(page_size), 1000)
        self._lookback_s = float(lookback.total_seconds())
        self._spill_dir = spill_dir or default_spill_dir()
        self._clock, self._rpc_timeout = clock, float(rpc_timeout_s)
        self._backoff = (float(backoff_initial_s), float(backoff_max_s))
        self._read_attempts = int(read_attempts)
        self._random = random.Random()
        self._client_args = (client_options, credentials)
        self._own_client = client is None
        self._client = client if client is not None else self._make_client()
        self._user_sleep = sleep
        #: Entries skipped by reads, per reason (SkipReason values, "diagnostic",
        #: "other_run", "not_json").
        self.skipped: Dict[str, int] = collections.Counter()
        # the log's index for run_versions(): each run's newest entry position, and
        # the newest entry read (the next look reads only what came after it)
        self._index: Dict[str, Tuple[int, int, str]] = {}
        self._index_cursor: Optional[Tuple[int, int, str]] = None
        self._index_lock = threading.Lock()
        # the store has its send queue (stores/background.py): append hands entries to it
        self._sending = SendQueue(
            self.url, self._send,
            spill_dir=self._spill_dir, spill_tag=spill_tag(project, log_name),
            required=("p", "i"), max_buffer=self._max_buffer, batch_size=self._batch_size,
            flush_interval_s=self._interval, sleep=sleep, backoff=self._backoff,
            permanent=(_gexc.InvalidArgument,), transient=TRANSIENT_ERRORS,
            release=self._release, forget_connections=self._forget_connections)
        self._sending.start()

    # ----------------------------------------------------------- set-up
    def _make_client(self):
        options, credentials = self._client_args
        try:
            return LoggingServiceV2Client(credentials=credentials, client_options=options)
        except Exception as exc:  # google.auth.exceptions.DefaultCredentialsError, ...
            raise StoreError(
                f"cannot connect to Cloud Logging for {self.url}: {exc} (run "
                "'gcloud auth application-default login' or pass credentials=)") from exc

    def _sleep(self, seconds: float) -> None:
        if self._user_sleep is not None:
            self._user_sleep(seconds)
        else:
            time.sleep(seconds)  # a read retry on the caller's own thread

    def _get_client(self):
        if self._client is None:  # dropped in a forked child: channels do not survive fork
            self._client = self._make_client()
        return self._client

    def _forget_connections(self) -> None:
        if self._own_client:
            self._client = None  # rebuilt on first use (gRPC channels do not survive fork)

    # ----------------------------------------------------------- writes
    def append(self, batch: Sequence[EventRecord]) -> None:
        """Queues events for delivery and returns at once (no network I/O).

        An event that cannot be turned into an entry (unknown kind) is counted
        in ``stats()["rejected"]`` and dropped rather than failing the batch.

        Raises:
          OSError: the spill file cannot be written (the caller retries).
        """
        entries = []
        for event in batch:
            try:
                entries.append(wire.make_entry(event, self._clock))
            except Exception:
                self._sending.rejected += 1
        self._sending.put(entries)

    def _send(self, batch: List[Dict[str, Any]]) -> None:
        """One ``WriteLogEntries`` call for a batch (runs on the sender thread)."""
        request = _WriteRequestPB(log_name=self._log_path, resource=self._resource,
                                  partial_success=True)
        for e in batch:
            pb = request.entries.add()
            pb.insert_id = e["i"]
            pb.timestamp.seconds, pb.timestamp.nanos = e["t"]
            pb.severity = _INFO
            pb.json_payload.update(e["p"])
            pb.labels.update(e["l"])
        self._get_client().write_log_entries(request=WriteLogEntriesRequest(request),
                                             retry=None, timeout=self._rpc_timeout)

    def _release(self) -> None:
        if self._own_client and self._client is not None:
            try:
                self._client.transport.close()
            except Exception:
                pass

    # ----------------------------------------------------------- reads
    def _list_page(self, request) -> Any:
        """One ``ListLogEntries`` page, retried on transient errors."""
        delay = self._backoff[0]
        for attempt in range(self._read_attempts):
            try:
                pager = self._get_client().list_log_entries(
                    request=ListLogEntriesRequest(request), retry=None, timeout=self._rpc_timeout)
                response = next(iter(pager.pages))  # this page only: we page ourselves
                return type(response).pb(response)
            except TRANSIENT_ERRORS as exc:
                if attempt + 1 == self._read_attempts:
                    raise StoreError(f"reading {self.url} failed: {exc}") from exc
                self._sleep(delay * (0.8 + 0.4 * self._random.random()))
                delay = min(delay * 2, self._backoff[1])
            except _gexc.GoogleAPICallError as exc:
                raise StoreError(f"Cloud Logging refused the query on {self.url}: {exc}") from exc

    def _entries(self, filter_: str, page_size: int):
        """Yields raw entries matching ``filter_``, ascending, page by page."""
        request = _ListRequestPB(resource_names=[f"projects/{self.project}"], filter=filter_,
                                 order_by="timestamp asc", page_size=page_size)
        while True:
            page = self._list_page(request)
            yield from page.entries
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        """Events of ``run`` after ``since``, in timestamp (then insert id) order.

        Args:
          run: the run (``job_name``).
          since: a cursor from an earlier read, or None: everything in the
            look-back window.
          limit: at most this many events.

        Returns:
          (events, cursor): the cursor is ``(seconds, nanos, insert_id)`` of the
          last entry consumed (skipped entries included), or ``since``.

        Raises:
          StoreError: the service failed or refused the query.
        """
        if not isinstance(run, str):
            raise TypeError(f"run must be a string, got {run!r}")
        if since is not None:
            since = (int(since[0]), int(since[1]), str(since[2]))
        floor = wire.split_timestamp(self._clock() - self._lookback_s)
        filter_ = wire.run_filter(self.project, self.log_name, run, since, floor)
        page_size = self._page_size if limit is None else max(1, min(self._page_size, limit))
        events: List[EventRecord] = []
        cursor = since
        for raw in self._entries(filter_, page_size):
            cursor = (raw.timestamp.seconds, raw.timestamp.nanos, raw.insert_id)
            event = wire.decode_entry(raw, run, self.skipped)
            if event is not None:
                events.append(event)
                if limit is not None and len(events) >= limit:
                    break
        return events, cursor

    def runs(self) -> List[str]:
        """Job names seen in the look-back window, oldest first (see
        :meth:`run_versions`: the first call reads every entry of the log in the
        window, so it is slow on large logs; later calls read only new entries)."""
        return list(self.run_versions())

    def run_versions(self) -> Dict[str, str]:
        """Each run's version, oldest run first: where its newest entry in the
        look-back window stands, ``"SECONDS.NANOS/INSERT_ID"`` (the cursor a fresh
        read of the run ends at; it changes whenever an entry of the run arrives).

        Cloud Logging has no "distinct" or "max" query: the first call reads every
        entry of the log in the window once; this store object then keeps each
        run's newest position and the log's, and a later call reads only the
        entries after it (one query, usually one page). Like an incremental
        read, it does not see an entry that arrives late with a timestamp
        before the newest one already read (module docstring, known limits).

        Raises:
          StoreError: the service failed or refused the query.
        """
        floor = wire.split_timestamp(self._clock() - self._lookback_s)
        with self._index_lock:
            filter_ = " AND ".join(
                [wire.log_filter(self.project, self.log_name),
                 wire.after_clause(None, floor)]
                + ([] if self._index_cursor is None
                   else [wire.after_clause(self._index_cursor, floor)]))
            index = dict(self._index)
            cursor = self._index_cursor
            for raw in self._entries(filter_, self._page_size):
                cursor = (raw.timestamp.seconds, raw.timestamp.nanos, raw.insert_id)
                name = raw.json_payload.fields.get("job_name")
                if name is not None and name.WhichOneof("kind") == "string_value":
                    index[name.string_value] = cursor
            # a run whose entries all left the window is gone (the index stays bounded)
            index = {run: pos for run, pos in index.items() if pos[:2] >= floor}
            # kept only once every page was read: a failed look leaves the index as it was
            self._index, self._index_cursor = index, cursor
            return {run: f"{s}.{n:09d}/{iid}" for run, (s, n, iid) in index.items()}

    def log_index(self) -> Optional[Dict[str, Any]]:
        """The index :meth:`run_versions` keeps, as JSON data (None before a look),
        for a later process to start from (:meth:`restore_log_index`)."""
        with self._index_lock:
            if self._index_cursor is None:
                return None
            return {"log": self._log_path, "cursor": list(self._index_cursor),
                    "runs": [[run, *pos] for run, pos in self._index.items()]}

    def restore_log_index(self, state: Any) -> bool:
        """Starts :meth:`run_versions` from an index an earlier process kept
        (:meth:`log_index`): the next look reads only the entries after it.
        Ignored (False) when this store has looked already, or ``state`` is not
        an index of this log."""
        try:
            if state["log"] != self._log_path:
                return False
            seconds, nanos, last_id = state["cursor"]
            cursor = (int(seconds), int(nanos), str(last_id))
            index = {str(run): (int(s), int(n), str(iid)) for run, s, n, iid in state["runs"]}
        except (KeyError, TypeError, ValueError):
            return False
        with self._index_lock:
            if self._index_cursor is not None:
                return False
            self._index, self._index_cursor = index, cursor
            return True
