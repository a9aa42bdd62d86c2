"""Handing a cycle's snapshot to the exporters, and closing them.

Each exporter runs on its own :class:`~goodput_core.monitor.runner.Runner`;
:func:`dispatch` submits the snapshot to every free one and waits for them only
until the cycle's deadline (docs/quality.md R5). Exporters write metric points and
step deviations once: an exporter that was still busy when a cycle was handed
out would miss them, so :func:`keep_carry` keeps them on its runner and
:func:`with_carry` hands them over with its next snapshot (bounded: the newest
:data:`~goodput_core.monitor.cycle.MAX_CARRY` per series).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Dict, List, Sequence

from goodput_core.exporters.base import MonitorSnapshot
from goodput_core.monitor import cycle
from goodput_core.monitor.runner import Deadlines, Runner
from goodput_core.queries.diagnostics import MetricPoint

__all__ = ["clear_carry", "close_all", "dispatch", "keep_carry", "with_carry"]

#: ``wait_until(event, deadline)``: True once ``event`` is set, False at the deadline.
WaitUntil = Callable[[threading.Event, float], bool]


_wait_until: WaitUntil = Deadlines().wait_until  # real time

logger = logging.getLogger(__name__)


def dispatch(runners: Sequence[Runner], snapshot: MonitorSnapshot, deadline: float,
             report: Callable[[str, Any], None], wait_until: WaitUntil = _wait_until) -> bool:
    """Hands ``snapshot`` to every free exporter; waits for them until ``deadline``
    (``wait_until``: the monitor's time, real by default).

    Returns:
      True when every exporter took the snapshot and finished in time.
    """
    pending = []
    for runner in runners:
        snap = with_carry(runner, snapshot)
        done = runner.submit(lambda e=runner.exporter, s=snap: e.export(s))
        if done is None:
            report(f"exporter {runner.name}", "busy")
            # keep what it missed: deviations and metric points are written once
            keep_carry(runner, snapshot)
        else:
            clear_carry(runner, snap)
            pending.append((runner, done))
    complete = len(pending) == len(runners)
    for runner, done in pending:
        if not wait_until(done, deadline):
            complete = False
            report(f"exporter {runner.name}", "timeout")
    return complete


def close_all(runners: Sequence[Runner], deadline: float, run: str,
              wait_until: WaitUntil = _wait_until) -> bool:
    """Closes every exporter (on its runner) and retires the runners, until ``deadline``.

    Returns:
      False when an exporter was still busy or did not close in time.
    """
    ok, pending = True, []
    for runner in runners:
        done = runner.submit(runner.exporter.close)
        runner.retire()
        if done is None:
            ok = False
            logger.warning("goodput monitor %s: exporter %s is still busy; not closed",
                           run, runner.name)
        else:
            pending.append((runner, done))
    for runner, done in pending:
        if not wait_until(done, deadline):
            ok = False
            logger.warning("goodput monitor %s: exporter %s did not close in time",
                           run, runner.name)
    return ok


def with_carry(runner: Any, snapshot: MonitorSnapshot) -> MonitorSnapshot:
    """The snapshot to hand to ``runner``: plus what it missed while busy.

    Args:
      runner: the exporter's :class:`~goodput_core.monitor.runner.Runner`.
      snapshot: this cycle's snapshot.

    Returns:
      ``snapshot`` itself, or a copy with the carried deviations and points.
    """
    changes: Dict[str, Any] = {}
    if runner.carry and snapshot.step_stats is not None:
        changes["new_step_deviations"] = runner.carry + snapshot.new_step_deviations
    if runner.carry_metrics:
        changes["new_metric_points"] = _merge(runner.carry_metrics, snapshot.new_metric_points)
    return dataclasses.replace(snapshot, **changes) if changes else snapshot


def keep_carry(runner: Any, snapshot: MonitorSnapshot) -> None:
    """``runner`` skipped ``snapshot`` (busy): keeps what is written only once."""
    runner.carry = (runner.carry + snapshot.new_step_deviations)[-cycle.MAX_CARRY:]
    if snapshot.new_metric_points:
        runner.carry_metrics = _merge(runner.carry_metrics, snapshot.new_metric_points)


def clear_carry(runner: Any, snapshot: MonitorSnapshot) -> None:
    """``snapshot`` (from :func:`with_carry`) went out to ``runner``: nothing is owed."""
    if snapshot.step_stats is not None:  # the deviations went out with it
        runner.carry = []
    runner.carry_metrics = {}  # always merged in, so always delivered


def _merge(old: Dict[str, List[MetricPoint]], new: Dict[str, List[MetricPoint]]
           ) -> Dict[str, List[MetricPoint]]:
    out = {name: list(points) for name, points in old.items()}
    for name, points in new.items():
        merged = out.get(name, []) + list(points)
        # stable by time: a late point from another host lands where it belongs
        merged.sort(key=lambda p: p.time)
        out[name] = merged[-cycle.MAX_CARRY:]
    return out
