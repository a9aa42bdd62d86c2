"""Lazy access to PyTorch, and what the environment says about this process.

Nothing here imports torch at module import time: ``goodput_integrations.torch``
stays importable (and cheap) without it. The process facts come first from
``torch.distributed`` once a process group exists, else from the variables
``torchrun`` (TorchElastic) sets for every worker before it starts:
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``TORCHELASTIC_RESTART_COUNT``, ``TORCHELASTIC_RUN_ID`` (checked on torch
2.13's ``torch.distributed.run``).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional

from goodput_integrations.errors import AdapterUnavailable
from goodput_integrations.jax._probe import log_once

__all__ = ["log_once", "require_torch", "imported_torch", "process_index", "elastic_env",
           "dist_initialized"]


def require_torch() -> Any:
    """Returns the ``torch`` module.

    Raises:
      AdapterUnavailable: torch is not installed (or fails to import).
    """
    try:
        import torch
    except ImportError as exc:
        raise AdapterUnavailable(
            "the PyTorch adapter needs torch: pip install 'goodput-core[torch]' "
            "(or install torch first, e.g. pip install torch)") from exc
    return torch


def imported_torch() -> Optional[Any]:
    """``torch`` if the program imported it already, else None (never imports it)."""
    return sys.modules.get("torch")


def dist_initialized() -> bool:
    """Whether a default ``torch.distributed`` process group exists (never raises)."""
    torch = imported_torch()
    if torch is None:
        return False
    try:
        dist = torch.distributed
        return bool(dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _int_env(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def process_index() -> Optional[int]:
    """This process's global rank, or None while it cannot be known.

    The process group's rank once it exists; else ``RANK`` (set by torchrun,
    Slurm launchers and Kubernetes operators before the process starts);
    else 0 when nothing says this is one process of several
    (``WORLD_SIZE`` unset or 1); else None: a multi-process job whose rank
    only ``init_process_group`` will tell (the adapter waits for it).
    """
    if dist_initialized():
        try:
            return int(sys.modules["torch"].distributed.get_rank())
        except Exception:
            pass
    rank = _int_env("RANK")
    if rank is not None:
        return rank
    world = _int_env("WORLD_SIZE")
    return 0 if world is None or world <= 1 else None


def world_size() -> Optional[int]:
    """The number of processes: the process group's, else ``WORLD_SIZE``."""
    if dist_initialized():
        try:
            return int(sys.modules["torch"].distributed.get_world_size())
        except Exception:
            pass
    return _int_env("WORLD_SIZE")


def elastic_env() -> Dict[str, Any]:
    """What torchrun says about this worker (only the variables that are set)."""
    out: Dict[str, Any] = {}
    for key, env in (("rank", "RANK"), ("local_rank", "LOCAL_RANK"),
                     ("world_size", "WORLD_SIZE"), ("local_world_size", "LOCAL_WORLD_SIZE"),
                     ("group_rank", "GROUP_RANK"),
                     ("restart_count", "TORCHELASTIC_RESTART_COUNT"),
                     ("max_restarts", "TORCHELASTIC_MAX_RESTARTS")):
        value = _int_env(env)
        if value is not None:
            out[key] = value
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id:
        out["run_id"] = run_id
    return out
