"""An in-process store, for tests and short-lived tools.

``memory://NAME`` opens a store shared by name inside the process, so a
recorder and a calculator built from the same URL see the same events.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord
from goodput_core.stores.base import Cursor, Store, StoreScheme

__all__ = ["MemoryStore", "open_named"]

_NAMED: Dict[str, "MemoryStore"] = {}
_NAMED_LOCK = threading.Lock()


class MemoryStore(Store):
    """Events kept in per-run Python lists; the cursor is a list index."""

    def __init__(self, name: str = ""):
        self.url = f"memory://{name}"
        self._runs: Dict[str, List[EventRecord]] = {}
        self._lock = threading.Lock()

    def append(self, batch: Sequence[EventRecord]) -> None:
        with self._lock:
            for event in batch:
                self._runs.setdefault(event.run, []).append(event)

    def read(
        self, run: str, since: Cursor = None, limit: Optional[int] = None
    ) -> Tuple[List[EventRecord], Cursor]:
        start = since or 0
        with self._lock:
            events = self._runs.get(run, [])
            end = len(events) if limit is None else min(len(events), start + limit)
            return events[start:end], end

    def runs(self) -> List[str]:
        with self._lock:
            return list(self._runs)

    def run_versions(self) -> Dict[str, int]:
        """Each run's version: how many events it holds (they are only appended)."""
        with self._lock:
            return {run: len(events) for run, events in self._runs.items()}


def open_named(name: str) -> MemoryStore:
    """Returns the process-wide memory store called ``name`` (created on first use)."""
    with _NAMED_LOCK:
        store = _NAMED.get(name)
        if store is None:
            store = _NAMED[name] = MemoryStore(name)
        return store


def _check(url: str, rest: str, writer: bool) -> None:
    return None  # any name


def _open(url: str, rest: str, create: bool) -> MemoryStore:
    return open_named(rest)


#: ``memory://NAME``, for the registry (:mod:`goodput_core.stores.schemes`): in
#: this process only (no journal or spill file outlives it, no monitor process).
SCHEME = StoreScheme(("memory",), _check, _open, shared=False)
