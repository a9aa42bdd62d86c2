"""When the journal may forget events: what the store confirms it holds.

A store that commits before ``append`` returns (SQLite) holds the events
then, and the journal is freed at once. A store that delivers from a thread
of its own (PostgreSQL, Cloud Logging: ``stores/background.py``) holds
them in memory only until its sender delivered them: :class:`Handover`
keeps the journal's slots until the store's ``delivered_mark()`` reaches the
``delivery_mark()`` it gave when they were appended. When the store falls
half a ring behind (an outage), the events it has not confirmed move from
the ring to the outbox's *held* file, which this process does not deliver
again but a later one does if this one dies (the store keeps each
(writer, sequence) pair once); spilled or adopted events handed to such a
store stay in their file until it confirmed them (:meth:`Handover.delivered`).

One object per recorder and process (the recorder's spill lock guards its
calls: the writer thread's, and a flush's or the exit hook's).
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Deque, Optional, Tuple

__all__ = ["Handover", "HANDOVER_WAIT_S"]

#: How long the writer waits, per try, for a background store's delivery of
#: spilled events before it leaves them in their file and tries again later.
HANDOVER_WAIT_S = 5.0


class Handover:
    """The journal's slots a background store has not confirmed yet.

    Args:
      store: the recorder's store (its delivery marks, when it has them).
      ring: the recorder's ring (:mod:`goodput_core.record.ring`).
      outbox: returns the recorder's outbox (made on first need).
    """

    def __init__(self, store: Any, ring: Any, outbox: Callable[[], Any]):
        self._store = store
        self._ring = ring
        self._outbox = outbox
        self._unconfirmed: Deque[Tuple[int, Any]] = collections.deque()  # (ticket, mark)
        self._held_mark: Any = None  # what the held file waits for
        #: the mark of spilled events handed to the store and not confirmed yet
        self.handed: Any = None

    def mark(self) -> Any:
        """The store's mark of everything appended so far (None: it commits
        before it returns)."""
        mark = getattr(self._store, "delivery_mark", None)
        return mark() if callable(mark) else None

    def pending(self) -> bool:
        """True while the store has not confirmed events of the ring or the held file."""
        return bool(self._unconfirmed) or self._held_mark is not None

    def stored_through(self, upto: int) -> None:
        """Every event up to ticket ``upto`` was appended to the store."""
        mark = self.mark()
        if mark is None:
            self._ring.release(upto)
        elif upto > self._ring.freed:
            self._unconfirmed.append((upto, mark))
            self.confirm()

    def confirm(self) -> None:
        """Frees the ring up to what the store delivered; moves what it has not
        confirmed to the held file when that is more than half a ring."""
        if not self.pending():
            return
        done = getattr(self._store, "delivered_mark", None)
        done = done() if callable(done) else None
        if done is None:
            return
        unconfirmed, ring = self._unconfirmed, self._ring
        while unconfirmed and unconfirmed[0][1] <= done:
            ring.release(unconfirmed.popleft()[0])
        if self._held_mark is not None and self._held_mark <= done:
            self._held_mark = None
            self._outbox().release_held()
        if unconfirmed and unconfirmed[-1][0] - ring.freed > ring.half:
            self.hold()

    def hold(self) -> bool:
        """Moves every unconfirmed event of the ring to the held file (at exit too)."""
        if not self._unconfirmed:
            return True
        upto, mark = self._unconfirmed[-1]
        try:
            self._outbox().hold(self._ring.events_between(self._ring.freed, upto))
        except OSError:
            return False  # they stay in the ring; new events wait in memory meanwhile
        self._unconfirmed.clear()
        self._ring.release(upto)
        self._held_mark = mark if self._held_mark is None else max(self._held_mark, mark)
        return True

    def delivered(self, mark: Any, wait: Optional[float] = HANDOVER_WAIT_S) -> bool:
        """True once the store delivered everything up to ``mark`` (waits ``wait`` s)."""
        done = getattr(self._store, "delivered_mark", None)
        if callable(done) and (done() or 0) >= mark:
            return True
        flush = getattr(self._store, "flush", None)
        try:
            return bool(flush(wait)) if callable(flush) else True
        except Exception:  # noqa: BLE001 - not delivered yet: tried again later
            return False
