"""Run summaries: each run's current figures at a glance, kept incrementally.

A store shared by a cluster holds hundreds to thousands of runs; listing them
with their goodput and state must not recompute every run from its events.
A :class:`RunSummary` holds a run's headline figures together with the
*version* of the run they reflect: a token from the store that changes
whenever an event of the run is added (the largest event id in SQLite and
PostgreSQL, the event count in memory, the newest entry's position in Cloud
Logging). :class:`Summaries` serves a summary from the cache only while the
store still reports that version, and only for runs whose figures no longer
depend on the clock (ended, or stopped by the liveness rule): a running run,
or one with new events, is recomputed, so a summary is never stale. Computing
one costs one cold read of that run (or none, where the caller holds the
run's calculator already: ``goodput serve`` keeps those of the runs looked at).

The cache (:class:`~goodput_core.stores.summary_cache.SummaryCache`) is a
private file of the reading user (``$XDG_CACHE_HOME/goodput/summaries.sqlite``),
keyed by the store's URL: summaries are derived data, so readers of a shared
store need no write access to it, writers never pay for them, and deleting the
file only costs the next listing a recomputation. Stores without versions are
summarised afresh at each listing.

``goodput runs --summary``, run groups (``compare --group``) and ``goodput
serve``'s runs page all read summaries here: one way to summarise a run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from goodput_core.queries.run_groups import check_run_group, group_of
from goodput_core.stores.summary_cache import SummaryCache

__all__ = ["RunSummary", "Summaries", "run_summaries", "runs_in_group", "summarize",
           "last_activity", "goodput_trend", "state_of", "SUMMARY_FORMAT", "STOPPED_AFTER_SECONDS"]

#: Bumped when the figures of a summary change meaning: older cached ones are recomputed.
SUMMARY_FORMAT = 2
#: States whose figures no longer depend on the query time (cacheable).
FINAL_STATES = frozenset({"ended", "stopped"})
#: Points of a summary's goodput trend (the runs page's sparkline).
TREND_POINTS = 24
#: Where the engine does not tell a run's state: a run whose last event is older
#: than this reads as stopped (three heartbeat intervals,
#: ``GOODPUT_HEARTBEAT_SECONDS``, 10 s by default, as liveness defines it).
STOPPED_AFTER_SECONDS = 3 * float(os.environ.get("GOODPUT_HEARTBEAT_SECONDS") or 10)
# Span labels outside a window's total time: overlapped loading (also in another
# bucket), time between attempts and waits for resources (lifecycle).
_NOT_IN_TOTAL = frozenset({"DATA_LOADING_ASYNC", "IDLE", "SCHEDULING"})
_LOG_INDEX = "log_index"  # the cache note holding a store's log index


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
      state_since: when the state began, where known.
      events: the events the figures were computed from.
      trend: cumulative goodput over the lifetime, ``[[t, percent or None], ...]``
        (:func:`goodput_trend`).
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
    state_since: Optional[float] = None
    events: Optional[int] = None
    trend: List[List[Any]] = dataclasses.field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        # the trend's points are finite or None already
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "RunSummary":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def state_of(calc: Any, now: float) -> Tuple[str, Optional[float], str]:
    """``(state, since, text)`` of the run at ``now``: ``not started``, ``running``,
    ``stopped`` or ``ended``; ``since`` is when the state began where known;
    ``text`` says it for people (``stopped at T (cause)``).

    The liveness rule's (``Calculator.state``, semantics rule 15) where the
    engine tells it; otherwise the last attempt's end, a recorded disruption,
    or :data:`STOPPED_AFTER_SECONDS` without a sign of life.
    """
    att = calc.timeline.attempts
    if not len(att):
        return "not started", None, "not started"
    told = getattr(calc, "state", None)
    if callable(told):
        st = told(now)
        if st.state == "stopped":
            return "stopped", st.stopped_at, st.describe()
        if st.state == "ended":
            return "ended", float(att.end[-1]), st.describe()
        return str(st.state), float(att.start[-1]), st.describe()
    if att.end[-1] == att.end[-1]:  # not NaN: a job end closed the last attempt
        return "ended", float(att.end[-1]), "ended"
    last = last_activity(calc)
    disruptions = calc.timeline.tables["disruption"]
    if len(disruptions) and float(disruptions["t"][-1]) >= float(att.start[-1]) \
            and last is not None and float(disruptions["t"][-1]) >= last:
        return "stopped", float(disruptions["t"][-1]), "stopped"
    if last is not None and now - last > STOPPED_AFTER_SECONDS:
        return "stopped", last, "stopped"
    return "running", float(att.start[-1]), "running"


def last_activity(calc: Any) -> Optional[float]:
    """The time of the run's latest event of any kind (None before any)."""
    tl = calc.timeline
    latest = -math.inf
    for table in tl.tables.tables.values():
        if len(table):
            latest = max(latest, float(table["t"][-1]))  # tables are kept sorted by time
    for hang in tl.tables.hangs:
        latest = max(latest, float(hang.get("detected") or -math.inf))
    return latest if math.isfinite(latest) else None


def goodput_trend(calc: Any, now: float, points: int = TREND_POINTS) -> List[List[Any]]:
    """Cumulative goodput at ``points`` times evenly spread over the lifetime:
    ``[[t, percent or None], ...]`` (None: nothing measured yet; ``[]`` before a
    lifetime). Each point is what ``calc.window(first start, t)`` says, computed
    from the attributed spans read once (binary searches at the points, not one
    window query each: a summary of every run of a store pays for it)."""
    life = calc.lifetime(now)
    if life is None or not life[1] > life[0]:
        return []
    ts = np.linspace(life[0], life[1], points + 1)[1:]
    productive, total = np.zeros(points), np.zeros(points)
    for label, (s, e) in calc.span_arrays(life[0], life[1], now=now).items():
        if label in _NOT_IN_TOTAL or not len(s):
            continue
        # seconds of the label before each point: its spans are disjoint and in order
        cum = np.concatenate(([0.0], np.cumsum(e - s)))
        i = np.maximum(np.searchsorted(s, ts, side="right") - 1, 0)
        covered = np.where(ts >= s[0], cum[i] + np.clip(ts - s[i], 0.0, e[i] - s[i]), 0.0)
        total += covered
        if label == "PRODUCTIVE":
            productive += covered
    return [[t, 100.0 * p / q if q > 0 else None]
            for t, p, q in zip(ts.tolist(), productive.tolist(), total.tolist())]


def summarize(calc: Any, now: float, version: Any = None,
              events: Optional[int] = None) -> RunSummary:
    """The summary of a refreshed calculator's run at ``now`` (``events``: how
    many events it was computed from, where the caller counted them)."""
    r = calc.cumulative(now)
    state, since, text = state_of(calc, now)
    life = calc.lifetime(now)
    return RunSummary(
        run=calc.run, version=version, state=state, state_text=text, goodput=r.goodput,
        total_seconds=r.total_seconds, productive_seconds=r.productive_seconds,
        disruptions=r.disruptions, max_productive_step=r.max_productive_step,
        last_step=r.last_step, first_start=None if life is None else life[0],
        last_activity=last_activity(calc), group=group_of(calc), query_time=float(now),
        state_since=since, events=events, trend=goodput_trend(calc, now))


class Summaries:
    """The summaries of one store's runs: served from the cache while a run's
    version is unchanged and its state final, computed otherwise.

    Args:
      store: an open store.
      cache: a SummaryCache, None for no cache, or "default" (the user's cache
        file; no cache when it is turned off or cannot be opened).
    """

    def __init__(self, store: Any, cache: Any = "default"):
        if cache == "default":
            cache = SummaryCache.open_default()
        self.store = store
        self.cache = cache
        self._fresh: List[RunSummary] = []
        # final summaries this object read or computed: a long-lived reader (the
        # dashboard) asks the cache file only about runs whose version moved
        self._known: Dict[str, RunSummary] = {}
        self._restored = False  # the store's log index read from the cache (once)
        self._saved_cursor: Any = None

    def versions(self) -> Dict[str, Any]:
        """Each run's version, oldest run first (``{}``: the store has none).

        A store that builds its versions from an index of its own (Cloud Logging:
        each run's newest entry in the log) starts from the index kept in the
        cache by the last listing, and leaves its new one there: a listing then
        reads only the log's entries since the last one."""
        versions_fn = getattr(self.store, "run_versions", None)
        if not callable(versions_fn):
            return {}
        restore = getattr(self.store, "restore_log_index", None)
        if self.cache is None or not callable(restore):
            return versions_fn()
        if not self._restored:
            self._restored = True
            restore(self.cache.get_note(self.store.url, _LOG_INDEX))
        versions = versions_fn()
        index = self.store.log_index()
        if index is not None and index["cursor"] != self._saved_cursor:
            self.cache.put_note(self.store.url, _LOG_INDEX, index)
            self._saved_cursor = index["cursor"]
        return versions

    def cached(self, names: Iterable[str], versions: Dict[str, Any]) -> Dict[str, RunSummary]:
        """The cached summaries of ``names`` that are still good: same version,
        final state."""
        out: Dict[str, RunSummary] = {}
        if not versions:
            return out
        ask = []
        for run in names:
            known = self._known.get(run)
            if known is not None and known.version == versions.get(run):
                out[run] = known
            else:
                ask.append(run)
        if self.cache is None or not ask:
            return out
        for run, d in self.cache.get(self.store.url, SUMMARY_FORMAT, ask).items():
            try:
                hit = RunSummary.from_json(d)
            except TypeError:  # a row of another shape: recomputed by the caller
                continue
            if versions.get(run) is not None and hit.version == versions[run] \
                    and hit.state in FINAL_STATES:
                out[run] = self._known[run] = hit
        return out

    def compute(self, name: str, now: float, version: Any,
                calc: Any = None, events: Optional[int] = None) -> RunSummary:
        """The run's summary from ``calc`` (refreshed by the caller up to at least
        ``version``), or from a calculator read cold here; kept for :meth:`save`
        when its state is final."""
        if calc is None:
            # lazy: the calculator's modules: a listing from the summary cache needs none
            from goodput_core.queries.calculator import Calculator

            calc = Calculator(name, self.store, clock=lambda: now)
            events = calc.refresh()
        s = summarize(calc, now, version, events)
        if version is not None and s.state in FINAL_STATES:
            self._fresh.append(s)
            self._known[name] = s
        return s

    def save(self) -> None:
        """Writes the summaries computed since the last save to the cache."""
        fresh, self._fresh = self._fresh, []
        if self.cache is not None and fresh:
            self.cache.put(self.store.url, SUMMARY_FORMAT, [s.to_json() for s in fresh])


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
    now = time.time() if now is None else float(now)
    summaries = Summaries(store, cache)
    versions = summaries.versions()
    names = list(runs) if runs is not None else (list(versions) if versions else store.runs())
    hits = summaries.cached(names, versions)
    out = [hits.get(name) or summaries.compute(name, now, versions.get(name))
           for name in names]
    summaries.save()
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
    # lazy: the calculator's modules: a listing from the summary cache needs none
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
