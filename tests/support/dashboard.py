"""A ``goodput serve`` dashboard in a thread of the test, on a free loopback
port, and plain HTTP requests to it (no proxy: loopback only)."""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, Optional, Tuple

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# A run name written to break out of HTML, attributes, JS strings and URLs.
HOSTILE_RUN = 'evil<script>alert(1)</script>"\'&amp;/../x'


@contextlib.contextmanager
def dashboard(store_url: str, token: Optional[str] = None, **options: Any) -> Iterator[Any]:
    """A running dashboard server over ``store_url``; yields the server (see ``.url``).
    ``options``: ``make_server``'s (``max_streams``, the run cache's)."""
    from goodput_core.cli.serve import make_server
    from goodput_core.stores import open_store

    server = make_server(open_store(store_url, create=False), "127.0.0.1", 0, token,
                         **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def wait_connections(server: Any, n: int, timeout: float = 60.0) -> bool:
    """Waits until ``server`` has ``n`` client connections open; False if it
    still has not after ``timeout`` s."""
    import time

    deadline = time.monotonic() + timeout
    while server.open_connections != n:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def run_path(run: str) -> str:
    return urllib.parse.quote(run, safe="")


def get(url: str, headers: Optional[Dict[str, str]] = None, method: str = "GET",
        timeout: float = 30.0) -> Tuple[int, Any, bytes]:
    """``(status, headers, body)`` of one request (errors included); the headers
    as ``http.client`` gives them (names in any case; a missing one is None)."""
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def get_json(url: str, **kwargs: Any) -> Any:
    status, _, body = get(url, **kwargs)
    assert status == 200, (status, body[:300])
    return json.loads(body)


class ServeProcess:
    """``goodput serve`` as a real process on a free loopback port: ``url``
    while it runs; ``stop()`` sends Ctrl-C (SIGINT) and returns its stderr."""

    def __init__(self, store_url: str, *argv: str, env: Optional[Dict[str, str]] = None):
        import re
        import subprocess
        import sys

        from tests.support.cli_process import _env

        full_env = _env()
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "goodput_core.cli", "serve", "--store", store_url,
             "--port", "0", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, env=full_env)
        line = self.proc.stdout.readline()
        found = re.search(r" on (http://\S+/)", line)
        if found is None:
            self.proc.kill()
            raise AssertionError(f"goodput serve did not start: {line!r} "
                                 f"{self.proc.stderr.read()!r}")
        self.url = found.group(1)
        self.port = int(self.url.rstrip("/").rsplit(":", 1)[1])

    def stop(self) -> str:
        import signal

        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=60)
        return err


def exchange(port: int, data: bytes, timeout: float = 30.0) -> bytes:
    """Sends ``data`` on a new loopback connection and returns every byte the
    server sends back until it closes the connection (raises on a timeout:
    a server that keeps the connection open after a refusal fails the test)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        out = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
    return out


def answers(raw: bytes) -> list:
    """The HTTP answers in ``raw``, in order: ``(status, headers, body)`` each
    (header names in lower case), read as a client reads them (each body by
    its Content-Length or its chunks). Bytes that are not an answer raise."""
    out = []
    while raw:
        head, sep, raw = raw.partition(b"\r\n\r\n")
        assert sep, f"not an HTTP answer: {head[:200]!r}"
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, status = status_line.split(" ", 2)[:2]
        assert version in ("HTTP/1.0", "HTTP/1.1"), status_line
        headers: Dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, raw = raw.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                body, raw = body + raw[:size], raw[size + 2:]
                if size == 0:
                    break
        else:
            n = int(headers.get("content-length", len(raw)))
            body, raw = raw[:n], raw[n:]
        out.append((int(status), headers, body))
    return out
