"""Events -> attributed spans that partition a job's lifetime (semantics.md).

Every instant of the lifetime gets one category (``buckets.PRODUCTIVE``, a
``BadputType`` or a custom event type); IDLE marks the gaps between attempts
(not part of total time). The partition is stored as one
:class:`~goodput_core.timeline.intervals.IntervalList` per category (sorted starts,
ends and cumulative lengths), so the seconds of every category inside any
window are a few binary searches. ``OTHER`` is never stored: it is whatever
of the lifetime no other category covers (this also makes the open tail of
a running attempt ``OTHER`` without storing anything that grows with time).

Two labels depend on events that may arrive much later and are applied as
*overlays* at query time instead of being painted:

* wasted progress (rule 4): a restart at step ``r`` turns the spans of
  steps >= r of the previous segment into ``WASTED_PROGRESS_FROM_DISRUPTION``
  (everything inside them except recovery and idle time);
* the program-startup heuristic (rule 6): the excess of a segment's first
  span over the mean of its other kept spans, taken from the first span's
  productive time, from its beginning.

Incremental updates: the timeline keeps a *freeze time* ``F`` before which
nothing can change any more (it is at most the start of the last step and
no paired interval or pending start crosses it). New events only re-examine
the tail ``[F, ...)`` when they cannot change anything before ``F``: the
per-category lists are cut at ``F`` and the tail is repainted. An event
changes the spans of the step it falls in, from that step's start (a late
job end turns the last step of a "crashed" attempt into a finished one, a
step end closes it, a disruption moves the start of recovery), so the
update is incremental only when the start of the step before the earliest
new event is at or after ``F``; otherwise (a late or backfilled write) it is
a full recomputation. Either way the result is the one a single pass over
all the events gives.

Ties the rules leave open: overlapping custom events of different types go
to the type seen first; a save outranks a restore; among the elastic
buckets re-initialisation outranks scale-up, which outranks slice-down.
Explicit program-startup spans switch the first-step heuristic off for every
segment of their attempt. Loads count as overlapped (DATA_LOADING_ASYNC)
inside step spans and inside the unfinished last step of an open or crashed
attempt; elsewhere they block (DATA_LOADING_SYNC). Input-stall spans (rule 7)
are DATA_LOADING_SYNC wherever they lie, at the level of blocking loads, and
are cut out of the overlapped-load annotation.

A disruption recorded in an attempt without steps and without a job end
(rule 2: a preemption during initialisation or compilation) makes the next
job start a restart: the time from the attempt's first disruption to that
job start is recovery, and nothing is wasted.
"""

from __future__ import annotations

import collections
import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from goodput_core.timeline.buckets import CUSTOM_BASE, IDLE, PRIORITY, PRODUCTIVE, BadputType
from goodput_core.timeline.ingest import ORBAX_RESTORE, EventTables
from goodput_core.timeline.intervals import (Growable, IntervalList, complement, paint, split_by_regions,
                                    union)
from goodput_core.timeline.open_phases import open_phase_limits, with_open_phases
from goodput_core.timeline.pairs import pairs_of, trailing_start
from goodput_core.timeline.segments import Attempts, SegmentTable

__all__ = ["Timeline"]

B = BadputType
_E = np.empty(0)
_INF = math.inf
_FAMILY_CODES = (("tpu", B.TPU_INITIALIZATION), ("prep", B.TRAINING_PREP),
                 ("reinit", B.ELASTIC_REINITIALIZATION), ("compile", B.PROGRAM_STARTUP))
FREEZE_LAG_STEPS = 32  # how many recent steps every update re-examines
_FAMILIES = ("tpu", "prep", "dl", "reinit", "save", "restore", "compile", "custom", "wait",
             "stall", "bload", "hang")


class Timeline:
    """The attributed spans of one run, updated incrementally.

    Use :meth:`add` to feed events and :meth:`update` before reading; the
    :class:`~goodput_core.queries.calculator.Calculator` does both.
    """

    def __init__(self):
        self.tables = EventTables()
        self.segments = SegmentTable()
        self.partition: Dict[int, IntervalList] = collections.defaultdict(IntervalList)
        self.async_track = IntervalList()   # loads overlapped by steps (annotation)
        self.compile_starts = Growable(np.float64)
        self.attempts = Attempts(_E, _E)
        self.F = -_INF
        self.dirty_from = _INF
        self.version = 0
        self.full_rebuilds = 0  # diagnostics: updates that could not be incremental
        # rule 2: (first disruption, next job start) of each disrupted attempt without steps
        self.stepless_restarts: Tuple[np.ndarray, np.ndarray] = (_E, _E)
        self.frozen_skips: collections.Counter = collections.Counter()
        self.tail_skips: collections.Counter = collections.Counter()
        self._overlay: Optional[dict] = None
        self.liveness = True  # rule 15 (liveness.py); off on the compatibility paths
        self.lives_cache = None  # liveness.py: per-attempt signs of life

    # ------------------------------------------------------------- updates
    def add(self, events, run: Optional[str] = None) -> int:
        """Validates and stores events; returns how many were stored."""
        earliest, stored = self.tables.add(events, run)
        if stored:
            self._dirty(earliest)
        return stored

    def add_page(self, page) -> int:
        """Stores a page of columns read from a store (:class:`EventPage`)."""
        earliest, stored = self.tables.add_page(page)
        if stored:
            self._dirty(earliest)
        return stored

    def _dirty(self, earliest: float) -> None:
        """The spans change from ``earliest``, and from the metric points just
        added where they lie at or after the freeze point (signs of life that
        may end an open phase there; earlier ones cannot)."""
        signs = self.tables.signs_from
        if signs >= self.F:
            earliest = min(earliest, signs)
        self.dirty_from = min(self.dirty_from, earliest)

    def set_carved(self, from_t: float, starts: np.ndarray, ends: np.ndarray,
                   to_t: float = _INF) -> None:
        """Replaces the stragglers' stalls carved from the lead's steps that
        start in ``[from_t, to_t)`` (rule 13, a run written by many hosts:
        painted as input stalls; ``starts`` sorted)."""
        changed = self.tables.replace_carved(from_t, np.asarray(starts, np.float64),
                                             np.asarray(ends, np.float64), to_t)
        self.dirty_from = min(self.dirty_from, changed)

    def update(self) -> None:
        """Brings the spans up to date with the events added so far."""
        if self.dirty_from == _INF:
            return
        self._rebuild(self.F if self._affected_from(self.dirty_from) >= self.F else -_INF)
        self.dirty_from = _INF

    def _affected_from(self, t: float) -> float:
        """The earliest time events at or after ``t`` can change: the start of the
        step in progress just before ``t`` (module docstring), else ``t``."""
        starts = self.tables["step_start"]["t"]
        i = int(np.searchsorted(starts, t, side="left")) - 1
        return min(t, float(starts[i])) if i >= 0 else t

    def _rebuild(self, F: float) -> None:
        T = self.tables
        att = self.attempts = Attempts(T["job_start"]["t"], T["job_end"]["t"])
        self.version += 1
        self._overlay = None
        if F == -_INF:
            self.full_rebuilds += 1
            self.partition.clear()
            self.async_track.clear()
            self.compile_starts.truncate(0)
            self.segments.clear()
            self.frozen_skips.clear()
        else:
            for il in list(self.partition.values()) + [self.async_track]:
                il.truncate_at(F)
            self.compile_starts.truncate(np.searchsorted(self.compile_starts.a, F, side="left"))
        first = self.segments.rebuild_tail(T, att, F)
        self.stepless_restarts = _stepless_restarts(T["disruption"]["t"], att, self.segments)
        rows = {c: a[first:] for c, a in self.segments.cols.items()}
        skip_times: Dict[str, List[np.ndarray]] = collections.defaultdict(list)
        skip_times["outside_lifetime"].append(self.segments.tail_invalid_times)
        pairs = {fam: pairs_of(T[fam], F, fam in ("custom", "wait"), skip_times) for fam in _FAMILIES}
        if len(att):  # rule 14: phases still open count up to the query time
            limit = open_phase_limits(T, att)
            pairs = {fam: with_open_phases(p, T[fam], F, fam in ("custom", "wait"), limit)
                     for fam, p in pairs.items()}
        if len(att):
            lo = max(F, float(att.start[0]))
            levels, (as_, ae) = self._levels(rows, att, pairs, F)
            s, e, c = paint(levels, lo)
            for code in np.unique(c).tolist():
                sel = c == code
                self.partition[code].extend(s[sel], e[sel])
            self.async_track.extend(as_, ae, owned=True)  # (temporaries of _levels)
            del as_, ae
            self.compile_starts.extend(np.sort(pairs["compile"][0]))
            F_new = max(F, self._freeze_point(pairs, att))
        else:
            F_new = -_INF  # no lifetime yet: everything is recomputed next time
        self._split_skips(skip_times, F_new)
        self.F = F_new

    def _levels(self, rows, att: Attempts, pairs, F: float):
        """The labelled intervals of the tail, highest priority first."""
        T = self.tables
        t = T["step_start"]["t"]
        t0 = t[rows["i0"]]
        crashed = rows["crashed"]
        rec = _cat((rows["rec_start"][crashed], att.next_start[rows["att"][crashed]]),
                   self.stepless_restarts)
        idle = att.idle()
        ob = T["orbax"]
        k = int(np.searchsorted(ob["t"], F, side="left"))
        o_s, o_e, o_k = ob["t"][k:], ob["end"][k:], ob["key"][k:]
        is_restore = o_k == ORBAX_RESTORE  # saves: local and persistent alike
        save = _cat(pairs["save"][:2], (o_s[~is_restore], o_e[~is_restore]))
        restore = _cat(pairs["restore"][:2], (o_s[is_restore], o_e[is_restore]))
        ws, we, wk = pairs["wait"][:3]
        names = T.names["wait"]
        up = np.array([("scale_up" in n.lower()) for n in names], bool)[wk] if len(wk) else \
            np.zeros(0, bool)
        cs, ce, ck = pairs["custom"][:3]
        # rule 7: loads inside step regions overlap training (annotation only)
        reg_s = np.maximum(t0, F)
        reg_e = rows["region_end"]
        ok = reg_e > reg_s
        # (the pairs are fresh arrays, replaced below: the split reuses them)
        ins, ine, outs, oute = split_by_regions(*pairs["dl"][:2], reg_s[ok], reg_e[ok],
                                                owned=True)
        # the loads are in those pieces now: not held through the rest of the
        # update (tens of MiB at millions of loads); the freeze point reads [3]
        pairs["dl"] = (_E, _E, _E, pairs["dl"][3])
        # input stalls block wherever they lie, and so do loads through the
        # native context manager (rule 16) and the first load of every attempt
        # after the first (rule 7: a restarted input pipeline is cold; the
        # reference 0.2.4's rule); the rest of a load stays overlapped
        cv = T["carved"]  # rule 13: the stragglers' stalls (none on one writer's runs)
        k = int(np.searchsorted(cv["t"], F, side="left"))
        sts, ste = union(*_cat(pairs["stall"][:2], pairs["bload"][:2],
                               _first_loads_after_restarts(T["dl"], att, F),
                               (cv["t"][k:], cv["end"][k:])))
        if len(sts):
            ins, ine = split_by_regions(ins, ine, sts, ste)[2:]
            outs, oute = _cat((outs, oute), (sts, ste))
        fam = {name: pairs[name][:2] for name, _ in _FAMILY_CODES}
        by_code = {
            IDLE: (*idle, IDLE),
            B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION: (
                *rec, B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION),
            B.HANG: (*pairs["hang"][:2], B.HANG),
            B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME: (*save, B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME),
            B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME: (*restore,
                                                     B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME),
            B.CUSTOM_BADPUT_EVENTS: (cs, ce, CUSTOM_BASE + ck.astype(np.int64)),
            B.PROGRAM_STARTUP: (*fam["compile"], B.PROGRAM_STARTUP),
            B.ELASTIC_REINITIALIZATION: (*fam["reinit"], B.ELASTIC_REINITIALIZATION),
            B.ELASTIC_SCALE_UP: (ws[up], we[up], B.ELASTIC_SCALE_UP),
            B.ELASTIC_SLICE_DOWN: (ws[~up], we[~up], B.ELASTIC_SLICE_DOWN),
            B.TPU_INITIALIZATION: (*fam["tpu"], B.TPU_INITIALIZATION),
            B.TRAINING_PREP: (*fam["prep"], B.TRAINING_PREP),
            B.DATA_LOADING_SYNC: (outs, oute, B.DATA_LOADING_SYNC),
            PRODUCTIVE: (t0, rows["prod_end"], PRODUCTIVE),
        }
        # The one overlap order (buckets.PRIORITY); wasted progress is an
        # overlay and OTHER the rest, so neither is painted here.
        levels = [by_code[code] for code in PRIORITY if code in by_code]
        return [(s, e, np.asarray(c, np.int64)) for s, e, c in levels], (ins, ine)

    def _freeze_point(self, pairs, att: Attempts) -> float:
        """The earliest time new events may change (see the module docstring)."""
        T = self.tables
        seg = self.segments
        F = float(att.start[-1])
        if len(seg):
            # a few steps back: late writes (an Orbax entry is logged when the
            # save ends; its span starts earlier) then stay on the fast path
            i = max(int(seg["i1"][-1]) - FREEZE_LAG_STEPS, int(seg["i0"][-1]))
            F = max(F, float(T["step_start"]["t"][i]))
        ob = T["orbax"]
        je = T["job_end"]["t"]
        ka = np.searchsorted(att.start, je, side="right") - 1
        # consecutive job ends of one attempt: a job start arriving between
        # them would end the attempt at the earlier one
        twin = (ka[1:] == ka[:-1]) & (ka[1:] >= 0)
        changed = True
        while changed:
            changed = False
            cross = twin & (je[:-1] < F) & (je[1:] >= F)
            if cross.any():
                F, changed = float(je[:-1][cross].min()), True
            for fam in _FAMILIES:
                for t, e in pairs[fam][3]:
                    c = trailing_start(t, e, F)
                    if c < F:
                        F, changed = c, True
            for iv in (ob, T["carved"]):  # intervals that cross F
                cross = (iv["t"] < F) & (iv["end"] > F)
                if cross.any():
                    F, changed = float(iv["t"][cross].min()), True
            # rule 2: a disrupted attempt without steps, restarted after F: a
            # step that arrives in it moves its recovery (painted from the disruption)
            d0, restart = self.stepless_restarts
            cross = (d0 < F) & (restart > F)
            if cross.any():
                F, changed = float(d0[cross].min()), True
        return F

    def _split_skips(self, skip_times: Dict[str, List[np.ndarray]], F: float) -> None:
        self.tail_skips.clear()
        for reason, parts in skip_times.items():
            times = np.concatenate(parts) if parts else _E
            before = int((times < F).sum())
            if before:
                self.frozen_skips[reason] += before
            if len(times) - before:
                self.tail_skips[reason] += len(times) - before

    # ------------------------------------------------------------- queries
    def skipped(self) -> Dict[str, int]:
        """Unusable inputs so far, by reason."""
        total = collections.Counter(self.tables.skipped)
        total.update(self.frozen_skips)
        total.update(self.tail_skips)
        if self.attempts.outside_ends:
            total["outside_lifetime"] += self.attempts.outside_ends
        return {k: v for k, v in total.items() if v}

    def measure(self, a: np.ndarray, b: np.ndarray) -> Dict[int, float]:
        """Seconds per category over the disjoint pieces ``[a[i], b[i])``.

        Stored categories and IDLE only (OTHER is the rest); the overlays of
        wasted progress and program startup are applied.
        """
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
        out: Dict[int, float] = collections.defaultdict(float)
        if not len(a):
            return out
        for code, il in self.partition.items():
            if len(il):
                out[code] = float((il.cum_at(b) - il.cum_at(a)).sum())
        ov = self.overlays()
        prod = self.partition.get(PRODUCTIVE)
        t0, x = ov["startup"]
        if len(t0) and prod is not None:
            lo = np.clip(t0[:, None], a[None, :], b[None, :])
            hi = np.clip(x[:, None], a[None, :], b[None, :])
            part = np.maximum(prod.cum_at(hi) - prod.cum_at(lo), 0.0)
            # A piece holding the whole startup gets the exact excess: x is
            # only known to the float spacing of absolute times (~2e-7 s).
            whole = (t0[:, None] >= a[None, :]) & (x[:, None] <= b[None, :])
            moved = float(np.where(whole, ov["startup_seconds"][:, None], part).sum())
            out[PRODUCTIVE] -= moved
            out[B.PROGRAM_STARTUP] += moved
        w0, w1 = ov["wasted"]
        if len(w0):
            lo = np.maximum(w0[:, None], a[None, :])
            hi = np.minimum(w1[:, None], b[None, :])
            ok = hi > lo
            lo, hi = lo[ok], hi[ok]
            wasted = float((hi - lo).sum())
            for code, il in self.partition.items():
                inside = float((il.cum_at(hi) - il.cum_at(lo)).sum()) if len(il) else 0.0
                if code in (IDLE, B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION):
                    wasted -= inside  # these outrank wasted progress
                else:
                    out[code] -= inside
            out[B.WASTED_PROGRESS_FROM_DISRUPTION] += max(wasted, 0.0)
        return out

    def async_seconds(self, a: np.ndarray, b: np.ndarray) -> float:
        """Seconds of overlapped (asynchronous) data loading over the pieces."""
        il = self.async_track
        return float((il.cum_at(b) - il.cum_at(a)).sum()) if len(a) else 0.0

    def labelled(self, a: float, b: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The partition of ``[a, b)`` as sorted pieces ``(starts, ends, codes)``
        with the overlays applied and OTHER filling the gaps (for pictures)."""
        if not b > a:
            return _E, _E, np.empty(0, np.int64)
        ov = self.overlays()
        pieces = {c: il.pieces(a, b) for c, il in self.partition.items() if len(il)}
        top = (IDLE, B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION)
        none = (_E, _E)
        levels = [(*pieces.get(c, none), c) for c in top]
        levels.append((*ov["wasted"], B.WASTED_PROGRESS_FROM_DISRUPTION))
        rest = [(s, e, np.full(len(s), c)) for c, (s, e) in pieces.items()
                if c not in top and c != PRODUCTIVE]
        if rest:  # disjoint by construction: one level
            levels.append(tuple(np.concatenate(x) for x in zip(*rest)))
        levels.append((*ov["startup"], B.PROGRAM_STARTUP))  # only productive time
        levels.append((*pieces.get(PRODUCTIVE, none), PRODUCTIVE))
        s, e, c = paint([(s, np.minimum(e, b), c) for s, e, c in levels], a)
        gs, ge = complement(a, b, s, e)
        s, e = np.concatenate((s, gs)), np.concatenate((e, ge))
        c = np.concatenate((c, np.full(len(gs), int(B.OTHER))))
        order = np.argsort(s, kind="stable")
        return s[order], e[order], c[order]

    def overlays(self) -> dict:
        """Per-segment startup ``(t0, x)`` and wasted ``(w0, w1)`` regions (cached)."""
        if self._overlay is None:
            self._overlay = _overlays(self)
        return self._overlay

    @property
    def nbytes(self) -> int:
        """Bytes held in arrays (events, spans, segments)."""
        return (self.tables.nbytes + self.segments.nbytes + self.async_track.nbytes
                + self.compile_starts.nbytes + sum(il.nbytes for il in self.partition.values()))


def _cat(*pairs) -> Tuple[np.ndarray, np.ndarray]:
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def _first_loads_after_restarts(dl, att: Attempts, F: float) -> Tuple[np.ndarray, np.ndarray]:
    """The first load (start and end, from the whole table) of every attempt
    after the first, where it starts at or after ``F`` (earlier ones are
    frozen, painted when they arrived: their attempt's start came first)."""
    t, e = dl["t"], dl["e"]
    if len(att) < 2 or not len(t):
        return _E, _E
    out_s, out_e = [], []
    starts, nexts = att.start[1:].tolist(), att.next_start[1:].tolist()
    for a, nxt in zip(starts, nexts):
        i = int(np.searchsorted(t, a, side="left"))
        while i < len(t) and e[i] != 0:
            i += 1  # an end left over from before the attempt
        while i + 1 < len(t) and e[i + 1] == 0:
            i += 1  # a second start replaces a pending one (rule 7)
        if i >= len(t) or t[i] < F or not (math.isnan(nxt) or t[i] < nxt):
            continue
        j = i + 1  # its end
        if j < len(t):
            out_s.append(float(t[i]))
            out_e.append(float(t[j]))
    return np.asarray(out_s, np.float64), np.asarray(out_e, np.float64)


def _stepless_restarts(d: np.ndarray, att: Attempts, seg: SegmentTable
                       ) -> Tuple[np.ndarray, np.ndarray]:
    """Rule 2 for attempts without steps: ``(first disruption, next job start)``
    of each attempt that recorded a disruption, has no step and no job end,
    and was followed by another attempt."""
    n = len(att)
    if not n or not len(d):
        return _E, _E
    has_steps = np.zeros(n, bool)
    has_steps[seg["att"]] = True
    a = att.of(d)
    d, a = d[a >= 0], a[a >= 0]
    ok = ~has_steps[a] & np.isnan(att.end[a]) & ~np.isnan(att.next_start[a])
    a, first = np.unique(a[ok], return_index=True)  # disruptions are sorted by time
    return d[ok][first], att.next_start[a]


def _overlays(tl: Timeline) -> dict:
    """Computes the startup and wasted overlays of every segment."""
    seg = tl.segments
    st = tl.tables["step_start"]
    t = st["t"]
    i0, i1, w = seg["i0"], seg["i1"], seg["w"]
    m, wl = i1 - i0, w - i0
    closed = seg["close_kind"] != 0
    has_w = w <= i1
    w0 = t[np.minimum(w, i1)] if len(w) else _E
    w1 = np.where(closed, seg["close"], t[i1]) if len(w) else _E
    ok = has_w & (w1 > w0)
    out = {"wasted": (w0[ok], w1[ok]), "startup": (_E, _E), "startup_seconds": _E}
    prod = tl.partition.get(PRODUCTIVE)
    k = np.minimum(wl, m)
    elig = (m >= 1) & (wl >= 1) & (k >= 2) & ~_compile_attempts(tl)[seg["att"]]
    if prod is None or not elig.any():
        return out
    j0, k = i0[elig], k[elig]
    p0, p1, pk = (prod.cum_at(t[j0]), prod.cum_at(t[j0 + 1]), prod.cum_at(t[j0 + k]))
    excess = (p1 - p0) - (pk - p1) / (k - 1)
    pos = excess > 0
    x = prod.locate((p0 + excess)[pos])
    out["startup"] = (t[j0][pos], x)
    out["startup_seconds"] = excess[pos]
    return out


def _compile_attempts(tl: Timeline) -> np.ndarray:
    """Per attempt: True when it recorded explicit program-startup spans
    (then the first-step heuristic is off for all its segments, rule 6)."""
    att = tl.attempts
    flags = np.zeros(max(len(att), 1), bool)
    cs = tl.compile_starts.a
    if len(cs) and len(att):
        a = np.searchsorted(att.start, cs, side="right") - 1
        flags[a[a >= 0]] = True
    return flags
