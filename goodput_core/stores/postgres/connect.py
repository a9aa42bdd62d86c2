"""How the PostgreSQL store opens, shares and gives back its connections.

**Opening.** The connection URL goes to libpq as the user wrote it (less our
``schema=``), so every form libpq accepts works: Unix sockets, ``PG*``
variables, several hosts, services, passfiles, TLS settings. Connections are
made for a transaction-pooling pgbouncer too: psycopg's automatic server-side
prepared statements are off (``prepare_threshold=None``). A failure becomes a
one-line :class:`StoreError` that names what to fix, with every password in
the URL replaced by ``***``.

**Sharing.** A cluster job has more recording processes than the server has
connections (a default server allows 100; a job may have 1,000 hosts), so a
process never holds more than one writing connection per server, whatever
the number of stores (recorders) it has: :class:`ConnectionSlot` lends it to
one batch at a time and closes it as soon as nobody needs it (no batch
waiting), so an idle process holds no connection at all. Each process then
connects about once per batch burst, while the recorders batch in between.

**Backing off.** When connecting fails (the server is full: "too many
clients", starting up, down), the slot refuses to try again before a delay
that doubles from ``first`` to ``longest`` with full jitter, for every store of
the process at once: a thousand refused hosts retry spread over time, never in
a loop, and their events wait in the stores' buffers (memory, then the spill
file), so the next batch is larger. :attr:`ConnectionSlot.counts` counts the
attempts (``opened``, ``refused``, ``held_back``).
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import psycopg
from psycopg.conninfo import conninfo_to_dict

from goodput_core.redact import redact
from goodput_core.stores.base import StoreError

__all__ = ["connect", "describe", "is_overload", "is_content_error", "ConnectionSlot", "slot_for", "slot_counts"]

#: A server that is there but full, starting or stopping: it will take us soon.
#: (Not a role's own CONNECTION LIMIT, "too many connections for role": that is
#: the configuration, and a store opened under it fails to open, as a wrong
#: password does.)
_OVERLOAD_STATES = {"57P03"}  # cannot_connect_now: starting up, shutting down, recovery
_OVERLOAD_TEXT = ("too many clients already", "remaining connection slots are reserved",
                  "the database system is starting up", "the database system is shutting down",
                  "no more connections allowed")

#: (part of the driver's message, what to tell the user): the first match wins.
#: (libpq already says what to check when a server does not answer.)
_HINTS = (
    ("password authentication failed", "check the user and password (in the URL, "
     "PGPASSWORD or the passfile)"),
    ("no password supplied", "give a password (in the URL, PGPASSWORD or the passfile)"),
    ("fatal: database \"", "check the database name, or create the database"),
    ("fatal: role \"", "check the user name, or create that role"),
    ("pg_hba.conf", "the server's pg_hba.conf does not let this user, host or database in"),
    ("certificate verify failed", "check sslrootcert: it must hold the CA that signed "
     "the server's certificate"),
    ("does not match host name", "the server's certificate is not for this host name"),
    ("root certificate file", "sslrootcert names no readable file"),
    ("server does not support ssl", "the server has no TLS: turn ssl on there, or lower "
     "sslmode"),
    ("definition of service", "check the service name and PGSERVICEFILE"),
    ("service file", "check PGSERVICEFILE"),
    ("invalid uri query parameter", "remove or fix that URL parameter"),
    ("invalid connection option", "remove or fix that connection parameter"),
    ("too many clients", "the server's max_connections is reached: goodput retries later"),
    ("could not translate host name", "check the host name"),
    ("timeout expired", "the server did not answer: check the host, port and firewall"),
)


def describe(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """The driver's message on one line, passwords scrubbed, with what to fix."""
    text = redact(" ".join(str(exc).split()) or type(exc).__name__, secrets)
    low = text.lower()
    hint = next((h for part, h in _HINTS if part in low), "")
    return f"{text} -> {hint}" if hint else text


def is_overload(exc: BaseException) -> bool:
    """True when the server refused us for now (full, starting, shutting down;
    pgbouncer at its ``max_client_conn``)."""
    if getattr(exc, "sqlstate", None) in _OVERLOAD_STATES:
        return True
    low = str(exc).lower()
    return any(part in low for part in _OVERLOAD_TEXT)


#: SQLSTATE classes of a statement refused for what it holds: data exception,
#: integrity violation, a program limit (a value too large). Everything else the
#: server says (a connection cut, a restart, pgbouncer's login retry, a deadlock)
#: is about the moment, not the events: the batch is retried whole.
_CONTENT_CLASSES = ("22", "23", "54")


def is_content_error(exc: BaseException) -> bool:
    """True when ``exc`` refused a batch for its content (retrying cannot help)."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate
        # No SQLSTATE: the driver itself could not encode a value (a NUL in text).
        return state is None or state[:2] in _CONTENT_CLASSES
    return isinstance(exc, (ValueError, TypeError, UnicodeError, OverflowError))


def connect(conninfo: str, *, timeout_s: int) -> "psycopg.Connection":
    """Opens one autocommit connection as libpq would, fit for pgbouncer.

    ``connect_timeout`` and ``application_name`` are ours only when neither the
    URL nor the environment sets them.

    Raises:
      psycopg.Error: as the driver raised it (see :func:`describe`).
    """
    given = conninfo_to_dict(conninfo)
    extra: Dict[str, Any] = {}
    if "connect_timeout" not in given and "PGCONNECT_TIMEOUT" not in os.environ:
        extra["connect_timeout"] = timeout_s
    if "application_name" not in given and "PGAPPNAME" not in os.environ:
        extra["application_name"] = "goodput"
    return psycopg.connect(conninfo, autocommit=True, prepare_threshold=None, **extra)


class ConnectionSlot:
    """One process's writing connection to one server, lent to one batch at a time.

    Args:
      opener: ``opener() -> connection`` (raises on failure).
      backoff: (first, longest) delay in seconds before connecting again after
        a failed attempt; each is drawn between half and 1.5 times the current
        step (full jitter), the step doubling per failure.
      clock, rng: ``time.monotonic`` and ``random.random`` (inject in tests).
    """

    def __init__(self, opener: Callable[[], Any], *, backoff: Tuple[float, float] = (0.2, 30.0),
                 clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float] = random.random):
        self._opener = opener
        self._backoff = backoff
        self._clock, self._rng = clock, rng
        self._turn = threading.Lock()  # held by the batch using the connection
        self._state = threading.Lock()
        self._waiting = 0
        self._conn: Any = None
        self._step = 0.0
        self._not_before = 0.0
        self._overloaded = False  # the last failed attempt met a full or starting server
        self._last_error = ""
        self.counts: Dict[str, int] = collections.Counter()

    def _open(self, gated: bool) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        wait = self._not_before - self._clock()
        if wait > 0 and (gated or self._overloaded):
            self.counts["held_back"] += 1
            error = StoreError(f"not connecting again for {wait:.1f} s after: "
                               f"{self._last_error}")
            error.overload = self._overloaded  # type: ignore[attr-defined]
            error.held_back = True  # type: ignore[attr-defined]
            raise error
        try:
            self._conn = self._opener()
        except Exception as exc:
            self.counts["refused"] += 1
            self._last_error = str(exc)
            self._overloaded = bool(getattr(exc, "overload", False)) or is_overload(exc)
            self._step = min(max(self._step * 2, self._backoff[0]), self._backoff[1])
            self._not_before = self._clock() + self._step * (0.5 + self._rng())
            raise
        self.counts["opened"] += 1
        self._step = 0.0
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    @contextmanager
    def lease(self, more: Callable[[], bool] = lambda: False,
              gated: bool = True) -> Iterator[Any]:
        """The connection for one batch (opened when needed).

        Args:
          more: True when the caller has another batch ready at once: the
            connection is then kept for it, as it is when another batch of
            this process waits; otherwise it is closed on return.
          gated: False to try at once after a failure that was not the
            server being full (a store opened with a fixed URL must say
            what is wrong now, not that an earlier attempt failed).

        Raises:
          StoreError: too soon after a failed attempt.
          psycopg.Error: connecting failed (the next attempt waits).
        """
        with self._state:
            self._waiting += 1
        self._turn.acquire()
        with self._state:
            self._waiting -= 1
        keep = False
        try:
            conn = self._open(gated)
            try:
                yield conn
                keep = not conn.closed and conn.info.transaction_status == \
                    psycopg.pq.TransactionStatus.IDLE
            finally:
                with self._state:
                    keep = keep and (self._waiting > 0 or more())
                if not keep:
                    self._close()
        finally:
            self._turn.release()


_SLOTS: Dict[Tuple[int, str], ConnectionSlot] = {}
_SLOTS_LOCK = threading.Lock()


def slot_for(conninfo: str, opener: Callable[[], Any],
             backoff: Optional[Tuple[float, float]] = None) -> ConnectionSlot:
    """This process's slot for ``conninfo`` (made with ``opener`` on first use)."""
    key = (os.getpid(), conninfo)  # a forked child gets its own
    with _SLOTS_LOCK:
        slot = _SLOTS.get(key)
        if slot is None:
            slot = _SLOTS[key] = ConnectionSlot(opener, **({"backoff": backoff}
                                                           if backoff else {}))
        return slot


def _after_fork_in_child() -> None:
    # The parent's slots stay in the table under the parent's pid, untouched
    # (closing one here would end the parent's session); only the lock is new.
    global _SLOTS_LOCK
    _SLOTS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def slot_counts() -> Dict[str, int]:
    """Connection attempts of this process, all servers: opened, refused, held_back."""
    out: Dict[str, int] = collections.Counter()
    with _SLOTS_LOCK:
        for (pid, _), slot in _SLOTS.items():
            if pid == os.getpid():
                out.update(slot.counts)
    return dict(out)
