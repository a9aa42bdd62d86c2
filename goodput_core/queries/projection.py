"""What-if: the expected ETTR of a run at another scale or checkpoint interval.

From the run itself: the failure rate per host-hour ``r`` (incidents / (hosts
x runtime hours)), the restart overhead ``u0`` (the mean time from a failure
to the first step of the next attempt: detection, requeue, init, restore,
compile), the blocking save cost ``C`` and the current interval ``Δt``
(:mod:`goodput_core.queries.checkpoint_advice`). With ``N`` hosts failing
independently, failures arrive at ``λ = N·r``.

**The model** (renewal, exponential failures; failures may strike during a
save or a restart as well): a stretch of ``Δt`` seconds of work followed by a
save of ``C`` seconds completes without a failure with probability
``exp(-λ(Δt + C))``; a failure loses the stretch's work and costs ``u0``. The
expected wall time of one stretch is

    E[T] = (exp(λ·u0) / λ) · (exp(λ·(Δt + C)) - 1)

so the expected ETTR (kept work over wall time, scheduling aside) is ``Δt /
E[T]``. Meta's first-order form, ``(1 - N·r·(u0 + Δt/2)) / (1 + C/Δt)``, is
reported beside it; the two agree when failures are rare within a stretch.
:func:`simulate` plays the same model by Monte-Carlo (the tests check the
projection against it). Fewer than 3 failures make the rate a rough guess:
``rough`` says so.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

from goodput_core.queries.incidents import incidents

__all__ = ["Projection", "expected_ettr", "first_order_ettr", "project", "simulate"]


@dataclasses.dataclass(frozen=True)
class Projection:
    """A what-if projection (fractions 0-1, seconds).

    Attributes:
      available: False when the run lacks what the model needs (``reason``).
      reason: why not, or the confidence note ("" if none).
      rough: fewer than 3 failures were seen.
      hosts, failures, runtime_hours: what the rate rests on.
      rate_per_host_hour: ``r``.
      restart_seconds, save_seconds: ``u0`` and ``C``.
      current_hosts, current_interval_seconds: as measured.
      hosts_projected, interval_seconds: the scenario.
      ettr_now, ettr_projected: the **model's** ETTR at the measured and the
        asked scenario: failures, restarts and saves only (scheduling, init,
        compiles, data loading and every other bucket aside), so ``ettr_now``
        is not the run's measured goodput.
      first_order_now, first_order_projected: Meta's first-order form.
      measured_goodput: the run's measured (runtime) goodput, 0-1: every bucket.
    """

    available: bool
    reason: str = ""
    rough: bool = False
    failures: int = 0
    runtime_hours: float = 0.0
    rate_per_host_hour: Optional[float] = None
    restart_seconds: Optional[float] = None
    save_seconds: Optional[float] = None
    current_hosts: int = 1
    current_interval_seconds: Optional[float] = None
    hosts_projected: int = 1
    interval_seconds: Optional[float] = None
    ettr_now: Optional[float] = None
    ettr_projected: Optional[float] = None
    first_order_now: Optional[float] = None
    first_order_projected: Optional[float] = None
    measured_goodput: Optional[float] = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def expected_ettr(hosts: int, rate_per_host_hour: float, restart_s: float, save_s: float,
                  interval_s: float) -> float:
    """The model's expected ETTR (see the module docstring)."""
    if interval_s <= 0:
        raise ValueError(f"the interval must be > 0 seconds, got {interval_s}")
    lam = hosts * rate_per_host_hour / 3600.0
    if lam <= 0:
        return interval_s / (interval_s + save_s)
    x = lam * (interval_s + save_s)
    if lam * restart_s + x > 700:  # exp overflows: nothing completes
        return 0.0
    wall = math.exp(lam * restart_s) / lam * math.expm1(x)
    return interval_s / wall


def first_order_ettr(hosts: int, rate_per_host_hour: float, restart_s: float, save_s: float,
                     interval_s: float) -> float:
    """Meta's first-order ETTR: ``(1 - N r (u0 + Δt/2)) / (1 + C/Δt)`` (clipped at 0)."""
    lam = hosts * rate_per_host_hour / 3600.0
    return max(0.0, (1.0 - lam * (restart_s + interval_s / 2.0)) / (1.0 + save_s / interval_s))


def simulate(hosts: int, rate_per_host_hour: float, restart_s: float, save_s: float,
             interval_s: float, *, work_s: float = 1e6, seed: int = 0,
             max_draws: int = 2_000_000) -> float:
    """Monte-Carlo of the model: ETTR of ``work_s`` seconds of kept work.

    Failures arrive as a Poisson process of rate ``hosts x r`` over the whole
    wall clock (work, saves and restarts alike); each costs the stretch in
    progress and ``restart_s``, during which another failure restarts the
    restart. At most ``max_draws`` failures are drawn (a scenario in which
    work hardly ever completes returns its ETTR so far, close to 0).
    """
    rng = np.random.default_rng(seed)
    lam = hosts * rate_per_host_hour / 3600.0
    stretch = interval_s + save_s
    done = wall = 0.0
    budget = max_draws  # a scenario where work hardly ever completes ends here
    while done < work_s and budget > 0:
        budget -= 1
        if lam <= 0:
            wall += stretch
            done += interval_s
            continue
        gap = rng.exponential(1.0 / lam)
        if gap >= stretch:
            wall += stretch
            done += interval_s
            continue
        wall += gap
        while budget > 0:  # restart; a failure during it starts it over
            budget -= 1
            gap = rng.exponential(1.0 / lam)
            if gap >= restart_s:
                wall += restart_s
                break
            wall += gap
    return done / wall if wall > 0 else 0.0


def project(calc: Any, now: float, *, hosts: Optional[int] = None,
            interval_s: Optional[float] = None) -> Projection:
    """The projection for ``calc``'s run (``hosts``/``interval_s``: the scenario;
    None keeps the measured value)."""
    if hosts is not None and hosts < 1:
        raise ValueError(f"hosts must be at least 1, got {hosts}")
    if interval_s is not None and not interval_s > 0:
        raise ValueError(f"the interval must be > 0 seconds, got {interval_s}")
    summary = incidents(calc, now)
    advice = calc.checkpoint_advice(now)
    cumulative = calc.cumulative(now)
    runtime = cumulative.total_seconds
    measured = cumulative.goodput / 100.0 if runtime > 0 else None
    n_now = _hosts(calc)
    failures = len(summary.incidents)
    if failures == 0 or runtime <= 0:
        return Projection(False, "no failures yet: the failure rate is unknown",
                          current_hosts=n_now, measured_goodput=measured)
    repairs = [i.first_step - i.detected for i in summary.incidents if i.first_step is not None]
    detect = [i.time_to_detect for i in summary.incidents if i.time_to_detect is not None]
    u0 = (float(np.mean(repairs)) if repairs else 0.0) + (float(np.mean(detect)) if detect else 0.0)
    save = advice.save_seconds
    current = advice.current_interval_seconds
    if save is None or current is None:
        return Projection(False, "no checkpoint interval measured (fewer than two saves in "
                          "one attempt)", failures=failures, current_hosts=n_now,
                          measured_goodput=measured)
    hours = runtime / 3600.0
    r = failures / (n_now * hours)
    n = hosts if hosts is not None else n_now
    dt = interval_s if interval_s is not None else current
    rough = failures < 3
    return Projection(
        True, "rough: fewer than 3 failures seen" if rough else "", rough, failures, hours,
        r, u0, save, n_now, current, n, dt,
        expected_ettr(n_now, r, u0, save, current), expected_ettr(n, r, u0, save, dt),
        first_order_ettr(n_now, r, u0, save, current), first_order_ettr(n, r, u0, save, dt),
        measured)


def _hosts(calc: Any) -> int:
    """Hosts of the run: the metadata's ``num_processes``, else 1."""
    try:
        n = int(calc.metadata().get("num_processes") or 1)
    except (TypeError, ValueError):
        n = 1
    return max(n, 1)
