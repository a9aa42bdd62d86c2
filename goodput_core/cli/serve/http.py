"""The dashboard's HTTP server: the ASGI app of :mod:`.app` on uvicorn, HTTP/1.1
parsed by h11 (the ``serve`` extra).

Security (each is tested):

- Binds 127.0.0.1 unless told; any other address needs a token (``--token-file``,
  ``GOODPUT_SERVE_TOKEN`` or ``--token``), compared in constant time. With a
  token every request must carry it: ``Authorization: Bearer T``, or
  ``?token=T`` once (the server then sets an HttpOnly, SameSite=Strict cookie).
- Read only: GET and HEAD are served, every other method is 405; nothing
  here writes to the store.
- Without a token, the ``Host`` header must name the server (a loopback
  name or the bound address): a web page elsewhere cannot reach the
  dashboard through DNS rebinding. h11 frames every request: a body the
  dashboard does not read is consumed as a body, and every refusal closes
  the connection, so no request can hide in another's body (a refused POST
  carrying ``GET ... Host: 127.0.0.1``) and skip the check.
- Every answer has a strict Content-Security-Policy (scripts, styles and
  data from this server only; no inline script), ``nosniff``, no referrer
  and no caching: the app's answers, uvicorn's own (a 500) and the 400 for
  what h11 cannot parse (a bad request line or header, a head still
  incomplete at 16 KiB, TLS on the plain port), which the protocol class
  below answers with them.
- A malformed request is one log line, never a traceback; a client that
  sends no whole request head within ``client_timeout`` (60 s) of
  connecting or of its last answer, or stops reading an answer for as long,
  is disconnected; at most ``max_connections`` are open at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Tuple

from goodput_core.cli.serve.api import Api
from goodput_core.cli.serve.app import DashboardApp
from goodput_core.cli.serve.security import (CSP, SECURITY_HEADERS, TOKEN_ENV, allowed_hosts,
                                             is_loopback)

__all__ = ["DashboardServer", "is_loopback", "CSP", "TOKEN_ENV", "BACKLOG"]

logger = logging.getLogger("goodput.serve")

BACKLOG = 1024            # connections the kernel queues before they are accepted
_MAX_STREAMS = 32         # live streams at once
_CLIENT_TIMEOUT_S = 60.0
_MAX_CONNECTIONS = 512
_WORKERS = 8              # threads doing the API's work (store reads, numpy)
_MAX_HEAD = 16 * 1024     # a request line or header block larger than this is a 400
_KEEP_ALIVE_S = 5
_GRACE_S = 5              # answers still running at shutdown get this long


def _uvicorn() -> Any:
    try:
        import uvicorn  # noqa: F401
        from uvicorn.protocols.http.h11_impl import H11Protocol
    except ImportError as exc:
        raise ImportError("goodput serve needs the 'serve' extra: "
                          f"pip install 'goodput-core[serve]' ({exc})") from exc
    return H11Protocol


class _ClientLog(logging.LoggerAdapter):
    """The server's logger, each line prefixed with the client's address (what
    uvicorn's protocol logs: a malformed request, an exception)."""

    def process(self, msg: Any, kwargs: Any) -> Tuple[Any, Any]:
        return f"{self.extra['who']()}: {msg}", kwargs

    @property
    def level(self) -> int:  # uvicorn compares it with its TRACE level
        return self.logger.getEffectiveLevel()


def _protocol_class(client_timeout: float, max_connections: int) -> type:
    """uvicorn's h11 protocol with the dashboard's guards (see the module's doc)."""
    base = _uvicorn()
    head = b"\r\n".join(b"%s: %s" % (k.lower().encode(), v.encode())
                        for k, v in SECURITY_HEADERS)
    refused = [0, -float("inf")]  # connections over the bound since the last line, its time

    class _Protocol(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            # uvicorn's lines (a malformed request) are ours, with the client
            self.logger = _ClientLog(logger, {"who": self._who})
            self._deadline: Optional[asyncio.TimerHandle] = None
            self._stalled: Optional[asyncio.TimerHandle] = None

        # -- connections: a bound on how many, a deadline for each request head
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.abort()
                refused[0] += 1
                now = self.loop.time()
                if now - refused[1] >= 10.0:  # a flood of them is a line every 10 s
                    logger.warning("%s: connection refused: %d open already (%d more "
                                   "refused since the last such line)", self._who(),
                                   max_connections, refused[0] - 1)
                    refused[:] = [0, now]
                return
            self._arm_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_deadline()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            for timer in (self._deadline, self._stalled):
                if timer is not None:
                    timer.cancel()
            super().connection_lost(exc)

        def _arm_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(client_timeout, self._deadline_passed)

        def _deadline_passed(self) -> None:
            # no whole request head since the connection or the last answer
            # (an answer in progress re-arms the deadline when it completes)
            self._deadline = None
            answering = self.cycle is not None and not self.cycle.response_complete
            if not answering and not self.transport.is_closing():
                logger.debug("%s: no request within %.0f s: closed", self._who(),
                             client_timeout)
                self.transport.abort()

        # -- a client that stops reading an answer
        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stalled is None:
                self._stalled = self.loop.call_later(client_timeout, self._stall_passed)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None

        def _stall_passed(self) -> None:
            self._stalled = None
            logger.info("%s: stopped reading for %.0f s: closed", self._who(), client_timeout)
            self.transport.abort()  # connection_lost frees the answer waiting to write

        # -- uvicorn's own answers
        def send_400_response(self, msg: str) -> None:
            """A malformed request: 400 with the security headers, one log line
            (uvicorn logged it through ``self.logger``), the connection closed."""
            body = b"malformed request\n"
            answering = self.cycle is not None and self.cycle.response_started \
                and not self.cycle.response_complete
            try:
                if not answering:  # else a broken body: no room for another answer
                    self.transport.write(
                        b"HTTP/1.1 400 Bad Request\r\n"
                        b"content-type: text/plain; charset=utf-8\r\n"
                        b"content-length: %d\r\nconnection: close\r\n%s\r\n\r\n%s"
                        % (len(body), head, body))
            finally:
                self.transport.close()

        def _unsupported_upgrade_warning(self) -> None:
            # 'Upgrade: websocket' to a dashboard that has none: answered as a plain
            # request, and no warning any client could repeat to fill the log
            logger.debug("%s: an Upgrade header was ignored", self._who())

        def _who(self) -> str:
            return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"

    return _Protocol


class DashboardServer:
    """Serves the dashboard for one store, on a socket bound at construction.

    Args:
      api: the :class:`~goodput_core.cli.serve.api.Api` answering requests.
      host, port: where to listen (port 0: any free port; see :attr:`url`).
      token: required on every request when given; required to bind any
        address but loopback.
      max_streams: live streams open at once; more are refused (503) and
        the pages fall back to fetching every 10 s.
      client_timeout: seconds a client may take to send a request head, or
        stall reading an answer, before it is disconnected.
      max_connections: connections open at once; more are closed at once.

    Raises:
      ValueError: a non-loopback address without a token.
      OSError: the address cannot be bound.
      ImportError: uvicorn is not installed (the ``serve`` extra).
    """

    def __init__(self, api: Api, host: str = "127.0.0.1", port: int = 8765,
                 token: Optional[str] = None, max_streams: int = _MAX_STREAMS, *,
                 client_timeout: float = _CLIENT_TIMEOUT_S,
                 max_connections: int = _MAX_CONNECTIONS):
        if not is_loopback(host) and not token:
            raise ValueError(
                f"refusing to serve on {host}: anyone who can reach it would read every run. "
                f"Give a token (--token-file FILE or ${TOKEN_ENV}) to bind an address other "
                "than 127.0.0.1")
        protocol = _protocol_class(float(client_timeout), int(max_connections))
        import uvicorn  # present: _protocol_class said what to install where not
        self.api = api
        self.token = token or None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind((host, port))
            self.socket.listen(BACKLOG)
        except OSError:
            self.socket.close()
            raise
        self.server_address: Tuple[Any, ...] = self.socket.getsockname()
        self.executor = ThreadPoolExecutor(_WORKERS, thread_name_prefix="goodput-serve")
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()  # until serve_forever runs
        self.app = DashboardApp(api, self.executor, self.token,
                                allowed_hosts(host, self.server_port),
                                max_streams, self._is_stopping)
        config = uvicorn.Config(
            self.app, http=protocol, ws="none", lifespan="off", loop="asyncio",
            interface="asgi3", log_config=None, access_log=False, proxy_headers=False,
            server_header=False, headers=[(k, v) for k, v in SECURITY_HEADERS],
            backlog=BACKLOG, timeout_keep_alive=_KEEP_ALIVE_S,
            timeout_graceful_shutdown=_GRACE_S,
            h11_max_incomplete_event_size=_MAX_HEAD)
        self._server = uvicorn.Server(config)

    @property
    def open_connections(self) -> int:
        """Client connections open now (the serving thread's count)."""
        return len(self._server.server_state.connections)

    def _is_stopping(self) -> bool:
        # shutdown(), or a signal uvicorn caught (then live streams end too)
        return self._stopping.is_set() or self._server.should_exit

    @property
    def server_port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serves until :meth:`shutdown` (or SIGINT/SIGTERM in the main thread).
        ``poll_interval`` is accepted for ``socketserver``'s signature; uvicorn
        looks for a shutdown ten times a second."""
        self._stopped.clear()
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._stopping.set()
            self._stopped.set()

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Stops :meth:`serve_forever` (live streams end) and waits for it."""
        self._stopping.set()
        self._server.should_exit = True
        self._stopped.wait(timeout)

    def server_close(self) -> None:
        self._stopping.set()
        self.socket.close()
        self.executor.shutdown(wait=False)
