"""The instants of a run worth marking: attempt starts, job ends, crashes,
restarts and accelerator duty-cycle drops (timeline pictures, the dashboard,
trace span events).

**Duty cycle dropped.** Where a run records the ML-diagnostics SDK's
``tpu_duty_cycle`` or ``gpu_duty_cycle`` (percent; e.g. ``log_system_metrics``,
:mod:`goodput_core.compat.mldiagnostics.system_metrics`), a sample that lies
:data:`DUTY_DROP_POINTS` percentage points or more below the median of the
:data:`DUTY_BASELINE` samples before it (at least 3 of them) marks a drop:
the accelerators went idle while the job went on (an input stall, a hang, a
slow host, a checkpoint). One marker per drop: the next needs the duty cycle
to recover first, to within half that margin of the baseline it fell from.
Only the plain series (process 0's host) is read; other hosts' series
(``tpu_duty_cycle{process_index=N}``) are not marked.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional

__all__ = ["DUTY_BASELINE", "DUTY_CYCLE_METRICS", "DUTY_DROP_POINTS", "Marker",
           "duty_cycle_drops", "run_markers"]

#: The duty-cycle metrics whose drops are marked (the SDK's names).
DUTY_CYCLE_METRICS = ("tpu_duty_cycle", "gpu_duty_cycle")
#: How far below its recent median (percentage points) a sample must fall.
DUTY_DROP_POINTS = 30.0
#: How many samples before it make the median (at least 3 are needed).
DUTY_BASELINE = 6


@dataclasses.dataclass
class Marker:
    """A vertical line: an attempt start, a job end, a crash or a restart."""

    t: float
    kind: str   # 'attempt', 'end', 'crash', 'restart' or 'duty_cycle_drop'
    text: str
    cause: str = ""                # a crash's recorded cause, when known
    step: Optional[int] = None      # the step a restart resumed from


def run_markers(calc, a: float = -math.inf, b: float = math.inf) -> List[Marker]:
    """Attempt starts, job ends, disruptions, restarts and duty-cycle drops
    inside ``[a, b]``."""
    tl = calc.timeline  # brought up to date by the property
    out: List[Marker] = []
    att = tl.attempts
    for i, t in enumerate(att.start.tolist()):
        out.append(Marker(t, "attempt", f"attempt {i + 1} starts"))
    for t in att.end.tolist():
        if not math.isnan(t):
            out.append(Marker(t, "end", "job end"))
    dis = tl.tables["disruption"]
    causes = tl.tables.names["disruption"]
    crash_times = dis["t"].tolist()
    for t, key in zip(crash_times, dis["key"].tolist()):
        cause = causes[key] if 0 <= key < len(causes) else "unknown"
        out.append(Marker(t, "crash", f"crash: {cause}", cause=cause))
    for t in tl.stepless_restarts[1].tolist():  # rule 2: disrupted before any step
        out.append(Marker(t, "restart", "restart (the attempt before had no step)"))
    seg = tl.segments
    if len(seg):
        st = tl.tables["step_start"]
        for i0, restart, crashed, rec in zip(seg["i0"].tolist(), seg["restart"].tolist(),
                                             seg["crashed"].tolist(), seg["rec_start"].tolist()):
            if restart:
                step = int(st["step"][i0])
                out.append(Marker(float(st["t"][i0]), "restart", f"restart from step {step}",
                                  step=step))
            # a crash inferred from a missing job end (no disruption event recorded)
            if crashed and not math.isnan(rec) and not any(
                    abs(rec - c) < 1e-6 for c in crash_times):
                out.append(Marker(rec, "crash", "crash (no job end)"))
    out.extend(duty_cycle_drops(calc))
    out = [m for m in out if a <= m.t <= b]
    out.sort(key=lambda m: m.t)
    return out


def duty_cycle_drops(calc) -> List[Marker]:
    """The duty-cycle drops of the run (module docstring), in time order."""
    out: List[Marker] = []
    for name in DUTY_CYCLE_METRICS:
        series = calc.metrics(name)
        values = [v for v in series.values.tolist()]
        times = series.times.tolist()
        recent: List[float] = []
        fell_from: Optional[float] = None
        for t, v in zip(times, values):
            if not math.isfinite(v):
                continue
            if fell_from is not None:
                if v >= fell_from - DUTY_DROP_POINTS / 2:
                    fell_from = None  # recovered: the baseline follows it again
                else:
                    continue  # still down: the baseline keeps the level it fell from
            if len(recent) >= 3:
                base = _median(recent)
                if v <= base - DUTY_DROP_POINTS:
                    fell_from = base
                    label = name.split("_", 1)[0].upper()
                    out.append(Marker(t, "duty_cycle_drop", f"{label} duty cycle dropped: "
                                      f"{base:.0f} % -> {v:.0f} %"))
                    continue
            recent = (recent + [v])[-DUTY_BASELINE:]
    out.sort(key=lambda m: m.t)
    return out


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
