"""goodput_core: measure the goodput of ML training jobs.

The engine imports no ML framework and no cloud client. Start with
:class:`Recorder` (record events of a run) and, once available,
:class:`Calculator` (turn them into goodput; :mod:`goodput_core.queries.calculator`).
Code written against ``ml-goodput-measurement`` imports
``goodput_core.compat.goodput`` instead of ``ml_goodput_measurement.goodput``.

Every name the README and ``docs/`` show users is importable from here:
``Recorder``, ``HangSettings``, ``Calculator``, ``GoodputResult``, ``BadputType``,
``RunContext``, ``record_config``, ``Monitor``, the exporters (``ConsoleExporter``,
``TensorBoardExporter``, ``PrometheusExporter``, ``CloudMonitoringExporter``,
``OtelExporter``, ``OtelTraceExporter``) and ``GCPOptions``. Those that need
numpy or a client library are imported on first use, so that
``import goodput_core`` (done by every training job) stays cheap.
"""

from goodput_core.events import EventRecord, Kind
from goodput_core.record.hooks import flush_all
from goodput_core.record.recorder import NULL_RECORDER, NullRecorder, Recorder
from goodput_core.record.watchdog import HangSettings
from goodput_core.stores import Store, StoreError, default_store_url, open_store

__all__ = [
    "BadputType",
    "Calculator",
    "CloudMonitoringExporter",
    "ConsoleExporter",
    "EventRecord",
    "GCPOptions",
    "GoodputResult",
    "HangSettings",
    "Kind",
    "Monitor",
    "NULL_RECORDER",
    "NullRecorder",
    "OtelExporter",
    "OtelTraceExporter",
    "PrometheusExporter",
    "Recorder",
    "RunContext",
    "Store",
    "StoreError",
    "TensorBoardExporter",
    "default_store_url",
    "flush_all",
    "open_store",
    "record_config",
]
__version__ = "0.1.0"


def _lazy(name):
    """The names that need numpy or a client library, imported on first use
    (each import says what it keeps out of ``import goodput_core``)."""
    if name == "BadputType":
        from goodput_core.timeline.buckets import BadputType as value  # lazy: the timeline
    elif name == "Calculator":
        from goodput_core.queries.calculator import Calculator as value  # lazy: numpy
    elif name == "GoodputResult":
        from goodput_core.queries.results import GoodputResult as value  # lazy: numpy
    elif name == "RunContext":
        from goodput_core.queries.diagnostics import RunContext as value  # lazy: numpy
    elif name == "record_config":
        from goodput_core.queries.diagnostics import record_config as value  # lazy: numpy
    elif name == "Monitor":
        from goodput_core.monitor.loop import Monitor as value  # lazy: numpy, exporters
    elif name == "ConsoleExporter":
        from goodput_core.exporters.console import ConsoleExporter as value  # lazy: numpy
    elif name == "TensorBoardExporter":
        # lazy: numpy
        from goodput_core.exporters.tensorboard import TensorBoardExporter as value
    elif name == "PrometheusExporter":
        # lazy: numpy
        from goodput_core.exporters.prometheus import PrometheusExporter as value
    elif name == "CloudMonitoringExporter":
        # lazy: numpy
        from goodput_core.exporters.cloud_monitoring import CloudMonitoringExporter as value
    elif name == "OtelExporter":
        from goodput_core.exporters.otel import OtelExporter as value  # lazy: numpy, otel
    elif name == "OtelTraceExporter":
        # lazy: numpy, opentelemetry
        from goodput_core.exporters.otel_trace import OtelTraceExporter as value
    elif name == "GCPOptions":
        from goodput_core.gcp import GCPOptions as value  # lazy: metadata lookups
    else:
        raise AttributeError(f"module 'goodput_core' has no attribute {name!r}")
    return value


def __getattr__(name):
    value = _lazy(name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
