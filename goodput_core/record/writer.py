"""The recorder's background writer: drains the queue into the store in batches.

Mixed into :class:`goodput_core.record.recorder.Recorder`, which owns the state it
uses (``_queue``, ``_wake``, ``_store``, writer metadata, counters). A batch
that fails to write for a reason that may pass (the store's own errors:
disk full, locked, unreachable) is kept and retried with exponential backoff,
so nothing is lost or written twice; the backoff is a real wait that neither
:meth:`WriterMixin.flush` nor a filling queue cuts short (only ``close()``
does), so a failing store never makes the writer spin. A batch that fails
because of its content (an event the store cannot encode) is split in halves
until the events that fail alone are isolated: those are dropped and counted
(``stats()["unstorable"]``), every other event is written.
:meth:`WriterMixin.flush` puts a fence in the queue and waits until the
writer has stored everything before it.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from typing import List, Optional

from goodput_core.events import EventRecord
from goodput_core.stores.base import StoreError

__all__ = ["WriterMixin"]

logger = logging.getLogger("goodput")


class _Fence:
    """A marker in the queue: set once everything before it is stored."""

    __slots__ = ("done", "ok")

    def __init__(self):
        self.done = threading.Event()
        self.ok = False


_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 5.0


def _may_pass(error: BaseException) -> bool:
    """True for store failures worth retrying as they are (I/O, locks, outages).

    Anything else (TypeError, OverflowError, UnicodeError, ValueError...) comes
    from the batch's content and would fail the same way forever; so does a
    store error that SQLite raised about the data itself (a constraint, a
    value too big, a type it cannot bind).
    """
    if isinstance(error, StoreError):
        sqlite3 = sys.modules.get("sqlite3")
        return sqlite3 is None or not isinstance(
            error.__cause__, (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError))
    return isinstance(error, OSError)


class WriterMixin:
    """Batching, retrying, fencing: the writer-thread half of the recorder."""

    def _drain_batch(self, limit: int = 10_000):
        """Pops up to ``limit`` events; returns (records, fences reached)."""
        q = self._queue
        run, host, pid, attempt = self.run, self._host, self._pid, self._attempt
        seq = self._seq
        batch, fences = [], []
        popleft = q.popleft
        while len(batch) < limit:
            try:
                item = popleft()
            except IndexError:
                break
            if type(item) is _Fence:
                fences.append(item)
                continue
            kind, t, step, extra, wt, pidx = item  # pidx: stamped at record time
            batch.append(EventRecord(run, kind, t, step, extra, pidx, host, pid, attempt,
                                     next(seq), wt))
        watchdog = self._watchdog
        if watchdog is not None and batch:
            try:
                watchdog.observe(batch)
            except Exception:  # never let the watchdog stop the writer
                logger.exception("goodput: hang watchdog error")
        return batch, fences

    def _append(self, batch) -> Optional[BaseException]:
        """One store append; returns the error instead of raising it."""
        try:
            # Fork safety of the store's own I/O is the store's job (the sqlite
            # store holds forks back while any thread is inside SQLite).
            self._store.append(batch)
        except Exception as exc:
            return exc
        self._written += len(batch)
        return None

    def _write(self, batch: List[EventRecord]) -> List[EventRecord]:
        """Writes ``batch``; returns the events left to retry ([] when done).

        A content error splits the failing part in halves, in order, down to
        single events that are dropped and counted; an error that may pass
        stops there and returns the unwritten rest, in order.
        """
        parts = [batch] if batch else []  # a stack: the next part to write is last
        while parts:
            part = parts.pop()
            error = self._append(part)
            if error is None:
                continue
            if _may_pass(error):
                self._write_errors += 1
                if self._write_errors == 1 or self._write_errors % 100 == 0:
                    logger.error("goodput: writing %d events to %s failed (will retry): %s",
                                 len(part), getattr(self._store, "url", "the store"), error)
                return part + [e for p in reversed(parts) for e in p]
            if len(part) == 1:
                self._unstorable += 1
                if self._unstorable == 1:
                    logger.error("goodput: dropped an event the store cannot hold (%s: %s); "
                                 "further ones are counted in stats()['unstorable']",
                                 type(error).__name__, error)
                continue
            half = len(part) // 2
            parts += [part[half:], part[:half]]
        return []

    def _drain(self, deadline: Optional[float] = None) -> None:
        """Writes everything queued; keeps a failed batch and retries it with backoff.

        Args:
          deadline: a ``time.monotonic()`` after which a failing store is left
            for later (flushing without a writer thread must not hang).
        """
        # Set before the first event leaves the queue, cleared once all are
        # stored: a reader that finds the queue empty and this False knows
        # that nothing recorded before is still on its way (has_unstored).
        self._draining = True
        try:
            self._drain_queue(deadline)
        finally:
            self._draining = False

    def has_unstored(self) -> bool:
        """True while events recorded so far may not all be in the store yet."""
        return bool(self._queue) or self._draining or self._pending is not None

    def _drain_queue(self, deadline: Optional[float]) -> None:
        pending = self._pending
        backoff = _FIRST_BACKOFF_S
        while True:
            if pending is None:
                pending, fences = self._drain_batch()
            else:
                fences = []
            if not pending and not fences:
                self._pending = None
                return
            left = self._write(pending)
            if left:
                self._pending = left
                for f in fences:  # fences stay ordered after the failed batch
                    self._queue.appendleft(f)
                wait = backoff if deadline is None else min(backoff, deadline - time.monotonic())
                if self._closed or wait <= 0:
                    return
                # Not self._wake: flush() and a filling queue set it, and a wait
                # on it would return at once and retry in a tight loop.
                self._backoff.wait(wait)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
                pending = self._pending
                continue
            pending = self._pending = None
            for f in fences:
                f.ok = True
                f.done.set()

    def _writer_loop(self) -> None:
        my_pid = self._pid
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            if os.getpid() != my_pid:  # a fork copied this thread's owner: not ours
                return
            try:
                self._drain()
            except Exception:  # keep the writer alive whatever happens
                logger.exception("goodput: writer error")
            if self._closed and not self._queue:
                return

    def flush(self, timeout: Optional[float] = 10.0, wait_for_delivery: bool = True) -> bool:
        """Blocks until every event recorded before this call is stored.

        Args:
          timeout: seconds to wait at most (None or ``math.inf``: no limit).
          wait_for_delivery: for stores that deliver in the background (Cloud
            Logging), also wait until they delivered; False waits only until
            the store has taken the events (it then owns them, spilling to
            disk during an outage).

        Returns:
          True when everything was stored, False on timeout or store failure.
        """
        if self._store is None:
            flush = getattr(self._cloud_logger, "flush", None)
            if callable(flush):
                try:
                    flush()
                except Exception:
                    logger.exception("goodput: cloud_logger.flush failed")
                    return False
            return True
        if timeout is not None and not math.isfinite(timeout):
            timeout = None if timeout > 0 else 0.0  # inf: no limit (NaN, -inf: none)
        deadline = None if timeout is None else time.monotonic() + timeout
        fence = _Fence()
        self._queue.append(fence)
        writer = self._writer
        if writer is None or not writer.is_alive():
            self._drain(deadline)  # no writer (interpreter exit, dead thread): write inline
        else:
            self._wake.set()
            fence.done.wait(timeout)
        if not fence.ok or not wait_for_delivery:
            return fence.ok
        # Stores that deliver in the background (Cloud Logging) have a fence too.
        store_flush = getattr(self._store, "flush", None)
        if callable(store_flush):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return bool(store_flush(left)) is not False
            except Exception:
                logger.exception("goodput: store flush failed")
                return False
        return True
