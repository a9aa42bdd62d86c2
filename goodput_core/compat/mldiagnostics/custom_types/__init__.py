"""The SDK's ``custom_types`` package at the same relative path:
``mlrun_types`` (the run's enums, ``ConfigDict``, ``MLRun``),
``metric_types`` and ``exceptions``."""

from goodput_core.compat.mldiagnostics.custom_types import exceptions, metric_types, mlrun_types

__all__ = ["exceptions", "metric_types", "mlrun_types"]
