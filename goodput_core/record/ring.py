"""Where a recorded event waits for the writer thread: the journal's ring, or memory.

Every event takes a *ticket* from one counter when it is recorded: its
sequence number, unique per writer, which the stores use to keep each
(writer, sequence) pair once. With a journal (:mod:`goodput_core.record.journal`)
the event goes into the ring slot of its ticket and is durable at once; when
the ring is full (the writer is far behind: a burst, a store that has not
confirmed yet), it waits in memory (``overflowed``: not durable until
stored), and when memory is full too it is dropped, counted and said
(``dropped``; the writer prints one line on stderr at the time, and exit
says it again). Without a journal (an in-process ``memory://`` store, a
spill directory that is refused, ``durable=False``) every event waits in
memory, as a bounded queue.

The producer side is :meth:`Ring.emitter`: a closure, so that the hot path
(``record_*`` on the training thread) is a ticket, one ``struct.pack_into``
into the mapped file and a comparison, with no lock. The consumer side
(:meth:`Ring.take`, called by the writer thread under the recorder's spill
lock) reads events in ticket order, windows of slots at once as columns
(:mod:`goodput_core.record.slot_columns`), and hands back the highest ticket it
passed; :meth:`Ring.release` tells the journal (and the producers) that
everything up to a ticket is stored or kept elsewhere.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import threading
import time
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from goodput_core.events import EventRecord
from goodput_core.record import journal as jr
from goodput_core.stores import schemes

__all__ = ["Ring", "Fence", "encode_extra", "new_ring"]

logger = logging.getLogger("goodput")

#: A ticket taken and not written (a thread between the two, or an exception
#: raised there, Ctrl-C, before the ticket was kept: nothing can say which) is
#: passed over once it stayed missing this long and over this many turns of
#: the writer; its slot is watched (and not reused) for _LATE_S more: a late
#: write is still delivered, after the events that followed it.
_GAP_GRACE_S = 0.25
_GAP_TURNS = 3
_LATE_S = 5.0
_EXTRA_CACHE = 256


_said_no_journal: Dict[str, bool] = {}  # spill directories already said to be unusable


def new_ring(store: Any, durable: bool, capacity: int, identity: Tuple[str, str, int, str],
             wake: Any) -> "Ring":
    """The ring of one recorder in one process: in a journal when the events
    are ``durable`` and a later process can read the store (not ``memory://``),
    else in memory. A journal that cannot be made (a spill directory refused,
    a full disk) is said once per directory; the ring's ``journal_error`` says why."""
    journal, error = None, None
    url = getattr(store, "url", "") or ""
    if store is not None and durable and url and schemes.shared(url):
        directory = jr.default_spill_dir()
        run, host, pid, attempt = identity
        try:
            journal = jr.Journal(directory, jr.tag_of(url), min(capacity, jr.DEFAULT_CAPACITY),
                                 {"run": run, "host": host, "pid": pid, "attempt": attempt,
                                  "store": url})
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
            if not _said_no_journal.get(directory):
                _said_no_journal[directory] = True
                logger.error("goodput: no journal in %s (%s): recorded events wait in memory "
                             "until stored and are lost if the process is killed",
                             directory, exc)
    ring = Ring(capacity, journal, identity, wake)
    ring.journal_error = error
    return ring


_quote = encode_basestring_ascii
_INFINITE = (-math.inf, math.inf)
_one_text_key: Dict[Tuple[str, str], bytes] = {}


def encode_extra(extra: dict) -> Optional[bytes]:
    """An extra payload as the stores keep it (strict JSON, ASCII), or None when
    it cannot be encoded. Flat payloads (text keys; text, int, finite float,
    bool or null values: custom badput types, metrics, slice counts) are
    written directly and one-key text payloads cached: the rest goes through
    the stores' encoder."""
    if len(extra) == 1:
        ((key, value),) = extra.items()
        if type(value) is str and type(key) is str:
            cached = _one_text_key.get((key, value))
            if cached is None:
                cached = ("{" + _quote(key) + ":" + _quote(value) + "}").encode()
                if len(_one_text_key) < _EXTRA_CACHE:
                    _one_text_key[(key, value)] = cached
            return cached
    parts = []
    for key, value in extra.items():
        kind = type(value)
        if type(key) is not str:
            break
        if kind is str:
            text = _quote(value)
        elif kind is float:
            if value != value or value in _INFINITE:
                break
            text = float.__repr__(value)
        elif kind is int:
            text = int.__repr__(value)
        elif value is None:
            text = "null"
        elif kind is bool:
            text = "true" if value else "false"
        else:
            break
        parts.append(_quote(key) + ":" + text)
    else:
        return ("{" + ",".join(parts) + "}").encode()
    # lazy: only nested payloads need it (import goodput_core stays light)
    from goodput_core.stores.strict_json import dumps

    try:
        return dumps(extra).encode("utf-8")
    except Exception:  # validated at record time: a payload changed since
        return None


class Fence:
    """A flush's marker: set once everything recorded before it is stored."""

    __slots__ = ("done", "ok", "drops")

    def __init__(self, drops: int = 0):
        self.done = threading.Event()
        self.ok = False
        self.drops = drops


class Ring:
    """The events waiting for the writer (see the module docstring).

    Args:
      capacity: events waiting at most (the recorder's ``queue_size``).
      journal: this writer's journal, or None (memory only).
      identity: (run, host, pid, attempt) of the events (writer metadata).
      wake: the writer's wake-up (record/wakeup.py), set when the waiting events pass half the capacity.
    """

    def __init__(self, capacity: int, journal: Optional[jr.Journal],
                 identity: Tuple[str, str, int, str], wake: Any):
        self.journal = journal
        self.journal_error: Optional[str] = None  # why there is no journal where one was due
        self.slots = journal.capacity if journal is not None else 0
        self.memory_cap = max(0, capacity - self.slots) if journal is not None else capacity
        self.half = max(1, (self.slots or capacity) // 2)
        self.identity = identity
        self._wake_event = wake
        self.tickets = itertools.count(1)
        self.freed = 0    # every ticket up to this is stored or kept elsewhere
        self.drained = 0  # every ticket up to this was taken by the writer
        self.memory: Deque[Any] = collections.deque()  # overflow (journal) or the queue
        self.holes: Set[int] = set()  # tickets not in the ring: in memory, dropped, fences
        self.fences: Dict[int, Fence] = {}
        self.dropped = 0
        self.overflowed = 0
        self.passed_over = 0  # tickets passed over (see _GAP_GRACE_S)
        self.never_written = 0  # of those, never written within _LATE_S
        self._late: Dict[int, float] = {}  # passed-over ticket -> when
        self._drops_acked = 0
        self._drop_lock = threading.Lock()
        self._gap: Optional[List[float]] = None  # [ticket, since, turns]

    # ------------------------------------------------------------ producers
    def wake(self) -> None:
        """Wakes the writer (once: setting a set event would take its lock again)."""
        if not self._wake_event.is_set():
            self._wake_event.set()

    def emitter(self, rec: Any) -> Callable[..., None]:
        """The recorder's ``_emit(kind, t, step, extra, write_time)``."""
        tickets, memory, slow = self.tickets, self.memory, self._slow
        if self.journal is None:
            high, cap, wake = self.half, self.memory_cap, self.wake

            def emit_to_memory(kind, t, step, extra, write_time):
                n = len(memory)
                if n < high:
                    memory.append((next(tickets), kind, t, step, extra, write_time,
                                   rec.process_index))
                elif n < cap:
                    memory.append((next(tickets), kind, t, step, extra, write_time,
                                   rec.process_index))
                    wake()
                else:
                    self._drop()
            return emit_to_memory

        mm, slots, half, wake = self.journal.mm, self.slots, self.half, self.wake
        pack, pack_inline = jr.PLAIN.pack_into, jr.INLINE.pack_into
        inline_max, has_step, inline_flag = jr.INLINE_BYTES, 256, jr.EXTRA_INLINE << 8

        def emit(kind, t, step, extra, write_time):
            n = next(tickets)
            try:
                room = n - self.freed
                if room <= slots:
                    if extra is None:
                        if step is None:
                            pack(mm, (n % slots) << 7, n, kind, t, 0, write_time,
                                 rec.process_index, n)
                        else:
                            pack(mm, (n % slots) << 7, n, kind | has_step, t, step, write_time,
                                 rec.process_index, n)
                    else:
                        data = encode_extra(extra)
                        if data is not None and len(data) <= inline_max:
                            pack_inline(mm, (n % slots) << 7, n, kind | inline_flag | (
                                0 if step is None else has_step), len(data), t,
                                0 if step is None else step, write_time, rec.process_index,
                                data, n)
                        else:
                            slow(n, kind, t, step, extra, write_time, rec.process_index, data)
                    if room >= half:
                        wake()
                else:
                    slow(n, kind, t, step, extra, write_time, rec.process_index)
            except BaseException:  # an async exception (Ctrl-C) between ticket and slot
                self._abandon(n)
                raise
        return emit

    def _slow(self, n: int, kind: int, t: float, step: Optional[int], extra: Optional[dict],
              write_time: float, pidx: int, data: Optional[bytes] = None) -> None:
        """An event with a long extra payload, or one the ring has no room for."""
        if extra is not None and n - self.freed <= self.slots:
            if data is None:
                data = encode_extra(extra)
            if data is not None and self._put_extra(n, kind, t, step, data, write_time, pidx):
                return
        if len(self.memory) < self.memory_cap:
            self.memory.append((n, kind, t, step, extra, write_time, pidx))
            self.holes.add(n)  # after the append: the writer finds it when it looks
            self.overflowed += 1
            self.wake()
        else:
            self.holes.add(n)
            self._drop()

    def _put_extra(self, n: int, kind: int, t: float, step: Optional[int], data: bytes,
                   write_time: float, pidx: int) -> bool:
        mm, slots = self.journal.mm, self.slots
        code = kind | (256 if step is not None else 0)
        step = 0 if step is None else step
        if len(data) <= jr.INLINE_BYTES:
            jr.INLINE.pack_into(mm, (n % slots) << 7, n, code | jr.EXTRA_INLINE << 8,
                                len(data), t, step, write_time, pidx, data, n)
            return True
        chunks = [data[i:i + jr.PART_BYTES] for i in range(0, len(data), jr.PART_BYTES)]
        if len(chunks) > min(0xFFFF, self.slots // 4):
            return False  # a payload this large waits in memory
        taken = []
        for k, chunk in enumerate(chunks):  # the parts first: a whole head has whole parts
            p = next(self.tickets)
            taken.append(p)
            if p - self.freed > slots:
                for q in taken:
                    self._abandon(q)
                return False
            jr.PART.pack_into(mm, (p % slots) << 7, p, jr.CONT << 8, k, len(chunk), n, chunk, p)
        jr.PARTS.pack_into(mm, (n % slots) << 7, n, code | jr.EXTRA_PARTS << 8, len(chunks),
                           len(data), t, step, write_time, pidx, n)
        return True

    def _abandon(self, n: int) -> None:
        """A ticket that will hold no event: the writer passes it at once."""
        self.holes.add(n)

    def _drop(self) -> None:
        with self._drop_lock:
            self.dropped += 1

    def nothing(self, fence: Optional[Fence] = None) -> int:
        """Takes a ticket that holds no event (a flush fence, a heartbeat); returns it."""
        if self.journal is None:
            if fence is not None:
                fence.drops = self.dropped
                self.memory.append(fence)
            return next(self.tickets)
        n = next(self.tickets)
        if fence is not None:
            fence.drops = self.dropped
            self.fences[n] = fence  # before the slot: the writer finds it when it passes
        try:
            if n - self.freed <= self.slots:
                jr.NOTHING.pack_into(self.journal.mm, (n % self.slots) << 7, n, jr.SKIP << 8, n)
            else:
                self.holes.add(n)
        except BaseException:
            self.holes.add(n)
            raise
        return n

    # ------------------------------------------------------------ the writer
    def take(self, limit: int) -> Tuple[Any, List[Fence]]:
        """Up to ``limit`` events in recording order, and the fences passed.
        Only the writer calls it (under the recorder's spill lock).

        With a journal the events come as an :class:`EventBatch` (columns read
        in bulk, :mod:`goodput_core.record.slot_columns`; the ticket is the
        sequence number), else as a list of EventRecords."""
        if self.journal is None:
            return self._take_memory(limit)
        # lazy: numpy, on the writer thread only (import goodput_core stays light)
        from goodput_core.record.slot_columns import Pieces

        out = Pieces(self.identity, self.journal.mm, self.slots)
        fences: List[Fence] = []
        holes, fence_at = self.holes, self.fences
        if self._late:
            self._take_late(out)
        n = self.drained + 1
        while len(out) < limit:
            count = min(limit - len(out), self.issued() - n + 1, self.slots)
            passed = out.add_window(n, count) if count > 0 else 0
            if passed:
                if fence_at:
                    end = n + passed
                    for k in sorted(k for k in list(fence_at) if n <= k < end):
                        fences.append(fence_at.pop(k))
                n += passed
                if passed == count:
                    continue
            if n in holes:  # a ticket whose event waits in memory, or none
                holes.discard(n)
                item = self._from_memory(n)
                if item is not None:
                    out.add_one(item)
            elif not self._pass_gap(n):
                break
            if fence_at:
                fence = fence_at.pop(n, None)
                if fence is not None:
                    fences.append(fence)
            n += 1
        batch = out.batch()
        self.drained = n - 1
        return batch, fences

    def _take_memory(self, limit: int) -> Tuple[List[EventRecord], List[Fence]]:
        out: List[tuple] = []
        fences: List[Fence] = []
        popleft = self.memory.popleft
        while len(out) < limit:
            try:
                item = popleft()
            except IndexError:
                break
            if type(item) is Fence:
                fences.append(item)
            else:
                out.append(item)
                self.drained = item[0]
        return self.records(out), fences

    def events_between(self, a: int, b: int) -> List[EventRecord]:
        """The events of tickets ``a < n <= b`` still in the ring's slots (taken
        already: for the held file; events that waited in memory are not there)."""
        # lazy: numpy, on the writer thread only (import goodput_core stays light)
        from goodput_core.record.slot_columns import Pieces

        out = Pieces(self.identity, self.journal.mm, self.slots)
        first = max(a, b - self.slots) + 1
        if b >= first:
            out.add_written(first, b - first + 1)
        return out.records()

    def _from_memory(self, n: int) -> Optional[tuple]:
        """The event of ticket ``n`` waiting in memory (None: none, it was dropped)."""
        memory = self.memory
        if memory and memory[0][0] == n:
            return memory.popleft()
        for item in list(memory):  # another thread appended first: rare
            if item[0] == n:
                memory.remove(item)
                return item
        return None

    def _pass_gap(self, n: int) -> bool:
        """A ticket not written yet: True when it is passed over (see _GAP_GRACE_S)."""
        now = time.monotonic()
        gap = self._gap
        if gap is None or gap[0] != n:
            self._gap = [n, now, 1]
            return False
        gap[2] += 1
        if now - gap[1] < _GAP_GRACE_S or gap[2] < _GAP_TURNS or self.issued() <= n:
            return False
        self.passed_over += 1
        self._late[n] = now
        self._gap = None
        return True

    def stalled(self) -> bool:
        """True when the last two takes stopped at the same ticket, issued but
        not written (not a call caught between its ticket and its slot: one
        that may never write it, passed over after _GAP_GRACE_S and
        _GAP_TURNS turns of the writer)."""
        gap = self._gap
        return gap is not None and gap[2] >= 2 and gap[0] <= self.issued()

    def _take_late(self, out: Any) -> None:
        """Events of passed-over tickets written since (or given up on), into
        ``out`` (:class:`~goodput_core.record.slot_columns.Pieces`)."""
        now = time.monotonic()
        for n, since in list(self._late.items()):
            if out.add_window(n, 1):  # written since (an event, or a ticket with none)
                del self._late[n]
            elif n in self.holes:
                del self._late[n]
                self.holes.discard(n)
                item = self._from_memory(n)
                if item is not None:
                    out.add_one(item)
            elif now - since > _LATE_S:
                del self._late[n]
                self.never_written += 1

    def issued(self) -> int:
        """The last ticket taken so far."""
        text = repr(self.tickets)  # 'count(N)': the next one, read without taking it
        return int(text[text.index("(") + 1:-1]) - 1

    def release(self, upto: int) -> None:
        """Everything up to ticket ``upto`` is stored or kept elsewhere (but the
        slot of a ticket passed over is not reused while it may still be written)."""
        if self._late:
            upto = min(upto, min(self._late) - 1)
        if upto <= self.freed:
            return
        if self.journal is not None:
            try:
                self.journal.set_stored_upto(upto)  # first: a slot is reused only after
            except (ValueError, OSError):
                pass
        self.freed = upto

    def waiting(self) -> int:
        """Events recorded and not taken by the writer yet (fences excluded)."""
        if self.journal is None:
            items = list(self.memory)  # one C call: atomic under the GIL
            return len(items) - sum(1 for i in items if type(i) is Fence)
        return max(0, self.issued() - self.drained - len(self.fences))

    def newest(self) -> Optional[Tuple[int, float]]:
        """(kind, time) of the newest event not taken by the writer yet, or None."""
        if self.journal is None:
            for item in reversed(list(self.memory)):
                if type(item) is not Fence:
                    return item[1], item[2]
            return None
        n = self.issued()
        if n <= self.drained:
            return None
        fields = jr._READ.unpack_from(self.journal.mm, (n % self.slots) << 7)
        if fields[0] == n and not (fields[1] >> 8) & (jr.SKIP | jr.CONT):
            return fields[1] & 0xFF, fields[4]
        for item in reversed(list(self.memory)):
            return item[1], item[2]
        return None

    def fence_ok(self, fence: Fence) -> bool:
        """False when events were dropped (memory full) since the previous fence."""
        ok = fence.drops <= self._drops_acked
        self._drops_acked = max(self._drops_acked, fence.drops)
        return ok

    def records(self, items: List[tuple]) -> List[EventRecord]:
        """The taken events as EventRecords (the ticket is the sequence number)."""
        run, host, pid, attempt = self.identity
        return [EventRecord(run, kind, t, step, extra, pidx, host, pid, attempt, n, wt)
                for n, kind, t, step, extra, wt, pidx in items]
