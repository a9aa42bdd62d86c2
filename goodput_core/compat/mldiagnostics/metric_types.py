"""``metric_types`` at the package's top, the SDK's ``metric_types`` name:
the names of :mod:`.custom_types.metric_types` (the same objects)."""

from goodput_core.compat.mldiagnostics.custom_types.metric_types import *  # noqa: F401,F403
from goodput_core.compat.mldiagnostics.custom_types.metric_types import __all__  # noqa: F401
