"""``machinelearning_run``: the ML-diagnostics SDK's run, on our recorder and store.

The arguments are the SDK's (names, order and defaults); the cloud ones
(``project``, ``region``, ``environment``, ``base_url``...) are accepted and
kept on the returned :class:`MLRun`, and nothing is sent anywhere. Ours are
keyword-only and come last (``store``, ``clock``, ``process_index``...).

The run name follows the SDK: ``name`` lower-cased, other characters
turned into ``-``, plus a suffix that decides which processes and restarts
share the run (:func:`_system.run_identity`): the GKE workload's creation
time on GKE, else ``run_workload_id`` (or ``$RUN_WORKLOAD_ID``), else the
Slurm job id, else the local time of the call (``"My Run_1"`` becomes
``my-run-1-20250304050607``: running a script twice gives two runs). A job
of several processes, or one that should continue its run after a restart,
outside GKE and Slurm passes the same ``run_workload_id`` on every process
and restart; separate runs are grouped with ``run_group``.

What a run records, into the store (default ``$GOODPUT_STORE`` or the
embedded sqlite file), under that run name:

* on process 0 (the SDK's "master host"): the job start now, the job end
  when the program exits (or :func:`end_run`), a disruption when it dies of
  an unhandled exception (the SDK reports the run FAILED then);
* run metadata: ``run_group``, ``configs`` (the user's, JSON-safe and nested;
  ``run.configs.userConfigs`` has them as strings, as the SDK's), ``software_configs`` and
  ``hardware_configs`` (collected as the SDK does), and the framework's
  device facts (``device_kind``, ``num_devices``...: program goodput needs
  them) once jax's backends exist, or, with ``framework=PYTORCH``, from
  torch (devices, world size, torchrun facts);
* with ``steps_from_metrics`` (default), the first metric recorded with
  ``step=N`` (N above every step seen) marks step N's start: the SDK has no
  step timing, so the metric calls give it (turn it off when the program
  also records steps itself, e.g. with ``goodput_integrations.jax``).
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import re
import time
from typing import Any, Callable, Dict, Mapping, Optional

from goodput_core.compat.mldiagnostics import _state, _system, _xprof
from goodput_core.compat.mldiagnostics.custom_types.exceptions import MLRunConfigurationError
from goodput_core.compat.mldiagnostics.custom_types.mlrun_types import (
    AcceleratorOrchestrator,
    ApplicationFramework,
    ConfigDict,
    Framework,
    MLRun,
    RlOrchestrator,
    RunPhase,
    ServingEngine,
)
from goodput_core.queries.run_groups import check_run_group

__all__ = ["MLRun", "ConfigDict", "machinelearning_run", "end_run", "active_run",
           "ON_DEMAND_XPROF_PORT", "RunPhase"]

logger = logging.getLogger("goodput")

#: The SDK's on-demand profiler port.
ON_DEMAND_XPROF_PORT = 9999
_ENVIRONMENTS = ("autopush", "staging", "prod")


def _enum(value: Any, cls: Any, name: str) -> Any:
    """``cls``'s member for ``value``: a member of ours or of the SDK's enum
    (by value), or its name as a string (any case), as the SDK; None: NONE."""
    if value is None and "NONE" in cls.__members__:
        return cls.NONE
    raw = getattr(value, "value", value)
    if isinstance(raw, str):
        for key in (raw.upper(), raw):
            if key in cls.__members__:
                return cls[key]
            try:
                return cls(key)
            except ValueError:
                continue
    raise MLRunConfigurationError(f"Invalid {name}: {value!r}. Supported values are: "
                                  f"{[m.value for m in cls]}")


_REGION = re.compile(r"[a-z]+(?:-[a-z]+)+[0-9]+")


def _check_region(region: Optional[str]) -> None:
    """As the SDK (without ``base_url``): a region like ``us-central1``; a
    zone (``us-central1-a``) or anything else is refused. None: not checked
    (the SDK asks the GCE metadata server then; nothing is asked here)."""
    if region is None or (isinstance(region, str) and _REGION.fullmatch(region)):
        return
    if isinstance(region, str) and re.fullmatch(_REGION.pattern + r"-[a-z]+", region):
        raise MLRunConfigurationError(f"Invalid region {region!r}: that is a zone; give its "
                                      f"region (e.g. 'us-central1').")
    raise MLRunConfigurationError(f"Invalid region {region!r}. Expected a region like "
                                  f"'us-central1'.")


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
    framework: Any = Framework.JAX,
    serving_engine: Any = ServingEngine.NONE,
    run_workload_id: Optional[str] = None,
    metric_only_run: bool = False,
    metrics_exporter_config: Optional[Dict[str, Any]] = None,
    accelerator_orchestrator: Any = AcceleratorOrchestrator.NONE,
    application_framework: Any = ApplicationFramework.NONE,
    rl_orchestrator: Any = RlOrchestrator.NONE,
    *,
    store: Any = None,
    clock: Callable[[], float] = time.time,
    process_index: Optional[int] = None,
    profile_dir: Optional[str] = None,
    steps_from_metrics: bool = True,
    record_job: bool = True,
    on_demand_xprof_processes: Optional[Any] = None,
    strict: bool = False,
    system_metrics_wait: Optional[Callable[[float], bool]] = None,
    run_name: Optional[str] = None,
) -> MLRun:
    """Creates the run that ``metrics`` and ``xprof`` record into (call it first).

    A second call ends the current run (job end) and starts the new one.

    Args:
      name: the run's display name (required); the run name is made from
        it as the module docstring says.
      run_group: the run's group (``goodput runs --group G``, ``goodput compare``).
      configs: the user's configs: a dict (e.g. loaded from YAML or JSON),
        or a path to a ``.json``/``.yaml`` file (ours).
      gcs_path: where profiles go: ``gs://...`` (uploaded when
        google-cloud-storage is installed) or a local directory.
      region: a region like ``us-central1`` (a zone is refused, as the SDK),
        unless ``base_url`` is given.
      on_demand_xprof: start jax's profiler server on port 9999 (it binds
        all interfaces) on local rank 0 of each host, as the SDK, or on the
        process indices in ``on_demand_xprof_processes``.
      log_system_metrics: collect system metrics every
        ``metrics_record_interval_sec`` seconds on local rank 0 of each host,
        as the SDK (host CPU and memory, GPU or TPU utilisation:
        :mod:`~goodput_core.compat.mldiagnostics.system_metrics`), and record
        those the program records (``MetricType.TPU_DUTY_CYCLE``...); without
        it both are dropped, as the SDK.
      metrics_record_interval_sec: seconds between system-metric samples
        (0 or less: none are collected, as the SDK).
      run_workload_id: the id that makes processes and restarts one run.
      metric_only_run: as the SDK, ``xprof`` captures nothing.
      framework, serving_engine, accelerator_orchestrator,
      application_framework, rl_orchestrator: the SDK's enums (ours in
        ``custom_types.mlrun_types`` or the SDK's own) or their names.
      base_url, cluster_id, project, environment, metrics_exporter_config:
        accepted for compatibility (validated as the SDK; no cloud is used).
      store: our store URL or path (default ``$GOODPUT_STORE`` or the embedded file).
      clock: the time source (tests inject a fake).
      process_index: this process's index (default: with ``framework=PYTORCH``
        the ``torch.distributed`` rank once a process group exists, else
        jax's; else ``RANK``-like variables, else 0).
      profile_dir: where traces go (default: see ``MLRun.profile_dir``).
      steps_from_metrics: mark step starts from metrics' ``step`` (module docstring).
      record_job: record job start/end and crashes on process 0.
      strict: raise on misuse during training instead of logging it (tests).
      system_metrics_wait: the system-metric sampler's ``wait(seconds) ->
        stop?`` (tests advance a fake clock instead of sleeping).
      run_name: the run's name in the store, as given (default: made from
        ``name`` by the SDK's rule); e.g. the MaxText shim joins the run of
        MaxText's goodput recorder.

    Returns:
      The :class:`MLRun` (``recorder`` is our :class:`~goodput_core.Recorder`).

    Raises:
      MLRunConfigurationError: a bad argument (no name, bad environment,
        region, enum, run group or configs), or an unusable store.
    """

    if not name or not isinstance(name, str):
        raise MLRunConfigurationError(
            "name is required and must be provided. The name parameter helps identify and "
            "organize your ML workloads (e.g. 'training_v1').")
    if environment not in _ENVIRONMENTS:
        raise MLRunConfigurationError("environment must be one of 'autopush', 'staging', "
                                      "or 'prod'.")
    enums = dict(
        framework=_enum(framework, Framework, "framework"),
        serving_engine=_enum(serving_engine, ServingEngine, "serving_engine"),
        accelerator_orchestrator=_enum(accelerator_orchestrator, AcceleratorOrchestrator,
                                       "accelerator_orchestrator"),
        application_framework=_enum(application_framework, ApplicationFramework,
                                    "application_framework"),
        rl_orchestrator=_enum(rl_orchestrator, RlOrchestrator, "rl_orchestrator"))
    if not (base_url or os.environ.get("DIAGON_BASE_URL")):
        _check_region(region)
    try:
        run_group = check_run_group(run_group)
    except ValueError as exc:
        raise MLRunConfigurationError(str(exc)) from None
    if configs is not None and not isinstance(configs, (Mapping, str, os.PathLike)):
        raise MLRunConfigurationError(
            f"configs must be a dict (or a JSON/YAML file path), got {type(configs).__name__}")
    try:
        interval = float(metrics_record_interval_sec)
    except (TypeError, ValueError):
        raise MLRunConfigurationError(f"metrics_record_interval_sec must be a number of "
                                      f"seconds, got {metrics_record_interval_sec!r}") from None
    gcs_path = _normalize_gcs_path(gcs_path)
    if run_name is not None and not (isinstance(run_name, str) and run_name.strip()):
        raise MLRunConfigurationError(f"run_name must be a non-empty string, got {run_name!r}")
    stored_name, orchestrator, details = _system.run_identity(name, clock(), run_workload_id)
    run_name = run_name or stored_name
    index = (_system.process_index(enums["framework"].value) if process_index is None
             else int(process_index))
    run = MLRun(
        name=run_name, run_group=run_group, gcs_path=gcs_path, location=region or "",
        project=project, run_phase=RunPhase.PHASE_ACTIVE,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(),
        workload_details=details, orchestrator=orchestrator, display_name=name,
        on_demand_xprof=bool(on_demand_xprof), log_system_metrics=bool(log_system_metrics),
        metric_only_run=bool(metric_only_run), environment=environment,
        metrics_exporter_config=metrics_exporter_config, control_plane_url=base_url,
        cluster_id=cluster_id, workload_id=run_workload_id, process_index=index,
        profile_dir=_profile_dir(profile_dir, gcs_path, run_name),
        profile_target=bool(gcs_path or profile_dir or os.environ.get("GOODPUT_PROFILE_DIR")),
        **enums)
    server = (functools.partial(_xprof.start_on_demand, on_demand_xprof_processes, index),
              _xprof.stop_on_demand)
    return _state.start(run, configs, store=store, clock=clock,
                        steps_from_metrics=steps_from_metrics, record_job=record_job,
                        strict=strict, system_metrics=(interval, system_metrics_wait),
                        profiler_server=server)


def end_run() -> None:
    """Ends the active run now (ours; the SDK ends it when the program exits):
    job end on process 0, everything flushed, the on-demand server stopped."""
    _state.finish()


def active_run() -> Optional[MLRun]:
    """The active :class:`MLRun`, or None (ours)."""
    return _state.active_run()
