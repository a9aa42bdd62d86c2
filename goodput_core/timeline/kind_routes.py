"""Which table each kind of event goes to, one event at a time or a column at once.

:func:`table_of` names an event's table (and whether it ends an interval) for
the per-event path of :mod:`goodput_core.timeline.ingest`; :func:`route_columns`
routes the common kinds of a whole batch (the kind, time and step columns of
records or of a store page) with numpy, through lookup tables indexed by kind
code: no Python per event, no sort.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.events import Kind

__all__ = ["PAIR_FAMILIES", "KEYED_FAMILIES", "ELASTIC_KINDS", "MAX_ABS_TIME", "MAX_STEP",
           "SIMPLE_KINDS", "table_of", "route_columns"]

MAX_ABS_TIME = 1e12   # ~year 33658: beyond it a time is garbage, not a date
MAX_STEP = 2 ** 62    # steps must fit int64 arithmetic with headroom

# kind -> (paired family name, is_end) for the start/end families
PAIR_FAMILIES: Dict[int, Tuple[str, int]] = {
    Kind.TPU_INIT_START: ("tpu", 0), Kind.TPU_INIT_END: ("tpu", 1),
    Kind.TRAINING_PREP_START: ("prep", 0), Kind.TRAINING_PREP_END: ("prep", 1),
    Kind.DATA_LOADING_START: ("dl", 0), Kind.DATA_LOADING_END: ("dl", 1),
    Kind.ELASTIC_REINIT_START: ("reinit", 0), Kind.ELASTIC_REINIT_END: ("reinit", 1),
    Kind.CHECKPOINT_SAVE_START: ("save", 0), Kind.CHECKPOINT_SAVE_END: ("save", 1),
    Kind.CHECKPOINT_RESTORE_START: ("restore", 0), Kind.CHECKPOINT_RESTORE_END: ("restore", 1),
    Kind.PROGRAM_STARTUP_START: ("compile", 0), Kind.PROGRAM_STARTUP_END: ("compile", 1),
    Kind.CUSTOM_BADPUT_START: ("custom", 0), Kind.CUSTOM_BADPUT_END: ("custom", 1),
    Kind.ELASTIC_WAIT_START: ("wait", 0), Kind.ELASTIC_WAIT_END: ("wait", 1),
    Kind.INPUT_STALL_START: ("stall", 0), Kind.INPUT_STALL_END: ("stall", 1),
    # loads through the native context manager: input stalls too (rule 16)
    Kind.BLOCKING_LOAD_START: ("bload", 0), Kind.BLOCKING_LOAD_END: ("bload", 1),
    # A hang's start is derived from its payload (see EventTables._add_hang).
    Kind.HANG_END: ("hang", 1),
}
# families keyed by a type in the payload (batch_columns.keyed_rows routes them)
KEYED_FAMILIES = frozenset({"custom", "wait"})
SIMPLE_KINDS = {Kind.JOB_START: "job_start", Kind.JOB_END: "job_end",
                Kind.JOB_SUBMITTED: "submitted", Kind.RESOURCES_GRANTED: "granted"}
ELASTIC_KINDS = frozenset({int(Kind.ELASTIC_SLICE_COUNTS), int(Kind.ELASTIC_WAIT_START),
                           int(Kind.ELASTIC_WAIT_END), int(Kind.ELASTIC_REINIT_START),
                           int(Kind.ELASTIC_REINIT_END)})


def table_of(kind: int) -> Tuple[str, Optional[int]]:
    """Table name and is_end flag of a kind (None: not an interval's start or end)."""
    pair = PAIR_FAMILIES.get(kind)
    if pair is not None:
        return pair
    if kind == Kind.STEP_START:
        return "step_start", None
    if kind == Kind.STEP_END:
        return "step_end", None
    if kind == Kind.DISRUPTION:
        return "disruption", None
    return SIMPLE_KINDS[kind], None


# Kinds routed column-wise: those that need nothing from the payload.
_VECTOR_KINDS = {int(k) for k, (fam, _) in PAIR_FAMILIES.items() if fam not in KEYED_FAMILIES}
_VECTOR_KINDS |= {int(Kind.JOB_START), int(Kind.JOB_END), int(Kind.STEP_START),
                  int(Kind.STEP_END)}
_LUT_SIZE = 256
# Their tables, and per kind code: 1 + its table's index here (0: not routed
# column-wise) and its is_end flag. A pair family's starts and ends are routed
# together, in arrival order (mostly time order: the table then takes them
# without a sort).
_STEP_TABLES = ("step_start", "step_end")
_TABLES = tuple(sorted({table_of(k)[0] for k in _VECTOR_KINDS}))
_TABLE_LUT = np.zeros(_LUT_SIZE, np.uint8)
_END_LUT = np.zeros(_LUT_SIZE, np.int8)
for _kind in _VECTOR_KINDS:
    _name, _end = table_of(_kind)
    _TABLE_LUT[_kind], _END_LUT[_kind] = 1 + _TABLES.index(_name), _end or 0
_VECTOR_LUT = _TABLE_LUT > 0
_PAIR_TABLES = frozenset(fam for fam, _ in PAIR_FAMILIES.values())
_ELASTIC_TABLES = frozenset(table_of(k)[0] for k in ELASTIC_KINDS & _VECTOR_KINDS)


def route_columns(k: np.ndarray, t: np.ndarray, step_all: np.ndarray, step_ok: np.ndarray,
                  base: int, arrays: Any, skipped: Any) -> Tuple[List[int], bool]:
    """Routes the rows of the common kinds into ``arrays`` (table -> column ->
    list of arrays), counting the unusable ones in ``skipped``.

    Args:
      k, t, step_all: kinds, times and steps (steps only read for step kinds).
      step_ok: False where the step is odd (the per-event path judges it).
      base: the arrival order of row 0.

    Returns:
      ``(rows left for the per-event path (other kinds, odd steps), whether
      an elastic kind was routed)``.
    """
    kc = np.clip(k, 0, _LUT_SIZE - 1)
    fast = _VECTOR_LUT[kc] & (kc == k) & step_ok
    bad_t = fast & ~(np.abs(t) <= MAX_ABS_TIME)  # False for NaN and infinities too
    if bad_t.any():
        nonfin = int((bad_t & ~np.isfinite(t)).sum())
        skipped["non_finite"] += nonfin
        skipped["out_of_range"] += int(bad_t.sum()) - nonfin
    fast &= ~bad_t
    elastic = False
    # one byte per row: its table's code, 0 where not routed here (each
    # table's rows are then found by one comparison of bytes)
    routed = np.where(fast, _TABLE_LUT[kc], 0)
    for code in (np.flatnonzero(np.bincount(routed, minlength=1)[1:]) + 1).tolist():
        idx = np.flatnonzero(routed == code)
        name = _TABLES[code - 1]
        cols = arrays[name]
        if name in _STEP_TABLES:
            st = step_all[idx]
            ok = (st >= 0) & (st < MAX_STEP)
            skipped["bad_step"] += int(len(ok) - ok.sum())
            idx, st = idx[ok], st[ok]
            cols["step"].append(st)
        elif name in _PAIR_TABLES:
            cols["e"].append(_END_LUT[kc[idx]])
        elastic = elastic or name in _ELASTIC_TABLES
        cols["t"].append(t[idx])
        cols["o"].append(base + idx)
    return np.flatnonzero(~fast & ~bad_t).tolist(), elastic
