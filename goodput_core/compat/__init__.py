"""Modules mirroring ``ml_goodput_measurement``'s public names.

``from goodput_core.compat import goodput`` replaces
``from ml_goodput_measurement import goodput``; likewise ``goodput_utils``,
``goodput_elastic``, ``monitoring`` and ``monitoring_elastic``. Submodules
are imported on use so that importing this package stays cheap.

``goodput_core.compat.mldiagnostics`` likewise mirrors Google's ML-diagnostics
SDK (``google_cloud_mldiagnostics``: ``machinelearning_run``, ``metrics``,
``xprof``, ``metric_types``).
"""
