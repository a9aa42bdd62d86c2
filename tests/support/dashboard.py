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
