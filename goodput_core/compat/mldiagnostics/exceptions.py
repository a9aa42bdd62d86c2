"""The ML-diagnostics SDK's exception classes (same names and bases).

Only :class:`MLRunConfigurationError` is raised, by ``machinelearning_run``
for a bad argument, before training starts. Misuse during training
(``metrics.record`` with a bad name or value, ``xprof`` without a run) is
logged once and counted instead of raised, unless the run was created with
``strict=True`` (tests), where it raises :class:`RecordingError` or
:class:`ProfilingError`.
"""

from __future__ import annotations

__all__ = ["MLDiagnosticError", "MLRunConfigurationError", "RecordingError",
           "NoActiveRunError", "ProfilingError"]


class MLDiagnosticError(Exception):
    """Base exception of the SDK."""


class MLRunConfigurationError(ValueError):
    """A bad ``machinelearning_run`` argument."""


class RecordingError(ValueError):
    """A metric that cannot be recorded (bad name or value)."""


class NoActiveRunError(Exception):
    """No ``machinelearning_run`` yet."""


class ProfilingError(Exception):
    """Profiling cannot start (no run)."""
