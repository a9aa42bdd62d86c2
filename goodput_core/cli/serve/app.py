"""The dashboard as an ASGI application: routing, the security checks of each
request, the pages, the JSON API and the live stream.

It runs on uvicorn (:mod:`goodput_core.cli.serve.http`), which frames the
requests (h11): a body the dashboard does not read is still consumed as a
body, never taken for the next request. The API's work (store reads, numpy)
runs on a small thread pool, never on the event loop.

Every request passes, in order: an HTTP version of 1.0 or 1.1 and a path
(``/...``) as target, else 400; an address of at most 8 KiB (414) and
headers of at most 16 KiB (431); without a token, a ``Host`` naming this
server, else 421; GET or HEAD, else 405; with a token, the token, else 401.
Each refusal closes the connection and is one log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mimetypes
import urllib.parse
from concurrent.futures import Executor
from importlib import resources
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple

from goodput_core.cli.serve.api import Api, BadRequest, NotFound
from goodput_core.cli.serve.security import (authorised, for_log, run_from_segment,
                                             token_cookie)

__all__ = ["DashboardApp", "STREAM_POLL_S", "MAX_TARGET", "MAX_HEADERS"]

logger = logging.getLogger("goodput.serve")

Headers = List[Tuple[bytes, bytes]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[Dict[str, Any]]]

_PAGES = {"/": "index.html", "/compare": "compare.html"}
_STATIC = ("app.js", "charts.js", "app.css")
_API_RUN_VIEWS = ("report", "timeline", "series")
STREAM_POLL_S = 0.5      # how often a stream looks for new events (live within 2 s)
_STREAM_PING_S = 15.0    # a comment line keeps proxies from closing an idle stream
_MAX_QUERY_FIELDS = 32
MAX_TARGET = 8 * 1024    # bytes of a request's path and query
MAX_HEADERS = 16 * 1024  # bytes of its header lines
_JSON = "application/json; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"


class _Refusal(Exception):
    """An answer that ends the request and the connection (one log line)."""

    def __init__(self, status: int, message: str, headers: Tuple[Tuple[str, str], ...] = ()):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def _asset(name: str) -> bytes:
    return resources.files("goodput_core.cli.serve").joinpath("static", name).read_bytes()


def _content_type(name: str) -> str:
    ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if ctype.startswith("text/") or ctype.endswith("javascript"):
        ctype += "; charset=utf-8"
    return ctype


class DashboardApp:
    """The ASGI application of one dashboard.

    Args:
      api: answers the API's requests (called on ``executor``).
      executor: where blocking work runs.
      token: required on every request when given.
      hosts: the ``Host`` values answered without a token.
      max_streams: live streams open at once; more get 503.
      stopping: true once the server shuts down (live streams then end).
    """

    def __init__(self, api: Api, executor: Executor, token: Optional[str], hosts: Set[str],
                 max_streams: int, stopping: Callable[[], bool]):
        self.api = api
        self.executor = executor
        self.token = token or None
        self.hosts = {h.encode("latin-1", "replace") for h in hosts}
        self.max_streams = max(1, int(max_streams))
        self.streams = 0  # open now (touched on the event loop only)
        self.stopping = stopping
        self._assets: Dict[str, bytes] = {}

    # ------------------------------------------------------------ ASGI
    async def __call__(self, scope: Dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # no lifespan, no websockets: nothing to do
            return
        head = scope["method"] == "HEAD"
        target = for_log(scope.get("raw_path", b"").decode("latin-1"))  # never the query
        send = _Tracked(send)
        try:
            await self._answer(scope, receive, send, head)
        except _Refusal as refusal:
            logger.info("refused %s %s from %s: %d %s", for_log(scope["method"], 16), target,
                        _client(scope), refusal.status, refusal.message)
            await _send_json(send, refusal.status, {"error": refusal.message}, head,
                             refusal.headers + (("Connection", "close"),))
        except Exception as exc:  # a bug: one answer, one log entry, the server goes on
            logger.exception("%s %s failed", for_log(scope["method"], 16), target)
            if send.started:
                return  # too late for another answer: the server closes the connection
            await _send_json(send, 500, {"error": f"internal error: {type(exc).__name__}"}, head,
                             (("Connection", "close"),))

    async def _answer(self, scope: Dict[str, Any], receive: Receive, send: Send,
                      head: bool) -> None:
        raw_path = scope.get("raw_path") or b""
        if scope.get("http_version") not in ("1.0", "1.1"):
            raise _Refusal(400, f"HTTP/{for_log(str(scope.get('http_version')), 8)} is not "
                                "served: HTTP/1.0 and 1.1 only")
        if not raw_path.startswith(b"/"):
            raise _Refusal(400, "the request target must be a path")
        # h11 bounds a head that arrives in parts; one that arrives whole is bounded here
        if len(raw_path) + len(scope.get("query_string") or b"") > MAX_TARGET:
            raise _Refusal(414, f"the address is longer than {MAX_TARGET} bytes")
        headers: Headers = scope["headers"]
        if sum(len(k) + len(v) + 4 for k, v in headers) > MAX_HEADERS:
            raise _Refusal(431, f"the headers are longer than {MAX_HEADERS} bytes")
        # Without a token, only a Host naming this server: a page elsewhere cannot
        # reach a loopback dashboard through DNS rebinding. With one, the token
        # guards (a rebound origin has no cookie), and remote users name the
        # machine as they like.
        if self.token is None:
            hosts = [v for k, v in headers if k == b"host"]
            if len(hosts) != 1 or hosts[0] not in self.hosts:
                raise _Refusal(421, "unexpected Host header")
        if scope["method"] not in ("GET", "HEAD"):
            raise _Refusal(405, "the dashboard only reads: GET and HEAD",
                           (("Allow", "GET, HEAD"),))
        try:
            path = raw_path.decode("ascii")
            params = _query(scope.get("query_string") or b"")
        except (UnicodeDecodeError, ValueError):
            raise _Refusal(400, "the address is not percent-encoded UTF-8") from None
        ok, set_cookie = authorised(self.token, params, headers)
        if not ok:
            raise _Refusal(401, "a token is needed: add ?token=<your token> to the address, "
                                "or send Authorization: Bearer <your token>")
        extra: Tuple[Tuple[str, str], ...] = ()
        if set_cookie:
            extra = (("Set-Cookie", token_cookie(self.token)),)
        if path in _PAGES or path.startswith("/run/"):
            page = "run.html" if path.startswith("/run/") else _PAGES[path]
            return await _send(send, 200, self._static(page), _content_type(page), head, extra)
        if path.startswith("/static/") and path[8:] in _STATIC:
            name = path[8:]
            return await _send(send, 200, self._static(name), _content_type(name), head)
        try:
            if path == "/api/stream":
                run = params.get("run")
                if run is not None:
                    _check_run(run)
                return await self._stream(run, receive, send, head)
            call = self._api_call(path, params)
            body = await self._blocking(lambda: json.dumps(call(), allow_nan=False).encode())
        except NotFound as exc:
            return await _send_json(send, 404, {"error": str(exc)}, head)
        except BadRequest as exc:  # a parameter it cannot use: one line, as any refusal
            logger.info("refused %s %s from %s: 400 %s", scope["method"], for_log(path),
                        _client(scope), for_log(str(exc)))
            return await _send_json(send, 400, {"error": str(exc)}, head)
        await _send(send, 200, body, _JSON, head, extra)

    def _static(self, name: str) -> bytes:
        body = self._assets.get(name)
        if body is None:
            body = self._assets[name] = _asset(name)
        return body

    def _blocking(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def _api_call(self, path: str, params: Dict[str, str]) -> Callable[[], Any]:
        """The API method answering ``path`` (raw, percent-encoded), bound."""
        api = self.api
        if path == "/api/runs":
            return lambda: api.runs(params)
        if path == "/api/compare":
            return lambda: api.compare(params)
        if path.startswith("/api/runs/"):
            # the name is everything between: a '/' in it may come encoded or not
            name, _, what = path[len("/api/runs/"):].rpartition("/")
            if what in _API_RUN_VIEWS and name:
                try:
                    run = run_from_segment(name)
                except UnicodeDecodeError:
                    raise _Refusal(400, "the run name is not percent-encoded UTF-8") from None
                _check_run(run)
                return lambda: getattr(api, what)(run) if what == "report" else \
                    getattr(api, what)(run, params)
        raise NotFound(f"no such path: {for_log(path, 80)}")

    # ------------------------------------------------------------ live
    async def _stream(self, run: Optional[str], receive: Receive, send: Send,
                      head: bool) -> None:
        """Server-sent events: ``change`` whenever what the page shows has new events."""
        if head:
            return await _send(send, 200, b"", "text/event-stream", head)
        if self.streams >= self.max_streams:
            return await _send_json(send, 503, {"error": "too many live streams open"}, head)
        self.streams += 1
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            last = await self._blocking(lambda: self.api.versions(run))
            await send({"type": "http.response.start", "status": 200,
                        "headers": _headers("text/event-stream", None,
                                            (("Connection", "close"),))})
            await _chunk(send, b"retry: 1000\n\n")
            pinged = asyncio.get_running_loop().time()
            while not self.stopping():
                await asyncio.wait((gone,), timeout=STREAM_POLL_S)
                if gone.done() or self.stopping():
                    break
                now = await self._blocking(lambda: self.api.versions(run))
                if now != last:
                    last = now
                    await _chunk(send, b"event: change\ndata: {}\n\n")
                elif asyncio.get_running_loop().time() - pinged > _STREAM_PING_S:
                    await _chunk(send, b": ping\n\n")
                    pinged = asyncio.get_running_loop().time()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.streams -= 1
            gone.cancel()


def _check_run(run: str) -> None:
    """A name no run can have (the recorder refuses NUL) is not looked up: some
    stores cannot even be asked (PostgreSQL text holds no NUL)."""
    if "\x00" in run:
        raise NotFound(f"no run named {run[:80]!r}")


class _Tracked:
    """``send``, remembering whether the answer has started."""

    def __init__(self, send: Send):
        self._send = send
        self.started = False

    async def __call__(self, message: Dict[str, Any]) -> None:
        self.started = True
        await self._send(message)


def _query(raw: bytes) -> Dict[str, str]:
    """The query's parameters (the last of each name); strict: a query that is
    not percent-encoded UTF-8, or has too many fields, raises ValueError."""
    text = raw.decode("ascii")
    pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, strict_parsing=False,
                                   errors="strict", max_num_fields=_MAX_QUERY_FIELDS)
    return dict(pairs)


def _client(scope: Dict[str, Any]) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


def _headers(ctype: str, length: Optional[int],
             extra: Tuple[Tuple[str, str], ...] = ()) -> Headers:
    # the security headers come from the server, on every answer (http.py)
    out = [(b"content-type", ctype.encode())]
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    out += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra]
    return out


async def _send(send: Send, status: int, body: bytes, ctype: str, head: bool,
                extra: Tuple[Tuple[str, str], ...] = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": _headers(ctype, len(body), extra)})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def _send_json(send: Send, status: int, obj: Any, head: bool,
                     extra: Tuple[Tuple[str, str], ...] = ()) -> None:
    await _send(send, status, json.dumps(obj).encode(), _JSON, head, extra)


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has gone (a body it sends is read and dropped)."""
    while (await receive())["type"] != "http.disconnect":
        pass
