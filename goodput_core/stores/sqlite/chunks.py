"""Packed chunks of the sqlite store, and reading events as columns.

Writers append one row per event to ``events`` (cheap, crash-safe, any
number of processes). Once a run has :data:`CHUNK_EVENTS` rows there, the
writer that noticed moves the oldest of them, in one transaction, into one
``chunks`` row holding the columns packed as little-endian arrays; a batch of
at least :data:`PACK_AT_ONCE` events of one run is written as a chunk straight
away (:mod:`goodput_core.stores.sqlite.packed`, faster than rows)::

    chunks (first_id INTEGER PRIMARY KEY,  -- id of its first event
            last_id, run_id, n,            -- id of its last event, run, count
            cols BLOB,                     -- ids, kinds, times, steps, writers,
                                           --   sequence numbers, write times
            extra TEXT,                    -- JSON [[offset, extra text], ...]
            odd TEXT)                      -- JSON [[reason, id, row], ...]

Events keep their ids (the newest row of ``events`` is never moved, so
SQLite never hands out an id again), so a reader's cursor (the last id it saw) means the
same before and after a compaction, and a chunk always holds a prefix of its
run's events (every id in ``chunks`` is below every id of the run still in
``events``). A reader takes chunks and rows in one read transaction (one
snapshot), so a compaction between its two queries cannot hide events.
Reading a million events is then ~120 blob reads and ``numpy.frombuffer``
instead of a million row tuples.

Rows whose values do not have the stored types (a hand-edited or damaged
file: a kind that is not a known code, a text step, an ``extra`` that is not
a JSON object...) are *corrupt*: readers skip and count them per reason
(:data:`CORRUPT_REASONS`), and a compaction keeps them verbatim in ``odd``
so that nothing a user wrote is ever dropped by the store itself.
"""

from __future__ import annotations

import collections
import json
import math
import sqlite3
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.events import EventRecord, Kind
from goodput_core.stores.base import StoreError
from goodput_core.stores.columns import EventPage, joined_rows_of

__all__ = ["SCHEMA", "CHUNK_EVENTS", "CORRUPT_REASONS", "Raw", "read_raw", "compact",
           "insert_chunk", "run_rows", "from_rows", "has_chunks"]

CHUNK_EVENTS = 8192
PACK_AT_ONCE = 1000  # a batch of one run this large is packed as it is written
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS chunks (first_id INTEGER PRIMARY KEY,"
    " last_id INTEGER NOT NULL, run_id INTEGER NOT NULL, n INTEGER NOT NULL,"
    " cols BLOB NOT NULL, extra TEXT, odd TEXT)",
    "CREATE INDEX IF NOT EXISTS chunks_run ON chunks (run_id, last_id)",
)
CORRUPT_REASONS = ("corrupt_kind", "corrupt_time", "corrupt_step", "corrupt_extra",
                   "corrupt_writer", "corrupt_chunk")
ROW_COLUMNS = "id, kind, time, step, extra, writer_id, seq, write_time"
_LAYOUT = (("id", "<i8"), ("kind", "<u1"), ("time", "<f8"), ("step", "<i8"),
           ("has_step", "<u1"), ("writer", "<i4"), ("seq", "<i8"), ("wt", "<f8"))
ENGINE_COLUMNS = ("id", "kind", "time", "step", "has_step", "writer", "wt")
# what a read with each row's writer needs (the cursor is kept apart)
WRITER_COLUMNS = ("kind", "time", "step", "has_step", "writer", "seq", "wt")
_ROW_BYTES = sum(np.dtype(d).itemsize for _, d in _LAYOUT)
_KNOWN_KINDS = np.array(sorted(int(k) for k in Kind), np.int64)
KNOWN_LUT = np.zeros(256, bool)  # kind codes are one byte in a chunk: known ones True
KNOWN_LUT[_KNOWN_KINDS] = True
I32 = 2 ** 31  # writer ids are int32 in a chunk


class Raw:
    """Events as columns with their ids and writer ids (one read's result)."""

    __slots__ = ("id", "kind", "time", "step", "has_step", "writer", "seq", "wt", "extra",
                 "corrupt")

    def __init__(self, cols: Dict[str, np.ndarray], extra: Dict[int, str],
                 corrupt: Optional[collections.Counter] = None):
        for name, _ in _LAYOUT:
            setattr(self, name, cols.get(name))
        self.extra = extra
        self.corrupt = corrupt if corrupt is not None else collections.Counter()

    def __len__(self) -> int:
        return len(self.kind)

    def cols(self) -> Dict[str, np.ndarray]:
        return {name: getattr(self, name) for name, _ in _LAYOUT
                if getattr(self, name) is not None}

    def sliced(self, a: int, b: int) -> "Raw":
        extra = {i - a: x for i, x in self.extra.items() if a <= i < b}
        return Raw({k: v[a:b] for k, v in self.cols().items()}, extra, self.corrupt)

    @staticmethod
    def join(parts: Sequence["Raw"], names: Sequence[str] = ()) -> "Raw":
        """One Raw of the parts, with only the columns ``names`` (all: empty)."""
        if len(parts) == 1:
            return parts[0]
        extra, corrupt = joined_rows_of(parts)
        cols = {name: np.concatenate([getattr(p, name) for p in parts])
                for name, _ in _LAYOUT if not names or name in names}
        return Raw(cols, extra, corrupt)

    # ----------------------------------------------------------- conversions
    def parsed_extras(self, share: bool = False) -> Tuple[Dict[int, Dict[str, Any]], np.ndarray]:
        """``({index: extra dict}, keep mask)``: an extra that is not a JSON
        object makes its row corrupt (counted, and False in the mask).
        ``share``: rows with the same text get the same dict, parsed once
        (for the engine, which only reads them: a run repeats a few custom
        badput types thousands of times)."""
        out: Dict[int, Dict[str, Any]] = {}
        keep = np.ones(len(self), bool)
        loads = json.loads
        parsed: Dict[str, Any] = {}
        for i, text in self.extra.items():
            value = parsed.get(text) if share else None
            if value is None:
                try:
                    value = loads(text)
                except (ValueError, RecursionError):
                    value = None
                if share:
                    parsed[text] = value
            if isinstance(value, dict):
                out[i] = value
            else:
                keep[i] = False
                self.corrupt["corrupt_extra"] += 1
        return out, keep

    def page(self, run: str, with_writers: bool = False) -> EventPage:
        """The columns the engine reads (corrupt extras dropped and counted;
        rows with the same extra text share its parsed dict); ``with_writers``:
        also each row's writer id and sequence number."""
        extra, keep = self.parsed_extras(share=True)
        has_step = self.has_step.astype(bool)
        if not keep.all():
            where = np.cumsum(keep) - 1
            extra = {int(where[i]): x for i, x in extra.items()}
            page = EventPage(run, self.kind[keep].astype(np.int64), self.time[keep],
                             self.step[keep], has_step[keep], self.wt[keep], extra,
                             dict(self.corrupt))
        else:
            keep = slice(None)
            page = EventPage(run, self.kind.astype(np.int64), self.time, self.step, has_step,
                             self.wt, extra, dict(self.corrupt))
        if with_writers:
            page.writer = self.writer[keep].astype(np.int32, copy=False)
            page.seq = self.seq[keep].astype(np.int64, copy=False)
        return page

    def records(self, run: str, writers) -> List[EventRecord]:
        """EventRecords (``writers``: writer id -> (process_index, host, pid, attempt))."""
        extra, keep = self.parsed_extras()
        new, ER, get = tuple.__new__, EventRecord, extra.get
        steps = [s if h else None for s, h in zip(self.step.tolist(), self.has_step.tolist())]
        idx = range(len(self)) if keep.all() else np.flatnonzero(keep).tolist()
        kinds, times, ws, seqs, wts = (self.kind.tolist(), self.time.tolist(),
                                       self.writer.tolist(), self.seq.tolist(),
                                       self.wt.tolist())
        return [new(ER, (run, kinds[i], times[i], steps[i],
                         get(i)) + writers[ws[i]] + (seqs[i], wts[i])) for i in idx]


# ------------------------------------------------------------------ rows -> columns
def _row_reason(row: tuple) -> Optional[str]:
    """Why a stored row is corrupt, or None (row: ROW_COLUMNS order)."""
    _, kind, t, step, extra, writer, seq, wt = row
    if type(kind) is not int or kind not in _KNOWN_SET:
        return "corrupt_kind"
    if t is not None and type(t) not in (float, int):
        return "corrupt_time"
    if step is not None and type(step) is not int:
        return "corrupt_step"
    if extra is not None and type(extra) is not str:
        return "corrupt_extra"
    if (type(writer) is not int or not -I32 <= writer < I32 or type(seq) is not int
            or (wt is not None and type(wt) not in (float, int))):
        return "corrupt_writer"
    return None


_KNOWN_SET = frozenset(_KNOWN_KINDS.tolist())
_TIME_TYPES = {float, int, type(None)}


def from_rows(rows: List[tuple]) -> Tuple[Raw, List[Tuple[str, tuple]]]:
    """Columns of stored rows, and the corrupt rows with their reasons."""
    odd: List[Tuple[str, tuple]] = []
    if rows:
        ids, kinds, times, steps, extras, writers, seqs, wts = zip(*rows)
        clean = (set(map(type, kinds)) == {int} and _KNOWN_SET.issuperset(kinds)
                 and _TIME_TYPES.issuperset(map(type, times))
                 and {int, type(None)}.issuperset(map(type, steps))
                 and {str, type(None)}.issuperset(map(type, extras))
                 and set(map(type, writers)) == {int} and set(map(type, seqs)) == {int}
                 and _TIME_TYPES.issuperset(map(type, wts))
                 and -I32 <= min(writers) and max(writers) < I32)
        if not clean:
            good = []
            for row in rows:
                reason = _row_reason(row)
                if reason is None:
                    good.append(row)
                else:
                    odd.append((reason, row))
            return from_rows(good)[0], odd
    else:
        ids = kinds = times = steps = extras = writers = seqs = wts = ()
    cols = {
        "id": np.array(ids, np.int64), "kind": np.array(kinds, np.uint8),
        "time": np.array(times, np.float64),  # None -> NaN
        "step": np.array([0 if s is None else s for s in steps], np.int64),
        "has_step": np.array([s is not None for s in steps], np.uint8),
        "writer": np.array(writers, np.int32), "seq": np.array(seqs, np.int64),
        "wt": np.array(wts, np.float64),
    }
    extra = {i: x for i, x in enumerate(extras) if x is not None}
    return Raw(cols, extra), odd


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"blob": value.hex()}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


# ------------------------------------------------------------------ chunks
def _pack(raw: Raw) -> bytes:
    return b"".join(np.ascontiguousarray(getattr(raw, name), d).tobytes()
                    for name, d in _LAYOUT)


def _unpack(row: tuple, since: int) -> Tuple[Raw, List[Tuple[str, int]]]:
    """The events of one chunk row with an id above ``since``, and the
    ``(reason, id)`` of its corrupt rows."""
    first_id, last_id, n, blob, extra_json, odd_json = row
    corrupt: collections.Counter = collections.Counter()
    cols: Dict[str, np.ndarray] = {}
    try:
        if not isinstance(blob, bytes) or len(blob) != n * _ROW_BYTES:
            raise ValueError("size")
        offset = 0
        for name, d in _LAYOUT:
            cols[name] = np.frombuffer(blob, d, n, offset)
            offset += n * np.dtype(d).itemsize
        extra = {int(i): str(x) for i, x in json.loads(extra_json or "[]")}
        odd = json.loads(odd_json or "[]")
        bad_kind = ~KNOWN_LUT[cols["kind"]]
    except (ValueError, TypeError, RecursionError):
        corrupt["corrupt_chunk"] += max(int(n) if isinstance(n, int) else 0, 1)
        return Raw({name: np.empty(0, d) for name, d in _LAYOUT}, {}, corrupt), []
    odd_ids = [(str(e[0]), e[1]) for e in odd
               if isinstance(e, list) and len(e) == 3 and isinstance(e[1], int)]
    raw = Raw(cols, extra, corrupt)
    start = int(np.searchsorted(raw.id, since, side="right"))
    if start:
        raw = raw.sliced(start, n)
    if bad_kind[start:].any():  # a damaged blob: not one of our kinds
        keep = ~bad_kind[start:]
        corrupt["corrupt_kind"] += int((~keep).sum())
        where = np.cumsum(keep) - 1
        raw = Raw({k: v[keep] for k, v in raw.cols().items()},
                  {int(where[i]): x for i, x in raw.extra.items() if keep[i]}, corrupt)
    return raw, odd_ids


def has_chunks(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunks'"
                        ).fetchone() is not None


def insert_chunk(conn: sqlite3.Connection, run_id: int, first_id: int, last_id: int,
                 raw: Raw, odd: List[Tuple[str, tuple]]) -> None:
    """Writes one chunk row: the events of ids ``first_id .. last_id``, as
    ``raw`` (their columns) and ``odd`` (the corrupt rows among them, kept
    verbatim), as :func:`from_rows` gives them."""
    extra = json.dumps([[i, x] for i, x in raw.extra.items()]) if raw.extra else None
    odd_json = json.dumps([[reason, row[0], [_jsonable(v) for v in row]]
                           for reason, row in odd]) if odd else None
    conn.execute("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (first_id, last_id, run_id, len(raw), _pack(raw), extra, odd_json))


def run_rows(conn: sqlite3.Connection, run_id: int, below_newest: bool,
              limit: int = -1) -> List[tuple]:
    # The newest row of the table stays unless the caller writes a newer one in
    # the same transaction: SQLite gives a new row the largest id + 1, so ids
    # would restart below the chunks' without it.
    newest = " AND id < (SELECT max(id) FROM events)" if below_newest else ""
    return conn.execute(f"SELECT {ROW_COLUMNS} FROM events WHERE run_id = ?{newest}"
                        " ORDER BY id LIMIT ?", (run_id, limit)).fetchall()


def compact(conn: sqlite3.Connection, run_id: int, max_chunks: int,
            size: int = CHUNK_EVENTS) -> int:
    """Moves the oldest full chunks of a run's rows into ``chunks``, one
    transaction each; returns how many chunks were written."""
    done = 0
    while done < max_chunks:
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = run_rows(conn, run_id, True, size)
            if len(rows) < size:
                conn.execute("COMMIT")
                return done
            insert_chunk(conn, run_id, rows[0][0], rows[-1][0], *from_rows(rows))
            conn.execute("DELETE FROM events WHERE run_id = ? AND id <= ?",
                         (run_id, rows[-1][0]))
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
        done += 1
    return done


#: The store format this version reads and writes, also kept in the file's
#: header (``PRAGMA user_version``) where every read checks it: a later
#: version that changes how events are kept raises it, and a reader of this
#: version still running then fails with an error instead of reading part of
#: a run.
FORMAT_VERSION = 2


def check_format(conn: sqlite3.Connection) -> None:
    """Raises StoreError when the file was (re)written by a newer format."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > FORMAT_VERSION:
        raise StoreError(f"the store was changed to format {version} by a newer goodput "
                         f"version while this one ({FORMAT_VERSION}) read it: upgrade goodput")


def read_raw(conn: sqlite3.Connection, run_id: int, since: int, limit: int,
             engine_only: Any = False) -> Tuple[Raw, Optional[int]]:
    """Events of a run with an id above ``since``, at most ``limit`` (< 0: all),
    from chunks and rows in one snapshot; also the last id returned (None: none).
    Corrupt rows are left out and counted in ``Raw.corrupt``. ``engine_only``:
    only the columns :meth:`Raw.page` needs (True), or those named (a tuple)."""
    parts: List[Raw] = []
    got, last = 0, None
    conn.execute("BEGIN")  # one snapshot for both tables
    try:
        check_format(conn)
        if has_chunks(conn):
            cur = conn.execute("SELECT first_id, last_id, n, cols, extra, odd FROM chunks"
                               " WHERE run_id = ? AND last_id > ? ORDER BY run_id, last_id",
                               (run_id, since))
            for row in cur:
                raw, odd = _unpack(row, since)
                if 0 <= limit - got < len(raw):
                    raw = raw.sliced(0, limit - got)
                parts.append(raw)
                got += len(raw)
                last = int(raw.id[-1]) if 0 <= limit <= got else int(row[1])
                for reason, i in odd:  # counted once: only those this read passes over
                    if since < i <= last:
                        raw.corrupt[reason] += 1
                since = last
                if 0 <= limit <= got:
                    break
            cur.close()
        if limit < 0 or got < limit:
            rows = conn.execute(f"SELECT {ROW_COLUMNS} FROM events WHERE run_id = ? AND id > ?"
                                " ORDER BY id LIMIT ?",
                                (run_id, since, -1 if limit < 0 else limit - got)).fetchall()
            if rows:
                raw, odd = from_rows(rows)
                for reason, _ in odd:
                    raw.corrupt[reason] += 1
                parts.append(raw)
                last = rows[-1][0]
    finally:
        conn.execute("COMMIT")
    if not parts:
        parts.append(from_rows([])[0])
    names = engine_only if isinstance(engine_only, tuple) else \
        (ENGINE_COLUMNS if engine_only else ())
    return Raw.join(parts, names), last
