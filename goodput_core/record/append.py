"""One batch into the store: the writer thread's only call of ``store.append``.

:class:`Appender` writes a batch and says what is left to retry. A batch that
fails for a reason that may pass (the store's own errors: cannot be opened,
disk full, locked, read-only, unreachable) comes back unwritten, in order,
for the writer (:mod:`goodput_core.record.writer`) to spill and retry. A
batch that fails because of its content (an event the store cannot encode:
the store's scheme says which errors those are,
:mod:`goodput_core.stores.schemes`) is split in halves until the events that
fail alone are isolated: those are dropped and counted
(``stats()["unstorable"]``), every other event is written.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Sequence

from goodput_core.events import EventRecord
from goodput_core.stores import schemes
from goodput_core.stores.base import StoreError
from goodput_core.stores.event_batch import EventBatch

__all__ = ["Appender"]

logger = logging.getLogger("goodput")


def _may_pass(error: BaseException) -> bool:
    """True for store failures worth retrying as they are (I/O, locks, outages).

    Anything else (TypeError, OverflowError, UnicodeError, ValueError...) comes
    from the batch's content and would fail the same way forever; so does a
    store error that its backend says is about the data itself (SQLite: a
    constraint, a value too big, a type it cannot bind).
    """
    if isinstance(error, StoreError):
        return not schemes.refuses_content(error)
    return isinstance(error, OSError)


class Appender:
    """Appends batches to ``store``; counts what it wrote, failed and refused.

    The counters are the recorder's (``stats()``), kept across a fork.
    """

    def __init__(self, store: Any):
        self.store = store
        self.written = 0
        self.write_errors = 0
        self.unstorable = 0  # events the store refused for their content

    def _append(self, batch) -> Optional[BaseException]:
        """One store append; returns the error instead of raising it."""
        try:
            # Fork safety of the store's own I/O is the store's job (the sqlite
            # store holds forks back while any thread is inside SQLite).
            self.store.append(batch)
        except Exception as exc:
            return exc
        self.written += len(batch)
        return None

    def write(self, batch: Sequence[EventRecord],
              refused: Optional[List[EventRecord]] = None) -> Sequence[EventRecord]:
        """Writes ``batch`` (EventRecords, or an EventBatch: handed on as columns
        to a store that appends columns, else as its EventRecords); returns the
        events left to retry ([] when done).

        A content error splits the failing part in halves, in order, down to
        single events that are dropped and counted (and added to ``refused``
        when given); an error that may pass stops there and returns the
        unwritten rest, in order.
        """
        if isinstance(batch, EventBatch) and not getattr(self.store, "appends_columns", False):
            batch = batch.records()
        parts = [batch] if batch else []  # a stack: the next part to write is last
        while parts:
            part = parts.pop()
            error = self._append(part)
            if error is None:
                continue
            if _may_pass(error):
                self.write_errors += 1
                if (self.write_errors == 1 or self.write_errors % 100 == 0) and \
                        not getattr(error, "said", False):  # a failed open says it once
                    logger.error("goodput: writing %d events to %s failed (will retry): %s",
                                 len(part), getattr(self.store, "url", "the store"), error)
                return part if not parts else \
                    list(part) + [e for p in reversed(parts) for e in p]
            if len(part) == 1:
                self.unstorable += 1
                if refused is not None:
                    refused.append(part[0])
                if self.unstorable == 1:
                    logger.error("goodput: dropped an event the store cannot hold (%s: %s); "
                                 "further ones are counted in stats()['unstorable']",
                                 type(error).__name__, error)
                continue
            half = len(part) // 2
            parts += [part[half:], part[:half]]
        return []
