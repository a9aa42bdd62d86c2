"""The job of a run written by many hosts, from its columns (semantics rule
13; docs/large-runs.md, "Many hosts").

What :func:`goodput_core.timeline.streams.lead_events` computes from records,
computed from :class:`~goodput_core.timeline.run_columns.RunColumns`: which
pieces form each attempt of the job and which of them lead (the same rules
code, :func:`~goodput_core.timeline.streams._job_attempts` and
:func:`~goodput_core.timeline.streams._lead_chain`, given piece summaries),
the lead's events as pages of columns, the disruption a lead piece borrows,
an observer's tail (:mod:`.observer_tail`), every stream's metrics and
metadata, the scheduler's times, and the stragglers' carved stalls
(:mod:`.carve`) as intervals.
"""

from __future__ import annotations

import functools
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.events import EventRecord, Kind
from goodput_core.stores.columns import EventPage
from goodput_core.timeline.first_step import first_step_carve
from goodput_core.timeline.carve import SmallBlocking, StepBlocking, carve, union_of_pairs
from goodput_core.timeline.host_columns import FAMILIES, Piece, Stream, t_of
from goodput_core.timeline.observer_tail import observer_tail
from goodput_core.timeline.run_columns import RunColumns
from goodput_core.timeline.streams import _job_attempts, _lead_chain, _piece_order

__all__ = ["Structure", "structure_of", "step_blocking", "lead_carve", "prefix_of", "piece_page", "records_page", "_as_step",
           "stream_page", "borrowed", "carves_of"]

_DISRUPTION, _JOB_END = int(Kind.DISRUPTION), int(Kind.JOB_END)
_STEP, _STEP_END = int(Kind.STEP_START), int(Kind.STEP_END)
_JOB_START = int(Kind.JOB_START)
_SIDE = (int(Kind.METRIC), int(Kind.METADATA))
_SCHEDULING = (int(Kind.JOB_SUBMITTED), int(Kind.RESOURCES_GRANTED))
_E = np.empty(0)


class Structure:
    """Who leads: the attempts of the job and their lead pieces.

    Attributes:
      single: True when one writer process wrote the run (with the unknown
        writer's and the scheduler's events): every event is the job's.
      groups: per attempt of the job, ``(chain, others)``: its lead pieces in
        order, and the others in the rules' order.
      leads: every lead piece, in order; followers: the other pieces (those
        that place no attempt too: liveness-only and observers' pieces).
      untils: where each lead piece is cut (the next one's start; inf).
      views: each lead piece cut there (:meth:`Piece.cut`; None: nothing
        left), late: its metrics and metadata from there on.
      others_of: the other pieces of each lead piece's attempt.
      tails: each lead piece's observer's tail (:mod:`.observer_tail`:
        only an attempt's last lead piece may have one; most have none).
    """

    def __init__(self, single: bool, groups: List[Tuple[List[Piece], List[Piece]]],
                 pieces: List[Piece], starts: Sequence[float] = ()):
        self.single, self.groups = single, groups
        self.leads = [p for chain, _ in groups for p in chain]
        self.others_of = [others for chain, others in groups for _ in chain]
        lead_ids = {id(p) for p in self.leads}
        self.followers = [p for p in pieces if id(p) not in lead_ids]
        self.untils = [p.start for p in self.leads[1:]] + [math.inf]
        cuts = [p.cut(u) for p, u in zip(self.leads, self.untils)]
        self.views = [c[0] for c in cuts]
        self.late = [c[1] for c in cuts]
        self.tails: List[List[EventRecord]] = [[] for _ in self.leads]
        observers = [(p.index, [t_of(e) for e in p.records], p.records) for p in self.followers
                     if p.start is None and _JOB_END in p.kinds]
        if observers:
            self._take_tails(observers, starts)

    def _take_tails(self, observers, starts: Sequence[float]) -> None:
        """Each attempt's last lead piece's tail (``starts``: the attempts' starts)."""
        last = -1
        for g, (chain, _) in enumerate(self.groups):
            last += len(chain)
            view = self.views[last]
            if view is not None:
                until = starts[g + 1] if g + 1 < len(starts) else math.inf
                self.tails[last] = observer_tail(view.job_end(), view.index, observers, until)


def structure_of(run: RunColumns) -> Structure:
    """The structure of the run's events so far (the per-event pass's rules:
    pieces in order of start, index and writer; those that place no attempt
    apart)."""
    streams = [s for s in run.writers() if s.pieces()]
    if len(streams) <= 1:
        return Structure(True, [], [])
    pieces = sorted((p for s in streams for p in s.pieces()), key=_piece_order)
    if run.odd is None and any(p.tie for p in pieces):
        run.odd = "a disruption or job end at the instant of its writer's last step start"
    groups, starts = [], []
    for group in _job_attempts([p for p in pieces if p.start is not None]):
        chain = _lead_chain(group)
        ids = {id(p) for p in chain}
        groups.append((chain, [p for p in group if id(p) not in ids]))
        starts.append(group[0].start)
    return Structure(False, groups, pieces, starts)


def step_blocking(p: Piece, k0: float = -math.inf) -> StepBlocking:
    """A piece's step spans and blocking intervals; ``k0``: those of its steps
    numbered ``k0`` and above only (all of them when its step numbers do not
    increase)."""
    t, k = p.column("steps")
    if k0 > -math.inf and len(k) and p.steps_increase():
        r0 = int(np.searchsorted(k, _as_step(k0), side="left"))
        t, k = t[r0:], k[r0:]
        since = float(t[0]) if len(t) else math.inf
    else:
        since = -math.inf
    ends, job_end = _step_ends(p)
    families = []
    for name in ("stall", "bload"):
        col, a, b = p.stream.families[name], _from_row(p, name, since), p.hi[name]
        families.append((col.t.a[a:b], col.v.a[a:b]))
    xs, ys = union_of_pairs(families)
    return StepBlocking.of(t, k, ends, job_end, xs, ys)


def _step_ends(p: Piece) -> Tuple[Dict[int, float], Optional[float]]:
    """A piece's step ends (``{step: time}``, the last of each) and its first job end."""
    ends: Dict[int, float] = {}
    job_end = None
    for e in p.records:
        if e[1] == _STEP_END and e[3] is not None:
            ends[e[3]] = t_of(e)
        elif e[1] == _JOB_END and job_end is None:
            job_end = t_of(e)
    return ends, job_end


def _as_step(k0: float) -> int:
    """A step bound as the steps' own type (an int64 column searched with a
    float would be converted whole, at every search)."""
    return int(max(min(k0, 2.0 ** 62), -2.0 ** 62))


#: Rows a piece's tail may have for the refresh's carve in Python (else by numpy).
SMALL_TAIL = 64


def small_blocking(p: Piece, k0: float) -> Optional[SmallBlocking]:
    """:func:`step_blocking` of ``p``'s steps from ``k0`` on as Python lists
    (:class:`SmallBlocking`); None when they are more than a few. Read from
    its last rows back (Python scalars: this runs for every host at every
    refresh)."""
    if k0 == -math.inf or not p.steps_increase():
        return None
    steps = p.stream.steps
    hi = p.hi["steps"]
    r0 = steps.search(_as_step(k0), p.lo["steps"], hi, values=True)
    if hi - r0 > SMALL_TAIL:
        return None
    t, k = steps.lists(r0, hi)
    since = t[0] if t else math.inf
    families = []
    for name in ("stall", "bload"):
        a, b = _from_row(p, name, since), p.hi[name]
        if b - a > 4 * SMALL_TAIL:
            return None
        families.append(p.stream.families[name].lists(a, b))
    ends, job_end = _step_ends(p)
    return SmallBlocking(t, k, ends, job_end, families)


def _from_row(p: Piece, name: str, since: float) -> int:
    """The row of a family of ``p`` to read it from for the steps from
    ``since`` on: the one after its last end before ``since`` (every interval
    that ends at or after ``since`` is paired there as in the whole family:
    an end pairs with the event right before it)."""
    col, lo, hi = p.stream.families[name], p.lo[name], p.hi[name]
    if since == -math.inf or hi == lo:
        return lo
    i = col.search(since, lo, hi)
    near = max(i - 8, lo)
    e = col.lists(near, i)[1]  # (ends and starts alternate: near)
    for back in range(len(e) - 1, -1, -1):
        if e[back] == 1:
            return near + back + 1
    if i - lo > 8:
        ends = np.flatnonzero(col.v.a[lo:i] == 1)
        if len(ends):
            return lo + int(ends[-1]) + 1
    return lo


def first_changed_step(p: Piece, since: float) -> float:
    """The smallest step number whose span or blocking a change of ``p``'s
    rows from time ``since`` on can have changed (-inf: any; inf: none).
    Read from its last rows back, as :func:`small_blocking`."""
    if since == -math.inf or not p.steps_increase():
        return -math.inf
    for name in ("stall", "bload"):  # an end may close a start made before ``since``
        col, lo = p.stream.families[name], p.lo[name]
        i = col.search(since, lo, p.hi[name])
        if i > lo:
            t, end = col.row(i - 1)
            if end == 0:
                since = min(since, t)
    steps, lo, hi = p.stream.steps, p.lo["steps"], p.hi["steps"]
    if hi == lo:
        return math.inf
    return float(steps.row(max(steps.search(since, lo, hi) - 1, lo))[1])


def carves_of(structure: Structure) -> Tuple[np.ndarray, np.ndarray]:
    """Every carved stall of the job, ``(starts, ends)`` sorted by start."""
    xs, ys = [], []
    for view, others in zip(structure.views, structure.others_of):
        if view is None or not others:
            continue
        x, y = lead_carve(view, others)
        xs.append(x)
        ys.append(y)
    if not xs:
        return _E, _E
    return _sorted(np.concatenate(xs), np.concatenate(ys))


def lead_carve(view: Piece, others: List[Piece]) -> Tuple[np.ndarray, np.ndarray]:
    """The stalls carved from one lead piece (cut at its successor's start):
    in its steps (:func:`.carve.carve`) and before its first step
    (:func:`.first_step.first_step_carve`), sorted by start."""
    makers = [functools.partial(step_blocking, p) for p in others]
    x, y = carve(step_blocking(view), makers)
    first = first_step_carve(prefix_of(view), [prefix_of(p) for p in others],
                             list(zip(x.tolist(), y.tolist())))
    if first:
        x = np.concatenate((np.fromiter((a for a, _ in first), np.float64, len(first)), x))
        y = np.concatenate((np.fromiter((b for _, b in first), np.float64, len(first)), y))
    return _sorted(x, y)


class _Prefix:
    """A piece's events up to its second step start (its job start even
    later), as :mod:`.first_step` reads a piece: ``kinds``, ``events``,
    ``times`` in time order (column rows before records at one instant),
    ``start``, ``cache``."""

    __slots__ = ("key", "index", "events", "times", "kinds", "start", "cache")


def prefix_of(p: Piece) -> _Prefix:
    """A piece's :class:`_Prefix`, kept on it while no row at or before its
    second step start arrived. A step end or job end at the instant of its
    first step start marks ``cache["tie"]`` (their order decides where a
    lead's first step ends, and the columns keep no sequence numbers: the
    run is odd)."""
    s = p.stream
    kept = p.cache.get("prefix")
    if kept is not None and s.changed_since(kept[0]) > kept[1]:
        return kept[2]
    t, k = p.column("steps")
    horizon = float(t[1]) if len(t) > 1 else math.inf
    rows = []
    if len(t):
        n = int(np.searchsorted(t, horizon, side="right"))
        rows += [(x, 0, i, (None, _STEP, x, step, None))
                 for i, (x, step) in enumerate(zip(t[:n].tolist(), k[:n].tolist()))]
    for name, (start, end) in FAMILIES.items():
        ft, fe = p.column(name)
        n = int(np.searchsorted(ft, horizon, side="right"))
        base = len(rows)
        rows += [(x, 0, base + i, (None, end if v else start, x, None, None))
                 for i, (x, v) in enumerate(zip(ft[:n].tolist(), fe[:n].tolist()))]
    base = len(rows)
    for i, e in enumerate(p.records):
        x = t_of(e)
        if x <= horizon or e[1] == _JOB_START:
            rows.append((x, 1, base + i, e))
    rows.sort(key=lambda r: r[:3])
    out = _Prefix()
    out.key, out.index, out.start, out.cache = p.key, p.index, p.start, {}
    out.times = [r[0] for r in rows]
    out.events = [r[3] for r in rows]
    out.kinds = [e[1] for e in out.events]
    if len(t):
        b = float(t[0])
        if any(e[1] in (_STEP_END, _JOB_END) and t_of(e) == b for e in p.records):
            p.cache["tie"] = True
    p.cache["prefix"] = (s.version, horizon, out)
    return out


def _sorted(x: np.ndarray, y: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    if len(x) > 1 and not (x[1:] >= x[:-1]).all():
        order = np.argsort(x, kind="stable")
        return x[order], y[order]
    return x, y


def borrowed(structure: Structure) -> List[EventRecord]:
    """The disruption each lead piece (cut at its successor's start) that
    recorded none takes from the other pieces (the earliest before the next
    lead piece's start and its own job end; one per restart: it keeps its
    writer)."""
    foreign = sorted((e for p in structure.followers for e in p.of_kind(_DISRUPTION)),
                     key=t_of)
    out = []
    for view, until in zip(structure.views, structure.untils):
        if view is None or _DISRUPTION in view.kinds:
            continue
        stop = min([until] + [t_of(e) for e in view.records if e[1] == _JOB_END])
        out += [e for e in foreign if view.start <= t_of(e) < stop][:1]
    return out


# ------------------------------------------------------------------ pages
def records_page(run: str, records: Sequence[EventRecord]) -> EventPage:
    """Records as a page (in their order)."""
    n = len(records)
    page = EventPage(run, np.fromiter((e[1] for e in records), np.int64, n),
                     np.fromiter((e[2] for e in records), np.float64, n),
                     np.fromiter((0 if e[3] is None else e[3] for e in records), np.int64, n),
                     np.fromiter((e[3] is not None for e in records), bool, n),
                     np.fromiter((e[10] for e in records), np.float64, n),
                     {i: e[4] for i, e in enumerate(records) if e[4] is not None})
    _with_writers(page, records)
    return page


def _with_writers(page: EventPage, records: Sequence[EventRecord]) -> None:
    """Sets the page's per-row writers from its records' metadata."""
    codes: Dict[tuple, int] = {}
    page.writer = np.fromiter((codes.setdefault((e[5], e[6], e[7], e[8]), len(codes))
                               for e in records), np.int32, len(records))
    page.seq = np.fromiter((e[9] for e in records), np.int64, len(records))
    page.writer_keys = {c: k for k, c in codes.items()}


def _column_page(run: str, s: Stream, t: np.ndarray, kind: np.ndarray,
                 step: Optional[np.ndarray]) -> EventPage:
    """Column rows of stream ``s`` as a page, with their writer (the
    stream's; rows of the unknown writer: none)."""
    n = len(t)
    page = EventPage(run, kind, t, step if step is not None else np.zeros(n, np.int64),
                     np.full(n, step is not None), t)
    if s.key is not None:
        host, pid = s.key if s.key[0] or s.key[1] >= 0 else ("", 0)
        page.writer = np.zeros(n, np.int32)
        page.seq = np.zeros(n, np.int64)
        page.writer_keys = {0: (s.index, host, pid, "")}
    return page


def piece_page(run: str, p: Piece, records: bool = True) -> EventPage:
    """A piece's events as one page (``records``: its records too)."""
    return _page_of(run, p.stream, p.lo, p.hi, p.records if records else [])


def stream_page(run: str, s: Stream, lo: Optional[Dict[str, int]] = None,
                records: Optional[List[EventRecord]] = None) -> EventPage:
    """A stream's rows from ``lo`` (default: all) and ``records`` (default: all)."""
    hi = {"steps": len(s.steps)}
    hi.update((n, len(c)) for n, c in s.families.items())
    lo = lo or {n: 0 for n in hi}
    return _page_of(run, s, lo, hi, s.records if records is None else records)


def _page_of(run: str, s: Stream, lo: Dict[str, int], hi: Dict[str, int],
             records: Sequence[EventRecord]) -> EventPage:
    parts = []
    if records:
        parts.append(records_page(run, records))
    if hi["steps"] > lo["steps"]:
        t, k = s.steps.t.a[lo["steps"]:hi["steps"]], s.steps.v.a[lo["steps"]:hi["steps"]]
        parts.append(_column_page(run, s, t, np.full(len(t), _STEP, np.int64), k))
    for name, (start, end) in FAMILIES.items():
        if hi[name] > lo[name]:
            col = s.families[name]
            t, e = col.t.a[lo[name]:hi[name]], col.v.a[lo[name]:hi[name]]
            parts.append(_column_page(run, s, t, np.where(e == 1, end, start).astype(np.int64),
                                      None))
    if not parts:
        return EventPage.empty(run)
    return parts[0] if len(parts) == 1 else EventPage.concat(run, parts)


def job_pages(run: str, columns: RunColumns, structure: Structure) -> List[EventPage]:
    """The pages of the job timeline's events, in the per-event pass's order:
    the unknown writer's events, the scheduler's, each lead piece's (and its
    observer's tail), the borrowed disruptions, the other pieces' metrics and metadata (the carved
    stalls apart: :func:`carves_of`)."""
    pages = []
    unknown = columns.streams.get(None)
    if unknown is not None:
        pages.append(stream_page(run, unknown))
    if structure.single:
        for s in columns.writers():
            pages.append(stream_page(run, s))
        return pages
    sched = [e for s in columns.writers() for e in s.records if e[1] in _SCHEDULING]
    if sched:
        pages.append(records_page(run, sched))
    for view, late, tail in zip(structure.views, structure.late, structure.tails):
        if view is not None:
            pages.append(piece_page(run, view))
        if tail:
            pages.append(records_page(run, tail))
        if late:
            pages.append(records_page(run, late))
    side = borrowed(structure)
    side += [e for p in structure.followers for e in p.records if e[1] in _SIDE]
    if side:
        pages.append(records_page(run, side))
    return pages
