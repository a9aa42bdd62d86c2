"""The AXLearn shim (``goodput_integrations.axlearn``): goodput with flags alone.

Pass to an AXLearn trainer::

    --recorder_type=goodput_integrations.axlearn:goodput_suite
    --recorder_spec=name=my-run
    --recorder_spec=upload_dir=gs://my-bucket/my-run/summaries
    --recorder_spec=upload_interval=30
    --recorder_spec=rolling_window_size=3600,86400
    --recorder_spec=store=sqlite:///shared/goodput.sqlite   # ours (optional)

AXLearn imports this package, which registers :class:`GoodputSuiteRecorder`
under ``goodput_suite`` in AXLearn's recorder registry. Without AXLearn the
same class works directly::

    from goodput_integrations import axlearn as gax

    recorder = gax.initialize(["--recorder_type=goodput_integrations.axlearn:goodput_suite",
                               "--recorder_spec=name=my-run", ...])
    with recorder.maybe_monitor_all():
        recorder.record(gax.Event.START_JOB)
        ...

Spec keys (AXLearn's and ours) are listed in :mod:`goodput_integrations.axlearn.spec`.
Importing this package imports AXLearn's ``measurement`` module when AXLearn
is installed, and never JAX.
"""

from goodput_integrations.axlearn._base import (
    AXLEARN_AVAILABLE,
    Event,
    EventType,
    initialize,
    parse_flags,
)
from goodput_integrations.axlearn.recorder import NAME, GoodputSuiteRecorder
from goodput_integrations.axlearn.spec import RecorderSpec, parse_spec

__all__ = [
    "AXLEARN_AVAILABLE",
    "Event",
    "EventType",
    "GoodputSuiteRecorder",
    "NAME",
    "RecorderSpec",
    "initialize",
    "parse_flags",
    "parse_spec",
]
