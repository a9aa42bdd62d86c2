"""The recorder's writer: a thread that drains the ring into the store in batches.

A :class:`~goodput_core.record.recorder.Recorder` *has* one :class:`Writer`
(``rec._writer``), made at construction and reset per process after a fork
(:meth:`Writer.new_process`). The recorder produces into the writer's
:attr:`Writer.ring` (:mod:`goodput_core.record.ring`: the journal's
memory-mapped ring, or memory); everything else here runs on the writer
thread, or in a flush or the exit hook. The writer *has* its parts:

* an :class:`~goodput_core.record.append.Appender` (``appender``): the one
  call of ``store.append``, which isolates and counts the events a store
  refuses for their content;
* a :class:`~goodput_core.record.redelivery.Redelivery` (``redelivery``):
  the spill files, delivered first;
* a :class:`~goodput_core.record.handover.Handover` (``handover``): when the
  journal may forget what the store took.

A batch that fails to write for a reason that may pass (the store's own
errors: cannot be opened, disk full, locked, read-only, unreachable) is
moved, with everything queued behind it, to this writer's spill file
(:mod:`goodput_core.record.spill`) and retried with exponential backoff: the
spilled events are delivered first, in order, once the store answers, and a
process that ends before that leaves them to the next one. Nothing is lost
or written twice; the backoff is a real wait that neither
:meth:`Writer.flush` nor a filling queue cuts short (only ``close()``
does), so a failing store never makes the writer spin.
:meth:`Writer.flush` puts a fence in the queue and waits until the
writer has stored everything before it, never longer than its timeout.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Optional, Sequence

from goodput_core.events import EventRecord
from goodput_core.record.append import Appender
from goodput_core.record.handover import Handover
from goodput_core.record.heartbeat import Heartbeat
from goodput_core.record.redelivery import Redelivery
from goodput_core.record.ring import Fence, new_ring
from goodput_core.record.wakeup import Wakeup
from goodput_core.stores.deferred import DeferredStore

__all__ = ["Writer"]

logger = logging.getLogger("goodput")


_CAUGHT_UP = 1024  # fewer events waiting after a batch: they wait for the next wake-up
_GAP_TURN_S = 0.1  # the writer's turns while the ring waits for a ticket not written
_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 5.0


class Writer:
    """Batching, retrying, spilling, fencing: the consumer side of one recorder.

    Args:
      run: the run name (thread name, messages).
      store: the store the events go to (a :class:`DeferredStore` is opened by
        the writer thread), or None (a cloud logger or a disabled recorder:
        the ring is made, no thread ever runs).
      capacity: the recorder's ``queue_size``.
      interval: how often the thread drains when nothing wakes it (seconds).
      durable: keep the events in a journal (see :func:`new_ring`).
      clock: the recorder's clock (heartbeat times).
      process_index: returns the recorder's process index in force now.
      watchdog: the recorder's hang watchdog, shown every batch, or None.
      heartbeat_s: the lead writer's heartbeat interval (0: none).
    """

    def __init__(self, run: str, store: Any, *, capacity: int, interval: float,
                 durable: bool, clock: Callable[[], float],
                 process_index: Callable[[], int], watchdog: Any, heartbeat_s: float):
        self.run = run
        self.store = store
        self.capacity = capacity
        self.interval = interval
        self.durable = durable
        self.clock = clock
        self.process_index = process_index
        self.watchdog = watchdog
        self.heartbeat_s = heartbeat_s
        self.closed = False  # set by close(): the thread ends once the ring is empty
        # Counters of the recorder's life (kept across a fork, as its stats()).
        self.appender = Appender(store)  # written, write_errors, unstorable
        self.spill_errors = 0  # failed writes of the spill file
        self.spill_error: Optional[str] = None  # the last one's reason

    def new_process(self, host: str, pid: int, attempt: str) -> None:
        """Per-process state: made at construction and again in a forked child
        (which never writes into the parent's journal: it gets one of its own)."""
        self.host, self.pid, self.attempt = host, pid, attempt
        self.wake = Wakeup()  # not threading.Event: see record/wakeup.py
        self.backoff = threading.Event()  # set by close(): ends the backoff wait
        self.pending: Optional[Sequence[EventRecord]] = None  # an EventBatch or a list
        self.pending_upto = 0  # the last ticket of the pending batch's part of the ring
        self._draining = False
        self.spill_lock = threading.Lock()  # the failed batch and the queue vs the spill file
        self.redelivery = Redelivery(self.store, self.appender)
        self._drops_said = 0
        self._drops_said_at_exit = False
        self.ring = new_ring(self.store, self.durable, self.capacity,
                             (self.run, host, pid, attempt), self.wake)
        self.journal_error = self.ring.journal_error
        self.handover = Handover(self.store, self.ring, self.redelivery.outbox_for)
        self.heartbeat = (Heartbeat(self.heartbeat_s)
                          if self.store is not None and self.heartbeat_s > 0 else None)
        self.thread: Optional[threading.Thread] = None

    @property
    def outbox(self) -> Any:
        """This writer's spill file (:class:`~goodput_core.record.spill.Outbox`), or None."""
        return self.redelivery.outbox

    def start(self) -> None:
        """Starts this process's writer thread (a writer with a store only)."""
        self.thread = threading.Thread(target=self._main, name=f"goodput-writer-{self.run}",
                                       daemon=True)
        self.thread.start()

    def _main(self) -> None:
        """The writer thread: opens the store at its first wake-up (never on
        the caller's thread), then drains the ring until closed.

        The first wake-up is one flush interval after construction, or at
        once when flushed or half full: the open's CPU work (imports, schema)
        then does not compete for the GIL with the statements that follow
        the constructor."""
        journal = self.ring.journal
        if journal is not None:
            journal.prefault()  # here, not on the recording calls' first lap of the ring
        store = self.store
        if isinstance(store, DeferredStore):
            self.wake.wait(self.interval)  # not cleared: the loop drains right after
            try:
                store.open()
            except Exception:  # noqa: BLE001 - logged by the store; stats(), flush(); retried
                pass
        self._loop()

    def store_error(self) -> Optional[str]:
        """Why the store cannot be opened, or None."""
        store = self.store
        if isinstance(store, DeferredStore) and not store.is_open and store.error is not None:
            return f"cannot open the store {store.url}: {store.error}"
        return None

    def close(self, stored: bool) -> None:
        """Ends the thread's waits; ``stored``: the last flush stored everything,
        so the journal and the spill files go (else they stay, said once)."""
        self.closed = True
        self.backoff.set()
        self.wake.set()
        outbox = self.outbox
        if not stored and outbox is not None and outbox.own_pending():
            logger.warning("goodput: run %r: %d events not stored in %s wait in %s; a later "
                           "flush() or the next process that opens that store delivers them",
                           self.run, outbox.own_pending(),
                           getattr(self.store, "url", "the store"),
                           outbox.stats()["spill_file"])
        if stored:
            self.release_journal()
            if outbox is not None and self.pid == os.getpid():
                with self.spill_lock:
                    self.redelivery.close()

    def _drain_batch(self, limit: int = 10_000):
        """Takes up to ``limit`` events in recording order (the caller holds the
        spill lock); returns (events, fences reached): the events as an
        :class:`~goodput_core.stores.event_batch.EventBatch` (columns) when the
        ring has a journal, else as a list of EventRecords."""
        batch, fences = self.ring.take(limit)
        if self.heartbeat is not None and batch:
            self.heartbeat.observe(batch)
        watchdog = self.watchdog
        if watchdog is not None and batch:
            try:
                watchdog.observe(batch)
            except Exception:  # never let the watchdog stop the writer
                logger.exception("goodput: hang watchdog error")
        return batch, fences

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
        ring = self.ring
        return (ring.issued() > ring.drained or bool(ring.memory) or self._draining
                or self.pending is not None or self.redelivery.own_pending() > 0)

    def _drain_queue(self, deadline: Optional[float]) -> None:
        backoff = _FIRST_BACKOFF_S
        while True:
            fences: list = []
            if self.ring.dropped and not self._drops_said:
                self._say_drops()  # at the time: before a flush waiting on it returns
            self._confirm()
            if self.redelivery.deliver(self.handover):
                with self.spill_lock:
                    pending = self.pending
                    if pending is None:
                        pending, fences = self._drain_batch()
                        self.pending = pending or None  # visible to an exit spill in flight
                        self.pending_upto = self.ring.drained
                    upto = self.pending_upto
                if not pending and not fences:
                    with self.spill_lock:
                        self._stored_through(upto)  # tickets that held no event
                    return
                left = self.appender.write(pending) if pending else []
                with self.spill_lock:
                    if self.pending is not pending:
                        left = []  # the exit hook spilled this batch meanwhile
                    else:
                        self.pending = left or None
                        self._stored_through(left[0].seq - 1 if left else upto)
                if not left:
                    if fences and self.heartbeat is not None:
                        # a due heartbeat goes before the fence: flush() then shows it
                        self._writer_beat()
                    own = self.redelivery.own_pending()
                    for f in fences:
                        f.ok = self.ring.fence_ok(f) and own == 0
                        f.done.set()
                    if self._caught_up():
                        return
                    continue
            # The store cannot take events now: they go to the spill file (not
            # memory). A flush waiting on them learns it at once when the store
            # cannot even be opened; else it waits for the retries, in order.
            self.redelivery.adopt_due = True
            fences += self._spill_memory()
            if self.redelivery.store_open():
                for f in fences:  # passed again once the spilled events are delivered
                    self.ring.nothing(f)
            else:
                for f in fences:
                    f.done.set()
            wait = backoff if deadline is None else min(backoff, deadline - time.monotonic())
            if self.closed or wait <= 0:
                return
            # Not self.wake: flush() and a filling queue set it, and a wait
            # on it would return at once and retry in a tight loop.
            self.backoff.wait(wait)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _caught_up(self) -> bool:
        """After a batch is stored: True when what was recorded meanwhile waits
        for the next wake-up (the flush interval, or the ring half full), as
        if recorded just after this drain. Events that trickle in while a
        batch is written would else be taken a few at a time, each small batch
        with its own transaction. Not while a flush waits (a fence in the
        ring), the writer closes, a batch's worth waits, or the take stopped at
        a ticket not written yet (the next turn counts towards passing it
        over); a memory ring (no journal: its fences wait among the events)
        drains to the end."""
        ring = self.ring
        return (ring.journal is not None and not self.closed and not ring.fences
                and ring.waiting() < _CAUGHT_UP and not ring.stalled())

    def _stored_through(self, upto: int) -> None:
        """Every event up to ticket ``upto`` was appended (the caller holds the
        spill lock): the journal forgets them once the store holds them
        (:mod:`goodput_core.record.handover`)."""
        self.handover.stored_through(upto)

    def _confirm(self) -> None:
        """Frees the journal up to what a background store delivered."""
        if self.handover.pending():
            with self.spill_lock:
                self.handover.confirm()

    # ------------------------------------------------------------ spilling
    def _spill_memory(self) -> list:
        """Moves the failed batch and the queue into the spill file; returns the fences met.

        When the file cannot be written either, the failed batch stays in
        memory (retried as before) and the queue keeps its bound.
        """
        fences: list = []
        ring = self.ring
        with self.spill_lock:
            try:
                outbox = self.redelivery.outbox_for()
                if self.pending:
                    outbox.put(self.pending)
                    self.pending = None
                    ring.release(self.pending_upto)
                while True:
                    before = ring.drained
                    batch, met = self._drain_batch()
                    fences += met
                    if batch:
                        try:
                            outbox.put(batch)
                        except OSError:
                            self.pending = batch
                            self.pending_upto = ring.drained
                            raise
                    ring.release(ring.drained)
                    if ring.drained == before and not batch:
                        break
            except OSError as exc:
                self.spill_errors += 1
                self.spill_error = f"{type(exc).__name__}: {exc}"
                if self.spill_errors == 1:
                    logger.error("goodput: cannot spill unstored events to %s (%s); they "
                                 "wait in memory", self.redelivery.outbox_for().directory, exc)
        return fences

    def leave_spilled(self, say: Optional[Callable[[str], Any]] = None) -> int:
        """Spills what is still unstored and releases the spill files and the
        journal (exit, close); says on stderr what was left, and any drops.

        Returns:
          Events left in this writer's spill file for a later process.
        """
        if self.store is None or self.pid != os.getpid():
            return 0
        say = say or sys.stderr.write
        url = getattr(self.store, "url", "the store")
        ring = self.ring
        lost = 0
        self._confirm()
        if self._queued() or self.pending:
            self._spill_memory()
            with self.spill_lock:
                lost = len(self.pending or ())
                items, fences = ring.take(1 << 62)  # the spill file failed too
                for f in fences:  # flushes are answered now
                    f.done.set()
                lost += len(items)
        with self.spill_lock:
            self.handover.hold()
        self._say_drops(say, at_exit=True)
        left, path = 0, None
        if self.redelivery.outbox is not None:
            with self.spill_lock:
                left, path = self.redelivery.close()
        kept = self.release_journal()
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

    def release_journal(self) -> Optional[str]:
        """Deletes the journal when it holds nothing undelivered; else leaves it
        for the next process and returns its path."""
        ring = self.ring
        journal = ring.journal
        if journal is None or journal.released:
            return None
        return None if journal.release(empty=ring.freed >= ring.issued()) else journal.path

    def _queued(self) -> bool:
        """True while recorded events wait for the writer."""
        ring = self.ring
        return ring.issued() > ring.drained or bool(ring.memory)

    def _say_drops(self, say: Optional[Callable[[str], Any]] = None,
                   at_exit: bool = False) -> None:
        """One stderr line at the first drop of a full queue, and one at exit."""
        dropped = self.ring.dropped
        if not dropped or (self._drops_said if not at_exit else self._drops_said_at_exit):
            return
        self._drops_said = dropped
        self._drops_said_at_exit = at_exit
        (say or sys.stderr.write)(
            f"goodput: run {self.run!r}: {dropped} events dropped{' so far' if not at_exit else ''}"
            f": more than queue_size={self.capacity} events waited for the writer "
            f"(stats()['dropped']); record less often or raise queue_size\n")

    def _writer_beat(self) -> None:
        """A due heartbeat (rule 15), on the writer thread only: never on the
        caller's thread, not even when flush() drains inline at exit."""
        if threading.current_thread() is self.thread:
            self.heartbeat.beat(self)

    def _loop(self) -> None:
        my_pid = self.pid
        hb = self.heartbeat
        wait = self.interval if hb is None else min(self.interval, max(hb.interval, 0.05))
        while True:
            # a ticket not written over two takes is passed over after a few
            # turns (ring._pass_gap): they come sooner than the interval
            self.wake.wait(min(wait, _GAP_TURN_S) if self.ring.stalled() else wait)
            self.wake.clear()
            if os.getpid() != my_pid:  # a fork copied this thread's owner: not ours
                return
            try:
                self._drain()
                if self.heartbeat is not None:
                    self._writer_beat()
            except Exception:  # keep the writer alive whatever happens
                logger.exception("goodput: writer error")
            if self.closed and not self._queued():
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
        if timeout is not None and not math.isfinite(timeout):
            timeout = None if timeout > 0 else 0.0  # inf: no limit (NaN, -inf: none)
        deadline = None if timeout is None else time.monotonic() + timeout
        fence = Fence()
        self.ring.nothing(fence)
        thread = self.thread
        if thread is None or not thread.is_alive():
            self._drain_within(deadline, timeout)  # no writer (closed, dead thread)
        else:
            self.wake.set()
            fence.done.wait(timeout)
        if not fence.ok or not wait_for_delivery:
            return fence.ok
        # Stores that deliver in the background (Cloud Logging) have a fence too.
        store_flush = getattr(self.store, "flush", None)
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
