"""Column-wise reading of event batches for :mod:`goodput_core.timeline.ingest`.

Two helpers keep Python bytecode per event out of ingestion:

* :func:`columns_of_records`: the kind, time and step columns of a batch of
  EventRecords, through C-level ``map`` passes (each pass over a million
  records costs ~15 ms of memory traffic: there are as few as possible);
* :func:`keyed_rows`: custom badput and elastic wait starts and ends (whose
  key is a type in their ``extra`` payload) routed without building a record
  or judging each event through the general path: only the type is read per
  row, and interned once per distinct value.

Both leave every odd row to the per-event path, which counts why it is
skipped: their results are the per-event path's, faster.
"""

from __future__ import annotations

import array
from operator import countOf, itemgetter
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from goodput_core.events import CUSTOM_BADPUT_EVENT_TYPE, ELASTIC_WAIT_EVENT_TYPE, Kind

__all__ = ["columns_of_records", "keyed_rows", "record_extras", "KEYED_KINDS"]

_INT_TYPES = {int, Kind}  # exact types: bools are not kinds
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
    has an odd step value (the per-event path judges those)."""
    try:
        kinds = list(map(itemgetter(1), events))
        if not set(map(type, kinds)) <= _INT_TYPES:
            return None
        times = list(map(itemgetter(2), events))
        if not set(map(type, times)) <= {float, int}:
            return None
        if run is not None and countOf(map(itemgetter(0), events), run) != len(events):
            return None
        try:
            k = np.frombuffer(bytes(kinds), np.uint8).astype(np.int64)
        except ValueError:  # a code outside 0-255 (unknown: the per-event path counts it)
            k = np.array(kinds, np.int64)
        t = np.frombuffer(array.array("d", times), np.float64)
    except (TypeError, IndexError, KeyError, OverflowError, ValueError):
        return None
    step_all = np.zeros(len(events), np.int64)
    step_ok = np.ones(len(events), bool)
    step_idx = np.flatnonzero((k == Kind.STEP_START) | (k == Kind.STEP_END))
    if len(step_idx):
        try:
            picked = itemgetter(*step_idx.tolist())(events)  # the step records, at C speed
            raw = list(map(itemgetter(3), picked if len(step_idx) > 1 else (picked,)))
            if set(map(type, raw)) != {int}:
                raise TypeError
            step_all[step_idx] = np.frombuffer(array.array("q", raw), np.int64)
        except (TypeError, OverflowError, ValueError, IndexError):
            step_ok[step_idx] = False  # odd step values: the per-event path judges them
    return k, t, step_all, step_ok


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
