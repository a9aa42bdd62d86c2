"""The recorder's background writer: drains the queue into the store in batches.

Mixed into :class:`goodput_core.record.recorder.Recorder`, which owns the state it
uses (``_ring``: the recorded events, :mod:`goodput_core.record.ring`; ``_wake``,
``_store``, writer metadata, counters). A batch
that fails to write for a reason that may pass (the store's own errors:
cannot be opened, disk full, locked, read-only, unreachable) is moved, with
everything queued behind it, to this writer's spill file
(:mod:`goodput_core.record.spill`) and retried with exponential backoff: the
spilled events are delivered first, in order, once the store answers, and a
process that ends before that leaves them to the next one. Nothing is lost
or written twice; the backoff is a real wait that neither
:meth:`WriterMixin.flush` nor a filling queue cuts short (only ``close()``
does), so a failing store never makes the writer spin. A batch that fails
because of its content (an event the store cannot encode) is split in halves
until the events that fail alone are isolated: those are dropped and counted
(``stats()["unstorable"]``), every other event is written.
:meth:`WriterMixin.flush` puts a fence in the queue and waits until the
writer has stored everything before it, never longer than its timeout.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from typing import Any, Callable, List, Optional

from goodput_core.events import EventRecord
from goodput_core.record.ring import Fence
from goodput_core.stores.base import StoreError

__all__ = ["WriterMixin"]

logger = logging.getLogger("goodput")


_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 5.0
_SPILL_BATCH = 10_000


def _may_pass(error: BaseException) -> bool:
    """True for store failures worth retrying as they are (I/O, locks, outages).

    Anything else (TypeError, OverflowError, UnicodeError, ValueError...) comes
    from the batch's content and would fail the same way forever; so does a
    store error that SQLite raised about the data itself (a constraint, a
    value too big, a type it cannot bind).
    """
    if isinstance(error, StoreError):
        sqlite3 = sys.modules.get("sqlite3")
        cause = error.__cause__
        if sqlite3 is not None and isinstance(cause, sqlite3.ProgrammingError) and \
                "binding parameter" in str(cause):
            return False  # a value of a type SQLite cannot bind: the event's own
        return sqlite3 is None or not isinstance(
            cause, (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError))
    return isinstance(error, OSError)


class WriterMixin:
    """Batching, retrying, fencing: the writer-thread half of the recorder."""

    def _drain_batch(self, limit: int = 10_000):
        """Takes up to ``limit`` events in recording order (the caller holds the
        spill lock); returns (records, fences reached)."""
        items, fences = self._ring.take(limit)
        heartbeat = self._heartbeat
        if heartbeat is not None:
            for item in items:
                heartbeat.observe(item[1])
        batch = self._ring.records(items)
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

    def _write(self, batch: List[EventRecord],
               refused: Optional[List[EventRecord]] = None) -> List[EventRecord]:
        """Writes ``batch``; returns the events left to retry ([] when done).

        A content error splits the failing part in halves, in order, down to
        single events that are dropped and counted (and added to ``refused``
        when given); an error that may pass stops there and returns the
        unwritten rest, in order.
        """
        parts = [batch] if batch else []  # a stack: the next part to write is last
        while parts:
            part = parts.pop()
            error = self._append(part)
            if error is None:
                continue
            if _may_pass(error):
                self._write_errors += 1
                if (self._write_errors == 1 or self._write_errors % 100 == 0) and \
                        not getattr(error, "said", False):  # a failed open says it once
                    logger.error("goodput: writing %d events to %s failed (will retry): %s",
                                 len(part), getattr(self._store, "url", "the store"), error)
                return part + [e for p in reversed(parts) for e in p]
            if len(part) == 1:
                self._unstorable += 1
                if refused is not None:
                    refused.append(part[0])
                if self._unstorable == 1:
                    logger.error("goodput: dropped an event the store cannot hold (%s: %s); "
                                 "further ones are counted in stats()['unstorable']",
                                 type(error).__name__, error)
                continue
            half = len(part) // 2
            parts += [part[half:], part[:half]]
        return []

    def _drain(self, deadline: Optional[float] = None) -> None:
        """Writes everything queued; on a failure spills it and retries with backoff.

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
        outbox = self._outbox
        ring = self._ring
        return (ring.issued() > ring.drained or bool(ring.memory) or self._draining
                or self._pending is not None
                or (outbox is not None and outbox.own_pending() > 0))

    def _drain_queue(self, deadline: Optional[float]) -> None:
        backoff = _FIRST_BACKOFF_S
        while True:
            fences: list = []
            if self._ring.dropped and not self._drops_said:
                self._say_drops()  # at the time: before a flush waiting on it returns
            self._confirm()
            if self._deliver_spilled():
                with self._spill_lock:
                    pending = self._pending
                    if pending is None:
                        pending, fences = self._drain_batch()
                        self._pending = pending or None  # visible to an exit spill in flight
                        self._pending_upto = self._ring.drained
                    upto = self._pending_upto
                if not pending and not fences:
                    with self._spill_lock:
                        self._stored_through(upto)  # tickets that held no event
                    return
                left = self._write(pending) if pending else []
                with self._spill_lock:
                    if self._pending is not pending:
                        left = []  # the exit hook spilled this batch meanwhile
                    else:
                        self._pending = left or None
                        self._stored_through(left[0].seq - 1 if left else upto)
                if not left:
                    if fences and self._heartbeat is not None:
                        # a due heartbeat goes before the fence: flush() then shows it
                        self._writer_beat()
                    own = self._outbox.own_pending() if self._outbox is not None else 0
                    for f in fences:
                        f.ok = self._ring.fence_ok(f) and own == 0
                        f.done.set()
                    continue
            # The store cannot take events now: they go to the spill file (not
            # memory). A flush waiting on them learns it at once when the store
            # cannot even be opened; else it waits for the retries, in order.
            self._adopt_due = True
            fences += self._spill_memory()
            if self._store_open():
                for f in fences:  # passed again once the spilled events are delivered
                    self._ring.nothing(f)
            else:
                for f in fences:
                    f.done.set()
            wait = backoff if deadline is None else min(backoff, deadline - time.monotonic())
            if self._closed or wait <= 0:
                return
            # Not self._wake: flush() and a filling queue set it, and a wait
            # on it would return at once and retry in a tight loop.
            self._backoff.wait(wait)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _stored_through(self, upto: int) -> None:
        """Every event up to ticket ``upto`` was appended (the caller holds the
        spill lock): the journal forgets them once the store holds them
        (:mod:`goodput_core.record.handover`)."""
        self._handover.stored_through(upto)

    def _confirm(self) -> None:
        """Frees the journal up to what a background store delivered."""
        if self._handover.pending():
            with self._spill_lock:
                self._handover.confirm()

    # ------------------------------------------------------------ spilling
    def _store_open(self) -> bool:
        return bool(getattr(self._store, "is_open", True))

    def _deliver_spilled(self) -> bool:
        """Delivers spilled events (earlier processes' first, then ours), in order.

        Returns:
          True when none is waiting any more, False when the store failed.
        """
        if self._spill_released:  # exit or close took the files: nothing more here
            return self._outbox is None or not self._outbox.pending()
        if self._adopt_due and self._store_open():
            self._adopt_due = False
            try:
                self._outbox_for().adopt()
            except OSError as exc:  # a spill directory refused, or unreadable
                if not self._adopt_said:
                    self._adopt_said = True
                    logger.error("goodput: could not look for spilled events: %s", exc)
            except Exception:  # noqa: BLE001 - never stop the writer
                logger.exception("goodput: could not look for spilled events")
        outbox = self._outbox
        # A store that delivers in the background batches on its own side:
        # larger hand-overs, one wait each for its confirmation.
        handover = self._handover
        size = _SPILL_BATCH if handover.mark() is None else 5 * _SPILL_BATCH
        while outbox is not None:
            events = outbox.peek(size)
            if not events:
                if outbox.pending():  # only lines set aside: the next read goes on
                    continue
                return True
            if handover.handed is None:
                refused: List[EventRecord] = []
                left = self._write(events, refused)
                outbox.set_aside(refused)  # never retried, never blocking the rest
                if left:  # ``left`` is the unwritten tail: the head is delivered
                    outbox.keep_from(len(events) - len(left))
                    return False
                handover.handed = handover.mark()
            if handover.handed is not None:
                # A store that delivers in the background has them in memory
                # only: the file keeps them until it says they are delivered
                # (they are not handed over twice meanwhile).
                if not handover.delivered(handover.handed):
                    outbox.rewind()
                    return False
                handover.handed = None
            outbox.commit(len(events))
        return True

    def _outbox_for(self):
        if self._outbox is None:
            from goodput_core.record.spill import Outbox

            self._outbox = Outbox(getattr(self._store, "url", "") or "")
        return self._outbox

    def _spill_memory(self) -> list:
        """Moves the failed batch and the queue into the spill file; returns the fences met.

        When the file cannot be written either, the failed batch stays in
        memory (retried as before) and the queue keeps its bound.
        """
        fences: list = []
        ring = self._ring
        with self._spill_lock:
            try:
                outbox = self._outbox_for()
                if self._pending:
                    outbox.put(self._pending)
                    self._pending = None
                    ring.release(self._pending_upto)
                while True:
                    before = ring.drained
                    batch, met = self._drain_batch()
                    fences += met
                    if batch:
                        try:
                            outbox.put(batch)
                        except OSError:
                            self._pending = batch
                            self._pending_upto = ring.drained
                            raise
                    ring.release(ring.drained)
                    if ring.drained == before and not batch:
                        break
            except OSError as exc:
                self._spill_errors += 1
                self._spill_error = f"{type(exc).__name__}: {exc}"
                if self._spill_errors == 1:
                    logger.error("goodput: cannot spill unstored events to %s (%s); they "
                                 "wait in memory", self._outbox_for().directory, exc)
        return fences

    def _leave_spilled(self, say: Optional[Callable[[str], Any]] = None) -> int:
        """Spills what is still unstored and releases the spill files and the
        journal (exit, close); says on stderr what was left, and any drops.

        Returns:
          Events left in this writer's spill file for a later process.
        """
        if self._store is None or self._pid != os.getpid():
            return 0
        say = say or sys.stderr.write
        url = getattr(self._store, "url", "the store")
        ring = self._ring
        lost = 0
        self._confirm()
        if self._queued() or self._pending:
            self._spill_memory()
            with self._spill_lock:
                lost = len(self._pending or ())
                items, fences = ring.take(1 << 62)  # the spill file failed too
                for f in fences:  # flushes are answered now
                    f.done.set()
                lost += len(items)
        with self._spill_lock:
            self._handover.hold()
        self._say_drops(say, at_exit=True)
        outbox = self._outbox
        left, path = 0, None
        if outbox is not None:
            with self._spill_lock:
                self._spill_released = True
                left, path = outbox.close()
        kept = self._release_journal()
        if left or lost:
            if left and path:
                say(f"goodput: run {self.run!r}: {left} events not stored in {url} are kept "
                    f"in {path}; the next process that opens that store delivers them\n")
            elif left:
                say(f"goodput: run {self.run!r}: {left} events not stored in the in-process "
                    f"store {url} are lost with it\n")
            if lost and kept:
                say(f"goodput: run {self.run!r}: {lost} events not stored in {url} are kept "
                    f"in {kept}; the next process that opens that store delivers them\n")
            elif lost:
                say(f"goodput: run {self.run!r}: {lost} events could neither be stored in "
                    f"{url} nor spilled; they are lost\n")
        return left

    def _release_journal(self) -> Optional[str]:
        """Deletes the journal when it holds nothing undelivered; else leaves it
        for the next process and returns its path."""
        ring = self._ring
        journal = ring.journal
        if journal is None or journal.released:
            return None
        return None if journal.release(empty=ring.freed >= ring.issued()) else journal.path

    def _queued(self) -> bool:
        """True while recorded events wait for the writer."""
        ring = self._ring
        return ring.issued() > ring.drained or bool(ring.memory)

    def _say_drops(self, say: Optional[Callable[[str], Any]] = None,
                   at_exit: bool = False) -> None:
        """One stderr line at the first drop of a full queue, and one at exit."""
        dropped = self._ring.dropped
        if not dropped or (self._drops_said if not at_exit else self._drops_said_at_exit):
            return
        self._drops_said = dropped
        self._drops_said_at_exit = at_exit
        (say or sys.stderr.write)(
            f"goodput: run {self.run!r}: {dropped} events dropped{' so far' if not at_exit else ''}"
            f": more than queue_size={self._cap} events waited for the writer "
            f"(stats()['dropped']); record less often or raise queue_size\n")

    def _writer_beat(self) -> None:
        """A due heartbeat (rule 15), on the writer thread only: never on the
        caller's thread, not even when flush() drains inline at exit."""
        if threading.current_thread() is self._writer:
            self._heartbeat.beat(self)

    def _writer_loop(self) -> None:
        my_pid = self._pid
        hb = self._heartbeat
        wait = self._interval if hb is None else min(self._interval, max(hb.interval, 0.05))
        while True:
            self._wake.wait(wait)
            self._wake.clear()
            if os.getpid() != my_pid:  # a fork copied this thread's owner: not ours
                return
            try:
                self._drain()
                if self._heartbeat is not None:
                    self._writer_beat()
            except Exception:  # keep the writer alive whatever happens
                logger.exception("goodput: writer error")
            if self._closed and not self._queued():
                return

    def _drain_within(self, deadline: Optional[float], timeout: Optional[float]) -> None:
        """Drains on a helper thread, waiting ``timeout`` at most: opening a
        store may block far longer than any flush may take."""
        try:
            helper = threading.Thread(target=self._drain, args=(deadline,), daemon=True,
                                      name=f"goodput-flush-{self.run}")
            helper.start()
        except RuntimeError:  # no new threads (interpreter shutting down)
            self._drain(deadline)
            return
        helper.join(timeout)

    def flush(self, timeout: Optional[float] = 10.0, wait_for_delivery: bool = True) -> bool:
        """Blocks until every event recorded before this call is stored.

        Args:
          timeout: seconds to wait at most (None or ``math.inf``: no limit).
          wait_for_delivery: for stores that deliver in the background (Cloud
            Logging), also wait until they delivered; False waits only until
            the store has taken the events (it then owns them, spilling to
            disk during an outage).

        Returns:
          True when everything was stored; False on timeout, or at once when
          the store failed and the events went to the spill file instead
          (``stats()`` says how many; they are delivered later).
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
        fence = Fence()
        self._ring.nothing(fence)
        writer = self._writer
        if writer is None or not writer.is_alive():
            self._drain_within(deadline, timeout)  # no writer (closed, dead thread)
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
                delivered = bool(store_flush(left)) is not False
            except Exception:
                logger.exception("goodput: store flush failed")
                return False
            if delivered:
                self._confirm()  # the journal is freed now, not at the writer's next turn
            return delivered
        return True
