"""The dashboard's HTTP server: the standard library's ``ThreadingHTTPServer``.

Security (each is tested):

- Binds 127.0.0.1 unless told; any other address needs a token (``--token`` or
  ``GOODPUT_SERVE_TOKEN``), compared in constant time. With a token every
  request must carry it: ``Authorization: Bearer T``, or ``?token=T`` once
  (the server then sets an HttpOnly, SameSite=Strict cookie for the pages).
- Read only: GET and HEAD are served, every other method is 405; nothing
  here writes to the store.
- Without a token, the ``Host`` header must name the server (a loopback
  name or the bound address): a web page elsewhere cannot reach the
  dashboard through DNS rebinding.
- Every answer has a strict Content-Security-Policy (scripts, styles and
  data from this server only; no inline script), ``nosniff`` and no referrer.
  The pages show store text with ``textContent`` only, never as markup.
- No external resource: the pages, script and style ship in the package.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import mimetypes
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Dict, Optional, Tuple

from goodput_core.cli.serve.api import Api, BadRequest, NotFound

__all__ = ["DashboardServer", "is_loopback", "CSP", "TOKEN_ENV"]

logger = logging.getLogger("goodput")

TOKEN_ENV = "GOODPUT_SERVE_TOKEN"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_COOKIE = "goodput_token"
_PAGES = {"/": "index.html", "/compare": "compare.html"}
_STATIC = ("app.js", "charts.js", "app.css")
_MAX_STREAMS = 32        # live streams at once (each holds a thread)
_STREAM_POLL_S = 0.5     # how often a stream looks for new events (live within 2 s)
_STREAM_PING_S = 15.0    # a comment line keeps proxies from closing an idle stream
_CLIENT_TIMEOUT_S = 60.0


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _asset(name: str) -> bytes:
    return resources.files("goodput_core.cli.serve").joinpath("static", name).read_bytes()


class DashboardServer(ThreadingHTTPServer):
    """Serves the dashboard for one store.

    Args:
      api: the :class:`~goodput_core.cli.serve.api.Api` answering requests.
      host, port: where to listen (port 0: any free port; see :attr:`url`).
      token: required on every request when given; required to bind any
        address but loopback.
      max_streams: live streams open at once (each holds a thread); more are
        refused (503) and the pages fall back to fetching every 10 s.

    Raises:
      ValueError: a non-loopback address without a token.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, api: Api, host: str = "127.0.0.1", port: int = 8765,
                 token: Optional[str] = None, max_streams: int = _MAX_STREAMS):
        if not is_loopback(host) and not token:
            raise ValueError(
                f"refusing to serve on {host}: anyone who can reach it would read every run. "
                f"Give a token (--token T or ${TOKEN_ENV}) to bind an address other than "
                "127.0.0.1")
        self.api = api
        self.token = token or None
        if ":" in host:  # an IPv6 address ("::1", "::")
            self.address_family = socket.AF_INET6
        self.streams = threading.BoundedSemaphore(max(1, int(max_streams)))
        self.stopping = threading.Event()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def shutdown(self) -> None:
        self.stopping.set()  # live streams end at their next poll
        super().shutdown()

    def allowed_hosts(self) -> set:
        host, port = self.server_address[:2]
        names = {host, f"[{host}]"} | {"localhost", "127.0.0.1", "[::1]"}
        return {f"{n}:{port}" for n in names} | names


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"
    # a client that stops sending or reading (a stalled or hostile one) frees
    # its thread, and a live stream its slot, after this many seconds
    timeout = _CLIENT_TIMEOUT_S
    server_version = "goodput-serve"
    sys_version = ""

    # ------------------------------------------------------------ plumbing
    def log_message(self, fmt: str, *args: Any) -> None:
        # the query string may hold the token: log the path only
        logger.debug("goodput serve: %s %s", self.command, self.path.split("?", 1)[0])

    def _headers(self, status: int, ctype: str, length: Optional[int],
                 extra: Tuple[Tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()

    def _send(self, status: int, body: bytes, ctype: str,
              extra: Tuple[Tuple[str, str], ...] = ()) -> None:
        self._headers(status, ctype, len(body), extra)
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any, extra: Tuple[Tuple[str, str], ...] = ()) -> None:
        body = json.dumps(obj, allow_nan=False).encode()
        self._send(status, body, "application/json; charset=utf-8", extra)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _refuse_writes(self) -> None:
        self._headers(405, "text/plain; charset=utf-8", 0, (("Allow", "GET, HEAD"),))

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_writes

    def do_HEAD(self) -> None:
        self.do_GET()

    # ------------------------------------------------------------ security
    def _authorised(self, params: Dict[str, str]) -> Tuple[bool, bool]:
        """``(allowed, set the cookie)``."""
        token = self.server.token
        if token is None:
            return True, False
        given = params.get("token")
        if given is not None:
            ok = hmac.compare_digest(given.encode(), token.encode())
            return ok, ok
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return hmac.compare_digest(auth[7:].encode(), token.encode()), False
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == _COOKIE:
                given = urllib.parse.unquote(value)
                return hmac.compare_digest(given.encode(), token.encode()), False
        return False, False

    # ------------------------------------------------------------ routing
    def do_GET(self) -> None:
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the browser went away, or stalled
        except Exception as exc:  # a bug must not kill the server's thread silently
            logger.exception("goodput serve: %s failed", self.path.split("?", 1)[0])
            try:
                self._error(500, f"internal error: {type(exc).__name__}")
            except OSError:
                pass

    def _route(self) -> None:
        # Without a token, only a Host naming this server: a page elsewhere cannot
        # reach a loopback dashboard through DNS rebinding. With one, the token
        # guards (a rebound origin has no cookie), and remote users name the
        # machine as they like.
        if self.server.token is None and \
                self.headers.get("Host", "") not in self.server.allowed_hosts():
            return self._error(421, "unexpected Host header")
        url = urllib.parse.urlsplit(self.path)
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        ok, set_cookie = self._authorised(params)
        if not ok:
            return self._error(401, "a token is needed: add ?token=<your token> to the "
                                    "address, or send Authorization: Bearer <your token>")
        extra: Tuple[Tuple[str, str], ...] = ()
        if set_cookie:
            value = urllib.parse.quote(self.server.token, safe="")  # any token, one cookie
            extra = (("Set-Cookie", f"{_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/"),)
        path = url.path
        if path in _PAGES or path.startswith("/run/"):
            page = "run.html" if path.startswith("/run/") else _PAGES[path]
            return self._send(200, _asset(page), "text/html; charset=utf-8", extra)
        if path.startswith("/static/") and path[8:] in _STATIC:
            ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
            if ctype.startswith("text/") or ctype.endswith("javascript"):
                ctype += "; charset=utf-8"
            return self._send(200, _asset(path[8:]), ctype)
        if path == "/api/stream":
            return self._stream(params.get("run"))
        try:
            return self._json(200, self._api(path, params), extra)
        except NotFound as exc:
            return self._error(404, str(exc))
        except BadRequest as exc:
            return self._error(400, str(exc))

    def _api(self, path: str, params: Dict[str, str]) -> Any:
        api = self.server.api
        if path == "/api/runs":
            return api.runs(params)
        if path == "/api/compare":
            return api.compare(params)
        if path.startswith("/api/runs/"):
            rest = path[len("/api/runs/"):]
            name, _, what = rest.rpartition("/")
            run = urllib.parse.unquote(name)
            if what == "report":
                return api.report(run)
            if what == "timeline":
                return api.timeline(run, params)
            if what == "series":
                return api.series(run, params)
        raise NotFound(f"no such path: {path[:80]}")

    # ------------------------------------------------------------ live
    def _stream(self, run: Optional[str]) -> None:
        """Server-sent events: ``change`` whenever what the page shows has new events."""
        if self.command == "HEAD":
            return self._headers(200, "text/event-stream", None)
        if not self.server.streams.acquire(blocking=False):
            return self._error(503, "too many live streams open")
        try:
            self._headers(200, "text/event-stream", None, (("Connection", "close"),))
            self.close_connection = True
            api, stop = self.server.api, self.server.stopping
            last = api.versions(run)
            self.wfile.write(b"retry: 1000\n\n")
            self.wfile.flush()
            pinged = time.monotonic()
            while not stop.wait(_STREAM_POLL_S):
                now = api.versions(run)
                if now != last:
                    last = now
                    self.wfile.write(b"event: change\ndata: {}\n\n")
                    self.wfile.flush()
                elif time.monotonic() - pinged > _STREAM_PING_S:
                    self.wfile.write(b": ping\n\n")
                    self.wfile.flush()
                    pinged = time.monotonic()
        finally:
            self.server.streams.release()
