"""Everything ``maxtext.common.goodput`` exports, on our engine: for forks.

MaxText imports its goodput helper from eight modules (the pre-train
``train.py``, ``utils/train_utils.py``, ``common/data_loader.py`` and five
post-train trainers), so a fork switches them all by replacing the *body*
of ``src/maxtext/common/goodput.py`` with this one line::

    from goodput_integrations.maxtext.fork import *  # noqa: F401,F403

Every importer then gets our helpers; ``ml-goodput-measurement`` is not
needed. Names served (MaxText 0.2.4-0.2.5): ``GoodputEvent``,
``RECORD_JOB_START_TIME``, ``RECORD_JOB_END_TIME``,
``create_goodput_recorder``, ``record_goodput``, ``maybe_record_goodput``,
``maybe_monitor_goodput``, ``get_goodput_job_name``, and the module objects
``goodput`` / ``monitoring`` (our compatible ``ml_goodput_measurement``
modules; the RL trainer reads ``goodput.GoodputRecorder``).

MaxText's ``managed_mldiagnostics`` flags load Google's SDK through
``maxtext.common.gcloud_stub.mldiagnostics_modules()`` (three importers).
A fork routes them to our diagnostics compat by replacing that function's
body with::

    from goodput_integrations.maxtext.fork import mldiagnostics_modules
    return mldiagnostics_modules()

(:func:`mldiagnostics_modules`: ``machinelearning_run`` then joins the
goodput run; events go to ``$GOODPUT_STORE``).
"""

from goodput_core.compat import goodput, monitoring
from goodput_integrations.maxtext.helpers import (
    RECORD_JOB_END_TIME,
    RECORD_JOB_START_TIME,
    GoodputEvent,
    create_goodput_recorder,
    get_goodput_job_name,
    maybe_monitor_goodput,
    maybe_record_goodput,
    record_goodput,
)
from goodput_integrations.maxtext.mldiagnostics import sdk_module

#: MaxText's flag for "ml_goodput_measurement is missing, goodput is a no-op".
_GOODPUT_STUB = False


def mldiagnostics_modules():
    """``(mldiag, is_stub)`` as MaxText's ``gcloud_stub.mldiagnostics_modules()``
    returns them: the SDK's names over our compat, never a stub
    (:mod:`goodput_integrations.maxtext.mldiagnostics`)."""
    import os

    return sdk_module(store=os.environ.get("GOODPUT_STORE") or None), False

__all__ = [
    "GoodputEvent",
    "RECORD_JOB_END_TIME",
    "RECORD_JOB_START_TIME",
    "_GOODPUT_STUB",
    "create_goodput_recorder",
    "get_goodput_job_name",
    "goodput",
    "maybe_monitor_goodput",
    "maybe_record_goodput",
    "mldiagnostics_modules",
    "monitoring",
    "record_goodput",
]
