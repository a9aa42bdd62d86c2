"""What the stores that send from a background thread share.

The Cloud Logging and PostgreSQL stores queue events and deliver them from a
sender thread of their own (:class:`~goodput_core.stores.batch_sender.BatchSender`
over a :class:`~goodput_core.stores.spill_buffer.SpillBuffer`: bounded
memory, then a local spill file). Such a store *has* a :class:`SendQueue`
(and is a :class:`QueuedStore`, which forwards to it), the part that does not
depend on the service: queueing, fences, close, counters, and the two moments
that need care:

* **Interpreter exit**: the recorders' queues are pushed into the stores
  first, then every live store delivers what it can within a bounded time
  and leaves the rest in its spill file for the next process.
* **``os.fork()``**: threads and network connections do not survive into the
  child, so each live store rebuilds its per-process state there and never
  touches the parent's connections.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import sys
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from goodput_core import exit_bound
from goodput_core.stores.base import Store
from goodput_core.stores.batch_sender import BatchSender
from goodput_core.stores.spill_buffer import SpillBuffer

__all__ = ["QueuedStore", "SendQueue", "EXIT_TIMEOUT_S"]

logger = logging.getLogger("goodput")

#: The default bound on everything goodput does at exit (``GOODPUT_EXIT_TIMEOUT_S``).
EXIT_TIMEOUT_S = exit_bound.DEFAULT_EXIT_TIMEOUT_S
_LIVE: "weakref.WeakSet" = weakref.WeakSet()  # the SendQueues of this process


def _nothing() -> None:
    pass


class SendQueue:
    """Queueing, fences, close and counters of a store with a sender thread.

    The store makes one at the end of its constructor and starts it
    (:meth:`start`: the sender thread, and the spill files earlier processes
    left), hands it the entries of each ``append`` (:meth:`put`) and delegates
    ``flush``, ``close``, ``stats`` and the delivery marks to it.

    Args:
      url: the store's URL (names its messages and its sender thread).
      send: ``send(entries)``: delivers one batch, on the sender thread; raises
        to retry (:class:`~goodput_core.stores.batch_sender.BatchSender`).
      spill_dir, spill_tag, required: the spill files
        (:class:`~goodput_core.stores.spill_buffer.SpillBuffer`).
      max_buffer, batch_size, flush_interval_s, sleep, backoff, permanent,
        transient: the sender's (:class:`~goodput_core.stores.batch_sender.BatchSender`).
      release: closes the store's own clients (after the sender stopped).
      forget_connections: in a forked child, drops without closing the
        connections of the parent.
    """

    def __init__(self, url: str, send: Callable[[List[Dict[str, Any]]], Any], *,
                 spill_dir: str, spill_tag: str, required: Tuple[str, ...],
                 max_buffer: int, batch_size: int, flush_interval_s: float,
                 sleep: Optional[Callable[[float], Any]], backoff: Tuple[float, float],
                 permanent: Tuple[Type[BaseException], ...] = (),
                 transient: Tuple[Type[BaseException], ...] = (),
                 release: Callable[[], None] = _nothing,
                 forget_connections: Callable[[], None] = _nothing):
        self.url = url
        self._send = send
        self._release = release
        self._forget_connections = forget_connections
        self.closed = False
        #: entries the store could not encode or send, dropped (``stats()["rejected"]``)
        self.rejected = 0
        self._sending = dict(spill_dir=spill_dir, spill_tag=spill_tag, required=required,
                             max_buffer=max_buffer, batch_size=batch_size,
                             flush_interval_s=flush_interval_s, sleep=sleep, backoff=backoff,
                             permanent=permanent, transient=transient)

    def start(self) -> None:
        """Starts sending (a separate step: ``send`` may use the store's
        reference to this queue, set once the constructor returned)."""
        self._init_process_state(adopt=True)
        _LIVE.add(self)

    def _buffer(self, max_memory: int) -> SpillBuffer:
        s = self._sending
        return SpillBuffer(s["spill_dir"], s["spill_tag"], max_memory, required=s["required"])

    def _init_process_state(self, adopt: bool) -> None:
        """The send buffer and thread, owned by one process (rebuilt in a forked child)."""
        s = self._sending
        self._pid = os.getpid()
        buffer = self._buffer(s["max_buffer"])
        self.sender = BatchSender(
            buffer, self._send, name=self.url, batch_size=s["batch_size"],
            flush_interval_s=s["flush_interval_s"], sleep=s["sleep"], backoff=s["backoff"],
            permanent=s["permanent"], transient=s["transient"])
        if adopt:
            try:
                self.sender.adopted(buffer.adopt_orphans())
            except OSError as exc:
                logger.error("goodput: could not read old spill files in %s: %s",
                             s["spill_dir"], exc)

    def put(self, entries: List[Dict[str, Any]]) -> None:
        """Hands entries to the sender (after a fork: this process's own sender).

        Raises:
          OSError: the spill file cannot be written (the caller retries).
        """
        if not entries:
            return
        if os.getpid() != self._pid:  # forked child: the parent's buffer is not ours
            self._init_process_state(adopt=False)
        if self.closed:
            # Kept on disk for the next store opened on the same destination.
            late = self._buffer(1)
            late.put(entries)
            logger.warning("goodput: %d events appended after close kept in %s",
                           len(entries), late.close())
            return
        self.sender.put(entries)

    def delivery_mark(self) -> Optional[int]:
        """A mark of everything appended so far: delivered once
        :meth:`delivered_mark` reaches it (the recorder frees its journal then).
        None when the events need no confirmation (closed: they are in a spill
        file; another process's store)."""
        if self.closed or os.getpid() != self._pid:
            return None
        return self.sender.marks()[0]

    def delivered_mark(self) -> Optional[float]:
        """How far the entries appended were delivered (or dropped for good)."""
        if self.closed or os.getpid() != self._pid:
            return math.inf
        return self.sender.marks()[1]

    def flush(self, timeout: Optional[float] = 10.0) -> bool:
        """Waits until every event appended before this call is delivered.

        Args:
          timeout: seconds to wait at most (None: no limit).

        Returns:
          True when delivered, False on timeout (the events stay queued).
        """
        return self.sender.flush(timeout)

    def close(self, timeout: Optional[float] = 10.0,
              say: Optional[Callable[[str], Any]] = None) -> bool:
        """Delivers what it can within ``timeout``, then stops the sender.

        Events still undelivered are left in a spill file, delivered by the
        next store opened on the same destination (in this or a later process).

        Args:
          say: where to say what was left (default: the log; at exit: stderr).

        Returns:
          True when everything was delivered.
        """
        if self.closed:
            return True
        self.closed = True
        ok, left_in = self.sender.close(timeout)
        if left_in:
            text = (f"goodput: {self.url} unreachable; undelivered events kept in {left_in}; "
                    "the next process that opens that store delivers them")
            if say is None:
                logger.warning("%s", text)
            else:
                say(text + "\n")
        self._release()
        return ok

    def after_fork_in_child(self) -> None:
        self._forget_connections()
        self._init_process_state(adopt=False)

    def stats(self) -> Dict[str, Any]:
        """Counters: delivered, pending (in memory / on disk), retries, rejected, ..."""
        out = self.sender.stats()
        out["rejected"] = self.rejected
        return out


class QueuedStore(Store):
    """A store that *has* a :class:`SendQueue` (``self._sending``, made and
    started at the end of the subclass's constructor): delivering, closing,
    the delivery marks and the counters are the queue's."""

    _sending: SendQueue

    def flush(self, timeout: Optional[float] = 10.0) -> bool:
        """Waits until every event appended before this call is delivered
        (False on timeout: the events stay queued)."""
        return self._sending.flush(timeout)

    def close(self, timeout: Optional[float] = 10.0,
              say: Optional[Callable[[str], Any]] = None) -> bool:
        """Delivers what it can within ``timeout`` and stops sending; what is left
        waits in a spill file for the next store on the same destination (``say``:
        where to say so; default the log). True when everything was delivered."""
        return self._sending.close(timeout, say)

    def delivery_mark(self) -> Optional[int]:
        """See :meth:`SendQueue.delivery_mark`."""
        return self._sending.delivery_mark()

    def delivered_mark(self) -> Optional[float]:
        """See :meth:`SendQueue.delivered_mark`."""
        return self._sending.delivered_mark()

    def stats(self) -> Dict[str, Any]:
        """Counters: delivered, pending (in memory / on disk), retries, rejected, ..."""
        return self._sending.stats()


def _close_all() -> None:
    """At exit: push the recorders' queues into the stores (what the record layer
    registered, :data:`goodput_core.exit_bound.before_stores_close`: its own
    atexit hook runs after ours, LIFO), then deliver; all of it within the one
    exit bound (:mod:`goodput_core.exit_bound`)."""
    exit_bound.run_before_stores_close()
    for queue in list(_LIVE):
        if queue.closed:
            continue
        try:
            queue.close(exit_bound.remaining(), say=sys.stderr.write)
        except Exception:
            logger.exception("goodput: closing %s at exit failed", queue.url)


def _after_fork_in_child() -> None:
    for queue in list(_LIVE):
        if not queue.closed:
            queue.after_fork_in_child()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
