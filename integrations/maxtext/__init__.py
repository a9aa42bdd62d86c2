"""The MaxText shim (``goodput_integrations.maxtext``): goodput with flags alone.

Two ways in:

1. **Unmodified MaxText** — run its train command under our launcher; MaxText's
   own ``from ml_goodput_measurement import goodput, monitoring`` then gets our
   classes (this process only) and Orbax checkpoint statistics are recorded::

       python -m goodput_integrations.maxtext.launch \\
           -m MaxText.train MaxText/configs/base.yml run_name=my-run \\
           base_output_directory=/tmp/out enable_goodput_recording=true monitor_goodput=true

   The same alias, from Python: :func:`enable_reference_alias` /
   :func:`disable_reference_alias` / ``with reference_alias(): ...``.

2. **MaxText's helper API** — change one import line (``maxtext.common.goodput``
   -> ``goodput_integrations.maxtext``); the helpers read the same flags from
   the config object, plus ours (``goodput_store``, ``goodput_rolling_windows``,
   ``goodput_prometheus_port``, ``goodput_ideal_step_time``)::

       recorder = create_goodput_recorder(config)
       with maybe_monitor_goodput(config):
           with maybe_record_goodput(recorder, GoodputEvent.JOB):
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
    "maybe_monitor_goodput",
    "maybe_record_goodput",
    "read_settings",
    "record_goodput",
    "reference_alias",
]
