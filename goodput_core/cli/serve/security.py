"""The dashboard's security rules, apart from the server that applies them.

- :func:`is_loopback` and :func:`allowed_hosts`: without a token, only a
  ``Host`` naming this server is answered (DNS rebinding defence).
- :func:`authorised`: with a token, every request carries it (a query
  parameter once, then a cookie; or ``Authorization: Bearer``), compared in
  constant time.
- :data:`SECURITY_HEADERS`: on every answer, errors and the HTTP stack's own
  refusals included.
- :func:`run_segment` / :func:`run_from_segment`: a run name as one path
  segment. Browsers drop ``.`` and ``..`` segments from a path, even
  percent-encoded (``%2E``), so such names are written with a ``~`` before
  them; a name that starts with ``~`` gets one more (``static/app.js`` does
  the same).
"""

from __future__ import annotations

import hmac
import ipaddress
import urllib.parse
from typing import Dict, Iterable, Mapping, Optional, Set, Tuple

from goodput_core.text import printable

__all__ = ["CSP", "SECURITY_HEADERS", "TOKEN_ENV", "COOKIE", "is_loopback", "allowed_hosts",
           "authorised", "token_cookie", "run_segment", "run_from_segment", "for_log"]

TOKEN_ENV = "GOODPUT_SERVE_TOKEN"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS: Tuple[Tuple[str, str], ...] = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)
COOKIE = "goodput_token"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> Set[str]:
    """The ``Host`` values naming a server bound to ``host:port``: the bound
    address and the loopback names, with and without the port."""
    names = {host, f"[{host}]"} | {"localhost", "127.0.0.1", "[::1]"}
    return {f"{n}:{port}" for n in names} | names


def authorised(token: Optional[str], params: Mapping[str, str],
               headers: Iterable[Tuple[bytes, bytes]]) -> Tuple[bool, bool]:
    """``(allowed, set the cookie)`` of a request: its ``?token=``, else its
    ``Authorization: Bearer``, else its cookie, compared in constant time."""
    if token is None:
        return True, False
    want = token.encode()
    given = params.get("token")
    if given is not None:
        ok = hmac.compare_digest(given.encode(), want)
        return ok, ok
    fields: Dict[bytes, bytes] = {}
    cookies = []
    for name, value in headers:
        if name == b"cookie":
            cookies.append(value)
        else:
            fields.setdefault(name, value)
    auth = fields.get(b"authorization", b"")
    if auth.startswith(b"Bearer "):
        return hmac.compare_digest(auth[7:], want), False
    for part in b";".join(cookies).split(b";"):
        name, _, value = part.strip().partition(b"=")
        if name == COOKIE.encode():
            given = urllib.parse.unquote(value.decode("latin-1"))
            return hmac.compare_digest(given.encode(), want), False
    return False, False


def token_cookie(token: str) -> str:
    """The ``Set-Cookie`` value that carries the token for the pages."""
    value = urllib.parse.quote(token, safe="")  # any token, one cookie
    return f"{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/"


def run_segment(run: str) -> str:
    """``run`` as one path segment (what the pages' links use)."""
    if run in (".", "..") or run.startswith("~"):
        run = "~" + run
    return urllib.parse.quote(run, safe="")


def run_from_segment(segment: str) -> str:
    """The run named by a path segment: percent-decoded (UTF-8, strictly) and
    one leading ``~`` dropped.

    Raises:
      ValueError: a segment that is not percent-encoded UTF-8.
    """
    run = urllib.parse.unquote(segment, errors="strict")
    return run[1:] if run.startswith("~") else run


def for_log(text: str, limit: int = 120) -> str:
    """``text`` for a log line: control characters escaped, at most ``limit``
    characters (a request's address is the client's to choose)."""
    return printable(text[:limit] + ("..." if len(text) > limit else ""))
