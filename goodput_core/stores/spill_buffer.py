"""The send buffer of the stores that deliver from a thread of their own (Cloud
Logging, PostgreSQL): bounded memory, then a local JSONL file.

While the service is unreachable the store keeps accepting events. The first
``max_memory`` pending entries stay in memory; beyond that, new entries are
appended to a per-process *spill file* (one JSON object per line) and read
back, in order, once the service answers again. So memory stays bounded
however long the outage lasts, and a process that exits (or is killed)
during an outage leaves its spill file behind: the next store opened on the
same destination (the ``tag``: :func:`spill_tag` of a Cloud Logging project
and log, of a PostgreSQL database and schema) *adopts* it and delivers it first.
Entries carry ids the destination deduplicates on, so replaying a file whose
entries were partly delivered duplicates nothing (Cloud Logging drops entries
with the same ``insertId`` and timestamp; PostgreSQL keeps one row per
writer id and sequence number). The recorder's own spill file
(:mod:`goodput_core.record.spill`) reuses :class:`SpillFile` and the adoption.

Each live spill file is locked with ``flock``; a file nobody holds is an
orphan. Files are created ``0600`` in a ``0700`` directory (the default is the
per-user cache dir). Data is JSON only; nothing is unpickled or evaluated.
Lines are flushed to the OS after every write (they survive the process being
killed, not a power loss).
"""

from __future__ import annotations

import collections
import fcntl
import json
import logging
import os
import stat
import threading
import uuid
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

__all__ = ["SpillBuffer", "SpillFile", "SpillDirRefused", "adopt_files", "default_spill_dir",
           "new_spill_file", "private_dir", "spill_paths", "spill_tag"]

logger = logging.getLogger("goodput")

Entry = Dict[str, Any]  # {"p": payload, "l": labels, "i": insert id, "t": [sec, nanos]}
_CHUNK = 10_000


def default_spill_dir() -> str:
    """``$XDG_CACHE_HOME/goodput/cloud-logging-spill`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return os.path.join(base, "goodput", "cloud-logging-spill")


class SpillDirRefused(OSError):
    """A spill directory another user could read or plant files in (the message says why)."""


def private_dir(directory: str) -> str:
    """Makes ``directory`` (``0700``) when missing and checks that it is ours alone.

    Spill files hold events that are delivered into the store later: a
    directory another user owns or may write (or a symlink to one) would
    let that user read them or plant events of their own, delivered as ours.

    Returns:
      ``directory``.

    Raises:
      SpillDirRefused: another user owns it (or the symlink naming it), others
        may write it, or it is not a directory.
      OSError: it cannot be created.
    """
    os.makedirs(directory, mode=0o700, exist_ok=True)
    link = os.lstat(directory)
    st = os.stat(directory)  # the directory a symlink leads to
    uid = os.geteuid()
    why = None
    if not stat.S_ISDIR(st.st_mode):
        why = "it is not a directory"
    elif st.st_uid != uid or link.st_uid != uid:
        why = f"it is owned by another user (uid {st.st_uid if st.st_uid != uid else link.st_uid})"
    elif st.st_mode & 0o022:
        why = f"other users may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    if why is not None:
        raise SpillDirRefused(f"refused the spill directory {directory}: {why}; make it yours "
                              f"and 0700, or set GOODPUT_SPILL_DIR to a private directory")
    return directory


def spill_tag(project: str, log_name: str) -> str:
    """A file-name-safe tag naming one destination: a (project, log) pair of
    Cloud Logging, a (database, schema) of PostgreSQL."""
    import hashlib  # not at import: OpenSSL takes milliseconds to load

    return hashlib.sha1(f"{project}\0{log_name}".encode()).hexdigest()[:16]


class SpillFile:
    """One locked JSONL file, appended at its end and read from an offset.

    Appends go straight to the file descriptor (no Python buffer, so a failed
    write can be cut off cleanly); reads use a separate buffered handle.
    A file whose owner calls :meth:`save_progress` keeps its read offset in a
    ``.pos`` file beside it, so a process that adopts it later starts after
    what was already delivered (stores without idempotent inserts need that).
    """

    def __init__(self, path: str, adopt: bool = False, required: Tuple[str, ...] = ("p", "i")):
        self.path = path
        self._required = required
        flags = os.O_RDWR | os.O_NOFOLLOW | (0 if adopt else os.O_CREAT | os.O_EXCL)
        fd = os.open(path, flags, 0o600)
        try:
            # Non-blocking: a file another live store holds is not an orphan.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if adopt and os.fstat(fd).st_nlink == 0:
                # Its adopter delivered and deleted it between our open and our
                # lock: taking it now would deliver it again.
                raise FileNotFoundError(path)
            self._reader = open(path, "rb")
        except OSError:
            os.close(fd)
            raise
        self.fd = fd
        self.read_pos = 0
        self.unread = 0
        self.bad_lines = 0
        if adopt:
            self.read_pos = _saved_progress(path, fd)
            self._reader.seek(self.read_pos)
            self.unread = sum(1 for line in self._reader if line.strip())

    def write(self, entries: List[Entry]) -> None:
        if not entries:
            return
        data = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in entries)
        end = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:
            # Disk full: cut the partial lines off, or reads would count them.
            os.ftruncate(self.fd, end)
            raise
        self.unread += len(entries)

    def read(self, n: int) -> List[Entry]:
        """Returns up to ``n`` entries after the read offset and moves past them."""
        out: List[Entry] = []
        self._reader.seek(self.read_pos)  # also drops stale read-ahead
        while len(out) < n and self.unread > 0:
            line = self._reader.readline()
            if not line:
                self.unread = 0
                break
            self.read_pos = self._reader.tell()
            if not line.strip():
                continue
            self.unread -= 1
            try:
                entry = json.loads(line)
            except ValueError:
                entry = None
            if not isinstance(entry, dict) or any(k not in entry for k in self._required):
                self.bad_lines += 1  # e.g. a line cut short by a crash
                continue
            out.append(entry)
        return out

    def reset(self) -> None:
        """Empties the file once everything in it was read and delivered."""
        os.ftruncate(self.fd, 0)
        self.read_pos = self.unread = 0

    def save_progress(self) -> None:
        """Records the read offset beside the file (``PATH.pos``, written in place)."""
        pos = self.path + ".pos"
        fd = os.open(pos, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.pwrite(fd, b"%020d\n" % self.read_pos, 0)
        finally:
            os.close(fd)

    def close(self, delete: bool) -> None:
        if delete:
            for path in (self.path, self.path + ".pos"):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        self._reader.close()
        os.close(self.fd)  # releases the lock


class SpillBuffer:
    """A FIFO of prepared log entries: memory first, a spill file beyond.

    Thread-safe. The consumer looks at the head with :meth:`peek` and removes
    it with :meth:`commit` only after delivery, so a failed send keeps its
    entries at the head, in order.

    Args:
      directory: where spill files live (created ``0700`` when missing).
      tag: names this store's (project, log) pair in file names
        (:func:`spill_tag`); orphans with the same tag are adopted.
      max_memory: entries held in memory at most; further ones are spilled.
      required: keys every entry read back from a file must have; a line
        without them (e.g. cut short by a crash) is skipped and counted.
    """

    def __init__(self, directory: str, tag: str, max_memory: int,
                 required: Tuple[str, ...] = ("p", "i")):
        if max_memory < 1:
            raise ValueError("max_buffer must be >= 1")
        self.directory = directory
        self.tag = tag
        self.max_memory = int(max_memory)
        self._required = required
        self._lock = threading.Lock()
        self._mem: Deque[Entry] = collections.deque()
        self._orphans: Deque[SpillFile] = collections.deque()
        self._orphan_head: List[Entry] = []  # read ahead from the first orphan
        self._own: Optional[SpillFile] = None
        self._peeked_from = None
        self.spilled_total = 0
        self.max_in_memory = 0
        self.adopted = 0
        self.bad_lines = 0  # of files already finished

    # ------------------------------------------------------------ files
    def adopt_orphans(self) -> int:
        """Queues the spill files left by dead processes for this tag, oldest first.

        Returns:
          The number of entries adopted.
        """
        with self._lock:
            held = {self._own.path} if self._own is not None else set()
            count = adopt_files(self._orphans, self.directory, self.tag, held, self._required)
            self.adopted += count
        if count:
            logger.warning("goodput: replaying %d unsent entries left in %s by an "
                           "earlier process", count, self.directory)
        return count

    def _own_file(self) -> SpillFile:
        if self._own is None:
            self._own = new_spill_file(self.directory, self.tag, self._required)
        return self._own

    # ------------------------------------------------------------ queue
    def __len__(self) -> int:
        with self._lock:
            return self._pending_locked()

    def _pending_locked(self) -> int:
        n = len(self._mem) + len(self._orphan_head)
        n += sum(o.unread for o in self._orphans)
        if self._own is not None:
            n += self._own.unread
        return n

    def in_memory(self) -> int:
        """Entries held in memory now (the bounded part)."""
        with self._lock:
            return len(self._mem) + len(self._orphan_head)

    def on_disk(self) -> int:
        """Entries waiting in spill files now."""
        with self._lock:
            return self._pending_locked() - len(self._mem) - len(self._orphan_head)

    def put(self, entries: List[Entry]) -> None:
        """Appends entries at the tail (memory while there is room, else the file).

        Raises:
          OSError: the spill file cannot be written (disk full, no permission).
        """
        with self._lock:
            own_backlog = self._own is not None and self._own.unread > 0
            room = 0 if own_backlog else max(0, self.max_memory - len(self._mem))
            # Once anything is on disk, newer entries go to disk too: order is
            # kept. The file is written first so that a failed write changes nothing.
            rest = entries[room:]
            if rest:
                self._own_file().write(rest)
                self.spilled_total += len(rest)
            self._mem.extend(entries[:room])
            self.max_in_memory = max(self.max_in_memory, len(self._mem))

    def peek(self, n: int) -> List[Entry]:
        """Returns (without removing) up to ``n`` entries at the head."""
        with self._lock:
            while self._orphans and not self._orphan_head:
                first = self._orphans[0]
                self._orphan_head = first.read(n)
                if not self._orphan_head and first.unread == 0:
                    self._drop_first_orphan()
            if self._orphan_head:
                self._peeked_from = "orphan"
                return self._orphan_head[:n]
            if not self._mem and self._own is not None and self._own.unread:
                # Refill memory from this process's own spill, in order.
                self._mem.extend(self._own.read(self.max_memory))
                if self._own.unread == 0:
                    self._own.reset()
            self._peeked_from = "mem"
            return list(_take(self._mem, n))

    def _drop_first_orphan(self) -> None:
        orphan = self._orphans.popleft()
        self.bad_lines += orphan.bad_lines
        orphan.close(delete=True)

    def commit(self, n: int) -> None:
        """Removes the ``n`` head entries returned by the last :meth:`peek`."""
        with self._lock:
            if self._peeked_from == "orphan":
                del self._orphan_head[:n]
                if not self._orphan_head and self._orphans and self._orphans[0].unread == 0:
                    self._drop_first_orphan()
            else:
                for _ in range(min(n, len(self._mem))):
                    self._mem.popleft()

    def close(self) -> Optional[str]:
        """Releases the files; pending entries are persisted for a later process.

        Returns:
          The path of the file left with the undelivered entries, or None.
        """
        with self._lock:
            left = None
            if self._pending_locked():
                # Streamed in chunks (a long outage may have spilled millions of
                # entries). Written before the old files are deleted: a crash in
                # between duplicates entries on disk, which insert ids make harmless.
                spill = new_spill_file(self.directory, self.tag, self._required)
                spill.write(self._orphan_head)
                for orphan in self._orphans:
                    _copy(orphan, spill)
                spill.write(list(self._mem))
                if self._own is not None:
                    _copy(self._own, spill)
                os.fsync(spill.fd)
                left = spill.path
                spill.close(delete=False)
            for orphan in self._orphans:
                orphan.close(delete=True)
            if self._own is not None:
                self._own.close(delete=True)
            self._orphans.clear()
            self._orphan_head = []
            self._mem.clear()
            self._own = None
            return left

    def stats(self) -> Dict[str, int]:
        """Counters for :meth:`CloudLoggingStore.stats`."""
        with self._lock:
            pending = self._pending_locked()
            memory = len(self._mem) + len(self._orphan_head)
            bad = self.bad_lines + sum(o.bad_lines for o in self._orphans)
            if self._own is not None:
                bad += self._own.bad_lines
            return {"pending": pending, "in_memory": memory, "on_disk": pending - memory,
                    "max_in_memory": self.max_in_memory, "spilled_total": self.spilled_total,
                    "adopted": self.adopted, "spill_bad_lines": bad}


def _copy(source: SpillFile, dest: SpillFile) -> None:
    while source.unread:
        chunk = source.read(_CHUNK)
        if not chunk:
            return
        dest.write(chunk)


def _take(queue: Deque[Entry], n: int):
    for i, item in enumerate(queue):
        if i >= n:
            return
        yield item


def new_spill_file(directory: str, tag: str, required: Tuple[str, ...]) -> SpillFile:
    """A new file of this process for ``tag`` (``TAG.PID.RANDOM.jsonl``, locked, 0600),
    its directory made 0700 when missing.

    Raises:
      SpillDirRefused: the directory is not private (:func:`private_dir`).
    """
    private_dir(directory)
    name = f"{tag}.{os.getpid()}.{uuid.uuid4().hex[:12]}.jsonl"
    return SpillFile(os.path.join(directory, name), required=required)


def adopt_files(into: Deque[SpillFile], directory: str, tag: str, held: Set[str],
                required: Tuple[str, ...], keep_empty: bool = True) -> int:
    """Appends to ``into`` the spill files of ``tag`` that no live process holds,
    oldest first, now locked by the caller (the paths in ``held`` are the
    caller's own: skipped); where a previous owner saved its progress, reading
    resumes after it. Without ``keep_empty``, a file with nothing left to read
    is deleted instead.

    Returns:
      The number of entries adopted.

    Raises:
      SpillDirRefused: the directory exists but is not private (:func:`private_dir`):
        nothing planted there is delivered.
    """
    count = 0
    if os.path.lexists(directory):
        private_dir(directory)
    for path in spill_paths(directory, tag):
        if path in held:
            continue
        try:
            spill = SpillFile(path, adopt=True, required=required)
        except OSError:
            continue  # a live process holds it (or it vanished)
        if not keep_empty and not spill.unread:
            spill.close(delete=True)
            continue
        into.append(spill)
        count += spill.unread
    return count


def spill_paths(directory: str, tag: str) -> List[str]:
    """The spill files of ``tag`` in ``directory``, oldest first (none when it is missing)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    paths = [os.path.join(directory, n) for n in names
             if n.startswith(tag + ".") and n.endswith(".jsonl")]
    paths.sort(key=_mtime)
    return paths


def _saved_progress(path: str, fd: int) -> int:
    """The read offset a previous owner saved for ``path`` (0 when none).

    An offset that does not fit the file (past its end, or not at the start
    of a line: a damaged or planted ``.pos``) is ignored: the file is read
    from its start, which the stores' idempotent inserts make safe (an event
    delivered before is stored once), instead of skipping undelivered lines.
    """
    try:
        pos_fd = os.open(path + ".pos", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        text = os.read(pos_fd, 64).strip()
    finally:
        os.close(pos_fd)
    pos = int(text) if text.isdigit() else 0
    if pos and (pos > os.fstat(fd).st_size or os.pread(fd, 1, pos - 1) != b"\n"):
        logger.warning("goodput: ignored the delivery offset %d of %s (it does not fit the "
                       "file); delivering it from its start (stored events are not stored "
                       "twice)", pos, path)
        return 0
    return pos


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
