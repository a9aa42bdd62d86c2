"""Run summaries: each run's current figures at a glance, kept incrementally.

A store shared by a cluster holds hundreds to thousands of runs; listing them
with their goodput and state must not recompute every run from its events.
A :class:`RunSummary` holds a run's headline figures together with the
*version* of the run they reflect: a token from the store that changes
whenever an event of the run is added (the largest event id in SQLite and
PostgreSQL, the event count in memory). :func:`run_summaries` serves a
summary from the cache only while the store still reports that version, and
only for runs whose figures no longer depend on the clock (ended, or stopped
by the liveness rule): a running run, or one with new events, is recomputed,
so a summary is never stale. Computing one costs one cold read of that run.

The cache (:class:`~goodput_core.stores.summary_cache.SummaryCache`) is a
private file of the reading user (``$XDG_CACHE_HOME/goodput/summaries.sqlite``),
keyed by the store's URL: summaries are derived data, so readers of a shared
store need no write access to it, writers never pay for them, and deleting the
file only costs the next listing a recomputation. Stores without versions
(Cloud Logging) are summarised afresh at each listing.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from goodput_core.queries.run_groups import check_run_group, group_of

__all__ = ["RunSummary", "run_summaries", "runs_in_group", "summarize", "SUMMARY_FORMAT"]

#: Bumped when the figures of a summary change meaning: older cached ones are recomputed.
SUMMARY_FORMAT = 1
#: States whose figures no longer depend on the query time (cacheable).
FINAL_STATES = frozenset({"ended", "stopped"})


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """A run's headline figures at a query time.

    Attributes:
      run: the run name.
      version: the store's version of the run they reflect (None: unknown).
      state: ``running``, ``ended``, ``stopped`` or ``not started``.
      state_text: the state for people (``stopped at T (cause)``).
      goodput: cumulative goodput in percent.
      total_seconds, productive_seconds: as in the report.
      disruptions: restarts.
      max_productive_step, last_step: as in the report.
      first_start: the first job start (None before one).
      last_activity: the latest event time of the run (None without one).
      group: the run group (None: none).
      query_time: when the figures were computed.
    """

    run: str
    version: Any
    state: str
    state_text: str
    goodput: float
    total_seconds: float
    productive_seconds: float
    disruptions: int
    max_productive_step: int
    last_step: int
    first_start: Optional[float]
    last_activity: Optional[float]
    group: Optional[str]
    query_time: float

    def to_json(self) -> Dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "RunSummary":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _state(calc: Any, now: float) -> tuple:
    """(state, text) of the run: the liveness rule's when the engine has it."""
    state_fn = getattr(calc, "state", None)
    if callable(state_fn):
        st = state_fn(now)
        return st.state, st.describe()
    att = calc.timeline.attempts
    if not len(att):
        return "not started", "not started"
    last_end = att.end[-1]
    state = "running" if last_end != last_end else "ended"  # NaN: the last attempt is open
    return state, state


def _last_activity(calc: Any) -> Optional[float]:
    tables = calc.timeline.tables
    last = -math.inf
    for name in ("job_start", "job_end", "step_start", "step_end", "disruption"):
        t = tables[name]["t"]
        if len(t):
            last = max(last, float(t.max()))
    return last if math.isfinite(last) else None


def summarize(calc: Any, now: float, version: Any = None) -> RunSummary:
    """The summary of a refreshed calculator's run at ``now``."""
    r = calc.cumulative(now)
    state, text = _state(calc, now)
    life = calc.lifetime(now)
    return RunSummary(
        run=calc.run, version=version, state=state, state_text=text, goodput=r.goodput,
        total_seconds=r.total_seconds, productive_seconds=r.productive_seconds,
        disruptions=r.disruptions, max_productive_step=r.max_productive_step,
        last_step=r.last_step, first_start=None if life is None else life[0],
        last_activity=_last_activity(calc), group=group_of(calc), query_time=float(now))


def run_summaries(store: Any, *, now: Optional[float] = None, cache: Any = "default",
                  runs: Optional[Iterable[str]] = None) -> List[RunSummary]:
    """Every run's summary (or those of ``runs``), oldest run first.

    Args:
      store: an open store.
      now: the query time (default: the clock).
      cache: a SummaryCache, None for no cache, or "default" (the user's cache file;
        no cache when it cannot be opened).
      runs: only these runs (default: every run of the store).
    """
    from goodput_core.queries.calculator import Calculator

    now = time.time() if now is None else float(now)
    if cache == "default":
        from goodput_core.stores.summary_cache import SummaryCache

        cache = SummaryCache.open_default()
    versions_fn = getattr(store, "run_versions", None)
    versions: Dict[str, Any] = versions_fn() if callable(versions_fn) else {}
    names = list(runs) if runs is not None else (list(versions) if versions else store.runs())
    cached: Dict[str, RunSummary] = {}
    if cache is not None and versions:
        for run, d in cache.get(store.url, SUMMARY_FORMAT, names).items():
            try:
                cached[run] = RunSummary.from_json(d)
            except TypeError:  # a row of another shape: recomputed below
                pass
    out: List[RunSummary] = []
    fresh: List[RunSummary] = []
    for name in names:
        version = versions.get(name)
        hit = cached.get(name)
        if hit is not None and version is not None and hit.version == version \
                and hit.state in FINAL_STATES:
            out.append(hit)
            continue
        calc = Calculator(name, store, clock=lambda: now)
        calc.refresh()
        s = summarize(calc, now, version)
        out.append(s)
        if version is not None and s.state in FINAL_STATES:
            fresh.append(s)
    if cache is not None and fresh:
        cache.put(store.url, SUMMARY_FORMAT, [s.to_json() for s in fresh])
    return out


def runs_in_group(store: Any, group: str, *, clock: Any = None) -> List[Tuple[str, Any]]:
    """The runs of ``store`` whose group is ``group``, oldest first.

    The group of each run comes from its summary (cached while the run
    does not change), so only the group's runs are read.

    Args:
      store: an open :class:`~goodput_core.stores.Store`.
      group: the group name (compared exactly, after stripping).
      clock: the calculators' clock (default: ``time.time``).

    Returns:
      ``[(run name, refreshed Calculator), ...]``.
    """
    from goodput_core.queries.calculator import Calculator

    group = check_run_group(group, "--group")
    kwargs = {} if clock is None else {"clock": clock}
    now = None if clock is None else clock()
    # the run summaries know each run's group: only the group's runs are read
    members = [s.run for s in run_summaries(store, now=now) if s.group == group]
    out = []
    for run in members:
        calc = Calculator(run, store, **kwargs)
        calc.refresh()
        if group_of(calc) == group:  # a run that changed group since its summary
            out.append((run, calc))
    return out
