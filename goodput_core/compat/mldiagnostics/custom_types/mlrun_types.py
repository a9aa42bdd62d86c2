"""The SDK's ``custom_types.mlrun_types``: the run's enums (same names and
values as ``google-cloud-mldiagnostics`` 1.0.10), ``ConfigDict`` and ``MLRun``.

``machinelearning_run`` returns an :class:`MLRun` whose ``framework``,
``serving_engine``, ``run_phase``, ``application_framework``... are these
enums (``run.framework == Framework.JAX``); it accepts the SDK's own enum
members and their names as strings too.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, List, Optional

__all__ = ["RunPhase", "Framework", "ServingEngine", "AcceleratorOrchestrator",
           "ApplicationFramework", "RlOrchestrator", "Orchestrator", "ConfigDict", "MLRun"]

_SECTIONS = ("softwareConfigs", "hardwareConfigs", "userConfigs")


class RunPhase(enum.Enum):
    """A run's phase."""

    PHASE_UNSPECIFIED = "RUN_PHASE_UNSPECIFIED"
    PHASE_ACTIVE = "ACTIVE"
    PHASE_COMPLETED = "COMPLETED"
    PHASE_FAILED = "FAILED"


class Framework(enum.Enum):
    JAX = "JAX"
    PYTORCH = "PYTORCH"


class ServingEngine(enum.Enum):
    NONE = "NONE"
    VLLM = "VLLM"


class AcceleratorOrchestrator(enum.Enum):
    NONE = "NONE"
    PATHWAYS = "PATHWAYS"


class ApplicationFramework(enum.Enum):
    NONE = "NONE"
    MAXTEXT = "MAXTEXT"
    AXLEARN = "AXLEARN"
    MAXDIFFUSION = "MAXDIFFUSION"


class RlOrchestrator(enum.Enum):
    NONE = "NONE"
    TUNIX = "TUNIX"


class Orchestrator(str, enum.Enum):
    """Where the workload runs (a ``str`` enum, as the SDK's)."""

    GKE = "GKE"
    SLURM = "SLURM"
    CUSTOM = "CUSTOM"
    NONE = "NONE"


class ConfigDict(dict):
    """The SDK's configs: a dict with attribute access.

    ``run.configs.update({...})``, ``run.configs.batch_size = 64`` and
    ``del run.configs.x`` re-record the user configs: ``userConfigs`` plus
    every top-level key that is not one of the three sections.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "_on_change", None)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"'ConfigDict' object has no attribute '{name}'") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(f"'ConfigDict' object has no attribute '{name}'") from None

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def user_configs(self) -> Dict[str, Any]:
        """``userConfigs`` merged with the top-level keys set later."""
        out = dict(self.get("userConfigs") or {})
        out.update({k: v for k, v in self.items() if k not in _SECTIONS})
        return out

    def _changed(self) -> None:
        callback = self._on_change
        if callback is not None:
            callback(self.user_configs())


@dataclasses.dataclass
class MLRun:
    """A run: the SDK's fields in the SDK's order, then ours (from ``process_index``)."""

    name: str
    run_group: str = ""
    configs: Optional[ConfigDict] = None
    gcs_path: Optional[str] = None
    location: str = "us-central1"
    project: Optional[str] = None
    run_phase: RunPhase = RunPhase.PHASE_ACTIVE
    created_at: Optional[str] = None
    workload_details: Optional[Dict[str, Any]] = None
    workload_targets: Optional[List[Dict[str, Any]]] = None
    orchestrator: Optional[Orchestrator] = None
    display_name: str = ""
    on_demand_xprof: bool = False
    log_system_metrics: bool = False
    metric_only_run: bool = False
    environment: str = ""
    framework: Framework = Framework.JAX
    serving_engine: ServingEngine = ServingEngine.NONE
    metrics_exporter_config: Optional[Dict[str, Any]] = None
    accelerator_orchestrator: AcceleratorOrchestrator = AcceleratorOrchestrator.NONE
    application_framework: ApplicationFramework = ApplicationFramework.NONE
    rl_orchestrator: RlOrchestrator = RlOrchestrator.NONE
    control_plane_url: Optional[str] = None
    ml_run_id: Optional[str] = None
    cluster_id: Optional[str] = None
    workload_id: Optional[str] = None
    namespace: Optional[str] = None
    # ours
    process_index: int = 0
    store: Optional[str] = None
    profile_dir: Optional[str] = None
    recorder: Any = dataclasses.field(default=None, repr=False)
    #: whether traces have a place: ``gcs_path`` or our ``profile_dir=`` was given
    profile_target: bool = dataclasses.field(default=False, repr=False)
