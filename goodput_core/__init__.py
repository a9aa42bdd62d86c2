"""goodput_core: measure the goodput of ML training jobs.

The engine imports no ML framework and no cloud client. Start with
:class:`Recorder` (record events of a run) and, once available,
:class:`Calculator` (turn them into goodput; :mod:`goodput_core.queries.calculator`).
Code written against ``ml-goodput-measurement`` imports
``goodput_core.compat.goodput`` instead of ``ml_goodput_measurement.goodput``.
"""

from goodput_core.events import EventRecord, Kind
from goodput_core.record.hooks import flush_all
from goodput_core.record.recorder import NULL_RECORDER, NullRecorder, Recorder
from goodput_core.stores import Store, StoreError, default_store_url, open_store

__all__ = [
    "Calculator",
    "EventRecord",
    "Kind",
    "NULL_RECORDER",
    "NullRecorder",
    "Recorder",
    "Store",
    "StoreError",
    "default_store_url",
    "flush_all",
    "open_store",
]
__version__ = "0.1.0"


def __getattr__(name):
    # The calculator needs numpy: import it on first use so that
    # `import goodput_core` (done by every training job) stays cheap.
    if name == "Calculator":
        from goodput_core.queries.calculator import Calculator

        return Calculator
    raise AttributeError(f"module 'goodput_core' has no attribute {name!r}")
