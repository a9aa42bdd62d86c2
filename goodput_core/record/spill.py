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
import json
import logging
import math
import os
import threading
from typing import Any, Deque, List, Optional, Tuple

from goodput_core.events import EventRecord, Kind
# where spill files and journals live, and how a store's files are named
from goodput_core.record.journal import SPILL_DIR_ENV, default_spill_dir, tag_of
from goodput_core.record.storable import check_event
from goodput_core.stores import canonical_store_url, schemes
from goodput_core.stores.spill_buffer import SpillFile, adopt_files, new_spill_file
from goodput_core.stores.strict_json import dumps
from goodput_core.record.journal import BadJournal, JournalOrphan, journal_paths

_KINDS = frozenset(int(k) for k in Kind)

__all__ = ["Outbox", "default_spill_dir", "tag_of", "SPILL_DIR_ENV"]

logger = logging.getLogger("goodput")

_MAX_MB_ENV = "GOODPUT_SPILL_MAX_MB"
_DEFAULT_MAX_MB = 1024


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


_INT = (int,)
_TIME = (float, int)


def _decode(row: Any) -> Optional[EventRecord]:
    """An event read back from a spill line, or None when the line does not hold
    one a store can take: every field is checked for its type and range (a
    line another program wrote, or a damaged one, must not stop the rest)."""
    if not isinstance(row, list) or len(row) != 11:
        return None
    run, kind, t, step, extra, pidx, host, pid, attempt, seq, wt = row
    if row[4] is not None:
        try:
            extra = json.loads(row[4])
        except (TypeError, ValueError, RecursionError):
            return None
        if not isinstance(extra, dict):
            return None
    if (type(run) is not str or not run or "\x00" in run or type(kind) is not int
            or kind not in _KINDS or not (t is None or type(t) in _TIME)
            or not (step is None or type(step) is int) or type(pidx) is not int
            or type(host) is not str or type(pid) is not int or type(attempt) is not str
            or type(seq) is not int or not (wt is None or type(wt) in _TIME)):
        return None
    event = EventRecord(run, kind, math.nan if t is None else float(t), step, extra, pidx, host,
                        pid, attempt, seq, math.nan if wt is None else float(wt))
    try:
        check_event(event)
    except ValueError:
        return None
    return event


def _line(entry: Any) -> str:
    """A set-aside entry as a line: a spill line as read, a journal's event
    encoded as a spill line, a journal slot whose payload was damaged as null."""
    if isinstance(entry, EventRecord):
        entry = {"e": _encode(entry)}
    return json.dumps(entry, separators=(",", ":"), default=str)


def _checked(event: Any) -> Optional[EventRecord]:
    """An event adopted from a journal, checked as a spill line is."""
    if event is None:
        return None
    return _decode(_encode(event))


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
        self.tag = tag_of(self.url)
        # An in-process store dies with its process: no later process can
        # take its events, and its URL names no one place (tests share it).
        self.in_process = not schemes.shared(self.url)
        self.max_bytes = _max_bytes()
        self._lock = threading.RLock()
        self._own: Optional[SpillFile] = None
        self._own_bytes = 0
        self._orphans: Deque[Any] = collections.deque()  # SpillFile or JournalOrphan
        self._peeked: Optional[Tuple[Any, int, int]] = None
        self._held: Optional[SpillFile] = None  # handed to a store, not confirmed yet
        #: counters for the recorder's stats()
        self.spilled_total = 0
        self.delivered = 0
        self.adopted = 0
        self.dropped = 0
        self.bad_lines = 0
        self.rejected = 0  # events set aside in .rejected files

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
            for mine in (self._own, self._held):
                if mine is not None:
                    held.add(mine.path)
            count = adopt_files(self._orphans, self.directory, self.tag, held, ("e",),
                                keep_empty=False)
            count += self._adopt_journals(held)
            self.adopted += count
        if count:
            logger.warning("goodput: delivering %d events that an earlier process left "
                           "spilled for %s", count, self.url)
        return count

    def _adopt_journals(self, held: set) -> int:
        """Queues the journals of dead writers of this store (after their spill
        files, which hold their older events)."""
        count = 0
        for path in journal_paths(self.directory, self.tag):
            if path in held:
                continue
            try:
                orphan = JournalOrphan(path)
            except BadJournal as exc:  # not a journal of ours: out of the way, said
                self._set_aside_file(path, str(exc))
                continue
            except OSError:
                continue  # its writer lives (or another process adopted it first)
            if not orphan.unread:
                orphan.close(delete=True)
                continue
            self._orphans.append(orphan)
            count += orphan.unread
        return count

    # ------------------------------------------------------------ held
    def hold(self, events: List[EventRecord]) -> None:
        """Keeps events a background store took but has not confirmed delivering
        (this process never delivers them again: a later one does if this one dies).

        Raises:
          OSError: the file cannot be written.
        """
        if not events or self.in_process:
            return
        with self._lock:
            if self._held is None:
                self._held = new_spill_file(self.directory, self.tag, ("e",))
            self._held.write([{"e": _encode(e)} for e in events])

    def release_held(self) -> None:
        """The store confirmed delivering every held event: forget them."""
        with self._lock:
            if self._held is not None:
                self._held.reset()

    # ------------------------------------------------------------ rejected
    def set_aside(self, events: List[EventRecord]) -> None:
        """Events from a spill file or journal that the store refused for their
        content: kept in ``<file>.rejected`` (not delivered, never retried)."""
        if not events:
            return
        with self._lock:
            source = self._peeked[0].path if self._peeked is not None else os.path.join(
                self.directory, self.tag)
            self._reject_lines(source, [json.dumps({"e": _encode(e)}, separators=(",", ":"))
                                        for e in events], "the store refused them")

    def _reject_lines(self, source: str, lines: List[str], why: str) -> None:
        self.rejected += len(lines)
        path = source + ".rejected"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, "".join(line + "\n" for line in lines).encode())
            finally:
                os.close(fd)
        except OSError as exc:
            path = f"nowhere ({exc})"
        if self.rejected == len(lines):  # said once; counted in stats()['spill_rejected']
            logger.error("goodput: set aside %d spilled events for %s (%s): kept in %s, not "
                         "delivered; further ones are counted in stats()['spill_rejected']",
                         len(lines), self.url, why, path)

    def _set_aside_file(self, path: str, why: str) -> None:
        try:
            os.rename(path, path + ".rejected")
        except OSError:
            return
        self.rejected += 1
        logger.error("goodput: %s; moved to %s.rejected", why, path)

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

    def _read(self, spill: Any, n: int) -> List[EventRecord]:
        self._peeked = (spill, spill.read_pos, spill.unread)
        out, bad = [], []
        journal = not isinstance(spill, SpillFile)
        for entry in spill.read(n):
            event = _checked(entry) if journal else _decode(entry["e"])
            if event is None:
                bad.append(entry)
            else:
                out.append(event)
        if bad and spill.read_pos > getattr(spill, "aside_upto", 0):  # not twice on a re-read
            spill.aside_upto = spill.read_pos
            self._reject_lines(spill.path, [_line(e) for e in bad],
                               "their content is not an event a store can hold")
        return out

    def _skip(self, spill: Any, n: int) -> None:
        """Reads past the next ``n`` good events again (quietly: lines set
        aside on the first read are not set aside twice)."""
        self._peeked = (spill, spill.read_pos, spill.unread)
        journal = not isinstance(spill, SpillFile)
        while n > 0 and spill.unread:
            for entry in spill.read(1):
                if (_checked(entry) if journal else _decode(entry["e"])) is not None:
                    n -= 1

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
                self._skip(spill, n)
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
            held, self._held = self._held, None
            if held is not None:
                self._release(held)  # unconfirmed events: delivered again later, stored once
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
                    "spill_rejected": self.rejected,
                    "spill_file": self._own.path if self._own is not None else None}

