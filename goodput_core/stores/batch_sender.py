"""The background sender of the stores that deliver from a thread of their own
(Cloud Logging, PostgreSQL): batches, backoff, fences.

One daemon thread takes entries from the head of a
:class:`~goodput_core.stores.spill_buffer.SpillBuffer`, sends them with
one call of ``write(batch)`` (one RPC to Cloud Logging, one transaction in
PostgreSQL) and removes them only once the call succeeded, so a failure keeps them at the head, in order. Failures are retried
after ``sleep(delay)``, the delay doubling up to a maximum, with +-20 % jitter
(hosts of one job that lost the service together do not retry in lockstep).
Errors listed as ``permanent`` (a request the service will never accept) drop
the batch instead of blocking everything behind it.

No client library is imported here: the store passes ``write`` and the error
classes in.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from goodput_core.stores.spill_buffer import SpillBuffer

__all__ = ["BatchSender"]

logger = logging.getLogger("goodput")


class BatchSender:
    """Delivers a buffer's entries in batches from a background thread.

    Args:
      buffer: the queue of entries (memory, then spill file).
      write: sends one batch (one RPC); raises on failure.
      name: for the thread name and log messages (the store URL).
      batch_size: entries per ``write`` call at most.
      flush_interval_s: how long a partial batch waits for more entries.
      sleep: ``sleep(seconds)`` between retries; None = a wait that
        :meth:`close` interrupts.
      backoff: (first delay, maximum delay) in seconds.
      permanent: exception types after which a batch is dropped, not retried.
      transient: exception types logged as warnings (others as errors; both
        are retried: credentials may be fixed while the data waits).
    """

    def __init__(self, buffer: SpillBuffer, write: Callable[[List[Dict[str, Any]]], Any], *,
                 name: str, batch_size: int, flush_interval_s: float,
                 sleep: Optional[Callable[[float], Any]], backoff: Tuple[float, float],
                 permanent: Tuple[Type[BaseException], ...] = (),
                 transient: Tuple[Type[BaseException], ...] = ()):
        self.buffer = buffer
        self._write = write
        self.name = name
        self._batch_size = batch_size
        self._interval = flush_interval_s
        self._user_sleep = sleep
        self._backoff = backoff
        self._permanent, self._transient = permanent, transient
        self._random = random.Random()
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._put = self._taken = 0  # entries queued / delivered-or-dropped, in order
        self._flushers = 0
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self.counts: Dict[str, int] = collections.Counter()
        self.last_error = ""

    # ------------------------------------------------------------ producer side
    def put(self, entries: List[Dict[str, Any]]) -> None:
        """Queues entries (memory or spill file) and wakes the thread when a batch is full."""
        with self._cond:
            self.buffer.put(entries)
            self._put += len(entries)
            self._start()
            if len(self.buffer) >= self._batch_size:
                self._cond.notify_all()

    def adopted(self, count: int) -> None:
        """Accounts for ``count`` entries the buffer took over from old spill files."""
        if count:
            with self._cond:
                self._put += count
                self._start()
                self._cond.notify_all()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"goodput-sender {self.name}")
            self._thread.start()

    # ------------------------------------------------------------ the thread
    def _sleep(self, seconds: float) -> None:
        if self._user_sleep is not None:
            self._user_sleep(seconds)
        else:
            self._wake.wait(seconds)

    def _wait_for_work(self) -> bool:
        """Blocks until a batch should be sent; False when the thread should exit."""
        with self._cond:
            while True:
                if self._stopping:  # close() already waited for delivery
                    return False
                pending = len(self.buffer)
                if pending and (pending >= self._batch_size or self._flushers):
                    return True
                if pending:
                    # A partial batch waits a little for company, unless flushed.
                    self._cond.wait(self._interval)
                    return len(self.buffer) > 0 and not self._stopping
                self._cond.wait()

    def _loop(self) -> None:
        delay, streak = self._backoff[0], 0
        while self._wait_for_work():
            batch: List[Dict[str, Any]] = []
            try:
                batch = self.buffer.peek(self._batch_size)
                if not batch:
                    continue
                self._write(batch)
                outcome = "delivered"
            except self._permanent as exc:
                outcome = "dropped"
                logger.error("goodput: %s rejected %d entries for good: %s",
                             self.name, len(batch), exc)
            except Exception as exc:  # retried: the entries stay at the head
                streak += 1
                self.counts["retries"] += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if streak == 1 or streak % 100 == 0:
                    level = logging.WARNING if isinstance(exc, self._transient) else logging.ERROR
                    logger.log(level, "goodput: writing to %s failed (%s); retrying, "
                               "%d entries pending", self.name, self.last_error, len(self.buffer))
                self._sleep(delay * (0.8 + 0.4 * self._random.random()))
                delay = min(delay * 2, self._backoff[1])
                continue
            if streak:
                logger.warning("goodput: %s reachable again after %d retries", self.name, streak)
            delay, streak = self._backoff[0], 0
            with self._cond:
                self.buffer.commit(len(batch))
                self._taken += len(batch)
                self.counts[outcome] += len(batch)
                self.counts["batches"] += 1
                self._cond.notify_all()

    # ------------------------------------------------------------ fences
    def flush(self, timeout: Optional[float]) -> bool:
        """Waits until every entry queued before this call left the buffer.

        Returns:
          True when done, False on timeout (the entries stay queued).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._put
            self._flushers += 1
            self._cond.notify_all()
            try:
                while self._taken < target:
                    if self._thread is None or not self._thread.is_alive():
                        return False
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
                return True
            finally:
                self._flushers -= 1

    def close(self, timeout: Optional[float]) -> Tuple[bool, Optional[str]]:
        """Delivers within ``timeout``, stops the thread, persists what is left.

        Returns:
          (everything delivered, path of the spill file left behind or None).
        """
        start = time.monotonic()
        ok = self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._wake.set()  # cuts a default backoff sleep short
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            # An RPC in flight may outlive the join; if it then succeeds, its
            # entries are also in the file left behind, and their insert ids
            # make the later resend harmless.
            thread.join(left)
        with self._cond:
            path = self.buffer.close()
        return ok and path is None, path

    def marks(self) -> Tuple[int, int]:
        """(entries queued so far, entries delivered or dropped so far), in order:
        an entry queued when the first was N is delivered once the second reaches N."""
        with self._cond:
            return self._put, self._taken

    def stats(self) -> Dict[str, Any]:
        """Buffer sizes plus delivered / dropped / retries / batches counters."""
        out: Dict[str, Any] = dict(self.buffer.stats())
        for key in ("delivered", "dropped", "retries", "batches"):
            out[key] = self.counts.get(key, 0)
        out["last_error"] = self.last_error
        return out
