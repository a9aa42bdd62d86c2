"""Drop-in replacement for ``ml_goodput_measurement.goodput_elastic``.

The elastic recorder methods (slice counts, elastic waits, re-initialisation)
live on every recorder of ours; this module keeps the reference's names.
:class:`ElasticGoodputCalculator` is the compat calculator with the elastic
buckets always reported and the slice efficiencies of the reference.
"""

from __future__ import annotations

from typing import Any, Dict

from goodput_core.compat.goodput import GoodputCalculator, GoodputRecorder
from goodput_core.queries.elastic import reportable
from goodput_core.queries.results import GoodputResult

__all__ = ["ElasticGoodputCalculator", "ElasticGoodputRecorder", "GoodputCalculator",
           "GoodputRecorder"]

_STEPPING = "stepping_slice_efficiency"
_AVAILABLE = "available_slice_efficiency"

_JOB_NAME = "job_name"
_ACTIVE_SLICES = "active_slices"
_TOTAL_SLICES = "total_slices"
_AVAILABLE_SLICES = "available_slices"
_ELASTIC_SLICE_COUNTS_TIMESTAMP = "elastic_slice_counts_timestamp"
_ELASTIC_WAIT_EVENT_TYPE = "elastic_wait_event_type"
_ELASTIC_WAIT_START_TIME = "elastic_wait_start_time"
_ELASTIC_WAIT_END_TIME = "elastic_wait_end_time"
_ELASTIC_REINIT_START_TIME = "elastic_reinit_start_time"
_ELASTIC_REINIT_END_TIME = "elastic_reinit_end_time"


class ElasticGoodputRecorder(GoodputRecorder):
    """The reference's elastic recorder (same constructor as GoodputRecorder)."""


class ElasticGoodputCalculator(GoodputCalculator):
    """The reference's elastic calculator (same constructor as GoodputCalculator).

    Breakdowns and ``badput_time`` always carry ``ELASTIC_SLICE_DOWN``,
    ``ELASTIC_SCALE_UP`` and ``ELASTIC_REINITIALIZATION``. Elastic waits and
    re-initialisation take part in the partition (semantics.md rule 8: TPU
    init or training prep inside a re-initialisation is re-initialisation
    time, counted once).

    The details add ``stepping_slice_efficiency`` and
    ``available_slice_efficiency`` (time-weighted fractions of the total
    slices, from the recorded slice counts) when a slice count was in force
    during the window: over the job's lifetime for
    :meth:`get_job_goodput_details`, over the window clipped to the lifetime
    for :meth:`get_interval_metric_details`. They are the engine's
    (:meth:`goodput_core.queries.calculator.Calculator.slice_efficiency`): unlike the
    reference's interval query, the slice count in force when the window
    opens counts even if it was recorded before the window, and idle time
    between attempts is left out, as it is of total time.
    """

    _elastic = True

    def get_job_goodput_details(self) -> Dict[str, Any]:
        """As :meth:`GoodputCalculator.get_job_goodput_details`, plus slice efficiencies."""
        with self._lock:
            details = super().get_job_goodput_details()
            if self._result is not None:
                self._add_efficiency(details, self._result)
            return details

    def _interval_details(self, result: GoodputResult, size: float) -> Dict[str, Any]:
        details = super()._interval_details(result, size)
        with self._lock:
            self._add_efficiency(details, result)
        return details

    def _add_efficiency(self, details: Dict[str, Any], result: GoodputResult) -> None:
        a, b = result.window
        # result.window is already clipped to the lifetime at the result's query time
        eff = self._calc.slice_efficiency(a, b, now=result.query_time)
        if reportable(eff, self._calc.slice_counts()):  # else the keys are left out
            details[_STEPPING], details[_AVAILABLE] = eff.stepping, eff.available
