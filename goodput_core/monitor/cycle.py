"""What a monitor cycle computes besides runtime goodput.

:class:`Extras` adds to each :class:`~goodput_core.exporters.base.MonitorSnapshot`:

* with the ``"goodput"`` part: the cumulative slice efficiency (runs with
  slice counts), program goodput (MFU and ML productivity goodput, when the
  run metadata has flops per step, a peak FLOP/s and the device count) and
  the model metrics (the points new since the last cycle, and the latest
  point of each metric);
  and the insights (hangs, checkpoint-interval advice, per-host breakdown:
  :mod:`goodput_core.queries.hangs`, :mod:`goodput_core.queries.checkpoint_advice`,
  :mod:`goodput_core.queries.host_outliers`);
* with the ``"rolling"`` part: the slice efficiency of each rolling window;
* with the ``"goodput"`` part, when an exporter wants the run as a trace
  (``wants_trace``): the attempts and the phases that ended since the last
  cycle (:mod:`goodput_core.queries.run_trace`).

Each is switched on or off by the monitor's ``include_slice_efficiency``,
``include_program_goodput`` and ``include_metrics``. Slice efficiency is left
out for a window in which no slice count was in force yet
(:func:`goodput_core.queries.elastic.reportable`).

Exporters write metric points and step deviations once: each cycle hands
out only the new ones (:func:`fresh_deviations`; the metric cursor of
:class:`Extras`); what a busy exporter missed is carried to its next
snapshot by :mod:`goodput_core.monitor.exporting` (bounded: the newest
``MAX_CARRY`` per series).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Collection, Dict, List, Optional, Sequence, Tuple

import numpy as np

from goodput_core.queries.diagnostics import MetricPoint
from goodput_core.queries.elastic import SliceEfficiency, reportable
from goodput_core.queries.incidents import incidents
from goodput_core.queries.lifecycle import lifecycle
from goodput_core.queries.run_trace import attempt_spans, phase_spans
from goodput_core.queries.step_series import StepSeries
from goodput_core.exporters.base import TraceDelta

__all__ = ["Extras", "HISTORY_STEPS", "MAX_CARRY", "fresh_deviations", "fresh_steps"]

#: Step deviations (and points per metric) kept for an exporter that is stuck.
MAX_CARRY = 100_000
#: A monitor's first cycle hands out the deviations of at most this many steps
#: (the newest): a resumed run's history was exported by the earlier attempt's
#: monitor, and writing it again would cost seconds per 100,000 steps.
HISTORY_STEPS = 10_000


class Extras:
    """Computes the optional parts of a snapshot and tracks the metric cursor.

    Args:
      slice_efficiency: compute slice efficiencies (cumulative and rolling).
      program_goodput: compute program goodput.
      metrics: hand out model metric points.
      on_error: ``on_error(source, exception)`` for an extra that failed; that
        extra is left out of the cycle, goodput still goes out (None: raise).
    """

    def __init__(self, *, slice_efficiency: bool = True, program_goodput: bool = True,
                 metrics: bool = True, insights: bool = True, trace: bool = False,
                 on_error: Optional[Callable[[str, BaseException], None]] = None):
        self.insights = bool(insights)
        self.slice_efficiency = bool(slice_efficiency)
        self.program_goodput = bool(program_goodput)
        self.metrics = bool(metrics)
        self._on_error = on_error
        self._cursor = -1  # the calculator's metric arrival cursor
        self.trace = bool(trace)
        self._incidents_key: Any = None
        self._incidents: Any = None
        self._trace_since = -math.inf  # where the first phase not handed out starts
        self._latest: Dict[str, MetricPoint] = {}

    def compute(self, calc: Any, parts: Collection[str], now: float, cumulative: Any,
                windows: Sequence[Any], final: bool = False) -> Dict[str, Any]:
        """The snapshot fields of the enabled extras for this cycle.

        Args:
          calc: the monitor's (refreshed) Calculator.
          parts: the parts of this cycle.
          now: the query time.
          cumulative: the cycle's cumulative result (None without the goodput part).
          windows: the rolling window sizes of this cycle (empty without that part).
          final: the monitor's last cycle (phases still open are handed out too).

        Returns:
          Keyword arguments for :class:`MonitorSnapshot` (only the computed ones).
        """
        out: Dict[str, Any] = {}
        goodput = "goodput" in parts
        if self.slice_efficiency and (goodput or windows):
            self._guard("slice efficiency", self._efficiency, out, calc, goodput, now, windows)
        if goodput and self.program_goodput and cumulative is not None:
            self._guard("program goodput", self._program, out, calc, now, cumulative)
        if goodput:  # running, stopped at T (cause) or ended: always with goodput
            self._guard("state", self._state, out, calc, now)
        if goodput and self.insights:
            self._guard("insights", self._insights, out, calc, now, cumulative)
        if goodput and self.trace:
            self._guard("trace", self._trace, out, calc, now, final)
        if goodput and self.metrics:
            # last: the cursor moves only once everything else was computed
            self._guard("metrics", self._metrics, out, calc)
        return out

    def _guard(self, source: str, fn: Callable[..., None], *args: Any) -> None:
        # a diagnostics bug must not cost the cycle its goodput figures
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - reported, the other parts go on
            if self._on_error is None:
                raise
            self._on_error(source, exc)

    def _efficiency(self, out: Dict[str, Any], calc: Any, goodput: bool, now: float,
                    windows: Sequence[Any]) -> None:
        counts = calc.slice_counts()
        if not len(counts.times):  # most runs have none: no query at all
            return
        if goodput:
            out["slice_efficiency"] = _reported(calc.slice_efficiency(now=now), counts)
        end = calc.rolling_end(now)  # a finished run's windows end where it did (rule 10)
        effs = {size: _reported(calc.slice_efficiency(end - float(size), end, now), counts)
                for size in windows}
        out["rolling_slice_efficiency"] = {k: v for k, v in effs.items() if v is not None}

    def _state(self, out: Dict[str, Any], calc: Any, now: float) -> None:
        out["state"] = calc.state(now)

    def _insights(self, out: Dict[str, Any], calc: Any, now: float, cumulative: Any) -> None:
        out["hangs"] = calc.hangs(now)
        out["checkpoint_advice"] = calc.checkpoint_advice(now)
        lc = lifecycle(calc, now, cumulative)  # the cycle's result: not computed again
        out["lifecycle"] = lc if lc.available else None
        # incidents read the whole run: only when there is one (a restart, or a
        # stop not restarted: an open incident), and again only when an attempt
        # or a disruption was added or the run stopped since
        tl = calc.timeline
        stopped = out.get("state") is not None and getattr(out["state"], "stopped", False)
        key = (len(tl.attempts), len(tl.tables["disruption"]), stopped)
        if (key[0] > 1 or stopped) and key != self._incidents_key:
            self._incidents_key, self._incidents = key, incidents(calc, now)
        out["incidents"] = self._incidents
        if getattr(calc, "_store", None) is not None:
            hosts = calc.hosts(now)
            out["hosts"] = hosts if len(hosts.hosts) >= 2 else None
        state = getattr(calc, "state", None)  # liveness, where the engine tells it
        if callable(state):
            out["run_state"] = str(state(now).state)

    def _trace(self, out: Dict[str, Any], calc: Any, now: float, final: bool) -> None:
        # Phases are computed from the start of the first one not handed out yet:
        # a phase boundary, so the pieces (and their ids) are those of a full read,
        # and a cycle costs what is new, not the run's length.
        phases = phase_spans(calc, now, self._trace_since)
        done = phases if final else [p for p in phases if p.closed]
        pending = [p for p in phases if not p.closed]
        if pending and not final:
            self._trace_since = pending[0].start
        elif done:
            self._trace_since = done[-1].end
        out["trace"] = TraceDelta(attempt_spans(calc, now), done)

    def _program(self, out: Dict[str, Any], calc: Any, now: float, cumulative: Any) -> None:
        out["program_goodput"] = calc.program_goodput(now, result=cumulative)

    def _metrics(self, out: Dict[str, Any], calc: Any) -> None:
        out["new_metric_points"] = self._new_points(calc)
        out["metrics"] = dict(self._latest)

    def _new_points(self, calc: Any) -> Dict[str, List[MetricPoint]]:
        series, self._cursor = calc.metrics_since(self._cursor)
        out: Dict[str, List[MetricPoint]] = {}
        for name, s in series.items():
            points = [MetricPoint(int(st), float(t), float(v)) for st, t, v in
                      zip(s.steps.tolist(), s.times.tolist(), s.values.tolist())]
            out[name] = points
            # a late point (earlier in time) does not replace a newer one
            last, prev = points[-1], self._latest.get(name)
            if prev is None or last.time >= prev.time:
                self._latest[name] = last
        return out


def _reported(eff: Optional[SliceEfficiency], counts: Any) -> Optional[SliceEfficiency]:
    return eff if reportable(eff, counts) else None


# ------------------------------------------------ written once, and carry
def fresh_steps(steps: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Indexes into ``steps`` (sorted, unique) of the steps not in ``done``
    (sorted, unique, a subset of ``steps`` in a monitor: steps are never removed).

    O(log n) when only steps after the last done one are new (a run going
    on); a full comparison only when some step before it is new (late
    events of another host, a step number reused).
    """
    if not len(done):
        return np.arange(len(steps))
    first_new = int(np.searchsorted(steps, done[-1], side="right"))
    if first_new == len(done) and steps[first_new - 1] == done[-1]:
        return np.arange(first_new, len(steps))  # the older ones are exactly ``done``
    idx = np.minimum(np.searchsorted(done, steps), len(done) - 1)
    return np.flatnonzero(done[idx] != steps)


def fresh_deviations(stats: Any, done: Any, new_times: Any = None
                     ) -> Tuple[List[Tuple[int, float]], Any]:
    """Deviations of the steps not handed out before.

    Args:
      stats: the cycle's :class:`~goodput_core.queries.step_stats.StepStats`.
      done: the steps whose deviation was handed out already: what the last
        call returned (a :class:`~goodput_core.queries.step_series.StepSeries`),
        or a sorted array of steps.
      new_times: called with the step times of those steps (all of them), e.g.
        a quantile sketch's ``add``.

    Returns:
      ``([(step, deviation), ...], done with those steps added)``: at most
      the last :data:`MAX_CARRY` pairs when more are new at once, and at most
      :data:`HISTORY_STEPS` on the first cycle (``done`` empty). While steps
      only grow, only the new steps are read (not the run's length).
    """
    series = stats.series
    if stats.ideal_step_time is None or not len(series):  # no ideal step time yet
        return [], done
    if not isinstance(done, StepSeries):
        done = StepSeries.of(done)
    n, last = len(series), done.last_step
    first_new = 0 if last is None else series.rank(last)
    if last is None or (first_new == len(done) and series.step_at(first_new - 1) == last):
        # the older ones are exactly ``done`` (steps are never removed): a suffix
        fresh, fresh_times = series.slice(first_new, n)
        after = series  # every step is done now: the cycle's own (immutable) series
    else:  # some step before the last done one is new (late events, a step number reused)
        steps, times = series.arrays()
        done_steps = done.arrays()[0]
        mask = fresh_steps(steps, done_steps)
        fresh, fresh_times = steps[mask], times[mask]
        after = StepSeries.of(np.union1d(done_steps, fresh))
    if not len(fresh):
        return [], done
    if new_times is not None:
        new_times(np.asarray(fresh_times, np.float64))
    # A monitor started on a long run (millions of steps) hands out the most
    # recent ones only, as a busy exporter's carry keeps: the older are done.
    keep = MAX_CARRY if len(done) else min(MAX_CARRY, HISTORY_STEPS)
    dev = stats.deviations_of(fresh_times[-keep:])
    return list(zip(fresh[-keep:].tolist(), dev.tolist())), after
