"""The recorder's spill file: events that have not reached an opened store.

When the recorder's store cannot be opened (server down, out of connection
slots, a directory that is not writable) or refuses a write for a reason that
is not one event's content (read-only, permission revoked, tables missing),
the writer moves the events out of memory into a local file of its own
instead of holding them until the process ends. The next writer that opens
the same store (in this process once the store answers, or in a later
process) *adopts* the files nobody holds and delivers them first, in order.

Files live in ``$GOODPUT_SPILL_DIR``, else ``$XDG_DATA_HOME/goodput/spill``
(``~/.local/share/goodput/spill``), one per writer:
``<store tag>.<pid>.<random>.jsonl`` (the tag is a hash of the store's URL,
password removed). They are created ``0600`` with ``O_EXCL``/``O_NOFOLLOW``
in a ``0700`` directory, hold one JSON array per event (nothing is unpickled)
and are locked with ``flock`` while their writer lives. How far a file was
delivered is kept beside it (``.pos``), so a file is never delivered twice.
A writer holds at most ``GOODPUT_SPILL_MAX_MB`` (default 1024) MiB on disk;
events beyond are dropped and counted (``stats()["spill_dropped"]``).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Deque, List, Optional, Tuple

from goodput_core.events import EventRecord
from goodput_core.stores import canonical_store_url
from goodput_core.stores.spill_buffer import SpillFile, adopt_files, new_spill_file
from goodput_core.stores.strict_json import dumps

__all__ = ["Outbox", "default_spill_dir", "SPILL_DIR_ENV"]

logger = logging.getLogger("goodput")

SPILL_DIR_ENV = "GOODPUT_SPILL_DIR"
_MAX_MB_ENV = "GOODPUT_SPILL_MAX_MB"
_DEFAULT_MAX_MB = 1024


def default_spill_dir() -> str:
    """``$GOODPUT_SPILL_DIR``, else ``$XDG_DATA_HOME/goodput/spill``."""
    env = os.environ.get(SPILL_DIR_ENV)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return os.path.join(base, "goodput", "spill")


def _max_bytes() -> int:
    try:
        return max(1, int(float(os.environ.get(_MAX_MB_ENV, _DEFAULT_MAX_MB)) * 2**20))
    except ValueError:
        return _DEFAULT_MAX_MB * 2**20


def _encode(e: EventRecord) -> list:
    row = list(e)
    if row[4] is not None:
        row[4] = dumps(row[4])  # the stores' strict JSON text
    return row


def _decode(row: list) -> Optional[EventRecord]:
    if not isinstance(row, list) or len(row) != 11 or not isinstance(row[0], str):
        return None
    if row[4] is not None:
        try:
            row[4] = json.loads(row[4])
        except (TypeError, ValueError):
            return None
    return EventRecord(*row)


class Outbox:
    """One writer's spill file plus the orphans it adopted, for one store.

    Thread-safe. Own events are spilled with :meth:`put`; :meth:`peek` returns
    the next events to deliver (orphans first, then own, each in order) and
    :meth:`commit` removes them once the store took them.

    Args:
      store_url: the store the events are meant for (names the files).
      directory: where files live (default :func:`default_spill_dir`).
    """

    def __init__(self, store_url: str, directory: Optional[str] = None):
        self.url = canonical_store_url(store_url) if store_url else ""
        self.directory = directory or default_spill_dir()
        self.tag = hashlib.sha1(self.url.encode()).hexdigest()[:16]
        # An in-process store dies with its process: no later process can
        # take its events, and its URL names no one place (tests share it).
        self.in_process = self.url.startswith("memory://")
        self.max_bytes = _max_bytes()
        self._lock = threading.RLock()
        self._own: Optional[SpillFile] = None
        self._own_bytes = 0
        self._orphans: Deque[SpillFile] = collections.deque()
        self._peeked: Optional[Tuple[SpillFile, int, int]] = None
        #: counters for the recorder's stats()
        self.spilled_total = 0
        self.delivered = 0
        self.adopted = 0
        self.dropped = 0
        self.bad_lines = 0

    # ------------------------------------------------------------ spilling
    def put(self, events: List[EventRecord]) -> int:
        """Appends events to this writer's file; returns how many were kept.

        Events beyond the size bound are not written (counted in ``dropped``).

        Raises:
          OSError: the file cannot be created or written (nothing was kept).
        """
        if not events:
            return 0
        lines = [{"e": _encode(e)} for e in events]
        with self._lock:
            if self._own is None:
                self._own = new_spill_file(self.directory, self.tag, ("e",))
            room = self.max_bytes - self._own_bytes
            keep = len(lines)
            size = sum(len(json.dumps(x, separators=(",", ":"))) + 1 for x in lines)
            while keep and size > room:  # rare: trim from the end until it fits
                keep -= 1
                size -= len(json.dumps(lines[keep], separators=(",", ":"))) + 1
            self._own.write(lines[:keep])
            self._own_bytes += size
            self.spilled_total += keep
            if keep < len(lines):
                self.dropped += len(lines) - keep
                if self.dropped == len(lines) - keep:
                    logger.error("goodput: the spill file %s reached its bound (%s=%d MiB); "
                                 "further events are dropped and counted in "
                                 "stats()['spill_dropped']", self._own.path, _MAX_MB_ENV,
                                 self.max_bytes // 2**20)
            return keep

    def adopt(self) -> int:
        """Takes over the files of this store that no live writer holds.

        Returns:
          The number of events adopted.
        """
        if self.in_process:
            return 0
        with self._lock:
            held = {f.path for f in self._orphans}
            if self._own is not None:
                held.add(self._own.path)
            count = adopt_files(self._orphans, self.directory, self.tag, held, ("e",),
                                keep_empty=False)
            self.adopted += count
        if count:
            logger.warning("goodput: delivering %d events that an earlier process left "
                           "spilled for %s", count, self.url)
        return count

    # ------------------------------------------------------------ delivering
    def pending(self) -> int:
        """Events waiting in files (own and adopted)."""
        with self._lock:
            return self.own_pending() + sum(o.unread for o in self._orphans)

    def own_pending(self) -> int:
        """This writer's own events waiting in its file."""
        with self._lock:
            return self._own.unread if self._own is not None else 0

    def peek(self, n: int) -> List[EventRecord]:
        """Up to ``n`` events to deliver next (removed by :meth:`commit`)."""
        with self._lock:
            while self._orphans:
                first = self._orphans[0]
                if first.unread:
                    return self._read(first, n)
                self.bad_lines += first.bad_lines
                self._orphans.popleft().close(delete=True)
            if self._own is not None and self._own.unread:
                return self._read(self._own, n)
            return []

    def _read(self, spill: SpillFile, n: int) -> List[EventRecord]:
        self._peeked = (spill, spill.read_pos, spill.unread)
        out = []
        for entry in spill.read(n):
            event = _decode(entry["e"])
            if event is None:
                spill.bad_lines += 1
            else:
                out.append(event)
        return out

    def rewind(self) -> None:
        """Puts the last peeked events back (their delivery failed)."""
        with self._lock:
            if self._peeked is not None:
                spill, pos, unread = self._peeked
                spill.read_pos, spill.unread = pos, unread
                self._peeked = None

    def keep_from(self, n: int) -> None:
        """The first ``n`` of the last peeked events were delivered, the rest were not."""
        with self._lock:
            if self._peeked is None:
                return
            spill = self._peeked[0]
            self.rewind()
            if n > 0:
                self._read(spill, n)
                self.commit(n)

    def commit(self, n: int) -> None:
        """The last peeked events were delivered: never deliver them again."""
        with self._lock:
            if self._peeked is None:
                return
            spill = self._peeked[0]
            self._peeked = None
            self.delivered += n
            if spill is self._own and not spill.unread:
                spill.reset()  # the own file starts again from empty
                self._own_bytes = 0
            try:
                spill.save_progress()
            except OSError:  # the next adopter may deliver it again: say so
                logger.warning("goodput: could not record delivery progress of %s", spill.path)

    # ------------------------------------------------------------ ending
    def close(self) -> Tuple[int, Optional[str]]:
        """Releases the files: delivered ones are deleted, the rest kept for later.

        Returns:
          (events left in this writer's own file, its path; None when no
          process can deliver them: an in-process ``memory://`` store).
        """
        with self._lock:
            self.rewind()
            for orphan in self._orphans:
                self._release(orphan)
            self._orphans.clear()
            own, self._own = self._own, None
            if own is None:
                return 0, None
            left = own.unread
            if self.in_process:
                own.close(delete=True)
                return left, None
            path = own.path if left else None
            self._release(own)
            return left, path

    def _release(self, spill: SpillFile) -> None:
        if not spill.unread:
            spill.close(delete=True)
            return
        try:
            spill.save_progress()
            os.fsync(spill.fd)
        except OSError:
            pass
        spill.close(delete=False)

    def stats(self) -> dict:
        """Counters: spilled (waiting on disk), spilled_total, delivered, adopted, dropped."""
        with self._lock:
            return {"spilled": self.own_pending(), "spilled_total": self.spilled_total,
                    "spill_delivered": self.delivered, "spill_adopted": self.adopted,
                    "spill_waiting": self.pending(), "spill_dropped": self.dropped,
                    "spill_file": self._own.path if self._own is not None else None}

