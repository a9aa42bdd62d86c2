"""The journal's slots read in bulk: the writer thread's side of the ring, as columns.

:meth:`Ring.take <goodput_core.record.ring.Ring.take>` reads a window of
consecutive tickets with one copy of the mapped slots and one numpy view of
them (:data:`SLOT_DTYPE`, the slot layout of :mod:`goodput_core.record.journal`),
and keeps the slots that hold their own ticket (a slot not written yet, or
reused, holds another): the events among them become columns of an
:class:`~goodput_core.stores.event_batch.EventBatch`, with no Python object per
event. Only the rare slots with an ``extra`` payload (inline, or in
continuation slots) are decoded one by one, and events that waited in memory
(a full ring, a long payload) join as single rows. A batch whose single rows
do not fit the columns (a clock that returned something other than a
number) is handed on as EventRecords instead, as before.

Imported by the writer thread on its first drain (numpy: ``import
goodput_core`` stays light).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Tuple

import numpy as np

from goodput_core.events import EventRecord
from goodput_core.record import journal as jr
from goodput_core.stores.event_batch import EventBatch

__all__ = ["SLOT_DTYPE", "Pieces", "slot_event"]

#: One journal slot (``journal._READ``): ticket, code (kind | flags << 8),
#: continuation parts, extra length, time, step, write time, process index,
#: the inline extra bytes, the closing ticket.
SLOT_DTYPE = np.dtype([("n", "<u8"), ("code", "<u2"), ("parts", "<u2"), ("xlen", "<u4"),
                       ("t", "<f8"), ("step", "<i8"), ("wt", "<f8"), ("pidx", "<i8"),
                       ("x", "V72"), ("end", "<u8")])
assert SLOT_DTYPE.itemsize == jr.SLOT == jr._READ.size

logger = logging.getLogger("goodput")
_said = False  # the columns' failure was logged (once)
_NOT_EVENT = (jr.SKIP | jr.CONT) << 8
_HAS_EXTRA = (jr.EXTRA_INLINE | jr.EXTRA_PARTS) << 8
_HAS_STEP = jr.HAS_STEP << 8


def slot_event(mm: Any, slots: int, fields: tuple) -> tuple:
    """One whole event slot (``journal._READ`` fields) as ``(ticket, kind, t,
    step, extra, write time, process index)``, its payload decoded."""
    n, code, nparts, xlen, t, step, wt, pidx, inline, _ = fields
    flags = code >> 8
    extra = None
    if flags & jr.EXTRA_INLINE:
        extra = jr.decode_extra(inline[:xlen])
    elif flags & jr.EXTRA_PARTS:
        extra = jr.decode_extra(_parts(mm, slots, n, nparts)[:xlen])
    return (n, code & 0xFF, t, step if flags & jr.HAS_STEP else None, extra, wt, pidx)


def _parts(mm: Any, slots: int, head: int, nparts: int) -> bytes:
    """The continuation slots of ``head`` (written before it, after it in tickets)."""
    found: Dict[int, bytes] = {}
    p = head + 1
    while len(found) < nparts and p - head <= slots:
        ticket, code, part, length, owner, chunk, _ = jr.PART.unpack_from(mm, (p % slots) << 7)
        if ticket == p and code >> 8 & jr.CONT and owner == head:
            found[part] = chunk[:length]
        p += 1
    return b"".join(found.get(k, b"") for k in range(nparts))


class Pieces:
    """The events of one take, in order, gathered as slot windows and single rows.

    Args:
      identity: (run, host, pid, attempt) of the events.
      mm: the journal's mapping.
      slots: the ring's capacity in slots.
    """

    def __init__(self, identity: Tuple[str, str, int, str], mm: Any, slots: int):
        self.identity, self.mm, self.slots = identity, mm, slots
        self._parts: List[Tuple[np.ndarray, Dict[int, dict]]] = []  # (event slots, extras)
        self._singles: List[Tuple[int, tuple]] = []  # (position, event tuple)
        self._count = 0

    def __len__(self) -> int:
        """Events gathered so far."""
        return self._count

    def _window(self, first: int, count: int) -> np.ndarray:
        """The slots of tickets ``first .. first + count - 1`` (count <= slots), copied."""
        a = first % self.slots
        b = a + count
        mm = self.mm
        if b <= self.slots:
            data = mm[a << 7:b << 7]
        else:  # the window wraps around the ring's end
            data = mm[a << 7:self.slots << 7] + mm[:(b - self.slots) << 7]
        return np.frombuffer(data, SLOT_DTYPE)

    def add_window(self, first: int, count: int) -> int:
        """Adds the events of the longest run of whole slots from ticket
        ``first`` (at most ``count`` tickets); returns how many tickets it passed."""
        slots = self._window(first, count)
        whole = slots["n"] == np.arange(first, first + count, dtype=np.uint64)
        if whole.all():
            passed = count
        else:
            passed = int(whole.argmin())
            slots = slots[:passed]
        if passed:
            self._add_slots(slots)
        return passed

    def add_written(self, first: int, count: int) -> None:
        """Adds the events of every whole slot among tickets ``first .. first +
        count - 1``, whatever lies between them (slots taken already: the held file)."""
        slots = self._window(first, count)
        self._add_slots(slots[slots["n"] == np.arange(first, first + count, dtype=np.uint64)])

    def _add_slots(self, slots: np.ndarray) -> None:
        is_event = (slots["code"] & _NOT_EVENT) == 0
        events = slots if is_event.all() else slots[is_event]
        if not len(events):
            return
        extras: Dict[int, dict] = {}
        for i in ((events["code"] & _HAS_EXTRA) != 0).nonzero()[0].tolist():
            extra = slot_event(self.mm, self.slots, events[i].item())[4]
            if extra is not None:
                extras[i] = extra
        self._parts.append((events, extras))
        self._count += len(events)

    def add_one(self, item: tuple) -> None:
        """Adds one event as ``(ticket, kind, t, step, extra, write time, process index)``."""
        self._singles.append((self._count, item))
        self._count += 1

    def batch(self) -> Any:
        """The events gathered, as an EventBatch (a list of EventRecords when a
        single row does not fit the columns)."""
        parts = self._parts
        if self._singles:
            try:
                parts = self._with_singles()
            except (TypeError, ValueError, OverflowError):
                return self.records()
        try:
            return self._columns(parts)
        except Exception:  # a bug here must not lose the events taken: as EventRecords
            global _said
            if not _said:
                _said = True
                logger.exception("goodput: reading the journal as columns failed; this "
                                 "batch goes as EventRecords")
            return self.records()

    def _columns(self, parts: List[Tuple[np.ndarray, Dict[int, dict]]]) -> EventBatch:
        if not parts:
            events, extra = np.empty(0, SLOT_DTYPE), {}
        elif len(parts) == 1:
            events, extra = parts[0]
        else:
            events = np.concatenate([p[0] for p in parts])
            extra, offset = {}, 0
            for rows, more in parts:
                extra.update({offset + i: x for i, x in more.items()})
                offset += len(rows)
        code = events["code"]
        has_step = (code & _HAS_STEP) != 0
        step = events["step"]
        step = np.where(has_step, step, 0) if not has_step.all() else \
            np.ascontiguousarray(step)  # (a view of the window's bytes when one slot: read-only)
        return EventBatch(self.identity, events["n"].astype(np.int64), code & 0xFF,
                          np.ascontiguousarray(events["t"]), step, has_step,
                          np.ascontiguousarray(events["wt"]),
                          np.ascontiguousarray(events["pidx"]), extra)

    def _with_singles(self) -> List[Tuple[np.ndarray, Dict[int, dict]]]:
        """The parts with the single rows put where they were added."""
        out: List[Tuple[np.ndarray, Dict[int, dict]]] = []
        singles = iter(self._singles)
        at, item = next(singles, (None, None))
        done = 0
        for rows, extras in self._parts + [(np.empty(0, SLOT_DTYPE), {})]:
            while at is not None and at <= done:
                out.append(_row_of(item))
                done += 1
                at, item = next(singles, (None, None))
            if len(rows):
                out.append((rows, extras))
                done += len(rows)
        return out

    def records(self) -> List[EventRecord]:
        """The events gathered as EventRecords (no columns)."""
        run, host, pid, attempt = self.identity
        items: List[tuple] = []
        for rows, extras in self._parts:
            for i, fields in enumerate(rows.tolist()):
                n, code, _, _, t, step, wt, pidx = fields[:8]
                items.append((n, code & 0xFF, t, step if code & _HAS_STEP else None,
                              extras.get(i), wt, pidx))
        for at, item in reversed(self._singles):
            items.insert(at, item)
        return [EventRecord(run, kind, t, step, extra, pidx, host, pid, attempt, n, wt)
                for n, kind, t, step, extra, wt, pidx in items]


def _row_of(item: tuple) -> Tuple[np.ndarray, Dict[int, dict]]:
    """One event tuple as one slot row and its extra. Raises TypeError for
    values the columns would change (a time that is not a float: an int
    would come back a float), OverflowError for those they cannot hold."""
    n, kind, t, step, extra, wt, pidx = item
    if (type(t) is not float or type(wt) is not float or type(pidx) is not int
            or type(kind) is not int or not 0 <= kind < 256
            or (step is not None and type(step) is not int)):
        raise TypeError("a value the columns do not hold as it is")
    code = kind | (_HAS_STEP if step is not None else 0)
    row = np.array([(n, code, 0, 0, t, 0 if step is None else step, wt, pidx, b"", n)],
                   SLOT_DTYPE)
    return row, ({0: extra} if extra is not None else {})
