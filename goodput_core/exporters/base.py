"""The interface between the monitor loop and the exporters.

Every monitor cycle builds one :class:`MonitorSnapshot` and hands it to each
exporter's :meth:`Exporter.export`. Exporters run on the monitor's thread,
never on the training thread; a failing or hanging exporter is logged and
skipped by the monitor without stopping the others.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from goodput_core.queries.checkpoint_advice import CheckpointAdvice
from goodput_core.queries.diagnostics import MetricPoint
from goodput_core.queries.hangs import Hang
from goodput_core.queries.host_outliers import HostBreakdown
from goodput_core.queries.incidents import IncidentSummary
from goodput_core.queries.lifecycle import Lifecycle
from goodput_core.queries.elastic import SliceEfficiency
from goodput_core.queries.program_goodput import ProgramGoodput
from goodput_core.queries.quantile_sketch import QuantileSketch
from goodput_core.queries.results import GoodputResult
from goodput_core.queries.run_trace import TraceSpan
from goodput_core.queries.step_stats import StepStats
from goodput_core.timeline.liveness import RunState

__all__ = ["Exporter", "MonitorSnapshot", "TraceDelta", "portable_settings"]


@dataclass(frozen=True)
class TraceDelta:
    """The run as a trace, as far as a cycle handed it out (exporters that set
    ``wants_trace``).

    Attributes:
      attempts: every attempt span so far (``closed`` False for one going on).
      phases: the phase spans that ended since the last cycle (at the final
        cycle also those still going on), in time order.
    """

    attempts: List[TraceSpan]
    phases: List[TraceSpan]


@dataclass(frozen=True)
class MonitorSnapshot:
    """What one monitor cycle computed for a run.

    Attributes:
      run: the run (job) name.
      query_time: the POSIX time the results are for.
      cumulative: the cumulative result (None when goodput export is off).
      rolling: results of the rolling windows, keyed by window size in seconds.
      step_stats: step-time statistics (None when step deviation is off).
      new_step_deviations: ``(step, deviation seconds)`` for steps not
        exported before (exporters write only these, never the whole history).
      recorder_dropped: events the local recorder dropped (queue full), if known.
      final: True for the last cycle, run by ``stop()``.
      slice_efficiency: cumulative stepping/available slice efficiency
        (None: off, or no slice count in force yet; with the cumulative result).
      rolling_slice_efficiency: the same per rolling window (windows without
        a slice count in force are left out).
      program_goodput: MFU and ML productivity goodput (None: off, or the
        metadata lacks flops per step, peak FLOP/s or the device count).
      metrics: the latest point of every model metric seen so far.
      new_metric_points: ``{name: [MetricPoint, ...]}`` that arrived since the
        last cycle, in time order (exporters that write series, like
        TensorBoard, write only these).
      hangs: the run's hangs so far (:class:`~goodput_core.queries.hangs.Hang`).
      checkpoint_advice: checkpoint-interval advice (None: insights off).
      hosts: per-host breakdown (None: insights off or fewer than two hosts).
      state: running, stopped (where and why) or ended (semantics.md rule 15;
        None when the goodput part was not computed).
      step_time_sketch: the step times seen so far as a quantile sketch (with
        ``step_stats``; None in a snapshot built without one: exporters then
        compute quantiles from ``step_stats.step_times``).
      run_state: ``running``, ``stopped`` or ``ended`` where the calculator
        tells a run's state (None: insights off, or not told).
      trace: the run as a trace (None unless an exporter wants it).
      lifecycle: scheduling goodput, ETTR and MPG (None: insights off, or the
        run has no scheduling events).
      incidents: the run's incidents, MTBF and MTTR (None: insights off or no
        incident yet).
      deadline: when the monitor stops waiting for this export
        (``time.monotonic()``; None: no deadline): an exporter with network
        timeouts of its own keeps within it (at ``stop()``, what is left of
        the final cycle's bound).
    """

    run: str
    query_time: float
    cumulative: Optional[GoodputResult] = None
    rolling: Dict[int, GoodputResult] = field(default_factory=dict)
    step_stats: Optional[StepStats] = None
    new_step_deviations: List[Tuple[int, float]] = field(default_factory=list)
    recorder_dropped: Optional[int] = None
    final: bool = False
    slice_efficiency: Optional[SliceEfficiency] = None
    rolling_slice_efficiency: Dict[Any, SliceEfficiency] = field(default_factory=dict)
    program_goodput: Optional[ProgramGoodput] = None
    metrics: Dict[str, MetricPoint] = field(default_factory=dict)
    new_metric_points: Dict[str, List[MetricPoint]] = field(default_factory=dict)
    hangs: List[Hang] = field(default_factory=list)
    checkpoint_advice: Optional[CheckpointAdvice] = None
    hosts: Optional[HostBreakdown] = None
    step_time_sketch: Optional[QuantileSketch] = None
    run_state: Optional[str] = None
    trace: Optional[TraceDelta] = None
    lifecycle: Optional[Lifecycle] = None
    incidents: Optional[IncidentSummary] = None
    state: Optional[RunState] = None
    deadline: Optional[float] = None

    @property
    def stopped(self) -> bool:
        """True when the run stopped without a job end (rule 15)."""
        return getattr(self.state, "state", None) == "stopped"

    @property
    def hung(self) -> bool:
        """True while a hang is open (no progress since the watchdog fired)."""
        return any(h.end is None for h in self.hangs)

    @property
    def hang_seconds(self) -> float:
        """Seconds of every hang so far (open ones up to the query time)."""
        return float(sum(h.seconds for h in self.hangs))


class Exporter(abc.ABC):
    """Publishes monitor snapshots somewhere."""

    #: A short name for logs ("tensorboard", "gcm", "prometheus", "console").
    name: str = "exporter"

    @abc.abstractmethod
    def export(self, snapshot: MonitorSnapshot) -> None:
        """Publishes one snapshot. May raise: the monitor logs and skips."""

    #: True for an exporter that wants the run as a trace (``snapshot.trace``).
    wants_trace: bool = False

    def close(self) -> None:
        """Flushes and releases resources (called once, at monitor stop)."""

    def process_spec(self) -> Optional[Dict[str, Any]]:
        """How a monitor process rebuilds this exporter: a spec of its kind in
        :mod:`goodput_core.exporters.registry` (``registry.spec(name,
        **JSON-able kwargs)``); None (the
        default) when it can only run in this process (the monitor then
        runs on a thread here; :mod:`goodput_core.monitor.process`)."""
        return None


def portable_settings(**settings: Any) -> Optional[Dict[str, Any]]:
    """``settings`` as plain JSON values for ``process_spec()`` (mappings as
    dicts), or None when one is not (the exporter then stays in this process)."""
    import json

    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in settings.items()}
    try:
        json.dumps(out)
    except (TypeError, ValueError):
        return None
    return out
