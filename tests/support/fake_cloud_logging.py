"""A real gRPC Cloud Logging server on loopback, for tests (no network, no credentials).

:class:`FakeCloudLogging` serves ``google.logging.v2.LoggingServiceV2``'s
``WriteLogEntries`` and ``ListLogEntries`` over TLS on ``127.0.0.1`` with the
client library's own message types (the proto-plus classes' serialisers; the
package ships no ``*_pb2_grpc`` servicer). Clients reach it through their
public options::

    google.cloud.logging.Client(project="p", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": fake.endpoint})

trusting the certificate of :mod:`tests.support.loopback_tls`.

What it emulates of the service:

* writes: entries get the request's log name, resource and labels as
  defaults; an entry with the same log name, ``insertId`` and timestamp as a
  stored one is a duplicate and dropped (Cloud Logging's de-duplication);
* reads: the filter is parsed and evaluated by
  :mod:`tests.support.fake_logging_filter` (Cloud Logging's precedence, where
  ``OR`` binds tighter than ``AND``; case-blind string comparison; an
  unparseable filter or unknown field is ``INVALID_ARGUMENT``);
* ``order_by`` ``timestamp asc|desc`` (ties by ``insertId``), ``page_size``
  capped at 1000 (default 50), opaque ``page_token`` continuation;
* failures driven by the test, never by time: :meth:`FakeCloudLogging.fail`
  (every call fails with a status code until :meth:`heal`) and
  :meth:`lose_responses` (a write is stored, then answered with an error, as
  when a response is lost on the way back).
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import grpc
from google.cloud.logging_v2.types import (
    ListLogEntriesRequest,
    ListLogEntriesResponse,
    WriteLogEntriesRequest,
    WriteLogEntriesResponse,
)
from google.cloud.logging_v2.types import LogEntry as _LogEntry

from tests.support.fake_logging_filter import (
    FilterError,
    matches,
    parse_filter,
    parse_time,
    struct_to_python,
)
from tests.support.loopback_grpc import LoopbackGrpcServer

__all__ = ["FakeCloudLogging", "FilterError", "parse_filter", "parse_time", "reference_client"]

_LogEntryPB = _LogEntry.pb()
_SERVICE = "google.logging.v2.LoggingServiceV2"


def _key(entry) -> Tuple[int, int, str, str]:
    return entry.timestamp.seconds, entry.timestamp.nanos, entry.insert_id, entry.log_name


class FakeCloudLogging(LoopbackGrpcServer):
    """A loopback ``LoggingServiceV2`` server (use as a context manager).

    Args:
      tls: serve TLS with the loopback certificate (the public client route);
        False serves plaintext (for an explicit channel).
      clock: POSIX time now, for entries written without a timestamp.
    """

    def __init__(self, *, tls: bool = True, clock: Callable[[], float] = None):
        import time

        super().__init__(tls=tls, max_workers=8)
        self._clock = clock or time.time
        self._lock = threading.Lock()
        self._entries: List[_Stored] = []
        self._seen = set()
        self._failure: Optional[Tuple[grpc.StatusCode, str]] = None
        self._lose = 0
        self._ids = 0
        self._last_query = None
        self.calls: Dict[str, int] = {"write": 0, "list": 0, "failed": 0, "duplicates": 0}
        self.filters: List[str] = []

    # ---------------------------------------------------------- lifecycle
    def handlers(self):
        return _SERVICE, {
            "WriteLogEntries": grpc.unary_unary_rpc_method_handler(
                self._write, request_deserializer=WriteLogEntriesRequest.deserialize,
                response_serializer=WriteLogEntriesResponse.serialize),
            "ListLogEntries": grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=ListLogEntriesRequest.deserialize,
                response_serializer=ListLogEntriesResponse.serialize),
        }

    # ---------------------------------------------------------- test controls
    def fail(self, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
             message: str = "fake outage") -> None:
        """Every call fails with ``code`` until :meth:`heal`."""
        with self._lock:
            self._failure = (code, message)

    def heal(self) -> None:
        with self._lock:
            self._failure = None

    @property
    def failing(self) -> bool:
        return self._failure is not None

    def lose_responses(self, count: int = 1) -> None:
        """The next ``count`` writes are stored, then answered with UNAVAILABLE."""
        with self._lock:
            self._lose = count

    def entries(self) -> List[Any]:
        """Copies of the stored entries (``LogEntry`` protobufs), in write order."""
        with self._lock:
            return [_copy(e.pb) for e in self._entries]

    def payloads(self, job_name: Optional[str] = None) -> List[Dict[str, Any]]:
        """Stored json payloads (numbers as floats), optionally of one job, in write order."""
        out = []
        for e in self.entries():
            if e.HasField("json_payload"):
                p = struct_to_python(e.json_payload)
                if job_name is None or p.get("job_name") == job_name:
                    out.append(p)
        return out

    # ---------------------------------------------------------- RPCs
    def _check_failure(self, context) -> None:
        failure = self._failure
        if failure is not None:
            self.calls["failed"] += 1
            context.abort(*failure)

    def _write(self, request, context):
        self.calls["write"] += 1
        self._check_failure(context)
        req = WriteLogEntriesRequest.pb(request)
        now = self._clock()
        stored = []
        for entry in req.entries:
            e = _copy(entry)
            if not e.log_name:
                e.log_name = req.log_name
            if not e.log_name.startswith("projects/") or "/logs/" not in e.log_name:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad log name {e.log_name!r}")
            if not e.HasField("resource"):
                if not req.HasField("resource"):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no monitored resource")
                e.resource.CopyFrom(req.resource)
            for k, v in req.labels.items():
                if k not in e.labels:
                    e.labels[k] = v
            e.receive_timestamp.FromNanoseconds(int(now * 1e9))
            if not e.HasField("timestamp"):
                e.timestamp.CopyFrom(e.receive_timestamp)
            stored.append(e)
        with self._lock:
            for e in stored:
                if not e.insert_id:
                    self._ids += 1
                    e.insert_id = f"fake-{self._ids:012d}"
                key = _key(e)
                if key in self._seen:
                    self.calls["duplicates"] += 1
                    continue
                self._seen.add(key)
                self._entries.append(_Stored(e))
            lose = self._lose > 0
            self._lose -= 1 if lose else 0
        if lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "response lost (fake)")
        return WriteLogEntriesResponse()

    def _list(self, request, context):
        self.calls["list"] += 1
        self._check_failure(context)
        req = ListLogEntriesRequest.pb(request)
        self.filters.append(req.filter)
        try:
            tree = parse_filter(req.filter)
            order = (req.order_by or "timestamp asc").strip().lower()
            if order not in ("timestamp asc", "timestamp desc"):
                raise FilterError(f"unsupported order_by {req.order_by!r}")
            parents = [p.rstrip("/") + "/logs/" for p in req.resource_names]
            desc = order.endswith("desc")
            with self._lock:
                stored = list(self._entries)
            # Later pages of one query reuse its result while nothing new was
            # written (a full scan per page would make paged tests slow).
            query = (req.filter, order, tuple(parents), len(stored))
            if self._last_query is not None and self._last_query[0] == query:
                hits = self._last_query[1]
            else:
                hits = [e for e in stored if any(e.log_name.startswith(p) for p in parents)
                        and matches(tree, e)]
                hits.sort(key=lambda e: e.key, reverse=desc)
                self._last_query = (query, hits)
        except FilterError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if req.page_token:
            after = tuple(json.loads(base64.urlsafe_b64decode(req.page_token)))
            hits = [e for e in hits if (e.key < after if desc else e.key > after)]
        size = min(req.page_size or 50, 1000)
        page, more = hits[:size], len(hits) > size
        response = ListLogEntriesResponse.pb()()
        response.entries.extend(e.pb for e in page)
        if more:
            token = json.dumps(list(page[-1].key)).encode()
            response.next_page_token = base64.urlsafe_b64encode(token).decode()
        return ListLogEntriesResponse(response)


class _Stored:
    """A stored entry with its payload converted once (filters read it often)."""

    __slots__ = ("pb", "py_payload", "key")

    def __init__(self, pb):
        self.pb = pb
        self.key = _key(pb)
        self.py_payload = struct_to_python(pb.json_payload) if pb.HasField("json_payload") else {}

    def __getattr__(self, name):
        return getattr(self.pb, name)


def _copy(entry):
    e = _LogEntryPB()
    e.CopyFrom(entry)
    return e


@contextlib.contextmanager
def reference_client(fake: FakeCloudLogging, project: str):
    """Points ``google.cloud.logging.Client()`` (no arguments, as the reference
    calls it) at the fake, with anonymous credentials, and stops the client
    library from probing the GCE metadata server for a monitored resource.

    The reference builds ``google.cloud.logging.Client()`` itself and offers no
    way to pass options or credentials; an environment variable cannot change
    the API endpoint. So the class is swapped for a factory that adds the
    public arguments ``project``, ``credentials`` and ``client_options``.
    """
    from unittest import mock

    import google.cloud.logging
    from google.auth.credentials import AnonymousCredentials

    real = google.cloud.logging.Client

    def factory(*args, **kwargs):
        kwargs.setdefault("project", project)
        kwargs.setdefault("credentials", AnonymousCredentials())
        kwargs.setdefault("client_options", {"api_endpoint": fake.endpoint})
        return real(*args, **kwargs)

    with mock.patch.object(google.cloud.logging, "Client", factory), mock.patch(
            "google.cloud.logging_v2.handlers._monitored_resources.retrieve_metadata_server",
            return_value=None):
        yield


@contextlib.contextmanager
def cloud_store_factory(default_server: FakeCloudLogging, spill_dir, project: str, log: str):
    """Yields ``make(server=None, **kwargs)`` building CloudLoggingStores on a fake.

    Stores reach the fake through the public TLS route, with no real sleeping
    in their backoff; every store made is closed on exit.
    """
    from google.auth.credentials import AnonymousCredentials

    from goodput_core.stores.cloud_logging import CloudLoggingStore

    stores: List[CloudLoggingStore] = []

    def make(server: Optional[FakeCloudLogging] = None, **kwargs) -> CloudLoggingStore:
        server = server or default_server
        kwargs.setdefault("spill_dir", str(spill_dir))
        kwargs.setdefault("flush_interval_s", 0.01)
        kwargs.setdefault("sleep", lambda s: None)
        store = CloudLoggingStore(
            project, kwargs.pop("log_name", log), credentials=AnonymousCredentials(),
            client_options={"api_endpoint": server.endpoint}, **kwargs)
        stores.append(store)
        return store

    try:
        yield make
    finally:
        for store in stores:
            store.close(timeout=5)
