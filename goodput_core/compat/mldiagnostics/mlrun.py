"""``machinelearning_run``: the ML-diagnostics SDK's run, on our recorder and store.

The arguments are the SDK's (names, order and defaults); the cloud ones
(``project``, ``region``, ``environment``, ``base_url``...) are accepted and
kept on the returned :class:`MLRun`, and nothing is sent anywhere. Ours are
keyword-only and come last (``store``, ``clock``, ``process_index``...).

What a run records, into the store (default ``$GOODPUT_STORE`` or the
embedded sqlite file), under the run name ``name`` (plus, on GKE, the
workload's creation time: see :func:`_system.gke_suffix`):

* on process 0 (the SDK's "master host"): the job start now, the job end
  when the program exits (or :func:`end_run`), a disruption when it dies of
  an unhandled exception (the SDK reports the run FAILED then);
* run metadata: ``run_group``, ``configs`` (the user's, JSON-safe and nested:
  the SDK flattens values to strings), ``software_configs`` and
  ``hardware_configs`` (collected as the SDK does), and jax's device facts
  (``device_kind``, ``num_devices``...: program goodput needs them) once
  jax's backends exist;
* with ``steps_from_metrics`` (default), the first metric recorded with
  ``step=N`` (N above every step seen) marks step N's start: the SDK has no
  step timing, so the metric calls give it (turn it off when the program
  also records steps itself, e.g. with ``goodput_integrations.jax``).
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import logging
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional

from goodput_core.compat.mldiagnostics import _system
from goodput_core.compat.mldiagnostics.exceptions import MLRunConfigurationError

__all__ = ["MLRun", "ConfigDict", "machinelearning_run", "end_run", "active_run",
           "ON_DEMAND_XPROF_PORT"]

logger = logging.getLogger("goodput")

#: The SDK's on-demand profiler port.
ON_DEMAND_XPROF_PORT = 9999
_ENVIRONMENTS = ("autopush", "staging", "prod")
_APP_FRAMEWORKS = ("NONE", "MAXTEXT", "AXLEARN", "MAXDIFFUSION")
_RL_ORCHESTRATORS = ("NONE", "TUNIX")
_SECTIONS = ("softwareConfigs", "hardwareConfigs", "userConfigs")


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
    """A run (the SDK's fields, plus ours after ``process_index``)."""

    name: str
    run_group: str = ""
    configs: Optional[ConfigDict] = None
    gcs_path: Optional[str] = None
    location: str = "us-central1"
    project: Optional[str] = None
    run_phase: str = "ACTIVE"
    created_at: Optional[str] = None
    orchestrator: Optional[str] = None
    display_name: str = ""
    on_demand_xprof: bool = False
    log_system_metrics: bool = False
    metric_only_run: bool = False
    environment: str = "prod"
    framework: str = "JAX"
    application_framework: str = "NONE"
    # ours
    process_index: int = 0
    store: Optional[str] = None
    profile_dir: Optional[str] = None
    recorder: Any = dataclasses.field(default=None, repr=False)


def _enum_text(value: Any, allowed, name: str) -> str:
    text = str(getattr(value, "value", value) if value is not None else "NONE").upper()
    if text not in allowed:
        raise MLRunConfigurationError(f"Invalid {name}: {value!r}. Supported values are: "
                                      f"{list(allowed)}")
    return text


def _profile_dir(explicit: Optional[str], gcs_path: Optional[str], run_name: str) -> str:
    """Where traces go: ``profile_dir``, else ``<gcs_path>/<run>`` for a local
    ``gcs_path``, else ``$GOODPUT_PROFILE_DIR/<run>`` or ``<data dir>/goodput/profiles/<run>``
    (a ``gs://`` path is uploaded to after each session: see ``_xprof``)."""
    if explicit:
        return os.fspath(explicit)
    if gcs_path and "://" not in gcs_path:
        return os.path.join(gcs_path, run_name)
    base = os.environ.get("GOODPUT_PROFILE_DIR") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                        "share"), "goodput", "profiles")
    return os.path.join(base, run_name)


def _normalize_gcs_path(path: Optional[str]) -> Optional[str]:
    """As the SDK: keep ``gs://``, collapse repeated slashes, drop a trailing one."""
    if not path:
        return path
    prefix = "gs://" if path.startswith("gs://") else ""
    rest = path[len(prefix):]
    while "//" in rest:
        rest = rest.replace("//", "/")
    return prefix + rest.rstrip("/")


def machinelearning_run(
    name: str,
    run_group: str = "",
    configs: Optional[Mapping[str, Any]] = None,
    gcs_path: Optional[str] = None,
    base_url: Optional[str] = None,
    cluster_id: Optional[str] = None,
    project: Optional[str] = None,
    region: Optional[str] = "us-central1",
    metrics_record_interval_sec: float = 10.0,
    on_demand_xprof: bool = False,
    log_system_metrics: bool = False,
    environment: str = "prod",
    framework: Any = "JAX",
    serving_engine: Any = "NONE",
    run_workload_id: Optional[str] = None,
    metric_only_run: bool = False,
    metrics_exporter_config: Optional[Dict[str, Any]] = None,
    accelerator_orchestrator: Any = "NONE",
    application_framework: Any = "NONE",
    rl_orchestrator: Any = "NONE",
    *,
    store: Any = None,
    clock: Callable[[], float] = time.time,
    process_index: Optional[int] = None,
    profile_dir: Optional[str] = None,
    steps_from_metrics: bool = True,
    record_job: bool = True,
    on_demand_xprof_processes: Optional[Any] = None,
    strict: bool = False,
) -> MLRun:
    """Creates the run that ``metrics`` and ``xprof`` record into (call it first).

    A second call ends the current run (job end) and starts the new one.

    Args:
      name: the run name (required).
      run_group: the run's group (``goodput runs --group G``, ``goodput compare``).
      configs: the user's configs: a dict (e.g. loaded from YAML or JSON),
        or a path to a ``.json``/``.yaml`` file (ours).
      gcs_path: where profiles go: ``gs://...`` (uploaded when
        google-cloud-storage is installed) or a local directory.
      on_demand_xprof: start jax's profiler server on port 9999 (it binds
        all interfaces) on ``on_demand_xprof_processes`` (default: every process).
      metric_only_run: as the SDK, ``xprof`` captures nothing.
      base_url, cluster_id, project, region, metrics_record_interval_sec,
      log_system_metrics, environment, serving_engine, run_workload_id,
      metrics_exporter_config, accelerator_orchestrator, rl_orchestrator:
        accepted for compatibility (validated as the SDK; no cloud is used).
      store: our store URL or path (default ``$GOODPUT_STORE`` or the embedded file).
      clock: the time source (tests inject a fake).
      process_index: this process's index (default: jax's, else ``RANK``-like
        variables, else 0).
      profile_dir: where traces go (default: see ``MLRun.profile_dir``).
      steps_from_metrics: mark step starts from metrics' ``step`` (module docstring).
      record_job: record job start/end and crashes on process 0.
      strict: raise on misuse during training instead of logging it (tests).

    Returns:
      The :class:`MLRun` (``recorder`` is our :class:`~goodput_core.Recorder`).

    Raises:
      MLRunConfigurationError: a bad argument (no name, bad environment,
        application framework, run group or configs), or an unusable store.
    """
    from goodput_core.compat.mldiagnostics import _state

    if not name or not isinstance(name, str):
        raise MLRunConfigurationError(
            "name is required and must be provided. The name parameter helps identify and "
            "organize your ML workloads (e.g. 'training_v1').")
    if environment not in _ENVIRONMENTS:
        raise MLRunConfigurationError("environment must be one of 'autopush', 'staging', "
                                      "or 'prod'.")
    app = _enum_text(application_framework, _APP_FRAMEWORKS, "application_framework")
    _enum_text(rl_orchestrator, _RL_ORCHESTRATORS, "rl_orchestrator")
    try:
        from goodput_core.run_groups import check_run_group

        run_group = check_run_group(run_group)
    except ValueError as exc:
        raise MLRunConfigurationError(str(exc)) from None
    if configs is not None and not isinstance(configs, (Mapping, str, os.PathLike)):
        raise MLRunConfigurationError(
            f"configs must be a dict (or a JSON/YAML file path), got {type(configs).__name__}")
    fw = str(getattr(framework, "value", framework)).upper()
    gcs_path = _normalize_gcs_path(gcs_path)
    run_name = name + _system.gke_suffix()
    index = _system.process_index() if process_index is None else int(process_index)
    run = MLRun(
        name=run_name, run_group=run_group, gcs_path=gcs_path, location=region or "",
        project=project, created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(),
        orchestrator="GKE" if run_name != name else "NONE", display_name=name,
        on_demand_xprof=bool(on_demand_xprof), log_system_metrics=bool(log_system_metrics),
        metric_only_run=bool(metric_only_run), environment=environment, framework=fw,
        application_framework=app, process_index=index,
        profile_dir=_profile_dir(profile_dir, gcs_path, run_name))
    return _state.start(run, configs, store=store, clock=clock,
                        steps_from_metrics=steps_from_metrics, record_job=record_job,
                        server_processes=on_demand_xprof_processes, strict=strict)


def end_run() -> None:
    """Ends the active run now (ours; the SDK ends it when the program exits):
    job end on process 0, everything flushed, the on-demand server stopped."""
    from goodput_core.compat.mldiagnostics import _state

    _state.finish()


def active_run() -> Optional[MLRun]:
    """The active :class:`MLRun`, or None (ours)."""
    from goodput_core.compat.mldiagnostics import _state

    current = _state.current()
    return None if current is None else current.run


_hooks_lock = threading.Lock()
_hooks_installed = False


def install_exit_hooks() -> None:
    """atexit: end the run (job end); sys.excepthook: a crash is a disruption.

    Installed once, at the first run; the previous excepthook is called after ours.
    """
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
    from goodput_core.compat.mldiagnostics import _state

    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        try:
            _state.crashed(exc_type)
        finally:
            previous(exc_type, exc, tb)

    sys.excepthook = hook
    atexit.register(_state.finish)
