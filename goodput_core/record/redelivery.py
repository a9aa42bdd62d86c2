"""Spilled events, delivered first: this writer's spill file and those that
earlier processes left.

A writer (:mod:`goodput_core.record.writer`) *has* one :class:`Redelivery`
per process. It makes the writer's spill file (its
:class:`~goodput_core.record.spill.Outbox`) on first need, adopts the files
that dead writers of the same store left once the store opens, and delivers
what they hold before anything newer, in order (:meth:`Redelivery.deliver`).
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

from goodput_core.events import EventRecord
from goodput_core.record.append import Appender
from goodput_core.record.handover import Handover

__all__ = ["Redelivery"]

logger = logging.getLogger("goodput")

_SPILL_BATCH = 10_000


class Redelivery:
    """The spill files of one writer and process.

    Args:
      store: the writer's store (its URL names the spill files).
      appender: the writer's :class:`~goodput_core.record.append.Appender`.
    """

    def __init__(self, store: Any, appender: Appender):
        self.store = store
        self.appender = appender
        self.outbox: Any = None  # this writer's spill file (record/spill.py), made on first need
        self.adopt_due = True  # look for earlier processes' spill files once the store opens
        self._adopt_said = False
        self.released = False  # exit or close released the spill files

    def outbox_for(self) -> Any:
        """The spill file, made now if needed."""
        if self.outbox is None:
            from goodput_core.record.spill import Outbox  # lazy: only a failing store spills

            self.outbox = Outbox(getattr(self.store, "url", "") or "")
        return self.outbox

    def store_open(self) -> bool:
        return bool(getattr(self.store, "is_open", True))

    def deliver(self, handover: Handover) -> bool:
        """Delivers spilled events (earlier processes' first, then ours), in order.

        Returns:
          True when none is waiting any more, False when the store failed.
        """
        if self.released:  # exit or close took the files: nothing more here
            return self.outbox is None or not self.outbox.pending()
        if self.adopt_due and self.store_open():
            self.adopt_due = False
            try:
                self.outbox_for().adopt()
            except OSError as exc:  # a spill directory refused, or unreadable
                if not self._adopt_said:
                    self._adopt_said = True
                    logger.error("goodput: could not look for spilled events: %s", exc)
            except Exception:  # noqa: BLE001 - never stop the writer
                logger.exception("goodput: could not look for spilled events")
        outbox = self.outbox
        # A store that delivers in the background batches on its own side:
        # larger hand-overs, one wait each for its confirmation.
        size = _SPILL_BATCH if handover.mark() is None else 5 * _SPILL_BATCH
        while outbox is not None:
            events = outbox.peek(size)
            if not events:
                if outbox.pending():  # only lines set aside: the next read goes on
                    continue
                return True
            if handover.handed is None:
                refused: List[EventRecord] = []
                left = self.appender.write(events, refused)
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

    def own_pending(self) -> int:
        """Events of this writer waiting in its spill file."""
        return self.outbox.own_pending() if self.outbox is not None else 0

    def close(self) -> Optional[tuple]:
        """Releases the spill file, if one was made (the caller holds the spill
        lock): returns its (events left, path), or None without one."""
        if self.outbox is None:
            return None
        self.released = True
        return self.outbox.close()
