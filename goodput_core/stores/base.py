"""The store interface every backend implements.

A store keeps the events of many runs. Writers append batches; readers read a
run incrementally with an opaque cursor::

    store.append(batch)                       # list of EventRecord
    events, cursor = store.read("run-1")      # everything so far
    more, cursor = store.read("run-1", since=cursor)   # only what is new

Stores are safe to use from several threads of one process; the sqlite store
is also safe across processes. A store never unpickles or evaluates data.
"""

from __future__ import annotations

import abc
from typing import Any, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord

__all__ = ["Store", "StoreError", "Cursor"]

Cursor = Any  # opaque to callers; None means "from the beginning"


class StoreError(Exception):
    """A store could not be opened or used (bad URL, unwritable path, ...)."""


class Store(abc.ABC):
    """Abstract event store."""

    #: The URL this store was opened from (for messages and the CLI).
    url: str = ""

    @abc.abstractmethod
    def append(self, batch: Sequence[EventRecord]) -> None:
        """Appends events atomically (all or none), in the given order."""

    @abc.abstractmethod
    def read(
        self, run: str, since: Cursor = None, limit: Optional[int] = None
    ) -> Tuple[List[EventRecord], Cursor]:
        """Returns events of ``run`` appended after ``since``, in append order.

        Args:
          run: the run (job) name.
          since: a cursor returned by an earlier read, or None for all events.
          limit: at most this many events (None: all).

        Returns:
          (events, cursor): pass ``cursor`` back to read only newer events.
        """

    @abc.abstractmethod
    def runs(self) -> List[str]:
        """Names of the runs in this store, oldest first."""

    def close(self) -> None:
        """Releases resources; the store must not be used afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
