"""What the SDK runs of the framework adapters: one table, modules imported on use.

The ML-diagnostics SDK serves JAX and PyTorch programs, and its profiler
sessions, on-demand profiler server, process probe and run metadata are the
adapters' (``goodput_integrations.jax``, ``goodput_integrations.torch``). The
engine imports no adapter (docs/architecture.md, layer rule 7): this table is
the one place where it names the adapter modules it uses, each imported only
when a program of that framework needs it (the framework is loaded by then),
so importing the SDK loads no adapter and no framework.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["ADAPTER_MODULES", "adapter"]

#: part -> the adapter module that provides it
ADAPTER_MODULES = {
    "jax.probe": "goodput_integrations.jax._probe",
    "jax.metadata": "goodput_integrations.jax.metadata",
    "jax.profiling": "goodput_integrations.jax.profiling",
    "jax.xprof_sessions": "goodput_integrations.jax.xprof_sessions",
    "torch.metadata": "goodput_integrations.torch.metadata",
    "torch.profiling": "goodput_integrations.torch.profiling",
}


def adapter(part: str) -> ModuleType:
    """The adapter module that provides ``part`` (a key of :data:`ADAPTER_MODULES`).

    Raises:
      ImportError: the adapter (or its framework) cannot be imported.
    """
    return importlib.import_module(ADAPTER_MODULES[part])
