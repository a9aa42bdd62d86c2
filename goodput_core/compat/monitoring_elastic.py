"""Drop-in replacement for ``ml_goodput_measurement.monitoring_elastic`` (0.2.3).

:class:`ElasticGoodputMonitor` keeps the reference's constructor. Our
calculator reports the elastic badput buckets (``ELASTIC_SLICE_DOWN``,
``ELASTIC_SCALE_UP``, ``ELASTIC_REINITIALIZATION``) for any run that
recorded elastic events, so the TensorBoard ``badput/elastic_*`` scalars and
the Cloud Monitoring series come from the same monitor as for other runs.

``include_slice_efficiency=True`` publishes the time-weighted stepping and
available slice efficiency (:mod:`goodput_core.queries.elastic`) of runs with slice
counts:

* Cloud Monitoring, as the reference: ``stepping_slice_efficiency`` and
  ``available_slice_efficiency`` (fractions), cumulative with the goodput
  uploader (``window_type="CUMULATIVE"``, ``rolling_window_size="0"``) and
  per window with the rolling uploader (``window_type="INTERVAL"``,
  ``rolling_window_size="<N>"``);
* TensorBoard (ours; the reference writes none): ``elastic/stepping_slice_efficiency``,
  ``elastic/available_slice_efficiency`` and ``elastic/rolling_<N>s/...``,
  in percent;
* Prometheus, when enabled: ``goodput_slice_efficiency{kind, window}``.

A window in which no slice count was in force yet is left out, as the
reference leaves out its keys.
"""

from __future__ import annotations

import datetime
from typing import Any, Optional

from goodput_core.compat import goodput_utils
from goodput_core.compat import monitoring

__all__ = ["ElasticGoodputMonitor", "GCPOptions"]

GCPOptions = goodput_utils.GCPOptions


class ElasticGoodputMonitor(monitoring.GoodputMonitor):
    """GoodputMonitor for elastic training jobs (always Pathways, as the reference).

    Args:
      include_slice_efficiency: publish stepping and available slice
        efficiency (see the module docstring).
      The others: as :class:`~goodput_core.compat.monitoring.GoodputMonitor`
      (no ``pathway_enabled``: the reference fixes it to True).
    """

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        tensorboard_dir: str,
        upload_interval: int,
        monitoring_enabled: bool = False,
        include_badput_breakdown: bool = False,
        include_step_deviation: bool = False,
        include_slice_efficiency: bool = False,
        configured_ideal_step_time=None,
        step_deviation_interval_seconds: int = 10,
        gcp_options: Optional[GCPOptions] = None,
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: Optional[float] = (
            monitoring._PROCESS_TERMINATION_TIMEOUT_SECONDS),
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str = "/tmp",
        max_logs_retention_period: Optional[datetime.timedelta] = None,
        **kwargs: Any,
    ):
        # read by GoodputMonitor when it builds its engine monitor
        self._include_slice_efficiency = bool(include_slice_efficiency)
        super().__init__(
            job_name=job_name,
            logger_name=logger_name,
            tensorboard_dir=tensorboard_dir,
            upload_interval=upload_interval,
            monitoring_enabled=monitoring_enabled,
            pathway_enabled=True,  # elastic always uses Pathways
            include_badput_breakdown=include_badput_breakdown,
            include_step_deviation=include_step_deviation,
            configured_ideal_step_time=configured_ideal_step_time,
            step_deviation_interval_seconds=step_deviation_interval_seconds,
            gcp_options=gcp_options,
            skip_final_flush=skip_final_flush,
            final_flush_timeout_seconds=final_flush_timeout_seconds,
            gcs_sync_interval_seconds=gcs_sync_interval_seconds,
            cache_dir=cache_dir,
            max_logs_retention_period=max_logs_retention_period,
            **kwargs,
        )
        self.include_slice_efficiency = self._include_slice_efficiency
