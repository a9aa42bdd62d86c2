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
import dataclasses
import importlib.util
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from goodput_core.events import EventRecord
from goodput_core.redact import redact

__all__ = ["Store", "StoreError", "Cursor", "StoreScheme", "importable"]

Cursor = Any  # opaque to callers; None means "from the beginning"


class StoreError(Exception):
    """A store could not be opened or used (bad URL, unwritable path, ...)."""


def _never(error: BaseException) -> bool:
    return False


def _anyone(url: str) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class StoreScheme:
    """What a store backend declares about its URLs: its package's ``SCHEME``,
    listed in :mod:`goodput_core.stores.schemes` (the registry).

    Attributes:
      names: its URL schemes (``NAME://...``), the first one canonical.
      check: ``check(url, rest, writer)`` validates a URL without I/O and
        without importing the store's client library (``rest``: what follows
        ``://``, or the whole bare string); raises :class:`StoreError`.
      open: ``open(url, rest, create)`` opens the store (imports its module
        then); ``create`` False for readers.
      bare: claims a string without ``://`` (PostgreSQL: a libpq keyword DSN).
      shared: other processes reach the store by its URL: the recorder keeps
        a journal and spill files for it, a monitor may run in a process of
        its own (``memory://``: False).
      canonical: the URL an opened store reports as its ``url`` (no I/O, no
        secret): default :func:`goodput_core.redact.redact`.
      elsewhere: the URL another process (in any directory) opens the same
        store by; default the URL itself when ``shared``, else None.
      may_write: False when this process may not write the store (a file's
        permissions): what dead writers left is then left to a writer.
      exit_watcher: MaxText's exit watcher records the run's tail into it
        (``integrations/maxtext/whole_process.py``).
      refuses_content: True for a failed ``append``'s error that is about the
        events themselves (the writer drops those events instead of retrying).
      read_cache: the dashboard's run-cache options for this store (a slow
        remote log is read less often).
    """

    names: Tuple[str, ...]
    check: Callable[[str, str, bool], None]
    open: Callable[[str, str, bool], "Store"]
    bare: Optional[Callable[[str], bool]] = None
    shared: bool = True
    canonical: Callable[[str], str] = redact
    elsewhere: Optional[Callable[[str], Optional[str]]] = None
    may_write: Callable[[str], bool] = _anyone
    exit_watcher: bool = False
    refuses_content: Callable[[BaseException], bool] = _never
    read_cache: Dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        """The canonical scheme name."""
        return self.names[0]

    def url_elsewhere(self, url: str) -> Optional[str]:
        """See ``elsewhere``."""
        if self.elsewhere is not None:
            return self.elsewhere(url)
        return url if self.shared else None


def importable(module: str) -> bool:
    """True when ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


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
