"""Ids that cannot alias in the sqlite store, and every delivery stored once.

Three rules, kept here in one place (the schema they need is additive: a file
of schema version 2 gains it at the first writer that opens it, and a reader
of an older goodput reads the file as before):

* **Run ids are never reused.** ``runs.run_id`` is ``AUTOINCREMENT`` (an
  older file's ``runs`` table is rebuilt once, ids kept): after ``goodput runs
  delete``, a new run never takes the deleted run's id, so a writer that
  still holds that id (a live process) adds its rows under an id no run has,
  never to another run.
* **Event ids are never reused.** SQLite gives a new row the largest id + 1.
  When ``runs delete`` removes the rows (or packed chunks) holding the
  largest ids, :func:`keep_ids_growing` leaves a *placeholder* row at the old
  largest id under run id 0 (no run has it: no reader sees it), so that later
  rows get larger ids: a reader's cursor never passes over them, and no
  chunk's bounds hide them.
* **Each (writer, sequence) pair is stored once.** The ``delivered`` table
  keeps, per writer, the ranges of sequence numbers stored (rows and packed
  chunks alike; a few rows per writer): :func:`keep_new`, inside the insert's
  transaction, drops the events already delivered and records the new ones.
  So a batch delivered again (a spill file or journal adopted after a crash
  between the store's commit and the saved offset) repeats nothing, as the
  PostgreSQL store's unique index does. Events without a sequence number
  (0: imported from elsewhere) are not checked.
"""

from __future__ import annotations

import sqlite3
from typing import Dict, List, Optional, Tuple

import numpy as np

__all__ = ["SCHEMA", "RUNS", "PLACEHOLDER_RUN", "needs_upgrade", "upgrade", "keep_new",
           "keep_new_columns", "id_floor", "keep_ids_growing"]

RUNS = ("CREATE TABLE IF NOT EXISTS runs (run_id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " name TEXT NOT NULL UNIQUE)")
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS delivered (writer_id INTEGER NOT NULL,"
    " lo INTEGER NOT NULL, hi INTEGER NOT NULL, PRIMARY KEY (writer_id, lo)) WITHOUT ROWID",
)
#: The run id of placeholder rows (AUTOINCREMENT ids start at 1).
PLACEHOLDER_RUN = 0
_INT64_MAX = 2 ** 63 - 1


def needs_upgrade(conn: sqlite3.Connection) -> bool:
    """True when the file lacks the ``delivered`` table or an AUTOINCREMENT ``runs``."""
    found = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                              " AND name IN ('runs', 'delivered')").fetchall())
    return "delivered" not in found or "AUTOINCREMENT" not in (found.get("runs") or "").upper()


def upgrade(conn: sqlite3.Connection) -> None:
    """Adds what the rules need (inside the caller's write transaction; idempotent)."""
    for statement in SCHEMA:
        conn.execute(statement)
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
                       ).fetchone()
    if row is None:
        conn.execute(RUNS)
    elif "AUTOINCREMENT" not in row[0].upper():
        # The runs table is small: rebuilt with its ids; sqlite_sequence then
        # starts at the largest of them.
        conn.execute(RUNS.replace("IF NOT EXISTS runs", "goodput_runs_new"))
        conn.execute("INSERT INTO goodput_runs_new (run_id, name) SELECT run_id, name FROM runs")
        conn.execute("DROP TABLE runs")
        conn.execute("ALTER TABLE goodput_runs_new RENAME TO runs")


def keep_new(conn: sqlite3.Connection, rows: List[tuple]) -> List[tuple]:
    """The rows (insert tuples: run_id, writer_id, seq, ...) whose (writer, seq)
    is not stored yet, first of each pair kept; records them as delivered.
    Runs inside the caller's write transaction."""
    seqs: Dict[int, List[int]] = {}
    for row in rows:
        if row[2] > 0:
            seqs.setdefault(row[1], []).append(row[2])
    if not seqs:
        return rows
    stored: Dict[int, set] = {}
    for writer, numbers in seqs.items():
        seen = _deliver(conn, writer, np.array(sorted(set(numbers)), np.int64))
        if len(seen):
            stored[writer] = set(seen.tolist())
    if not stored and all(len(set(v)) == len(v) for v in seqs.values()):
        return rows
    out, taken = [], set()
    for row in rows:
        seq = row[2]
        if seq > 0:
            key = (row[1], seq)
            if key in taken or seq in stored.get(row[1], ()):
                continue
            taken.add(key)
        out.append(row)
    return out


def keep_new_columns(conn: sqlite3.Connection, writer: np.ndarray,
                     seq: np.ndarray) -> Optional[np.ndarray]:
    """As :func:`keep_new`, for events as columns (each event's writer id and
    sequence number): a mask of the events to keep, or None to keep them all."""
    counted = seq > 0
    if not counted.any():
        return None
    keep = None
    one = writer[0] == writer.min() == writer.max()
    for w in ([int(writer[0])] if one else sorted(set(writer[counted].tolist()))):
        mine = counted if one else counted & (writer == w)
        numbers = seq[mine]
        distinct, first = _distinct(numbers)
        seen = _deliver(conn, w, distinct)
        if len(seen) or len(distinct) < len(numbers):
            if keep is None:
                keep = np.ones(len(seq), bool)
            where = mine.nonzero()[0]
            again = np.ones(len(numbers), bool)
            again[first] = False  # the first of each pair is kept ...
            if len(seen):  # ... unless it was stored before (seen is sorted)
                at = np.minimum(np.searchsorted(seen, numbers), len(seen) - 1)
                again |= seen[at] == numbers
            keep[where[again]] = False
    return keep


def _distinct(numbers: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The sorted distinct ``numbers``, and where each first occurs (as
    ``np.unique(..., return_index=True)``, which imports numpy.ma on first use)."""
    if len(numbers) < 2 or (numbers[1:] > numbers[:-1]).all():  # a writer's batch: in order
        return numbers, np.arange(len(numbers))
    order = np.argsort(numbers, kind="stable")  # equal numbers keep their order
    ordered = numbers[order]
    first = np.ones(len(ordered), bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return ordered[first], order[first]


def _deliver(conn: sqlite3.Connection, writer: int, numbers: np.ndarray) -> np.ndarray:
    """Records the sorted distinct sequence ``numbers`` of ``writer`` as
    delivered; returns those that were stored before."""
    old = _touching(conn, writer, int(numbers[0]), int(numbers[-1]))
    seen = numbers[:0]
    new = numbers
    if old:
        before = np.zeros(len(numbers), bool)
        for a, b in old:
            before |= (numbers >= a) & (numbers <= b)
        if before.any():
            seen, new = numbers[before], numbers[~before]
    merged = _merge(old + _runs_of(new))
    if merged != sorted(old):
        conn.executemany("DELETE FROM delivered WHERE writer_id = ? AND lo = ?",
                         [(writer, a) for a, _ in old])
        conn.executemany("INSERT INTO delivered VALUES (?, ?, ?)",
                         [(writer, a, b) for a, b in merged])
    return seen


def _touching(conn: sqlite3.Connection, writer: int, lo: int, hi: int) -> List[Tuple[int, int]]:
    """The stored ranges of ``writer`` that overlap or touch [lo, hi]: index
    seeks only (a writer that flushes often has many ranges: its fences take
    sequence numbers that no event has)."""
    below = conn.execute("SELECT lo, hi FROM delivered WHERE writer_id = ? AND lo < ?"
                         " ORDER BY lo DESC LIMIT 1", (writer, lo - 1)).fetchall()
    within = conn.execute("SELECT lo, hi FROM delivered WHERE writer_id = ? AND lo BETWEEN ?"
                          " AND ?", (writer, lo - 1, min(hi + 1, _INT64_MAX))).fetchall()
    return [r for r in below if r[1] >= lo - 1] + within


def _runs_of(numbers: np.ndarray) -> List[Tuple[int, int]]:
    """Sorted distinct numbers as (first, last) ranges of consecutive ones."""
    if not len(numbers):
        return []
    cut = (np.diff(numbers) != 1).nonzero()[0]
    firsts = numbers[np.concatenate(([0], cut + 1))].tolist()
    lasts = numbers[np.concatenate((cut, [len(numbers) - 1]))].tolist()
    return list(zip(firsts, lasts))


def _merge(ranges: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def id_floor(conn: sqlite3.Connection) -> int:
    """The largest event id in use: rows and packed chunks."""
    top = conn.execute("SELECT max(id) FROM events").fetchone()[0] or 0
    has_chunks = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                              " AND name = 'chunks'").fetchone()
    if has_chunks:
        last = conn.execute("SELECT last_id FROM chunks ORDER BY first_id DESC LIMIT 1"
                            ).fetchone()
        top = max(top, last[0] if last else 0)
    return int(top)


def keep_ids_growing(conn: sqlite3.Connection, floor: int) -> None:
    """After a deletion: leaves a placeholder row at ``floor`` (the largest id
    before it) when no row holds an id that large any more, and drops the
    placeholders that no longer hold the largest id. Inside the caller's
    write transaction."""
    conn.execute("DELETE FROM events WHERE run_id = ? AND id < (SELECT max(id) FROM events)",
                 (PLACEHOLDER_RUN,))
    top = conn.execute("SELECT max(id) FROM events").fetchone()[0] or 0
    if top < floor:
        conn.execute("INSERT INTO events (id, run_id, writer_id, seq, kind, time, step, extra,"
                     " write_time) VALUES (?, ?, 0, 0, 0, NULL, NULL, NULL, NULL)",
                     (floor, PLACEHOLDER_RUN))
