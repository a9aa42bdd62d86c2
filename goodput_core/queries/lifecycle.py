"""The whole life of a job: scheduling goodput, ETTR and ML Productivity Goodput.

* **Scheduling goodput** SG = time holding the resources / time from the first
  submission to the end of the run.
* **Runtime goodput** RG = productive / time holding the resources: the
  calculator's goodput, whose total excludes the waits for resources
  (:mod:`goodput_core.queries.scheduling`).
* **Program goodput** PG = MFU during productive time, where the model's FLOPs
  and the devices' peak are known (:mod:`goodput_core.queries.program_goodput`).
* **MPG** = SG x RG x PG (Google's ML Productivity Goodput), each factor shown.
* **ETTR** = productive / (end - first submission) (Meta's effective
  training-time ratio: queueing and requeues included).

By construction SG x RG = ETTR exactly. Without a ``job_submitted`` event
there is nothing to measure: ``available`` is False and the runtime figures
are the calculator's as always.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

__all__ = ["Lifecycle", "lifecycle"]


@dataclasses.dataclass(frozen=True)
class Lifecycle:
    """A run's lifecycle figures (fractions 0-1, seconds).

    Attributes:
      available: False without scheduling events (the rest is then None or 0).
      submitted: the first submission (POSIX seconds).
      end: the end of the run (its last job end, else the query time).
      wall_seconds: ``end - submitted``.
      held_seconds: time holding the resources (the runtime total).
      scheduling_seconds: every wait for resources (before the first attempt
        and after each requeue).
      idle_seconds: time between an explicit job end and the next start.
      requeues: submissions after the first.
      scheduling_goodput, runtime_goodput, ettr: SG, RG and ETTR.
      program_goodput: PG (None when the FLOPs are unknown).
      mpg: SG x RG x PG (None without PG).
    """

    available: bool
    submitted: Optional[float] = None
    end: Optional[float] = None
    wall_seconds: float = 0.0
    held_seconds: float = 0.0
    scheduling_seconds: float = 0.0
    idle_seconds: float = 0.0
    requeues: int = 0
    scheduling_goodput: Optional[float] = None
    runtime_goodput: Optional[float] = None
    ettr: Optional[float] = None
    program_goodput: Optional[float] = None
    mpg: Optional[float] = None

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def lifecycle(calc: Any, now: float, result: Any = None) -> Lifecycle:
    """The lifecycle figures of ``calc``'s run at ``now``.

    Args:
      result: the run's cumulative result at ``now``, if already computed.
    """
    waits = calc.scheduling(now)
    if waits.first_submission is None:
        return Lifecycle(False)
    r = result if result is not None else calc.cumulative(now)
    life = r.lifetime
    end = life[1] if life[1] == life[1] else float(now)  # NaN: no job start yet
    wall = max(end - waits.first_submission, 0.0)
    held = r.total_seconds
    pg = calc.program_goodput(now, result=r)
    prog = None if pg is None else float(pg.mfu)
    sg = held / wall if wall > 0 else None
    rg = r.productive_seconds / held if held > 0 else None
    ettr = r.productive_seconds / wall if wall > 0 else None
    mpg = sg * rg * prog if None not in (sg, rg, prog) else None
    return Lifecycle(True, waits.first_submission, end, wall, held,
                     waits.seconds(waits.first_submission, end), r.idle_seconds,
                     max(waits.submissions - 1, 0), sg, rg, ettr, prog, mpg)
