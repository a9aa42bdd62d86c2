"""Typed query results and their assembly from a timeline."""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Mapping, Tuple

import numpy as np

from goodput_core.timeline.buckets import (
    BASE_BADPUT,
    CUSTOM_BASE,
    ELASTIC_BADPUT,
    HANG_BADPUT,
    IDLE,
    PRODUCTIVE,
    BadputType,
)
from goodput_core.timeline.intervals import complement, union

__all__ = ["GoodputResult", "build_result", "empty_result"]


@dataclasses.dataclass(frozen=True)
class GoodputResult:
    """Goodput and badput of a run over a window (or its whole lifetime).

    Seconds always satisfy ``productive_seconds + sum of badput_seconds
    (DATA_LOADING_ASYNC excepted) == total_seconds`` and
    ``total_seconds + idle_seconds + excluded_seconds + scheduling_seconds``
    = the window's part of the lifetime.

    Attributes:
      goodput: productive share of total time, in percent (0 when total is 0).
      productive_seconds: time spent on progress that was kept.
      total_seconds: lifetime in the window, minus idle and excluded time.
      idle_seconds: time between an attempt's job end and the next job start.
      excluded_seconds: time removed by the query's exclusions (idle excepted).
      badput_seconds: every base bucket (elastic ones when the run has
        elastic events, ``HANG`` when it recorded a hang);
        ``CUSTOM_BADPUT_EVENTS`` is the sum of the types.
      badput_percent: the same in percent of ``total_seconds``.
      custom_badput_seconds / custom_badput_percent: per upper-cased type.
      data_loading_async_seconds: loads overlapped by steps (not badput).
      disruptions: restarts whose segment began in the window.
      max_productive_step: the largest step whose progress was kept (0: none).
      last_step: the last step recorded in the window (0: none).
      skipped: unusable inputs so far, by reason.
      window: the effective ``(start, end)`` (clipped to the lifetime).
      lifetime: ``(first job start, last job end or now)``; NaNs without one.
      query_time: the ``now`` of the query.
      scheduling_seconds: waits for resources after a requeue, inside the
        lifetime (:mod:`goodput_core.queries.scheduling`; 0 without scheduling
        events): carved out of the partition like idle time.
    """

    goodput: float
    productive_seconds: float
    total_seconds: float
    idle_seconds: float
    excluded_seconds: float
    badput_seconds: Dict[BadputType, float]
    badput_percent: Dict[BadputType, float]
    custom_badput_seconds: Dict[str, float]
    custom_badput_percent: Dict[str, float]
    data_loading_async_seconds: float
    disruptions: int
    max_productive_step: int
    last_step: int
    skipped: Dict[str, int]
    window: Tuple[float, float]
    lifetime: Tuple[float, float]
    query_time: float
    scheduling_seconds: float = 0.0

    @property
    def badput_total_seconds(self) -> float:
        """All badput that takes part in the partition (async loading excepted)."""
        return self.total_seconds - self.productive_seconds


def _pct(v: float, total: float) -> float:
    return 100.0 * v / total if total > 0 else 0.0


def _clamp(v: float, total: float) -> float:
    return min(max(v, 0.0), total)


def empty_result(now: float, skipped: Dict[str, int], elastic: bool) -> GoodputResult:
    """The result of a run without a job start (nothing to measure)."""
    keys = BASE_BADPUT + (ELASTIC_BADPUT if elastic else ())
    nan = (math.nan, math.nan)
    return GoodputResult(0.0, 0.0, 0.0, 0.0, 0.0, {k: 0.0 for k in keys}, {k: 0.0 for k in keys},
                         {}, {}, 0.0, 0, 0, 0, dict(skipped), nan, nan, float(now))


def build_result(timeline, a: float, b: float, excl: List[Tuple[float, float]],
                 lifetime: Tuple[float, float], now: float, steps: Mapping[str, int]
                 ) -> GoodputResult:
    """Assembles a result for the window ``[a, b)`` clipped to the lifetime.

    Args:
      timeline: an up-to-date Timeline.
      a, b: the window (already validated).
      excl: exclusion intervals (validated).
      lifetime: (start, end) of the lifetime at ``now``.
      now: the query time.
      steps: ``disruptions``, ``max_productive_step``, ``last_step``.
    """
    wa = max(a, lifetime[0])
    wb = max(min(b, lifetime[1]), wa)
    if excl:
        es, ee = union([x for x, _ in excl], [y for _, y in excl])
        es, ee = np.clip(es, wa, wb), np.clip(ee, wa, wb)
        ok = ee > es
        es, ee = es[ok], ee[ok]
    else:
        es = ee = np.empty(0)
    ks, ke = complement(wa, wb, es, ee)
    kept = timeline.measure(ks, ke)
    idle_kept = kept.get(IDLE, 0.0)
    idle_excl = 0.0
    idle_il = timeline.partition.get(IDLE)
    if len(es) and idle_il is not None:
        idle_excl = float((idle_il.cum_at(ee) - idle_il.cum_at(es)).sum())
    total = max(float((ke - ks).sum()) - idle_kept, 0.0)
    excluded = max(float((ee - es).sum()) - idle_excl, 0.0)
    names = timeline.tables.names["custom"]
    custom = {names[c - CUSTOM_BASE]: _clamp(v, total) for c, v in kept.items() if c >= CUSTOM_BASE}
    badput: Dict[BadputType, float] = {}
    keys = BASE_BADPUT + (ELASTIC_BADPUT if timeline.tables.elastic_seen else ())
    keys += HANG_BADPUT if timeline.tables.hangs else ()
    for k in keys:
        badput[k] = _clamp(kept.get(int(k), 0.0), total)
    badput[BadputType.CUSTOM_BADPUT_EVENTS] = _clamp(float(sum(custom.values())), total)
    productive = _clamp(kept.get(PRODUCTIVE, 0.0), total)
    async_s = _clamp(timeline.async_seconds(ks, ke), total)
    badput[BadputType.DATA_LOADING_ASYNC] = async_s
    labelled = productive + sum(v for k, v in badput.items()
                                if k not in (BadputType.OTHER, BadputType.DATA_LOADING_ASYNC))
    badput[BadputType.OTHER] = max(total - labelled, 0.0)
    return GoodputResult(
        goodput=_pct(productive, total),
        productive_seconds=productive,
        total_seconds=total,
        idle_seconds=idle_kept + idle_excl,
        excluded_seconds=excluded,
        badput_seconds=badput,
        badput_percent={k: _pct(v, total) for k, v in badput.items()},
        custom_badput_seconds=custom,
        custom_badput_percent={k: _pct(v, total) for k, v in custom.items()},
        data_loading_async_seconds=async_s,
        disruptions=int(steps["disruptions"]),
        max_productive_step=int(steps["max_productive_step"]),
        last_step=int(steps["last_step"]),
        skipped=timeline.skipped(),
        window=(wa, wb),
        lifetime=tuple(lifetime),
        query_time=float(now),
    )
