"""Drop-in replacement for ``ml_goodput_measurement.goodput_elastic`` (recorder part).

The elastic recorder methods (slice counts, elastic waits, re-initialisation)
live on every recorder of ours; this module keeps the reference's names.
"""

from __future__ import annotations

from goodput_core.compat.goodput import GoodputRecorder

__all__ = ["ElasticGoodputRecorder", "GoodputRecorder"]

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
