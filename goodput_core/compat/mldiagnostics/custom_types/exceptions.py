"""The ML-diagnostics SDK's exception classes (same names and bases), at the
SDK's path (``custom_types.exceptions``).

Raised at the API's edge, before or outside the training step:
:class:`MLRunConfigurationError` by ``machinelearning_run`` for a bad
argument, :class:`ProfilingError` by ``xprof`` without a run or without a
place for traces (as the SDK). A bad metric during training (bad name or
value) is logged once and counted instead of raised, unless the run was
created with ``strict=True`` (tests), where it raises :class:`RecordingError`.
"""

from __future__ import annotations

__all__ = ["MLDiagnosticError", "MLRunConfigurationError", "RecordingError",
           "NoActiveRunError", "ProfilingError", "ControlPlaneClientNotInitializedError"]


class MLDiagnosticError(Exception):
    """Base exception of the SDK."""


class MLRunConfigurationError(ValueError):
    """A bad ``machinelearning_run`` argument."""


class RecordingError(ValueError):
    """A metric that cannot be recorded (bad name or value)."""


class NoActiveRunError(Exception):
    """No ``machinelearning_run`` yet."""


class ProfilingError(Exception):
    """Profiling cannot start (no run, or no ``gcs_path``/``profile_dir``)."""


class ControlPlaneClientNotInitializedError(Exception):
    """The SDK's control-plane client is missing (never raised here: there is none)."""
