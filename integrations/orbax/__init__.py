"""The Orbax adapter (``goodput_integrations.orbax``).

Checkpoint statistics (the blocking part of every save and restore) in one line::

    from goodput_integrations import orbax as gorbax

    mngr = gorbax.goodput_checkpoint_manager(directory, options, recorder=rec)
    # or, for a manager you already have:
    gorbax.attach(mngr, rec)
    # async commit completion as metrics (optional):
    gorbax.instrument(rec)

Importing this package does not import Orbax; using any name from it without
orbax-checkpoint installed raises :class:`AdapterUnavailable`.
"""

from __future__ import annotations

import importlib
from typing import Any

from goodput_integrations.errors import AdapterUnavailable

__all__ = [
    "AdapterUnavailable",
    "GoodputLogger",
    "OrbaxMonitoring",
    "attach",
    "detach",
    "goodput_checkpoint_manager",
    "instrument",
    "sanitize_entry",
    "uninstrument",
]

_LAZY = {
    "GoodputLogger": "logger",
    "sanitize_entry": "logger",
    "attach": "manager",
    "detach": "manager",
    "goodput_checkpoint_manager": "manager",
    "OrbaxMonitoring": "monitoring",
    "instrument": "monitoring",
    "uninstrument": "monitoring",
}


def __getattr__(name: str) -> Any:
    # Orbax takes a second or two to import: only when a name is used.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    except AdapterUnavailable:
        raise
    except ImportError as exc:
        raise AdapterUnavailable(
            f"the Orbax adapter needs jax and orbax-checkpoint: pip install "
            f"'goodput-core[jax]' ({exc})") from exc
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
