"""MaxText's managed ML diagnostics (``managed_mldiagnostics=true``) on our compat.

MaxText (0.2.4-0.2.5) loads Google's SDK through
``maxtext.common.gcloud_stub.mldiagnostics_modules()`` (``import
google_cloud_mldiagnostics as mldiag``) and calls
``mldiag.machinelearning_run(name=run_name, run_group=..., configs=...,
gcs_path=managed_mldiagnostics_dir, on_demand_xprof=..., region=...)``,
``mldiag.metrics.record(name, value, step=step)`` and
``mldiag.xprof(process_index_list=...)``. Google's SDK needs a Google Cloud
project. :func:`sdk_module` builds a module with the SDK's names over
:mod:`goodput_core.compat.mldiagnostics`:

* under the launcher, the alias serves it as ``google_cloud_mldiagnostics``
  (:mod:`~goodput_integrations.maxtext.alias`, ``mldiagnostics=True``);
* a fork returns it from ``gcloud_stub.mldiagnostics_modules()``
  (:func:`goodput_integrations.maxtext.fork.mldiagnostics_modules`).

Its ``machinelearning_run`` takes the SDK's arguments. Where MaxText built
a goodput recorder in this process (``enable_goodput_recording=true``), the
diagnostics run *joins* that run: same run name (the goodput job name, not
the SDK's ``<name>-<timestamp>``), no second job start/end and no step
marks from metrics (MaxText's recorder records those); its run group,
configs and metrics land beside goodput, so ``goodput runs --group G``
lists the run with its goodput. Without a goodput recorder it is the
compat's own run, named by the SDK's rule. Events go to the alias's store
(or ``$GOODPUT_STORE``).
"""

from __future__ import annotations

import types
from typing import Any, Callable, Optional

from goodput_integrations.maxtext import runtime

__all__ = ["ROOT", "SUBMODULES", "joined_run", "sdk_module"]

ROOT = "google_cloud_mldiagnostics"
#: SDK submodule -> our module (MaxText uses only the root's attributes).
SUBMODULES = {
    "custom_types": "goodput_core.compat.mldiagnostics.custom_types",
    "custom_types.metric_types": "goodput_core.compat.mldiagnostics.custom_types.metric_types",
    "custom_types.mlrun_types": "goodput_core.compat.mldiagnostics.custom_types.mlrun_types",
    "custom_types.exceptions": "goodput_core.compat.mldiagnostics.custom_types.exceptions",
    "core": "goodput_core.compat.mldiagnostics.core",
    "core.xprof": "goodput_core.compat.mldiagnostics.core.xprof",
}


def joined_run(*args: Any, store: Optional[str] = None,
               clock: Optional[Callable[[], float]] = None, **kwargs: Any) -> Any:
    """``machinelearning_run`` with the SDK's arguments, joined to the
    goodput run of this process when there is one (module docstring).

    ``store`` and ``clock`` are the defaults of the caller (the alias's
    settings); an explicit keyword of the caller wins.
    """
    # lazy: the diagnostics SDK: only when diagnostics are on
    from goodput_core.compat.mldiagnostics import machinelearning_run

    extra: dict = {}
    if store is not None:
        extra["store"] = store
    if clock is not None:
        extra["clock"] = clock
    recorder = runtime.current_recorder()
    name = getattr(recorder, "job_name", None)
    if recorder is not None and isinstance(name, str) and name:
        extra.update(run_name=name, record_job=False, steps_from_metrics=False)
    extra.update(kwargs)
    return machinelearning_run(*args, **extra)


def sdk_module(store: Optional[str] = None,
               clock: Optional[Callable[[], float]] = None,
               name: str = ROOT) -> types.ModuleType:
    """A module with the SDK's top-level names (``machinelearning_run``,
    ``metrics``, ``xprof``, ``metric_types``, ``custom_types``, ``core``) over
    our compat, its ``machinelearning_run`` joined (:func:`joined_run`)."""
    # lazy: the diagnostics SDK: only when diagnostics are on
    from goodput_core.compat import mldiagnostics as compat

    module = types.ModuleType(name, f"goodput's {ROOT} (see goodput_integrations.maxtext."
                                    "mldiagnostics)")
    for key in ("metrics", "xprof", "metric_types", "custom_types", "core", "exceptions",
                "end_run", "active_run", "MLRun", "Xprof"):
        module.__dict__[key] = getattr(compat, key)

    def machinelearning_run(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("store", store)   # the caller's own keywords win
        kwargs.setdefault("clock", clock)
        return joined_run(*args, **kwargs)

    machinelearning_run.__doc__ = compat.machinelearning_run.__doc__
    module.machinelearning_run = machinelearning_run  # type: ignore[attr-defined]
    return module
