"""The recorder's background writer: drains the queue into the store in batches.

Mixed into :class:`goodput_core.recorder.Recorder`, which owns the state it
uses (``_queue``, ``_wake``, ``_store``, writer metadata, counters). A batch
that fails to write is kept and retried with backoff, so nothing is lost or
written twice; :meth:`WriterMixin.flush` puts a fence in the queue and waits
until the writer has stored everything before it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Optional

from goodput_core.events import EventRecord

__all__ = ["WriterMixin"]

logger = logging.getLogger("goodput")


class _Fence:
    """A marker in the queue: set once everything before it is stored."""

    __slots__ = ("done", "ok")

    def __init__(self):
        self.done = threading.Event()
        self.ok = False


class WriterMixin:
    """Batching, retrying, fencing: the writer-thread half of the recorder."""

    def _drain_batch(self, limit: int = 10_000):
        """Pops up to ``limit`` events; returns (records, fences reached)."""
        q = self._queue
        run, pidx, host, pid, attempt = (
            self.run, self.process_index, self._host, self._pid, self._attempt)
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
            kind, t, step, extra, wt = item
            batch.append(EventRecord(run, kind, t, step, extra, pidx, host, pid, attempt,
                                     next(seq), wt))
        watchdog = self._watchdog
        if watchdog is not None and batch:
            try:
                watchdog.observe(batch)
            except Exception:  # never let the watchdog stop the writer
                logger.exception("goodput: hang watchdog error")
        return batch, fences

    def _write(self, batch) -> bool:
        if not batch:
            return True
        try:
            # Fork safety of the store's own I/O is the store's job (the sqlite
            # store holds forks back while any thread is inside SQLite).
            self._store.append(batch)
        except Exception:
            self._write_errors += 1
            if self._write_errors == 1 or self._write_errors % 100 == 0:
                logger.exception("goodput: writing %d events to %s failed (will retry)",
                                 len(batch), getattr(self._store, "url", "the store"))
            return False
        self._written += len(batch)
        return True

    def _drain(self) -> None:
        """Writes everything queued; keeps a failed batch and retries it."""
        # Set before the first event leaves the queue, cleared once all are
        # stored: a reader that finds the queue empty and this False knows
        # that nothing recorded before is still on its way (has_unstored).
        self._draining = True
        try:
            self._drain_queue()
        finally:
            self._draining = False

    def has_unstored(self) -> bool:
        """True while events recorded so far may not all be in the store yet."""
        return bool(self._queue) or self._draining or self._pending is not None

    def _drain_queue(self) -> None:
        pending = getattr(self, "_pending", None)
        backoff = 0.05
        while True:
            if pending is None:
                pending, fences = self._drain_batch()
            else:
                fences = []
            if not pending and not fences:
                self._pending = None
                return
            if not self._write(pending):
                self._pending = pending
                for f in fences:  # fences stay ordered after the failed batch
                    self._queue.appendleft(f)
                if self._closed:
                    return
                self._wake.wait(backoff)
                backoff = min(backoff * 2, 5.0)
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
          timeout: seconds to wait at most (None: no limit).
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
        deadline = None if timeout is None else time.monotonic() + timeout
        fence = _Fence()
        self._queue.append(fence)
        writer = self._writer
        if writer is None or not writer.is_alive():
            self._drain()  # no writer (interpreter exit, dead thread): write inline
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
