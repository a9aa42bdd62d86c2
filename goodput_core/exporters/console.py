"""Console exporter: one human-readable line per monitor cycle.

Example::

    goodput run=demo goodput=35.84% productive=30.0s total=83.7s disruptions=1
    max_step=29 badput=INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION:23.9%,...
    rolling=60s:25.45%,3600s:35.84% ideal_step=1.000s new_deviations=29

plus ``mfu=... ml_productivity=...`` and ``slice_efficiency=stepping:...,available:...``
when the snapshot has them.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any, List, Optional, TextIO

from goodput_core.timeline.buckets import BadputType
from goodput_core.exporters import registry
from goodput_core.exporters.base import Exporter, MonitorSnapshot
from goodput_core.text import printable

__all__ = ["ConsoleExporter", "format_snapshot"]

logger = logging.getLogger(__name__)
_TOP = 3  # badput buckets shown


def _window(size: Any) -> str:
    f = float(size)
    return f"{int(f) if f.is_integer() else f}s"


def format_snapshot(snap: MonitorSnapshot) -> str:
    """The one-line summary of a snapshot.

    Args:
      snap: the snapshot.

    Returns:
      ``goodput run=... goodput=...%`` and whatever parts the snapshot has.
    """
    parts: List[str] = [f"goodput run={snap.run}"]
    r = snap.cumulative
    if r is not None and math.isnan(r.lifetime[0]):
        parts.append("(no job start recorded yet)")
    elif r is not None:
        parts += [f"goodput={r.goodput:.2f}%", f"productive={r.productive_seconds:.1f}s",
                  f"total={r.total_seconds:.1f}s", f"disruptions={r.disruptions}",
                  f"max_step={r.max_productive_step}"]
        top = sorted(((v, k.name) for k, v in r.badput_percent.items()
                      if v > 0 and k is not BadputType.DATA_LOADING_ASYNC), reverse=True)[:_TOP]
        if top:
            parts.append("badput=" + ",".join(f"{name}:{v:.1f}%" for v, name in top))
    prog, eff = snap.program_goodput, snap.slice_efficiency
    if prog is not None:
        parts.append(f"mfu={100 * prog.mfu:.2f}% "
                     f"ml_productivity={100 * prog.ml_productivity_goodput:.2f}%")
    if eff is not None:
        parts.append(f"slice_efficiency=stepping:{100 * eff.stepping:.1f}%,"
                     f"available:{100 * eff.available:.1f}%")
    if snap.rolling:
        parts.append("rolling=" + ",".join(f"{_window(k)}:{w.goodput:.2f}%"
                                           for k, w in sorted(snap.rolling.items())))
    s = snap.step_stats
    if s is not None:
        if s.ideal_step_time is not None:
            parts.append(f"ideal_step={s.ideal_step_time:.3f}s")
        parts.append(f"new_deviations={len(snap.new_step_deviations)}")
    if snap.hung:
        parts.append(f"HUNG hang_seconds={snap.hang_seconds:.0f}s")
    if snap.stopped and hasattr(snap.state, "describe"):
        parts.append(snap.state.describe().upper().replace("STOPPED AT", "STOPPED at", 1))
    advice = snap.checkpoint_advice
    if advice is not None and advice.available and advice.goodput_gain_points is not None \
            and advice.goodput_gain_points >= 0.5:
        parts.append(f"checkpoint_every={advice.recommended_interval_seconds:.0f}s"
                     f"(+{advice.goodput_gain_points:.1f}pt)")
    if snap.hosts is not None and snap.hosts.outliers:
        parts.append("outlier_hosts=" + ",".join(f"{i}:{b}" for i, b, _ in snap.hosts.outliers))
    if snap.recorder_dropped:
        parts.append(f"dropped_events={snap.recorder_dropped}")
    if snap.final:
        parts.append("(final)")
    return " ".join(parts)


class ConsoleExporter(Exporter):
    """Prints one summary line per cycle.

    Args:
      stream: where to write (e.g. ``sys.stdout``); None logs the line at
        INFO on this module's logger instead.
    """

    name = "console"

    def __init__(self, stream: Optional[TextIO] = None):
        self._stream = stream

    def export(self, snapshot: MonitorSnapshot) -> None:
        """Writes (or logs) the snapshot's summary line."""
        line = printable(format_snapshot(snapshot))  # custom event types are user data
        if self._stream is None:
            logger.info("%s", line)
        else:
            self._stream.write(line + "\n")
            self._stream.flush()

    def process_spec(self) -> Optional[dict]:
        """Portable when writing to this process's stdout or stderr (inherited
        by the monitor process); a logger or another stream stays here."""
        for name in ("stdout", "stderr"):
            if self._stream is not None and self._stream is getattr(sys, name):
                return registry.spec("console", name=name)
        return None


def to_standard_stream(name: str) -> ConsoleExporter:
    """A console exporter on ``sys.stdout`` or ``sys.stderr`` (the monitor process's)."""
    return ConsoleExporter({"stdout": sys.stdout, "stderr": sys.stderr}[name])
