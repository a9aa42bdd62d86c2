"""The calculator's job timeline of a run written by many hosts, from the
run's columns (semantics rule 13; docs/large-runs.md, "Many hosts").

:class:`ManyHosts` holds the run as columns per writer
(:class:`~goodput_core.timeline.host_columns.RunColumns`), fed by the
store's column pages, and keeps the job timeline up to date:

* the structure (attempts, lead pieces, the others' order, observers'
  tails) is computed from the piece summaries at each read with new events;
  when it changed, or a lead piece with a tail got rows, the job timeline
  is built again from the columns in memory (the lead's events, not the
  run's);
* otherwise the lead pieces' new rows are added to the timeline (the
  engine re-examines its own tail), the carved stalls are computed again
  for the lead steps from the first one a new row can change, and replaced
  in the timeline from the first that differs.

A run the columns cannot hold exactly (:attr:`RunColumns.odd`) is left to
the per-event pass (:mod:`goodput_core.queries.many_writers`): the caller
reads it again as records.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, List, Optional

import numpy as np

from goodput_core.stores.columns import EventPage
from goodput_core.stores.gc_pause import gc_paused
from goodput_core.events import Kind
from goodput_core.timeline.carve import carve, carve_small
from goodput_core.timeline.run_columns import RunColumns
from goodput_core.timeline.lead_columns import (
    Structure, _as_step, _page_of, _sorted, borrowed, carves_of, first_changed_step, job_pages,
    lead_carve, records_page, small_blocking, step_blocking, structure_of)
from goodput_core.timeline.host_columns import t_of
from goodput_core.timeline.spans import Timeline

__all__ = ["ManyHosts"]

_E = np.empty(0)
_SIDE = (int(Kind.METRIC), int(Kind.METADATA))
_SCHEDULING = (int(Kind.JOB_SUBMITTED), int(Kind.RESOURCES_GRANTED))


class ManyHosts:
    """A many-writer run's columns and its job timeline.

    Args:
      run: the run name.
      liveness: the job timeline's liveness setting (rule 15).

    Attributes:
      columns: the run's :class:`RunColumns`.
      rebuilds: how many times the job timeline was built from the start,
        updates: how many reads grew it in place (diagnostics).
    """

    def __init__(self, run: Optional[str], liveness: bool = True):
        self.run = run
        self.liveness = liveness
        self.columns = RunColumns(run)
        self.rebuilds = 0
        self.updates = 0  # (diagnostics: reads that grew the job timeline in place)
        self._tl: Optional[Timeline] = None
        self._structure: Optional[Structure] = None
        self._versions: Dict[Any, int] = {}

    @property
    def odd(self) -> Optional[str]:
        return self.columns.odd

    def add_page(self, page: EventPage) -> None:
        """Adds a page read with its writers (``read_columns(writers=True)``)."""
        self.columns.add_page(page)

    def timeline(self) -> Timeline:
        """The job timeline of every event added so far."""
        versions = self.columns.versions()
        if self._tl is None or versions != self._versions:
            with gc_paused():
                if self._tl is None or not self._update():
                    self._tl = self._build()
                else:
                    self.updates += 1
            self._versions = versions
        return self._tl

    def _build(self) -> Timeline:
        """The job timeline built from the columns, from the start."""
        self.rebuilds += 1
        run = self.run or ""
        cols = self.columns
        structure = structure_of(cols)
        tl = Timeline()
        tl.liveness = self.liveness
        for page in job_pages(run, cols, structure):
            tl.add_page(page)
        if not structure.single:
            starts, ends = carves_of(structure)
            if len(starts):
                if _interleaved(tl, starts, ends):
                    cols.odd = "a lead stall event next to a carved stall"
                tl.set_carved(-math.inf, starts, ends)
            _check_ties(cols, structure)
        self._signature = _signature(structure)
        self._records_fed = {k: len(s.arrivals) for k, s in cols.streams.items()}
        self._merges = {k: s.merges() for k, s in cols.streams.items()}
        self._rows_fed = {(p.key, p.number): dict(v.hi)
                          for p, v in zip(structure.leads, structure.views) if v is not None}
        self._rows_fed.update(((k, None), s.counts()) for k, s in cols.streams.items())
        self._borrowed = borrowed(structure) if not structure.single else []
        return tl

    def _update(self) -> bool:
        """Brings the job timeline up to date with the rows added since the last
        call; False (having changed nothing) when it must be built again."""
        cols = self.columns
        structure = structure_of(cols)
        if _signature(structure) != self._signature:
            return False
        changed = [s for k, s in cols.streams.items() if s.version != self._versions.get(k)]
        if any(s.merges() != self._merges.get(s.key, 0) for s in changed):
            return False
        if any(structure.tails):  # (rows of a lead with a tail: rare, after its process left)
            tailed = {p.key for p, tail in zip(structure.leads, structure.tails) if tail}
            if any(s.key in tailed for s in changed):
                return False
        lent = borrowed(structure) if not structure.single else []
        old = self._borrowed
        if len(lent) < len(old) or any(a is not b for a, b in zip(lent, old)):
            return False
        run, tl = self.run or "", self._tl
        pages = []
        side: List[Any] = list(lent[len(old):])
        leads = {(p.key, p.number): (v, u) for p, v, u in
                 zip(structure.leads, structure.views, structure.untils)}
        lead_keys = {p.key for p in structure.leads}
        for s in changed:
            fed = self._records_fed.get(s.key, 0)
            if fed == len(s.arrivals) and s.key not in lead_keys and s.key is not None \
                    and not structure.single:
                continue  # (column rows of a host that does not lead: its carve, below)
            new = s.arrivals[fed:]
            self._records_fed[s.key] = len(s.arrivals)
            if s.key is None or structure.single:  # every row is the job's
                lo = self._rows_fed.get((s.key, None)) or {n: 0 for n in s.counts()}
                pages.append(_page_of(run, s, lo, s.counts(), new))
                self._rows_fed[(s.key, None)] = s.counts()
                continue
            fresh = {id(e) for e in new}
            sched = [e for e in new if e[1] in _SCHEDULING]
            if sched:
                pages.append(records_page(run, sched))
            for p in s.pieces():
                mine = [e for e in p.records if id(e) in fresh] if fresh else []
                view, until = leads.get((p.key, p.number), (None, -math.inf))
                if view is None:
                    side += [e for e in mine if e[1] in _SIDE]
                    continue
                if until < math.inf:  # (cut at its successor's start: later, its side rows)
                    side += [e for e in mine if t_of(e) >= until and e[1] in _SIDE]
                    mine = [e for e in mine if t_of(e) < until]
                lo = self._rows_fed.get((p.key, p.number)) or view.lo
                pages.append(_page_of(run, s, lo, view.hi, mine))
                self._rows_fed[(p.key, p.number)] = dict(view.hi)
        if side:
            pages.append(records_page(run, side))
        for page in pages:
            if len(page):
                tl.add_page(page)
        self._borrowed = lent
        if not structure.single:
            self._carve(tl, structure, {s.key: s.changed_since(self._versions.get(s.key, -1))
                                        for s in changed})
        return True

    def _carve(self, tl: Timeline, structure: Structure, since: Dict[Any, float]) -> None:
        """Carves again the lead steps a change can have touched, per attempt
        (each lead piece's whole carve when the change can reach its first
        step or the time before it)."""
        cut = {id(p): (v, u) for p, v, u in zip(structure.leads, structure.views,
                                                 structure.untils)}
        for chain, others in structure.groups:
            if not others:
                continue
            k0 = min((first_changed_step(p, since[p.key]) for p in chain + others
                      if p.key in since), default=math.inf)
            if k0 == math.inf:
                continue
            early = any(p.key in since and since[p.key] <= _horizon(p) for p in others)
            small = [small_blocking(p, k0) for p in others]
            if any(b is None for b in small):
                small = None
            for lead in chain:
                view, until = cut[id(lead)]
                if view is None:
                    continue
                t, k = view.column("steps")
                if early or k0 == -math.inf or not view.steps_increase() or not len(k) or \
                        k0 <= k[0] or since.get(lead.key, math.inf) <= _horizon(view):
                    x, y = lead_carve(view, others)  # its first step's carve may change
                    from_t = view.start
                else:
                    r0 = int(np.searchsorted(k, _as_step(k0), side="left"))
                    if r0 == len(t):
                        continue  # no lead step from k0 on: no carve there, before or now
                    from_t = float(t[r0])
                    lead_small = small_blocking(view, k0) if small is not None else None
                    if lead_small is not None:  # a few steps again: in Python
                        x, y = carve_small(lead_small, small)
                    else:
                        x, y = carve(step_blocking(view, k0),
                                     [functools.partial(step_blocking, p, k0) for p in others])
                    x, y = _sorted(x, y)
                if len(x) and _interleaved(tl, x, y):
                    self.columns.odd = "a lead stall event next to a carved stall"
                tl.set_carved(from_t, x, y, until)
        _check_ties(self.columns, structure)


def _horizon(p) -> float:
    """Up to where a piece's rows decide the carve before its first step:
    its second step start (inf: it has none; kept on the piece once known:
    a row that moves it makes new pieces)."""
    h = p.cache.get("horizon")
    if h is None:
        t = p.column("steps")[0]
        h = float(t[1]) if len(t) > 1 else math.inf
        if h < math.inf:
            p.cache["horizon"] = h
    return h


def _check_ties(columns: RunColumns, structure: Structure) -> None:
    """A lead piece's step end or job end at the instant of its first step
    start makes the run odd (:func:`~goodput_core.timeline.lead_columns.prefix_of`)."""
    if columns.odd is None and any(v is not None and v.cache.get("tie")
                                   for v in structure.views):
        columns.odd = "a step end or job end at the instant of the lead's first step start"


def _signature(structure: Structure) -> tuple:
    """The structure as the job timeline depends on it: which pieces lead,
    and the others in order, per attempt."""
    def ids(pieces):
        return tuple((p.key, p.number) for p in pieces)

    return (structure.single, tuple((ids(c), ids(o)) for c, o in structure.groups),
            tuple(structure.untils), tuple(v is None for v in structure.views),
            tuple(tuple(map(id, tail)) for tail in structure.tails))


def _interleaved(tl: Timeline, starts: np.ndarray, ends: np.ndarray) -> bool:
    """True when the per-event pass, which puts the carved stalls among the
    lead's own input stall events, would pair them differently from the two
    apart: a lead stall event strictly inside a carved stall, or a lead stall
    start (no end after it yet) right before one (the carve would replace it)."""
    st = tl.tables["stall"]
    t, e = st["t"], st["e"]
    if not len(t):
        return False
    after_start = np.searchsorted(t, starts, side="right")  # lead events at c1 come first
    before_end = np.searchsorted(t, ends, side="left")      # the carve's end comes first
    if (before_end > after_start).any():
        return True
    prev = after_start - 1
    ok = prev >= 0
    return bool((e[prev[ok]] == 0).any())
