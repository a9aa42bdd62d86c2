"""Column-wise reading of event batches for :mod:`goodput_core.timeline.ingest`.

Two helpers keep Python bytecode per event out of ingestion:

* :func:`columns_of_records`: the kind, time and step columns of a batch of
  EventRecords, through C-level ``map`` passes. A pass over a million records
  costs ~15 ms whatever it does with the field (interpreter work per element,
  not memory traffic), so each column is read, type-checked and packed in one
  pass (``bytes(map(int.conjugate, ...))``, ``np.fromiter(map(float.conjugate,
  ...))``), steps from the step records only (``itertools.compress``);
* :func:`keyed_rows`: custom badput and elastic wait starts and ends (whose
  key is a type in their ``extra`` payload) routed without building a record
  or judging each event through the general path: only the type is read per
  row, and interned once per distinct value.

Both leave every odd row to the per-event path, which counts why it is
skipped: their results are the per-event path's, faster.
"""

from __future__ import annotations

import array
from itertools import compress
from operator import countOf, itemgetter
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from goodput_core.events import CUSTOM_BADPUT_EVENT_TYPE, ELASTIC_WAIT_EVENT_TYPE, Kind

__all__ = ["columns_of_records", "keyed_rows", "record_extras", "KEYED_KINDS"]

_INT_TYPES = {int, Kind}  # exact types: bools are not kinds
_RUN, _KIND, _TIME, _STEP = (itemgetter(i) for i in range(4))  # EventRecord's fields
NO_KIND = 0  # no kind has code 0: rows marked so are judged by the per-event path
#: kind -> (family, is_end, the extra field holding its type)
KEYED_KINDS = {
    int(Kind.CUSTOM_BADPUT_START): ("custom", 0, CUSTOM_BADPUT_EVENT_TYPE),
    int(Kind.CUSTOM_BADPUT_END): ("custom", 1, CUSTOM_BADPUT_EVENT_TYPE),
    int(Kind.ELASTIC_WAIT_START): ("wait", 0, ELASTIC_WAIT_EVENT_TYPE),
    int(Kind.ELASTIC_WAIT_END): ("wait", 1, ELASTIC_WAIT_EVENT_TYPE),
}
_KEYED_CODES = np.array(sorted(KEYED_KINDS), np.int64)


def columns_of_records(events: List[Any], run: Optional[str]):
    """``(kinds, times, steps, step_ok)`` arrays of a batch of records, or
    None when its kinds or times have odd types or it mixes runs (then every
    event takes the per-event path). ``step_ok`` is False where a step kind
    has an odd step value; rows whose kind is a bool have kind 0 (no kind):
    the per-event path judges both."""
    try:
        if run is not None and countOf(map(_RUN, events), run) != len(events):
            return None
        k = _kind_column(events)
        t = None if k is None else _time_column(events)
    except (TypeError, IndexError, KeyError, OverflowError, ValueError):
        return None
    if t is None:
        return None
    step_all, step_ok = _step_columns(events, k)
    return k, t, step_all, step_ok


def _kind_column(events: List[Any]) -> Optional[np.ndarray]:
    """The kind codes (int64), or None when a kind is not an int.

    One C-level pass reads, checks and packs them: ``int.conjugate`` takes
    ints (``Kind`` members too) and nothing else, ``bytes`` packs codes 0-255.
    A bool is an int too: read as 1 or 0, it is marked 0 (no kind) so that the
    per-event path counts it (only the rows read as 1, job starts, are looked at).
    """
    try:
        codes = bytes(map(int.conjugate, map(_KIND, events)))
    except (TypeError, ValueError):  # numpy integers, codes beyond 255: as before
        return _checked_kinds(events)
    k = np.frombuffer(codes, np.uint8).astype(np.int64)
    k[_bool_rows(events, np.flatnonzero(k == 1), _KIND)] = NO_KIND
    return k


def _checked_kinds(events: List[Any]) -> Optional[np.ndarray]:
    """:func:`_kind_column` for batches with other integer types: None unless
    every kind is an int or a ``Kind`` (exact types: bools are not kinds)."""
    kinds = list(map(_KIND, events))
    if not set(map(type, kinds)) <= _INT_TYPES:
        return None
    try:
        return np.frombuffer(bytes(kinds), np.uint8).astype(np.int64)
    except ValueError:  # a code outside 0-255 (unknown: the per-event path counts it)
        return np.array(kinds, np.int64)


def _time_column(events: List[Any]) -> Optional[np.ndarray]:
    """The times (float64), or None when one is neither a float nor an int.

    One C-level pass when they are all floats (``float.conjugate`` takes
    floats and nothing else, ``np.fromiter`` packs them); ints, which the
    per-event path takes too, are read and checked in three passes."""
    try:
        return np.fromiter(map(float.conjugate, map(_TIME, events)), np.float64, len(events))
    except TypeError:
        times = list(map(_TIME, events))
        if not set(map(type, times)) <= {float, int}:
            return None
        return np.frombuffer(array.array("d", times), np.float64)


def _step_columns(events: List[Any], k: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(steps, step_ok)``: the step of each step start and end (0 elsewhere),
    read at C level from those records only (``compress``); ``step_ok`` is
    False where a step is not an int (bools included: read as 0 or 1, those
    rows are looked at one by one)."""
    n = len(events)
    step_all = np.zeros(n, np.int64)
    step_ok = np.ones(n, bool)
    is_step = (k == Kind.STEP_START) | (k == Kind.STEP_END)
    step_idx = np.flatnonzero(is_step)
    if not len(step_idx):
        return step_all, step_ok
    try:
        raw = map(_STEP, compress(events, is_step.tobytes()))
        steps = np.fromiter(map(int.conjugate, raw), np.int64, len(step_idx))
    except (TypeError, OverflowError, ValueError, IndexError):
        step_ok[step_idx] = False  # odd step values: the per-event path judges them
        return step_all, step_ok
    step_all[step_idx] = steps
    step_ok[_bool_rows(events, step_idx[(steps == 0) | (steps == 1)], _STEP)] = False
    return step_all, step_ok


def _bool_rows(events: List[Any], rows: np.ndarray, field: Callable[[Any], Any]) -> List[int]:
    """The rows among ``rows`` whose ``field`` is a bool (a C-level pass over
    those records only; a loop only when there is one)."""
    rows = rows.tolist()
    if not countOf(map(type, map(field, map(events.__getitem__, rows))), bool):
        return []
    return [i for i in rows if type(field(events[i])) is bool]


def keyed_rows(k: np.ndarray, t: np.ndarray, rest: List[int], max_abs_time: float,
               extra_of: Callable[[int], Tuple[bool, Any]], code: Callable[[str, str], int]):
    """Routes the custom badput and elastic wait rows among ``rest``.

    Args:
      k, t: the batch's kinds and times.
      rest: row indices left by the column-wise routing, ascending.
      max_abs_time: the largest usable absolute time.
      extra_of: row -> ``(is a record, its extra or None)``.
      code: interns ``(space, type name)`` (called in row order, as the
        per-event path would).

    Returns:
      ``(rest, routed)``: the rows still left for the per-event path, and
      ``{family: (rows, is_end, keys)}`` of the rows routed here (each a
      usable time and, for custom badput, a string type; the others are left).
    """
    if not rest:
        return rest, {}
    idx = np.asarray(rest, np.int64)
    kr = k[idx]
    tr = t[idx]
    cand = np.isin(kr, _KEYED_CODES) & np.isfinite(tr) & (np.abs(tr) <= max_abs_time)
    if not cand.any():
        return rest, {}
    taken = np.zeros(len(idx), bool)
    out = {"custom": ([], [], []), "wait": ([], [], [])}
    upper: dict = {}  # custom type -> its interned upper-cased key
    for j, i, kind in zip(np.flatnonzero(cand).tolist(), idx[cand].tolist(),
                          kr[cand].tolist()):
        is_record, extra = extra_of(i)
        if not is_record:
            continue
        fam, is_end, field = KEYED_KINDS[kind]
        value = extra.get(field) if isinstance(extra, dict) else None
        if fam == "custom":
            # the key is the upper-cased type, as the reference pairs them
            if not isinstance(value, str):
                continue  # missing_field: counted by the per-event path
            key = upper.get(value)
            if key is None:
                key = upper[value] = code(fam, value.upper())
        else:  # elastic wait: the raw type, default 'unknown'
            key = code(fam, value if isinstance(value, str) else "unknown")
        rows, ends, keys = out[fam]
        rows.append(i)
        ends.append(is_end)
        keys.append(key)
        taken[j] = True
    routed = {fam: v for fam, v in out.items() if v[0]}
    return (idx[~taken].tolist() if taken.any() else rest), routed


def record_extras(events: List[Any]) -> Callable[[int], Tuple[bool, Any]]:
    """``extra_of`` for :func:`keyed_rows` over a batch of records: row ->
    (is a record, its extra or None)."""
    def extra_of(i: int) -> Tuple[bool, Any]:
        ev = events[i]
        if not isinstance(ev, tuple):
            return False, None
        return True, ev[4] if len(ev) > 4 else None
    return extra_of
