"""Drop-in replacement for ``ml_goodput_measurement.goodput``.

Change ``from ml_goodput_measurement import goodput`` to
``from goodput_core.compat import goodput``; the classes keep their names,
signatures, positional order and defaults. Differences: events go to the
embedded store by default (pass ``store=`` for another, e.g.
``cloud-logging://PROJECT/LOG``), recording never blocks the caller, and a
recorder built with ``logging_enabled=False`` is a null object.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from goodput_core import events as _events
from goodput_core.recorder import Recorder

__all__ = ["GoodputRecorder"]

# Payload-key constants of the reference module (de-facto public names).
_JOB_NAME = _events.JOB_NAME
_STEP_COUNT = _events.STEP_COUNT
_STEP_START_TIME = "step_start_time"
_JOB_START_TIME = "job_start_time"
_JOB_END_TIME = "job_end_time"
_TPU_INIT_START_TIME = "tpu_init_start_time"
_TPU_INIT_END_TIME = "tpu_init_end_time"
_TRAINING_PREPARATION_START_TIME = "training_prep_start_time"
_TRAINING_PREPARATION_END_TIME = "training_prep_end_time"
_DATA_LOADING_START_TIME = "data_loading_start_time"
_DATA_LOADING_END_TIME = "data_loading_end_time"
_CUSTOM_BADPUT_EVENT_TYPE = _events.CUSTOM_BADPUT_EVENT_TYPE
_CUSTOM_BADPUT_EVENT_START_TIME = "custom_badput_event_start_time"
_CUSTOM_BADPUT_EVENT_END_TIME = "custom_badput_event_end_time"


class GoodputRecorder(Recorder):
    """The reference's recorder on our engine.

    Args:
      job_name: the run name.
      logger_name: the reference's Cloud Logging log name; kept as an
        attribute and used by the cloud-logging store, ignored by embedded ones.
      logging_enabled: False (the reference's default) records nothing; set
        it True on the one process that should write.
      cloud_logger: a duck-typed object with ``write_cloud_logging_entry``:
        each payload is handed to it synchronously, as in the reference.
      background_grace_period_s: accepted for compatibility (the exit hook
        flushes with its own deadline).
      background_batch_size: accepted for compatibility.
      background_max_latency_s: the longest an event waits before the
        background writer stores it.
      store: where events go (URL, path or Store); default embedded sqlite.
      clock: the time source (tests inject a fake).
      strict: raise on misuse instead of counting and dropping.
    """

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        logging_enabled=False,
        cloud_logger: Any = None,
        *,
        background_grace_period_s: float = 5.0,
        background_batch_size: int = 100,
        background_max_latency_s: float = 2.0,
        store: Any = None,
        clock: Callable[[], float] = time.time,
        strict: bool = False,
        **kwargs: Any,
    ):
        self.logger_name = logger_name
        self.logging_enabled = bool(logging_enabled)
        super().__init__(
            job_name,
            store,
            clock=clock,
            strict=strict,
            flush_interval_s=min(float(background_max_latency_s), 0.5),
            cloud_logger=cloud_logger,
            enabled=self.logging_enabled,
            **kwargs,
        )
