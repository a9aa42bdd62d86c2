"""``goodput serve``: a live web dashboard over a store (read only).

Usage::

    goodput serve [--store URL] [--host 127.0.0.1] [--port 8765] [--token-file FILE]

Pages: the runs (``/``), one run (``/run/NAME``) and a run group side by side
(``/compare?group=G``), updated live as events are stored. The JSON API the
pages use is described in :mod:`goodput_core.cli.serve.api`. Any address but
loopback needs a token: from a file (``--token-file``), the environment
(``$GOODPUT_SERVE_TOKEN``) or, with a warning, the command line (``--token``:
every user of the machine can read it in ``ps``). Needs the ``serve`` extra
(uvicorn).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

from goodput_core.cli import CliError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.cli.serve import make_server
from goodput_core.cli.serve.security import TOKEN_ENV
from goodput_core.stores import open_store

__all__ = ["add_arguments", "run", "read_token"]


def add_arguments(parser) -> None:
    add_store_argument(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; any other needs a token)")
    parser.add_argument("--port", type=_port, default=8765, help="port (default 8765; 0: any)")
    parser.add_argument("--token-file", default=None, metavar="FILE",
                        help="require the token this file holds on every request (its first "
                             f"line; default: ${TOKEN_ENV})")
    parser.add_argument("--token", default=None,
                        help="require this token on every request; other users of the machine "
                             "can read it in ps: prefer --token-file or $" + TOKEN_ENV)


def _port(text: str) -> int:
    import argparse

    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def read_token(args) -> Optional[str]:
    """The token: ``--token-file``, else ``--token`` (with a warning), else
    ``$GOODPUT_SERVE_TOKEN``; None for none.

    Raises:
      CliError: both options, an unreadable or empty file.
    """
    if args.token_file is not None and args.token is not None:
        raise CliError("give the token once: --token-file or --token")
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.readline().strip()
            mode = os.stat(args.token_file).st_mode
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read the token file {args.token_file}: "
                           f"{getattr(exc, 'strerror', None) or exc}") from None
        if not token:
            raise CliError(f"the token file {args.token_file} is empty")
        if mode & 0o077:
            print(f"goodput serve: warning: {args.token_file} can be read by other users "
                  f"(chmod 600 {args.token_file})", file=sys.stderr)
        return token
    if args.token is not None:
        print("goodput serve: warning: a token given with --token can be read by every user "
              f"of this machine (ps); use --token-file FILE or ${TOKEN_ENV}", file=sys.stderr)
        return args.token or None
    return os.environ.get(TOKEN_ENV) or None


def _log_to_stderr() -> None:
    """One line per refused or malformed request on stderr (never a traceback
    for a request: the server answers those itself)."""
    log = logging.getLogger("goodput.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("goodput serve: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def run(args) -> int:
    token = read_token(args)
    store = open_store(args.store, create=False)
    try:
        server = make_server(store, args.host, args.port, token)
    except ImportError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") \
            from None
    _log_to_stderr()
    # the token itself is never printed (terminals are logged and shared)
    hint = "?token=<your token>" if token else ""
    print(f"goodput serve: {store.url} on {server.url}{hint}   (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.stdout.flush()
    return 0
