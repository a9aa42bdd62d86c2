"""The dashboard's JSON API, apart from HTTP (the handler maps paths here).

=======================================  =============================================
``GET /api/runs[?group=G]``              ``{store, group, pending, runs: [{run, group,
                                         state, state_since, goodput_percent,
                                         total_seconds, last_activity, events,
                                         sparkline}]}``, the most recently active
                                         first (rows not read yet: ``pending``)
``GET /api/runs/{run}/report``           exactly ``goodput report RUN --json``
``GET /api/runs/{run}/timeline``         ``?start=&end=&width=``: spans merged to
                                         ``width`` pixels (see ``views.timeline_bins``)
``GET /api/runs/{run}/series``           ``?window=SECONDS&points=N``: goodput and
                                         badput over time, step time by step, state
``GET /api/compare?group=G``             exactly ``goodput compare --group G --json``
``GET /api/stream[?run=R]``              server-sent events: ``change`` when a run
                                         (or the list of runs) has new events
=======================================  =============================================
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, Optional

import numpy as np

from goodput_core.cli import CliError
from goodput_core.cli.commands.report import _finite, build_report
from goodput_core.cli.serve.runs import RunCache, run_state
from goodput_core.cli.serve.views import SpanIndex, series, step_series, timeline_bins
from goodput_core.queries.markers import duty_cycle_drops
from goodput_core.queries.run_groups import check_run_group
from goodput_core.cli.commands.compare import compare_reports

__all__ = ["Api", "NotFound", "BadRequest"]


class NotFound(Exception):
    """404: no such run or page."""


class BadRequest(Exception):
    """400: a query parameter that cannot be used."""


def _number(params: Dict[str, str], name: str, default: Optional[float] = None,
            lo: float = -math.inf, hi: float = math.inf) -> Optional[float]:
    text = params.get(name)
    if text in (None, ""):
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"{name}={text[:40]!r}: expected a number") from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise BadRequest(f"{name}={text[:40]!r}: out of range [{lo}, {hi}]")
    return value


class Api:
    """Answers the API's GET requests from a :class:`RunCache` (read only)."""

    def __init__(self, cache: RunCache, budget_s: float = 2.0):
        self.cache = cache
        # the runs list reads runs for at most this long per request; the rows
        # not read yet come as ``pending`` and the page asks again
        self.budget_s = float(budget_s)

    def _entry(self, run: str):
        if not self.cache.exists(run):
            raise NotFound(f"no run named {run!r}")
        return self.cache.get(run)

    def _cached(self, entry: Any, name: str, key: Any, build):
        """A per-run value rebuilt only when ``key`` changes (new events, a new second)."""
        views = entry.views
        hit = views.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = build()
        views[name] = (key, value)
        return value

    def runs(self, params: Dict[str, str]) -> Dict[str, Any]:
        group = params.get("group") or None
        # a big store: the rows not summarised within the budget come next time
        deadline = time.monotonic() + self.budget_s
        rows, pending = [], 0
        for name, s in self.cache.summaries(self.cache.clock(), deadline):
            if s is None:
                pending += 1
                rows.append({"run": name, "group": None, "state": None, "state_since": None,
                             "goodput_percent": None, "total_seconds": None,
                             "last_activity": None, "events": None, "sparkline": [],
                             "pending": True})
                continue
            rows.append({"run": name, "group": s.group, "state": s.state,
                         "state_since": s.state_since,
                         "goodput_percent": s.goodput if s.total_seconds > 0 else None,
                         "total_seconds": s.total_seconds, "last_activity": s.last_activity,
                         "events": s.events, "sparkline": s.trend})
        if group is not None:
            rows = [r for r in rows if r["group"] == group]
        rows.sort(key=lambda r: -(r["last_activity"] or -math.inf))
        return _finite({"store": self.cache.store.url, "group": group, "runs": rows,
                        "pending": pending})

    @staticmethod
    def _moment(entry: Any, now: float) -> Any:
        """What a computed view depends on: the run's events and, while its
        lifetime still grows with the clock, the second. Pages open on one run
        share each computation (a change on a busy run reaches every page)."""
        ended = run_state(entry.calc, now)[0] == "ended"
        return entry.version, None if ended else math.floor(now)

    def report(self, run: str) -> Dict[str, Any]:
        entry = self._entry(run)
        calc = entry.calc
        now = self.cache.clock()

        def build():
            result = calc.window(-math.inf, math.inf, now=now)
            with self.cache.io:  # the host insights read the store
                return build_report(calc, result, calc.step_stats(),
                                    store_url=self.cache.store.url, window_spec=None,
                                    exclude=[])
        return self._cached(entry, "report", self._moment(entry, now), build)

    def _span_index(self, entry: Any, now: float) -> SpanIndex:
        return self._cached(entry, "spans", self._moment(entry, now),
                            lambda: SpanIndex.of(entry.calc, now))

    def timeline(self, run: str, params: Dict[str, str]) -> Dict[str, Any]:
        entry = self._entry(run)
        now = self.cache.clock()
        start, end = _number(params, "start"), _number(params, "end")
        if start is not None and end is not None and end < start:
            raise BadRequest("end < start")
        width = int(_number(params, "width", 800, 1, 4096))
        index = self._span_index(entry, now)
        tl = entry.calc.timeline
        disruptions = tl.tables["disruption"]["t"] if len(tl.tables["disruption"]) else []
        drops = [m.t for m in duty_cycle_drops(entry.calc)]
        markers = {"disruption": np.asarray(disruptions, np.float64),
                   "job_start": np.asarray(tl.attempts.start, np.float64),
                   "duty_cycle_drop": np.asarray(drops, np.float64)}
        out = timeline_bins(index, start, end, width, markers)
        out["run"] = run
        out["hangs"] = [{"step": h.step, "start": h.start, "end": h.end, "seconds": h.seconds}
                        for h in entry.calc.hangs(now)][-width:]
        return _finite(out)

    def series(self, run: str, params: Dict[str, str]) -> Dict[str, Any]:
        entry = self._entry(run)
        now = self.cache.clock()
        window = _number(params, "window", None, 1e-3, 1e12)
        points = int(_number(params, "points", 120, 2, 1000))
        calc = entry.calc

        def build():
            state, since = run_state(calc, now)
            out = series(calc, now, points=points, window=window)
            out["steps"] = self._cached(entry, "steps", entry.version,
                                        lambda: step_series(calc.step_stats()))
            out.update(run=run, state=state, state_since=since, version=entry.version)
            return _finite(out)
        # one slot: another window or point count replaces it (memory stays bounded)
        return self._cached(entry, "series", (self._moment(entry, now), window, points), build)

    def compare(self, params: Dict[str, str]) -> Dict[str, Any]:
        try:  # a group no run can have (too long, control characters) is the asker's error
            group = check_run_group(params.get("group"), "group")
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if not group:
            raise BadRequest("give ?group=G")
        with self.cache.io:  # compare reads every run of the store itself
            try:
                return compare_reports(self.cache.store, group=group, now=self.cache.clock())
            except CliError as exc:
                raise NotFound(str(exc)) from None

    def versions(self, run: Optional[str]) -> Any:
        """What the live stream compares: the run's version; for the runs page, every
        run's version in the store (any run with a new event, or a new run, changes
        it; stores without versions: the number of runs) and the versions of the runs
        kept (open pages, running runs: read anew where due)."""
        if run is not None:
            return self.cache.poll(run) if self.cache.exists(run) else None
        return (self.cache.store_versions() or len(self.cache.names()),
                self.cache.cached_versions())
