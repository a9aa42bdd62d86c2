"""Event validation and the columnar event tables the timeline reads.

Events are kept as compact numpy columns, one sorted table per family of
kinds (steps, job starts, each paired start/end family, Orbax spans, ...):
no Python object per event survives ingestion. Each table stays sorted by
``(time, arrival order)``; exact duplicates (same kind, time, step or type)
of steps, job starts/ends, disruptions and Orbax entries are dropped and
counted (a duplicated start or end of a paired interval is harmless: it is
counted as unmatched). Every unusable input is counted per reason in
:attr:`EventTables.skipped`, never raised.

Kinds outside the partition are kept on the side, compactly, for the
diagnostics queries: elastic slice counts (table ``slices``), model metrics
(table ``metric``, names interned) and run metadata (only the latest value
of each key, :attr:`EventTables.metadata`). They never move the timeline's
dirty mark: adding them does not trigger a recomputation of the spans.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from goodput_core.events import (
    CUSTOM_BADPUT_EVENT_TYPE,
    ELASTIC_WAIT_EVENT_TYPE,
    HANG_EXPECTED_STEP,
    HANG_LAST_PROGRESS,
    HANG_STACK,
    HEARTBEAT_SECONDS,
    ORBAX_DIRECTORY,
    ORBAX_EVENT_TYPE,
    Kind,
    orbax_span_keys,
    persistent_directory,
)
from goodput_core.stores.columns import EventPage
from goodput_core.timeline.batch_columns import columns_of_records, keyed_rows, record_extras
from goodput_core.timeline.kind_routes import (
    ELASTIC_KINDS, KEYED_FAMILIES, MAX_ABS_TIME, MAX_STEP, PAIR_FAMILIES, route_columns, table_of)
from goodput_core.timeline.table import DTYPES as _DTYPES
from goodput_core.timeline.table import Table

__all__ = ["EventTables", "PAIR_FAMILIES", "MAX_ABS_TIME", "MAX_STEP", "NO_STEP", "SIDE_TABLES"]

_INF = math.inf

_TABLE_COLUMNS = {
    "job_start": (), "job_end": (), "step_start": ("step",), "step_end": ("step",),
    "disruption": ("key",), "orbax": ("end", "key"),
    # side tables: not part of the partition (see SIDE_TABLES)
    "slices": ("active", "avail", "total"), "metric": ("step", "key", "val"),
    "submitted": (), "granted": (),
    "heartbeat": ("val",),  # val: the writer's interval in seconds (NaN: not said)
}
# Scheduling times change no span: they are read at query time (lifecycle).
# Heartbeats change no span either (liveness, rule 15; but see _commit).
SIDE_TABLES = frozenset({"slices", "metric", "submitted", "granted", "heartbeat"})
_SLICE_KEYS = ("active_slices", "available_slices", "total_slices")
_SIDE_KINDS = {int(Kind.METADATA), int(Kind.METRIC), int(Kind.ELASTIC_SLICE_COUNTS),
               int(Kind.HEARTBEAT)}
_KNOWN = {int(k) for k in Kind}
_MAX_STACK_CHARS = 4000  # a hang's stack summary kept for the report
NO_STEP = -1  # metric recorded without a step number
ORBAX_SAVE, ORBAX_RESTORE, ORBAX_PERSISTENT_SAVE = 0, 1, 2  # orbax "key": what the span is


class EventTables:
    """All events of one run, validated, as sorted columnar tables."""

    def __init__(self):
        # arrival order kept where it is read: what metric points are new (diagnostics)
        self.tables: Dict[str, Table] = {
            name: Table(cols, keep_order=name == "metric") for name, cols in _TABLE_COLUMNS.items()}
        for fam in set(f for f, _ in PAIR_FAMILIES.values()):
            # no dedup here: back-to-back zero-length intervals legitimately
            # repeat (kind, time); a duplicated start or end is merely unmatched
            self.tables[fam] = Table(("e", "key") if fam in KEYED_FAMILIES else ("e",), dedup=False)
        # rule 13: the stragglers' stalls carved from the lead's steps (a run
        # written by many hosts), as intervals: set by replace_carved, not events
        self.tables["carved"] = Table(("end",), dedup=False)
        self.skipped: collections.Counter = collections.Counter()
        self.names: Dict[str, List[str]] = {"custom": [], "wait": [], "disruption": [],
                                            "metric": []}
        # run metadata: key -> (time, arrival order, value), the latest wins
        self.metadata: Dict[str, Tuple[float, int, Any]] = {}
        self._side_stored = 0
        # the earliest metric point of the last rows added (a sign of life:
        # it may end an open phase after the freeze point)
        self.signs_from = _INF
        self._codes: Dict[str, Dict[str, int]] = {k: {} for k in self.names}
        self.elastic_seen = False
        #: Hangs as the watchdog saw them: dicts with ``detected``, ``start``
        #: (when the hung step should have ended), ``last_progress``, ``step``,
        #: ``expected_step_seconds`` and ``stack``, in arrival order.
        self.hangs: List[Dict[str, Any]] = []
        #: Who recorded each disruption: ``(time, process index, host)``, arrival order.
        self.disruption_writers: List[Tuple[float, int, str]] = []
        self.order = 0  # arrival counter (ties in time are broken by arrival)

    def __getitem__(self, name: str) -> Table:
        return self.tables[name]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tables.values())

    def code(self, space: str, name: str) -> int:
        """Interns a type name (custom type, elastic wait type, cause)."""
        codes = self._codes[space]
        c = codes.get(name)
        if c is None:
            c = codes[name] = len(self.names[space])
            self.names[space].append(name)
        return c

    # ------------------------------------------------------------ ingestion
    def add(self, events: Iterable[Any], run: Optional[str] = None) -> Tuple[float, int]:
        """Validates and stores events.

        Args:
          events: EventRecords (or tuples in the same field order).
          run: when given, events of other runs are skipped and counted.

        Returns:
          (earliest time any stored event affects, or +inf; events stored).
        """
        events = events if isinstance(events, list) else list(events)
        if not events:
            return _INF, 0
        rows, arrays = _buckets(), _buckets()
        base = self.order
        self.order += len(events)
        rest: Iterable[int] = range(len(events))
        if len(events) >= 256:
            columns = columns_of_records(events, run)
            if columns is not None:
                rest = self._route(*columns, base, arrays)
                rest = self._route_keyed(columns[0], columns[1], rest, record_extras(events),
                                         base, arrays)
        side0 = self._side_stored
        for i in rest:
            self._add_one(events[i], run, base + i, rows)
        return self._commit(rows, arrays, side0)

    def add_page(self, page: EventPage) -> Tuple[float, int]:
        """Validates and stores a page of columns read from a store (no Python
        object per event: only rows with an ``extra`` payload, or odd values,
        are built into records and judged one by one).

        Returns:
          As :meth:`add`.
        """
        self.skipped.update(page.corrupt)
        n = len(page)
        if not n:
            return _INF, 0
        rows, arrays = _buckets(), _buckets()
        base = self.order
        self.order += n
        is_step = (page.kind == Kind.STEP_START) | (page.kind == Kind.STEP_END)
        rest = self._route(page.kind, page.time, page.step, ~is_step | page.has_step, base,
                           arrays)
        get = page.extra.get
        rest = self._route_keyed(page.kind, page.time, rest, lambda i: (True, get(i)), base,
                                 arrays)
        side0 = self._side_stored
        for i in rest:
            self._add_one(page.record(i), None, base + i, rows)
        return self._commit(rows, arrays, side0)

    def replace_carved(self, from_t: float, starts: np.ndarray, ends: np.ndarray,
                       to_t: float = _INF) -> float:
        """Replaces the carved stalls that start in ``[from_t, to_t)`` by
        ``(starts, ends)`` (sorted, all starting in that range); returns the
        earliest start that changed (inf: nothing did)."""
        table = self.tables["carved"]
        t_all, e_all = table["t"], table["end"]
        i = int(np.searchsorted(t_all, from_t, side="left"))
        j = len(t_all) if to_t == _INF else int(np.searchsorted(t_all, to_t, side="left"))
        old_s, old_e = t_all[i:j], e_all[i:j]
        n = min(len(old_s), len(starts))
        differ = np.flatnonzero((old_s[:n] != starts[:n]) | (old_e[:n] != ends[:n]))
        if len(differ):
            k = int(differ[0])
        elif len(old_s) == len(starts):
            return _INF
        else:
            k = n
        changed = min(float(old_s[k]) if k < len(old_s) else _INF,
                      float(starts[k]) if k < len(starts) else _INF)
        if j == len(t_all):
            table.cols["t"].truncate(i + k)
            table.cols["end"].truncate(i + k)
            table.cols["t"].extend(starts[k:])
            table.cols["end"].extend(ends[k:])
        else:
            table.cols["t"].replace(np.concatenate((t_all[:i], starts, t_all[j:])))
            table.cols["end"].replace(np.concatenate((e_all[:i], ends, e_all[j:])))
        return changed

    def _commit(self, rows, arrays, side0: int) -> Tuple[float, int]:
        """Inserts the routed rows and arrays into their tables."""
        earliest, stored = _INF, self._side_stored - side0
        self.signs_from = _INF
        for name in set(rows) | set(arrays):
            table = self.tables[name]
            batch = {}
            for k in table.batch_names:
                parts = arrays[name][k] + [np.asarray(rows[name][k], dtype=_DTYPES[k])]
                batch[k] = np.concatenate(parts).astype(_DTYPES[k], copy=False)
            t0, dups = table.insert(batch)
            # side kinds change no span by themselves; a heartbeat may end the
            # open phases of an attempt that later restarted (open_phases.py),
            # and so may a metric point (a sign of life, liveness.py: only one
            # at or after the freeze point can, Timeline.add)
            if name not in SIDE_TABLES or name == "heartbeat":
                earliest = min(earliest, t0)
            elif name == "metric":
                self.signs_from = min(self.signs_from, t0)
            stored += len(batch["t"]) - dups
            if dups:
                self.skipped["duplicate"] += dups
        return earliest, stored

    def _route(self, k: np.ndarray, t: np.ndarray, step_all: np.ndarray, step_ok: np.ndarray,
               base: int, arrays) -> List[int]:
        """Column-wise path for the common kinds (:func:`route_columns`);
        returns the rows left for the per-event path."""
        rest, elastic = route_columns(k, t, step_all, step_ok, base, arrays, self.skipped)
        self.elastic_seen = self.elastic_seen or elastic
        return rest

    def _route_keyed(self, k: np.ndarray, t: np.ndarray, rest: List[int], extra_of, base: int,
                     arrays) -> List[int]:
        """Routes the usable custom badput and elastic wait rows among ``rest``
        into ``arrays`` (:func:`keyed_rows`); returns the rows still left."""
        rest, routed = keyed_rows(k, t, rest, MAX_ABS_TIME, extra_of, self.code)
        for name, (idx, ends, keys) in routed.items():
            idx = np.asarray(idx, np.int64)
            cols = arrays[name]
            cols["e"].append(np.asarray(ends, np.int8))
            cols["key"].append(np.asarray(keys, np.int32))
            cols["t"].append(t[idx])
            cols["o"].append(base + idx)
            if name == "wait":
                self.elastic_seen = True
        return rest

    def _add_one(self, ev: Any, run, order: int, rows) -> None:
        """Validates one event; stores it in ``rows`` or counts why not."""
        reason = self._check(ev, run)
        if reason is not None:
            if reason:
                self.skipped[reason] += 1
            return
        kind = int(ev[1])
        try:
            t = float(ev[2])
        except OverflowError:
            self.skipped["out_of_range"] += 1
            return
        if kind == Kind.CHECKPOINT_STATS:
            self._add_orbax(ev, order, rows)
            return
        if kind == Kind.HANG:
            reason = self._add_hang(ev, t, order, rows)
            if reason:
                self.skipped[reason] += 1
            return
        if not (math.isfinite(t) and abs(t) <= MAX_ABS_TIME):
            self.skipped["non_finite" if not math.isfinite(t) else "out_of_range"] += 1
            return
        if kind in _SIDE_KINDS:
            reason = self._add_side(kind, ev, t, order, rows)
            if reason:
                self.skipped[reason] += 1
            return
        name, is_end = table_of(kind)
        cols = rows[name]
        if kind in (Kind.STEP_START, Kind.STEP_END):
            step = _step(ev[3] if len(ev) > 3 else None)
            if step is None:
                self.skipped["bad_step"] += 1
                return
            cols["step"].append(step)
        elif name in ("custom", "wait", "disruption"):
            key = self._type_key(name, ev)
            if key is None:
                self.skipped["missing_field"] += 1
                return
            cols["key"].append(key)
            if name == "disruption":
                self.disruption_writers.append(
                    (t, int(ev[5]) if len(ev) > 5 and ev[5] is not None else 0,
                     str(ev[6]) if len(ev) > 6 and ev[6] is not None else ""))
        if is_end is not None:
            cols["e"].append(is_end)
        cols["t"].append(t)
        cols["o"].append(order)

    def _check(self, ev: Any, run) -> Optional[str]:
        """A skip reason, '' to ignore silently, or None when usable so far."""
        if not isinstance(ev, tuple) or len(ev) < 3:
            return "not_an_event"
        if run is not None and ev[0] != run:
            return "other_run"
        kind = ev[1]
        if type(kind) is bool or not isinstance(kind, (int, np.integer)) or int(kind) not in _KNOWN:
            return "unknown_kind"
        kind = int(kind)
        if kind in ELASTIC_KINDS:
            self.elastic_seen = True
        t = ev[2]
        if type(t) is bool or not isinstance(t, (int, float, np.integer, np.floating)):
            return "bad_time"
        return None

    def _add_side(self, kind: int, ev: Any, t: float, order: int, rows) -> Optional[str]:
        """Stores a slice-count, metric or metadata event; returns a skip reason or None."""
        extra = ev[4] if len(ev) > 4 else None
        if kind == Kind.HEARTBEAT:  # liveness only (rule 15): never changes a span
            iv = extra.get(HEARTBEAT_SECONDS) if isinstance(extra, dict) else None
            ok = type(iv) is not bool and isinstance(iv, (int, float)) and 0 < iv < MAX_ABS_TIME
            rows["heartbeat"]["val"].append(float(iv) if ok else math.nan)
            rows["heartbeat"]["t"].append(t)
            rows["heartbeat"]["o"].append(order)
            return None
        if not isinstance(extra, dict) or not extra:
            return "missing_field"
        if kind == Kind.METADATA:
            for key, value in extra.items():  # the latest (time, arrival) wins
                if key not in self.metadata or (t, order) >= self.metadata[key][:2]:
                    self.metadata[key] = (t, order, value)
            self._side_stored += 1
            return None
        if kind == Kind.ELASTIC_SLICE_COUNTS:
            name, raw, step = "slices", [extra.get(k) for k in _SLICE_KEYS], None
        else:  # METRIC
            name, raw = "metric", [extra.get("metric_value")]
            step = NO_STEP if len(ev) < 4 or ev[3] is None else _step(ev[3])
            if not isinstance(extra.get("metric_name"), str):
                return "missing_field"
            if step is None:
                return "bad_step"
        values = []
        for v in raw:
            if type(v) is bool or not isinstance(v, (int, float, np.integer, np.floating)):
                return "missing_field"
            try:
                v = float(v)
            except OverflowError:  # an int beyond float64
                return "out_of_range"
            if not math.isfinite(v):
                return "non_finite"
            values.append(v)
        if name == "slices" and min(values) < 0:  # a count of slices: older writers let these in
            return "negative_count"
        cols = rows[name]
        if step is None:
            for col, v in zip(("active", "avail", "total"), values):
                cols[col].append(v)
        else:
            cols["step"].append(step)
            cols["key"].append(self.code("metric", extra["metric_name"]))
            cols["val"].append(values[0])
        cols["t"].append(t)
        cols["o"].append(order)
        return None

    def _type_key(self, name: str, ev: Any) -> Optional[int]:
        extra = ev[4] if len(ev) > 4 else None
        field = {"custom": CUSTOM_BADPUT_EVENT_TYPE, "wait": ELASTIC_WAIT_EVENT_TYPE,
                 "disruption": "disruption_cause"}[name]
        value = extra.get(field) if isinstance(extra, dict) else None
        if name == "custom":
            # bucket key = upper-cased type, as the reference (which pairs by it too)
            return self.code(name, value.upper()) if isinstance(value, str) else None
        # elastic wait: the reference pairs by the raw type, default 'unknown'
        return self.code(name, value if isinstance(value, str) else "unknown")

    def _add_orbax(self, ev: Any, order: int, rows) -> None:
        """An Orbax statistics entry: its blocking span becomes an interval."""
        extra = ev[4] if len(ev) > 4 else None
        event_type = extra.get(ORBAX_EVENT_TYPE) if isinstance(extra, dict) else None
        if event_type not in ("save", "restore", "emergency_restore"):
            self.skipped["missing_field"] += 1
            return
        duration = extra.get(orbax_span_keys(event_type)[1])
        if type(duration) is bool or not isinstance(duration, (int, float)):
            self.skipped["missing_orbax_duration"] += 1
            return
        try:
            duration = float(duration)
            start = float(ev[2])
            if math.isnan(start):  # no start time: the span ends at the write time
                wt = ev[10] if len(ev) > 10 else math.nan
                if type(wt) is bool or not isinstance(wt, (int, float)):
                    wt = math.nan
                start = float(wt) - duration
        except OverflowError:
            self.skipped["out_of_range"] += 1
            return
        if math.isnan(start) and math.isfinite(duration):
            self.skipped["no_timestamp"] += 1
            return
        if not (math.isfinite(duration) and 0.0 <= duration <= MAX_ABS_TIME):
            self.skipped["non_finite" if not math.isfinite(duration) else "out_of_range"] += 1
            return
        if not (math.isfinite(start) and abs(start) <= MAX_ABS_TIME):
            self.skipped["non_finite" if not math.isfinite(start) else "out_of_range"] += 1
            return
        cols = rows["orbax"]
        cols["t"].append(start)
        cols["o"].append(order)
        cols["end"].append(start + duration)
        if event_type != "save":
            cols["key"].append(ORBAX_RESTORE)
        else:  # local or persistent (0.2.4's breakdown of the save bucket)
            persistent = persistent_directory(extra.get(ORBAX_DIRECTORY))
            cols["key"].append(ORBAX_PERSISTENT_SAVE if persistent else ORBAX_SAVE)


    def _add_hang(self, ev: Any, t: float, order: int, rows) -> Optional[str]:
        """A hang: its span starts when the hung step should have ended
        (last progress + expected step time), at the detection at the latest."""
        extra = ev[4] if len(ev) > 4 else None
        if not isinstance(extra, dict):
            return "missing_field"
        last, expected = extra.get(HANG_LAST_PROGRESS), extra.get(HANG_EXPECTED_STEP)
        for v in (last, expected):
            if type(v) is bool or not isinstance(v, (int, float)):
                return "missing_field"
        start = min(float(last) + max(float(expected), 0.0), t)
        if not (math.isfinite(t) and math.isfinite(start) and abs(start) <= MAX_ABS_TIME):
            return "non_finite"
        step = _step(ev[3]) if len(ev) > 3 and ev[3] is not None else None
        stack = extra.get(HANG_STACK)
        self.hangs.append({"detected": t, "start": start, "last_progress": float(last),
                           "step": step, "expected_step_seconds": float(expected),
                           "stack": stack[:_MAX_STACK_CHARS] if isinstance(stack, str) else ""})
        cols = rows["hang"]
        cols["e"].append(0)
        cols["t"].append(start)
        cols["o"].append(order)
        return None


def _buckets():
    """name -> column -> list of values or arrays, created on first use."""
    return collections.defaultdict(lambda: collections.defaultdict(list))


def _step(value: Any) -> Optional[int]:
    """A valid step number, or None (bools, negatives and huge values are not)."""
    if type(value) is bool:
        return None
    if isinstance(value, (int, np.integer)):
        v = int(value)
    elif isinstance(value, (float, np.floating)) and math.isfinite(value) and value == int(value):
        v = int(value)
    else:
        return None
    return v if 0 <= v < MAX_STEP else None
