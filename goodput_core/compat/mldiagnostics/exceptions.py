"""``exceptions`` at the package's top (kept for earlier imports): the
classes of :mod:`.custom_types.exceptions` (the same objects)."""

from goodput_core.compat.mldiagnostics.custom_types.exceptions import *  # noqa: F401,F403
from goodput_core.compat.mldiagnostics.custom_types.exceptions import __all__  # noqa: F401
