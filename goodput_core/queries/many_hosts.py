"""The calculator's job timeline of a run written by many hosts, from the
run's columns (semantics rule 13; docs/large-runs.md, "Many hosts").

:class:`ManyHosts` holds the run as columns per writer
(:class:`~goodput_core.timeline.host_columns.RunColumns`), fed by the
store's column pages, and keeps the job timeline up to date:

* the structure (attempts, lead pieces, the others' order) is computed
  from the piece summaries at each read with new events; when it changed,
  the job timeline is built again from the columns in memory (the lead's
  events, not the run's);
* otherwise the lead pieces' new rows are added to the timeline (the
  engine re-examines its own tail), the carved stalls are computed again
  for the lead steps from the first one a new row can change, and replaced
  in the timeline from the first that differs.

A run the columns cannot hold exactly (:attr:`RunColumns.odd`) is left to
the per-event pass (:mod:`goodput_core.queries.many_writers`): the caller
reads it again as records.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from goodput_core.stores.columns import EventPage
from goodput_core.stores.gc_pause import gc_paused
from goodput_core.timeline.host_columns import RunColumns
from goodput_core.timeline.lead_columns import Structure, carves_of, job_pages, structure_of
from goodput_core.timeline.spans import Timeline

__all__ = ["ManyHosts"]

_E = np.empty(0)


class ManyHosts:
    """A many-writer run's columns and its job timeline.

    Args:
      run: the run name.
      liveness: the job timeline's liveness setting (rule 15).

    Attributes:
      columns: the run's :class:`RunColumns`.
      rebuilds: how many times the job timeline was built from the start
        (diagnostics).
    """

    def __init__(self, run: Optional[str], liveness: bool = True):
        self.run = run
        self.liveness = liveness
        self.columns = RunColumns(run)
        self.rebuilds = 0
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
                self._tl = self._build()
            self._versions = versions
        return self._tl

    def _build(self) -> Timeline:
        """The job timeline built from the columns, from the start."""
        self.rebuilds += 1
        run = self.run or ""
        structure = structure_of(self.columns)
        tl = Timeline()
        tl.liveness = self.liveness
        for page in job_pages(run, self.columns, structure):
            tl.add_page(page)
        if not structure.single:
            starts, ends = carves_of(structure)
            if len(starts):
                if _interleaved(tl, starts, ends):
                    self.columns.odd = "a lead stall event next to a carved stall"
                tl.set_carved(-math.inf, starts, ends)
        self._structure = structure
        return tl


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
