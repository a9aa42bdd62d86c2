"""The SDK's ``core.xprof``: the ``Xprof`` class and the on-demand server's
``start_on_demand_xprof`` / ``stop_on_demand_xprof``.

``start_on_demand_xprof`` starts jax's profiler server on local rank 0 of
each host only (``LOCAL_RANK``, ``SLURM_LOCALID`` or
``OMPI_COMM_WORLD_LOCAL_RANK``; 0 when none is set, one process per host),
as the SDK: processes sharing a host would clash on one port. It never
raises; a second call while the server runs does nothing.
"""

from __future__ import annotations

from goodput_core.compat.mldiagnostics._xprof import Xprof, start_on_demand, stop_on_demand

__all__ = ["Xprof", "start_on_demand_xprof", "stop_on_demand_xprof"]


def start_on_demand_xprof(port: int = 9999) -> None:
    """Starts the on-demand profiler server on ``port`` (local rank 0 only)."""
    start_on_demand(None, port=port)


def stop_on_demand_xprof() -> None:
    """Stops the server :func:`start_on_demand_xprof` started (no-op otherwise)."""
    stop_on_demand()
