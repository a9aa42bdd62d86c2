"""Reference-format payloads straight into columns (no record per payload).

A million payloads read from Cloud Logging or a duck-typed ``cloud_logger``
are mostly a handful of shapes (``{job_name, step_count, step_start_time}``,
``{job_name, data_loading_start_time}``...). :func:`payload_page` groups the
payloads by their key tuple, decides once per shape how to read it, and reads
each common shape column-wise (one ``itemgetter`` pass per key) into an
:class:`~goodput_core.stores.columns.EventPage`. Every other payload (extra
keys, odd value types, Orbax entries) goes through
:func:`goodput_core.events.from_payload` as before, so both paths accept,
convert and skip exactly the same payloads, for the same reasons.
"""

from __future__ import annotations

import collections
import itertools
from operator import itemgetter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.events import (
    JOB_NAME,
    KIND_BY_TIME_KEY,
    KINDS,
    ORBAX_EVENT_TYPE,
    Kind,
    SkipReason,
    from_payload,
)
from goodput_core.stores.columns import EventPage

__all__ = ["payload_page"]

MIN_BATCH = 256  # below this the per-payload path is as fast
# kinds whose payload has nothing beyond job name, time and step
_PLAIN_KINDS = frozenset(k for k, s in KINDS.items() if not s.required) - {
    Kind.METADATA, Kind.CHECKPOINT_STATS}
_NUMBER = {float, int}


def _plan(keys: Tuple[str, ...]) -> Optional[Tuple[int, str, Optional[str]]]:
    """``(kind, time key, step key)`` when payloads with these keys, in this
    order, can be read column-wise; None when each must be parsed alone."""
    if JOB_NAME not in keys or ORBAX_EVENT_TYPE in keys:
        return None
    kind = next((KIND_BY_TIME_KEY[k] for k in keys if k in KIND_BY_TIME_KEY), None)
    if kind not in _PLAIN_KINDS:
        return None
    spec = KINDS[kind]
    if not set(keys) <= {JOB_NAME, spec.time_key, spec.step_key}:
        return None  # extra keys: they belong in an extra dict
    if kind in (Kind.STEP_START, Kind.STEP_END) and spec.step_key not in keys:
        return None  # a step event without a step: from_payload says why
    return int(kind), spec.time_key, spec.step_key if spec.step_key in keys else None


def payload_page(payloads: Sequence[Any], run: Optional[str]
                 ) -> Optional[Tuple[EventPage, collections.Counter]]:
    """The usable payloads as one page, in their order, and the skipped ones
    per reason; None for a small batch or one that is not all dicts (the
    caller parses those one by one).

    Args:
      payloads: reference-format payload dicts.
      run: the run they must belong to (None: any; a payload without
        ``job_name`` is taken as this run's, as :func:`from_payload` does).
    """
    n = len(payloads)
    if n < MIN_BATCH or set(map(type, payloads)) != {dict}:
        return None
    shapes = collections.defaultdict(itertools.count().__next__)
    codes = np.fromiter(map(shapes.__getitem__, map(tuple, payloads)), np.int64, n)
    kind = np.zeros(n, np.int64)
    time = np.zeros(n)
    step = np.zeros(n, np.int64)
    has_step = np.zeros(n, bool)
    keep = np.ones(n, bool)
    extra: Dict[int, Dict[str, Any]] = {}
    skipped: collections.Counter = collections.Counter()
    order = np.argsort(codes, kind="stable")
    ends = np.cumsum(np.bincount(codes)).tolist()
    by_shape = list(map(payloads.__getitem__, order.tolist()))  # each shape's, contiguous
    slow: List[int] = []
    for keys, code in shapes.items():
        a, b = (ends[code - 1] if code else 0), ends[code]
        plan = _plan(keys)
        if plan is None or not _read_group(by_shape[a:b], order[a:b], plan, run, kind, time,
                                           step, has_step):
            slow.extend(order[a:b].tolist())
    names = run
    for i in sorted(slow):
        parsed = from_payload(payloads[i], run=run)
        if isinstance(parsed, SkipReason):
            skipped[parsed.value] += 1
            keep[i] = False
        elif run is not None and parsed.run != run:
            skipped["other_run"] += 1
            keep[i] = False
        else:
            names = parsed.run if names is None else names
            kind[i], time[i] = parsed.kind, parsed.time
            if parsed.step is not None:
                step[i], has_step[i] = parsed.step, True
            if parsed.extra is not None:
                extra[i] = parsed.extra
    if not keep.all():
        where = np.cumsum(keep) - 1
        extra = {int(where[i]): x for i, x in extra.items()}
        kind, time, step, has_step = kind[keep], time[keep], step[keep], has_step[keep]
    page = EventPage(names or "", kind, time, step, has_step, np.full(len(kind), np.nan), extra)
    return page, skipped


def _read_group(group: List[dict], idx: np.ndarray, plan, run, kind, time, step, has_step
                ) -> bool:
    """Reads the payloads of one shape (at ``idx`` in the batch) column-wise
    into the arrays; False (nothing written) when a value has a type the
    column path does not take."""
    k, time_key, step_key = plan
    names = set(map(itemgetter(JOB_NAME), group))
    if run is None or names != {run}:
        return False  # other runs, or no run to check against: judged one by one
    t = _times(group, time_key)
    if t is None:
        return False  # bools, strings, None: from_payload decides
    steps = None
    if step_key is not None:
        steps = list(map(itemgetter(step_key), group))
        if set(map(type, steps)) != {int}:
            return False  # doubles from Cloud Logging, strings: from_payload converts
        try:
            steps = np.array(steps, np.int64)
        except OverflowError:
            return False
    if not np.isfinite(t).all():
        return False  # from_payload counts these as non_finite
    kind[idx] = k
    time[idx] = t
    if steps is not None:
        step[idx] = steps
        has_step[idx] = True
    return True


def _times(group: List[dict], time_key: str) -> Optional[np.ndarray]:
    """The group's times as float64, or None when one is not a number (a
    bool, a string...) or an int beyond a float. Floats (what JSON gives) are
    read, checked and packed in one C-level pass (``float.conjugate`` takes
    floats alone); a group with ints is read and checked as from_payload would."""
    try:
        return np.fromiter(map(float.conjugate, map(itemgetter(time_key), group)), np.float64,
                           len(group))
    except TypeError:
        times = list(map(itemgetter(time_key), group))
    if not _NUMBER.issuperset(map(type, times)):
        return None
    try:
        return np.array(times, np.float64)
    except OverflowError:
        return None
