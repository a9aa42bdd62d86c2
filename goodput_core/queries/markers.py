"""The instants of a run worth marking: attempt starts, job ends, crashes and
restarts (timeline pictures, the dashboard, trace span events)."""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional

__all__ = ["Marker", "run_markers"]


@dataclasses.dataclass
class Marker:
    """A vertical line: an attempt start, a job end, a crash or a restart."""

    t: float
    kind: str   # 'attempt', 'end', 'crash' or 'restart'
    text: str
    cause: str = ""                # a crash's recorded cause, when known
    step: Optional[int] = None      # the step a restart resumed from


def run_markers(calc, a: float = -math.inf, b: float = math.inf) -> List[Marker]:
    """Attempt starts, job ends, disruptions and restarts inside ``[a, b]``."""
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
    out = [m for m in out if a <= m.t <= b]
    out.sort(key=lambda m: m.t)
    return out
