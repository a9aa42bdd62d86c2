"""``goodput serve``: a live, read-only web dashboard over any store.

Parts: :mod:`.runs` (one incremental calculator per run looked at, in a
bounded cache), :mod:`.views` (what the charts draw, with costs bounded by
the pixels asked for), :mod:`.api` (the JSON API), :mod:`.security` (the
rules each request passes), :mod:`.app` (routing, as an ASGI application),
:mod:`.http` (the server: uvicorn, the ``serve`` extra) and ``static/`` (the
pages, their script and style: no external resource, the dashboard works
offline).
"""

from __future__ import annotations

from typing import Any, Optional

from goodput_core.stores import schemes

__all__ = ["make_server"]


def make_server(store: Any, host: str = "127.0.0.1", port: int = 8765,
                token: Optional[str] = None, *, max_streams: int = 32,
                client_timeout: float = 60.0, max_connections: int = 512,
                **cache_options: Any):
    """A :class:`~goodput_core.cli.serve.http.DashboardServer` over ``store``
    (an open store), its socket bound; call ``serve_forever()`` on it,
    ``shutdown()`` to stop and ``server_close()`` to let the port go.

    ``client_timeout``: seconds a client may take to send a request, or stall
    reading an answer, before it is disconnected; ``max_connections``: more
    connections at once are closed as they come. ``cache_options`` go to
    :class:`~goodput_core.cli.serve.runs.RunCache`.
    Cloud Logging is read less often (every 2 s per run, its run list every
    10 s): each read is an API call under a quota, and its logs arrive with a
    delay of their own.

    Raises:
      ValueError: a non-loopback ``host`` without a token.
      OSError: the port cannot be bound.
      ImportError: uvicorn is missing (``pip install 'goodput-core[serve]'``).
    """
    # lazy: the server's modules (numpy, asyncio): goodput demo imports this package
    # for its security helpers
    from goodput_core.cli.serve.api import Api
    from goodput_core.cli.serve.http import DashboardServer
    from goodput_core.cli.serve.runs import RunCache

    scheme = schemes.scheme_of(str(getattr(store, "url", "")))[0]
    for key, value in (scheme.read_cache if scheme is not None else {}).items():
        cache_options.setdefault(key, value)  # a slow remote log is read less often
    return DashboardServer(Api(RunCache(store, **cache_options)), host, port, token,
                           max_streams=max_streams, client_timeout=client_timeout,
                           max_connections=max_connections)
