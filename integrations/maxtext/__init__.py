"""The MaxText shim (``goodput_integrations.maxtext``): goodput with flags alone.

Supported: MaxText 0.2.4-0.2.5 (the ``maxtext`` package; Python >= 3.12).
Two ways in:

1. **Unmodified MaxText** — run its train command under our launcher; MaxText's
   own ``from ml_goodput_measurement import goodput, monitoring`` then gets our
   classes (this process only), Orbax checkpoint statistics are recorded, and
   a crash or SIGTERM records a disruption with its cause::

       python -m goodput_integrations.maxtext.launch -- \\
           python3 -m maxtext.trainers.pre_train.train src/maxtext/configs/base.yml \\
           run_name=my-run base_output_directory=/tmp/out \\
           enable_goodput_recording=true monitor_goodput=true

   The same alias, from Python: :func:`enable_reference_alias` /
   :func:`disable_reference_alias` / ``with reference_alias(): ...``.

2. **A fork** — replace the body of ``src/maxtext/common/goodput.py`` with
   ``from goodput_integrations.maxtext.fork import *`` (see
   :mod:`~goodput_integrations.maxtext.fork`). The helpers read MaxText's
   flags from its config object; ours come from environment variables
   (``GOODPUT_STORE``, ``GOODPUT_ROLLING_WINDOWS``, ``GOODPUT_PROMETHEUS_PORT``,
   ``GOODPUT_IDEAL_STEP_TIME``, ``GOODPUT_CHECKPOINT_STATS``), or from a
   config object that has those keys in lower case::

       recorder = create_goodput_recorder(config)
       record_goodput(recorder, RECORD_JOB_START_TIME)
       with maybe_monitor_goodput(config):
           ...

Importing this package imports neither MaxText, JAX nor Orbax.
"""

from goodput_integrations.maxtext.alias import (
    AliasConflict,
    AliasSettings,
    disable_reference_alias,
    enable_reference_alias,
    reference_alias,
)
from goodput_integrations.maxtext.config import MaxTextGoodputSettings, read_settings
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

__all__ = [
    "AliasConflict",
    "AliasSettings",
    "GoodputEvent",
    "MaxTextGoodputSettings",
    "RECORD_JOB_END_TIME",
    "RECORD_JOB_START_TIME",
    "create_goodput_recorder",
    "disable_reference_alias",
    "enable_reference_alias",
    "get_goodput_job_name",
    "maybe_monitor_goodput",
    "maybe_record_goodput",
    "read_settings",
    "record_goodput",
    "reference_alias",
]
