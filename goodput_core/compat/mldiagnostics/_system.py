"""What ``machinelearning_run`` collects by itself: process index, software
and hardware configs, the GKE run-name suffix.

jax is never imported here: it is asked only when the program has imported
it already (``"jax" in sys.modules``), and its devices only once its
backends exist (asking earlier would break ``jax.distributed.initialize``).
Versions are read from installed package metadata, without importing.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import sys
from importlib import metadata as _pkg
from typing import Any, Dict, Optional

from goodput_core.compat.mldiagnostics._frameworks import adapter
from goodput_core.compat.mldiagnostics.custom_types.mlrun_types import Orchestrator

logger = logging.getLogger("goodput")

_RANK_ENV = ("NODE_RANK", "GROUP_RANK", "RANK", "JOB_COMPLETION_INDEX")
_LOCAL_RANK_ENV = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")


def _version(*dists: str) -> Optional[str]:
    for dist in dists:
        try:
            return _pkg.version(dist)
        except _pkg.PackageNotFoundError:
            continue
    return None


def _jax_probe():
    """The JAX adapter's probe (``jax._probe``) when jax is already imported, else None."""
    if "jax" not in sys.modules:
        return None
    try:
        return adapter("jax.probe")
    except Exception:
        return None


def torch_rank() -> Optional[int]:
    """``torch.distributed``'s rank when the program imported torch and started
    a process group (as the SDK's PyTorch path), else None; never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return None


def process_index(framework: str = "JAX") -> int:
    """This process's index: for ``framework="PYTORCH"`` the process group's
    rank once it exists, else jax's when known without starting a backend;
    else the first of ``NODE_RANK``, ``GROUP_RANK``, ``RANK``,
    ``JOB_COMPLETION_INDEX`` that is set (as the SDK), else 0."""
    if framework == "PYTORCH":
        rank = torch_rank()
        return rank if rank is not None else _first_int_env(_RANK_ENV)
    probe = _jax_probe()
    if probe is not None:
        try:
            index = probe.current_process_index()
            if index is not None:
                return int(index)
        except Exception:
            pass
    return _first_int_env(_RANK_ENV)


def local_rank() -> int:
    """This process's rank on its host: the first of ``LOCAL_RANK``,
    ``SLURM_LOCALID``, ``OMPI_COMM_WORLD_LOCAL_RANK`` that is set, else 0
    (one process per host, the SDK's assumption for JAX)."""
    return _first_int_env(_LOCAL_RANK_ENV)


def _first_int_env(names) -> int:
    """The first of the variables ``names`` set to an integer, else 0."""
    for env in names:
        try:
            return int(os.environ[env])
        except (KeyError, ValueError):
            continue
    return 0


def software_configs(framework: str) -> Dict[str, str]:
    """The SDK's ``softwareConfigs``: framework, its version, XLA flags, libtpu version."""
    version = _version("jax") if framework == "JAX" else _version("torch")
    return {
        "framework": framework,
        "framework_version": version or "unknown",
        "xla_flags": os.environ.get("XLA_FLAGS", "default"),
        "libtpu_version": _version("libtpu", "libtpu-nightly") or "n/a",
    }


def jax_metadata() -> Dict[str, Any]:
    """``goodput_integrations.jax.run_metadata()`` once jax's backends exist, else {}."""
    probe = _jax_probe()
    if probe is None or probe.backends_initialized() is False:
        return {}
    try:
        return adapter("jax.metadata").run_metadata()
    except Exception:
        logger.warning("goodput: reading jax's devices failed; hardware configs unknown",
                       exc_info=True)
        return {}


def torch_metadata() -> Dict[str, Any]:
    """``goodput_integrations.torch.run_metadata()`` when the program imported
    torch, else {} (torch is never imported here)."""
    if "torch" not in sys.modules:
        return {}
    try:
        return adapter("torch.metadata").run_metadata()
    except Exception:
        logger.warning("goodput: reading torch's devices failed; hardware configs unknown",
                       exc_info=True)
        return {}


def hardware_configs(meta: Dict[str, Any]) -> Dict[str, str]:
    """The SDK's ``hardwareConfigs`` from :func:`jax_metadata` ("unknown" where not known)."""
    if not meta:
        return dict.fromkeys(("device_type", "num_slices", "devices_per_slice",
                              "accelerator_type"), "unknown")
    slices = int(meta.get("num_slices") or 1)
    platform = str(meta.get("platform") or "unknown").lower()
    return {
        "device_type": str(meta.get("device_kind") or "unknown"),
        "num_slices": str(slices),
        "devices_per_slice": str(int(meta.get("num_devices") or 0) // slices or "unknown"),
        "accelerator_type": platform if platform in ("tpu", "gpu", "cpu") else "unknown",
    }


def sanitize_identifier(text: str) -> str:
    """The SDK's run-name rule: lower case, every run of characters other
    than ``a-z0-9`` becomes one ``-``, no ``-`` at either end."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def run_identity(name: str, now: float, workload_id: Optional[str]):
    """``(run name, orchestrator, workload details)`` of a new run.

    The name is the SDK's (:func:`sanitize_identifier`) of ``name`` plus a
    suffix that says which processes and restarts make one run:

    * on GKE, the workload's creation time (:func:`gke_suffix`): every pod
      and every restart of a workload;
    * else with a workload id (``run_workload_id=`` or ``$RUN_WORKLOAD_ID``,
      the SDK's), that id: every process and restart given the same id;
    * else in a Slurm job (``$SLURM_JOB_ID``), ``slurm-<job id>``: every task
      and requeue of the job;
    * else the local time of the call (``YYYYmmddHHMMSS``, the SDK's rule
      off GKE): every call is a new run, so running a script twice gives
      two runs.
    """
    gke = gke_suffix()
    workload_id = workload_id or os.environ.get("RUN_WORKLOAD_ID") or None
    job = os.environ.get("SLURM_JOB_ID")
    if gke:
        return sanitize_identifier(name + gke), Orchestrator.GKE, None
    if workload_id:
        return (sanitize_identifier(f"{name}-{workload_id}"), Orchestrator.CUSTOM,
                {"id": workload_id, "display_name": workload_id})
    if job:
        return (sanitize_identifier(f"{name}-slurm-{job}"), Orchestrator.SLURM,
                {"job_id": job, "display_name": os.environ.get("SLURM_JOB_NAME")
                 or f"slurm-job-{job}"})
    stamp = datetime.datetime.fromtimestamp(now).strftime("%Y%m%d%H%M%S")
    return sanitize_identifier(f"{name}-{stamp}"), Orchestrator.NONE, None


def gke_suffix() -> str:
    """``-YYYYmmdd-HHMMSS`` (UTC) of the GKE workload's creation time, from the
    ``GKE_DIAGON_METADATA`` variable the SDK's GKE webhook sets; "" elsewhere.

    Every pod of a workload, and every restart of a pod, sees the same
    creation time, so they all record into one run (restarts become
    disruptions of that run), while a new submission gets a new run.
    """
    raw = os.environ.get("GKE_DIAGON_METADATA")
    if not raw:
        return ""
    try:
        stamp = json.loads(raw).get("creation-timestamp") or ""
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except (ValueError, AttributeError, TypeError):
        logger.warning("goodput: GKE_DIAGON_METADATA has no usable creation-timestamp; "
                       "the run name gets no suffix")
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return "-" + when.astimezone(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
