"""A store that opens on first use: the recorder's writer thread opens it, not the caller.

Opening a store costs real time (the sqlite module's import, the file, its
schema check; a Cloud Logging client and its credentials). A recorder is
built on the training thread, so it validates the URL there
(:func:`goodput_core.stores.check_store_url`: no I/O) and hands the opening
to its writer, which calls :meth:`DeferredStore.append` first (docs/quality.md P9:
the first ``record_*`` costs what any other does).

An open that fails raises :class:`StoreError` from that call and is logged
once; the writer spills the batch to its local spill file and retries
(opening again), the error is kept for
:meth:`~goodput_core.record.recorder.Recorder.stats`, and
:meth:`~goodput_core.record.recorder.Recorder.flush` returns False as soon as
the writer's open failed. Nothing opens the store on the caller's thread. A fork waits for an open in
progress, so a child never inherits a half-built store.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Callable, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord
# Imported first so that its fork hooks are registered before ours: ours then
# run first before a fork (they wait for an open that may need its gate).
from goodput_core.stores import canonical_store_url
from goodput_core.stores.sqlite import fork as _sqlite_fork  # noqa: F401
from goodput_core.stores.base import Cursor, Store, StoreError
from goodput_core.stores.event_batch import EventBatch
from goodput_core.stores import open_store

__all__ = ["DeferredStore"]

logger = logging.getLogger("goodput")

_LIVE: "weakref.WeakSet[DeferredStore]" = weakref.WeakSet()
_FORK_WAIT_S = 30.0  # how long a fork waits for an open in progress


class DeferredStore(Store):
    """Opens ``url`` with ``opener`` on the first call that needs the store.

    Args:
      url: a store URL or path (already validated by the caller).
      opener: ``opener(url) -> Store`` (default
        :func:`goodput_core.stores.open_store`; tests inject a slow one).
    """

    def __init__(self, url: str, opener: Optional[Callable[[str], Store]] = None):
        self._target = str(url)
        #: The URL the open store will report (for messages and read-your-writes
        #: matching): sqlite paths made absolute, a password replaced by ``***``.
        self.url = canonical_store_url(self._target)
        self._opener = opener
        self._inner: Optional[Store] = None
        self._lock = threading.Lock()
        self._tried = threading.Event()
        #: The last error of an open that failed (None once open).
        self.error: Optional[BaseException] = None
        #: Opens that failed so far.
        self.failures = 0
        self._held_for_fork = False
        _LIVE.add(self)

    def open(self) -> Store:
        """The open store; opens it now if needed.

        Raises:
          StoreError: it cannot be opened (the next call tries again).
        """
        inner = self._inner
        if inner is not None:
            return inner
        with self._lock:
            if self._inner is None:
                try:
                    if self._opener is None:
                        self._inner = open_store(self._target)
                    else:
                        self._inner = self._opener(self._target)
                    self.error = None
                except Exception as exc:  # noqa: BLE001 - reported, retried by the writer
                    self.failures += 1
                    self.error = exc
                    if self.failures == 1:  # before _tried is set: flush() callers see it
                        logger.error("goodput: cannot open the store %s: %s; events stay "
                                     "queued and opening is retried", self.url, exc)
                    error = StoreError(f"cannot open the store {self.url}: {exc}")
                    error.said = True  # type: ignore[attr-defined]  # logged above: once
                    raise error from exc
                finally:
                    self._tried.set()
            return self._inner

    @property
    def is_open(self) -> bool:
        """True once an open succeeded."""
        return self._inner is not None

    def wait_tried(self, timeout: Optional[float]) -> bool:
        """Waits until a first open was attempted; True when that happened in time."""
        return self._tried.wait(timeout)

    # A fork waits for an open in progress (a half-built store must not be
    # copied into the child); the child gets fresh locks and opens the store
    # itself if the parent had not opened it yet.
    def _before_fork(self) -> None:
        self._held_for_fork = self._lock.acquire(timeout=_FORK_WAIT_S)

    def _after_fork_in_parent(self) -> None:
        if self._held_for_fork:
            self._held_for_fork = False
            self._lock.release()

    def after_fork_in_child(self) -> None:
        """Fresh locks in a forked child (idempotent)."""
        self._held_for_fork = False
        self._lock = threading.Lock()
        self._tried = threading.Event()
        if self._inner is not None:
            self._tried.set()

    @property
    def appends_columns(self) -> bool:
        """Whether the opened store takes an EventBatch as columns (False until open)."""
        return bool(getattr(self._inner, "appends_columns", False))

    # ------------------------------------------------------- Store methods
    def append(self, batch: Sequence[EventRecord]) -> None:
        inner = self.open()
        if isinstance(batch, EventBatch) and not getattr(inner, "appends_columns", False):
            batch = batch.records()
        inner.append(batch)

    def read(self, run: str, since: Cursor = None,
             limit: Optional[int] = None) -> Tuple[List[EventRecord], Cursor]:
        return self.open().read(run, since=since, limit=limit)

    def runs(self) -> List[str]:
        return self.open().runs()

    def flush(self, timeout: Optional[float] = 10.0) -> Any:
        """The opened store's own fence (Cloud Logging delivers in the background)."""
        flush = getattr(self._inner, "flush", None)
        return flush(timeout) if callable(flush) else True

    def delivery_mark(self) -> Any:
        """The opened store's delivery mark (background stores), else None."""
        mark = getattr(self._inner, "delivery_mark", None)
        return mark() if callable(mark) else None

    def delivered_mark(self) -> Any:
        """The opened store's delivered mark (background stores), else None."""
        mark = getattr(self._inner, "delivered_mark", None)
        return mark() if callable(mark) else None

    def stats(self) -> Any:
        """The opened store's own counters, or None (not open, or it keeps none)."""
        stats = getattr(self._inner, "stats", None)
        return stats() if callable(stats) else None

    def checkpoint(self) -> None:
        """The opened store's checkpoint (the embedded store folds its log into the file)."""
        checkpoint = getattr(self._inner, "checkpoint", None)
        if callable(checkpoint):
            checkpoint()

    def close(self) -> None:
        inner = self._inner
        if inner is not None:
            inner.close()


def _each(method: str) -> Callable[[], None]:
    def run() -> None:
        for store in list(_LIVE):
            getattr(store, method)()
    return run


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_each("_before_fork"),
                        after_in_parent=_each("_after_fork_in_parent"),
                        after_in_child=_each("after_fork_in_child"))
