"""``goodput serve``: a live web dashboard over a store (read only).

Usage::

    goodput serve [--store URL] [--host 127.0.0.1] [--port 8765] [--token T]

Pages: the runs (``/``), one run (``/run/NAME``) and a run group side by side
(``/compare?group=G``), updated live as events are stored. The JSON API the
pages use is described in :mod:`goodput_core.cli.serve.api`. Any address but
loopback needs a token (``--token`` or ``$GOODPUT_SERVE_TOKEN``).
"""

from __future__ import annotations

import os
import sys

from goodput_core.cli import CliError
from goodput_core.cli.commands.common import add_store_argument

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; any other needs a token)")
    parser.add_argument("--port", type=_port, default=8765, help="port (default 8765; 0: any)")
    parser.add_argument("--token", default=None,
                        help="require this token on every request "
                             "(default: $GOODPUT_SERVE_TOKEN)")


def _port(text: str) -> int:
    import argparse

    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def run(args) -> int:
    from goodput_core.cli.serve import make_server
    from goodput_core.cli.serve.http import TOKEN_ENV
    from goodput_core.stores import open_store

    token = args.token or os.environ.get(TOKEN_ENV) or None
    store = open_store(args.store, create=False)
    try:
        server = make_server(store, args.host, args.port, token)
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") \
            from None
    # the token itself is never printed (terminals are logged and shared)
    hint = "?token=<your token>" if token else ""
    print(f"goodput serve: {store.url} on {server.url}{hint}   (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever(poll_interval=0.25)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.stdout.flush()
    return 0
