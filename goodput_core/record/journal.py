"""The recorder's journal: events durable the moment ``record_*`` returns.

A ``record_*`` call writes its event into one slot of a ring of fixed-size
slots in a file of this process, mapped into memory (``mmap``,
``MAP_SHARED``). The kernel owns those pages: when the process dies, even by
SIGKILL, what it wrote stays in the file (not across a power loss: the pages
reach the disk when the kernel writes them back). The writer thread reads
the slots in order, stores them and then records, in the file's header, how
far the store took them (``stored_upto``); a slot is written again only after
that. The next writer that opens the same store, or any reader that delivers
(``goodput`` read commands), adopts a journal nobody holds and delivers what
lies past ``stored_upto``, exactly once: the stores skip a (writer, sequence)
pair they already hold, so a crash between a commit and the header update
repeats nothing.

File (``<spill dir>/<store tag>.<pid>.<random>.journal``, ``0600``, created
under a temporary name, ``flock``-ed by its writer while it lives, blocks
allocated up front so that a full disk can never fault a write into the
mapping)::

    slots   capacity x 128 bytes     slot of ticket n at (n % capacity) * 128
    header  4096 bytes               magic, version, slot size, capacity,
                                     stored_upto, then the writer's identity
                                     as JSON (run, host, pid, attempt, store)

Slot (little-endian; the ticket is the event's sequence number, first and
last so a torn slot, a process killed mid-write, is told from a whole one)::

    Q ticket  H code (kind | flags << 8)  H parts  I extra length
    d time  q step  d write time  q process index  72s extra  Q ticket

An extra payload (strict JSON) longer than 72 bytes goes into continuation
slots written before the event's own slot (each names its head ticket and
part number). Flags: the event has a step, its extra is inline or in parts,
the slot is a continuation, or it holds no event (a flush fence or a
heartbeat took the ticket). The ring is written by several threads without a
lock: each takes a ticket from one counter, so no two write one slot.

Python's ``struct.pack_into`` zeroes the slot and then writes its fields in
order, so the closing ticket is written last: a slot whose two tickets agree
is whole.
"""

from __future__ import annotations

import fcntl
import json
import logging
import mmap
import os
import stat
import struct
import uuid
from typing import Any, Dict, List, Optional, Tuple

from goodput_core.events import EventRecord
from goodput_core.stores import canonical_store_url

__all__ = ["Journal", "JournalOrphan", "journal_paths", "live_journals", "default_spill_dir",
           "tag_of", "SPILL_DIR_ENV", "SLOT", "HEADER",
           "HAS_STEP", "EXTRA_INLINE", "EXTRA_PARTS", "CONT", "SKIP", "INLINE_BYTES",
           "DEFAULT_CAPACITY"]

logger = logging.getLogger("goodput")

SLOT = 128
HEADER = 4096
INLINE_BYTES = 72
PART_BYTES = 96
#: Ring slots per journal (2 MiB): at most this many events wait for the writer
#: before more wait in memory only (``stats()["overflowed"]``).
DEFAULT_CAPACITY = 16_384
_MAGIC = b"GPJOURN1"
_VERSION = 1
SUFFIX = ".journal"

# flags (code >> 8)
HAS_STEP, EXTRA_INLINE, EXTRA_PARTS, CONT, SKIP = 1, 2, 4, 8, 16

#: An event without extra: ticket, code, time, step, write time, process index, ticket.
PLAIN = struct.Struct("<QH6xdqdq72xQ")
#: Two plain events in consecutive slots, written by one call (a span's start
#: and end: record/hot_calls.py).
PLAIN_PAIR = struct.Struct("<" + PLAIN.format[1:] * 2)
#: Three: a load's input stall and the next step's start (record/hot_calls.py).
PLAIN_TRIPLE = struct.Struct("<" + PLAIN.format[1:] * 3)
#: An event with its extra inline: + extra length and bytes.
INLINE = struct.Struct("<QH2xIdqdq72sQ")
#: An event whose extra lies in continuation slots: + parts, total length.
PARTS = struct.Struct("<QHHIdqdq72xQ")
#: A continuation: ticket, code, part number, its length, head ticket, bytes, ticket.
PART = struct.Struct("<QHHIQ96sQ")
#: A slot holding no event (a fence's or a heartbeat's ticket).
NOTHING = struct.Struct("<QH110xQ")
#: Reading: the fields of a whole slot as an event.
_READ = struct.Struct("<QHHIdqdq72sQ")
_TICKET = struct.Struct("<Q")
_HEAD = struct.Struct("<8sIIQQ")  # magic, version, slot size, capacity, stored_upto
_UPTO_AT = 24
_IDENTITY_AT = 40  # u32 length, then JSON
_MAX_TICKET = 2 ** 62
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux's value
try:  # the built-in SHA-1: hashlib loads OpenSSL, milliseconds in Recorder()
    from _sha1 import sha1 as _sha1
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import sha1 as _sha1


SPILL_DIR_ENV = "GOODPUT_SPILL_DIR"


def default_spill_dir() -> str:
    """``$GOODPUT_SPILL_DIR``, else ``$XDG_DATA_HOME/goodput/spill``: the recorder's
    spill files and journals."""
    env = os.environ.get(SPILL_DIR_ENV)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(base, "goodput", "spill")


def tag_of(store_url: str) -> str:
    """The tag naming a store's spill files and journals (a hash of its
    canonical URL, password removed)."""
    url = canonical_store_url(store_url) if store_url else ""
    return _sha1(url.encode()).hexdigest()[:16]


def journal_paths(directory: str, tag: str) -> List[str]:
    """The journals of the store ``tag`` in ``directory``, oldest first."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    paths = [os.path.join(directory, n) for n in names
             if n.startswith(tag + ".") and n.endswith(SUFFIX)]

    def mtime(path: str) -> float:
        try:
            return os.stat(path, follow_symlinks=False).st_mtime
        except OSError:
            return 0.0
    return sorted(paths, key=mtime)


class Journal:
    """This writer's journal (the owner's side: write slots, record progress).

    Args:
      directory: the spill directory (checked private, created 0700).
      tag: the store's tag (names the file, as spill files are named).
      capacity: ring slots.
      identity: run, host, pid, attempt and store (redacted URL) of the writer.

    Raises:
      OSError: the file cannot be made (directory refused, disk full, no mmap).
    """

    def __init__(self, directory: str, tag: str, capacity: int, identity: Dict[str, Any]):
        # lazy: the spill buffer's module, off import goodput_core
        from goodput_core.stores.spill_buffer import private_dir

        private_dir(directory)
        self.capacity = int(capacity)
        text = json.dumps(identity, separators=(",", ":")).encode()
        if len(text) > HEADER - _IDENTITY_AT - 4:
            raise OSError(f"the writer's identity does not fit a journal header "
                          f"({len(text)} bytes)")
        self.path = os.path.join(directory, f"{tag}.{os.getpid()}.{uuid.uuid4().hex[:12]}"
                                            f"{SUFFIX}")
        self.size = self.capacity * SLOT + HEADER
        new = self.path + ".new"  # not a journal name until whole: no adopter sees it early
        fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.posix_fallocate(fd, 0, self.size)  # a write into the map never meets a full disk
            self.base = self.capacity * SLOT
            # written, not mapped: no page fault here (the writer thread maps the
            # pages in ahead of the recording calls, prefault())
            os.pwrite(fd, _HEAD.pack(_MAGIC, _VERSION, SLOT, self.capacity, 0) + bytes(
                _IDENTITY_AT - _HEAD.size) + struct.pack("<I", len(text)) + text, self.base)
            mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            os.rename(new, self.path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(new)
            except OSError:
                pass
            raise
        self.fd = fd
        self.mm = mm
        self.stored_upto = 0
        self.released = False

    def prefault(self) -> None:
        """Maps every page in for writing (the writer thread calls it once), so
        that no ``record_*`` call waits for the file system on its first lap of
        the ring (``MADV_POPULATE_WRITE``, Linux 5.14+; elsewhere nothing)."""
        try:
            self.mm.madvise(_MADV_POPULATE_WRITE)
        except (AttributeError, OSError, ValueError):
            pass

    def set_stored_upto(self, ticket: int) -> None:
        """Everything up to ``ticket`` is stored (or kept elsewhere): not adopted again."""
        if ticket > self.stored_upto:
            _TICKET.pack_into(self.mm, self.base + _UPTO_AT, ticket)
            self.stored_upto = ticket

    def release(self, empty: bool = False) -> bool:
        """Deletes the file when nothing in it waits (``empty``: the caller knows),
        else leaves it for an adopter (unlocked). The mapping stays (a late
        ``record_*`` must not fail).

        Returns:
          True when the file was deleted.
        """
        if self.released:
            return True
        self.released = True
        if not empty:
            try:
                empty = not self.pending_tickets()
            except (ValueError, OSError):
                empty = False
        if empty:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        try:
            # the lock belongs to the open file, which the map's own descriptor
            # shares: unlocked explicitly, so an adopter may take what is left
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
        except OSError:
            pass
        if not empty:
            try:
                self.mm.flush()  # not needed for a SIGKILL; the file is left for later
            except (ValueError, OSError):
                pass
        return empty

    def drop_in_forked_child(self) -> None:
        """In a forked child: unmaps the parent's journal and closes its
        descriptors here (the parent keeps its lock and its file). A journal
        the parent had released already is left alone: its descriptor number
        may belong to another file by now (a pipe the child writes to)."""
        if self.released:
            return
        try:
            self.mm.close()
        except (ValueError, BufferError, OSError):
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.released = True

    def pending_tickets(self) -> List[int]:
        """Tickets of whole event slots past ``stored_upto`` (for release)."""
        out = []
        mm, upto = self.mm, self.stored_upto
        for i in range(self.capacity):
            ticket = _TICKET.unpack_from(mm, i * SLOT)[0]
            if ticket > upto and _TICKET.unpack_from(mm, i * SLOT + SLOT - 8)[0] == ticket:
                flags = struct.unpack_from("<H", mm, i * SLOT + 8)[0] >> 8
                if not flags & (SKIP | CONT):
                    out.append(ticket)
        return out


def decode_extra(data: bytes) -> Optional[dict]:
    """An extra payload read back (None: not a JSON object)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def event_of(fields: tuple, extra: Optional[dict], ident: Tuple[str, str, int, str]
             ) -> EventRecord:
    """An EventRecord from a slot's fields (``_READ`` order) and the writer's identity."""
    ticket, code, _, _, t, step, wt, pidx = fields[:8]
    run, host, pid, attempt = ident
    return EventRecord(run, code & 0xFF, t, step if (code >> 8) & HAS_STEP else None, extra,
                       pidx, host, pid, attempt, ticket, wt)


class JournalOrphan:
    """A journal left by a dead writer, adopted: its undelivered events, in order.

    The interface the recorder's outbox reads orphans through (as spill
    files): ``unread``, ``read(n)``, ``read_pos``, ``save_progress()``,
    ``close(delete)``, ``bad_lines``.

    Raises:
      OSError: a live writer (or another adopter) holds it, it vanished, it is
        not a regular file of ours, or it is not a journal (``ValueError``
        inside: set aside by the caller).
    """

    def __init__(self, path: str):
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            st = os.fstat(fd)
            if st.st_nlink == 0:  # delivered and deleted between our open and our lock
                raise FileNotFoundError(path)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or \
                    st.st_mode & 0o022:
                raise PermissionError(f"{path} is not a private file of this user")
            self.fd = fd
            self._parse(os.pread(fd, st.st_size, 0) if st.st_size else b"")
        except BaseException:
            os.close(fd)
            raise
        self.read_pos = 0
        self.bad_lines = 0

    def _parse(self, data: bytes) -> None:
        if len(data) < HEADER + SLOT:
            raise BadJournal(f"{self.path}: too short for a journal")
        base = len(data) - HEADER
        magic, version, slot, capacity, upto = _HEAD.unpack_from(data, base)
        if magic != _MAGIC or version != _VERSION or slot != SLOT or \
                capacity * SLOT != base or upto > _MAX_TICKET:
            raise BadJournal(f"{self.path}: not a goodput journal of this version")
        (n,) = struct.unpack_from("<I", data, base + _IDENTITY_AT)
        try:
            ident = json.loads(data[base + _IDENTITY_AT + 4:base + _IDENTITY_AT + 4 + n])
            who = (ident["run"], ident["host"], int(ident["pid"]), ident["attempt"])
            if not all(isinstance(x, str) for x in (who[0], who[1], who[3])) or not who[0]:
                raise ValueError(who)
        except (ValueError, KeyError, TypeError) as exc:
            raise BadJournal(f"{self.path}: unreadable writer identity ({exc})") from None
        self.identity = ident
        self.base = base
        self.stored_upto = upto
        heads, parts = [], {}
        for i, fields in enumerate(_READ.iter_unpack(data[:base])):
            ticket = fields[0]
            if ticket <= upto or ticket != fields[-1] or ticket % capacity != i or \
                    ticket > _MAX_TICKET:
                continue  # stored, never written, or torn (its call never returned)
            flags = fields[1] >> 8
            if flags & SKIP:
                continue
            if flags & CONT:
                _, _, part, length, head, chunk, _ = PART.unpack_from(data, i * SLOT)
                parts[(head, part)] = chunk[:min(length, PART_BYTES)]
                continue
            heads.append(fields)
        heads.sort(key=lambda f: f[0])
        events: List[Optional[EventRecord]] = []
        for fields in heads:
            _, code, nparts, xlen, t, step, wt, pidx, inline, _ = fields
            flags = code >> 8
            extra = None
            if flags & EXTRA_INLINE:
                extra = decode_extra(inline[:min(xlen, INLINE_BYTES)])
            elif flags & EXTRA_PARTS:
                chunks = [parts.get((fields[0], k)) for k in range(nparts)]
                extra = None if any(c is None for c in chunks) else \
                    decode_extra(b"".join(chunks)[:xlen])
            if flags & (EXTRA_INLINE | EXTRA_PARTS) and extra is None:
                events.append(None)  # a damaged payload: counted, set aside
                continue
            events.append(event_of(fields, extra, who))
        self._events = events
        self.unread = len(events)

    def read(self, n: int) -> List[Any]:
        """Up to ``n`` events after the read position (None for a damaged one)."""
        out = self._events[self.read_pos:self.read_pos + n]
        self.read_pos += len(out)
        self.unread = len(self._events) - self.read_pos
        return out

    def save_progress(self) -> None:
        """Records in the header that the events read so far were delivered."""
        done = [e for e in self._events[:self.read_pos] if e is not None]
        if done:
            upto = max(self.stored_upto, done[-1].seq)
            os.pwrite(self.fd, _TICKET.pack(upto), self.base + _UPTO_AT)
            self.stored_upto = upto

    def reset(self) -> None:  # the outbox resets only its own file
        raise NotImplementedError

    def close(self, delete: bool) -> None:
        if delete:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os.close(self.fd)  # releases the lock


class BadJournal(ValueError):
    """A file named like a journal that is not one (damaged or foreign)."""


def live_journals(directory: str, tag: str) -> List[Dict[str, Any]]:
    """The identities of the live writers (this host) with a journal for ``tag``:
    journals whose lock is held. Used to refuse deleting a run being recorded."""
    out = []
    for path in journal_paths(directory, tag):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                continue  # nobody holds it: an orphan, not a live writer
            except OSError:
                pass
            size = os.fstat(fd).st_size
            if size < HEADER + SLOT:
                continue
            head = os.pread(fd, HEADER, size - HEADER)
            (n,) = struct.unpack_from("<I", head, _IDENTITY_AT)
            try:
                ident = json.loads(head[_IDENTITY_AT + 4:_IDENTITY_AT + 4 + n])
            except ValueError:
                continue
            if isinstance(ident, dict):
                ident["path"] = path
                out.append(ident)
        finally:
            os.close(fd)
    return out

