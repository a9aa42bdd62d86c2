"""Run metadata of a PyTorch job: versions, devices, world size, torchrun facts.

Read without initialising anything: CUDA devices are described only when a
CUDA context exists already or CUDA is available (``device_count`` and the
device name do not create a context), the world size from the process
group once it exists, else from ``WORLD_SIZE``.
"""

from __future__ import annotations

from typing import Any, Dict

from goodput_core.queries.program_goodput import peak_flops_per_device
from goodput_integrations.base.versions import installed_versions
from goodput_integrations.torch import _probe

__all__ = ["run_metadata", "versions"]

_DISTRIBUTIONS = (
    ("framework_version", "torch"),
    ("lightning_version", "lightning"),
    ("transformers_version", "transformers"),
    ("accelerate_version", "accelerate"),
)


def versions() -> Dict[str, str]:
    """Installed versions of torch and the trainers on top of it (not imported)."""
    return installed_versions(_DISTRIBUTIONS)


def device_facts(torch: Any) -> Dict[str, Any]:
    """``platform``, ``device_kind``, ``num_local_devices`` (and CUDA versions)."""
    cuda = torch.cuda
    try:
        on_cuda = cuda.is_available()
    except Exception:
        on_cuda = False
    if not on_cuda:
        return {"platform": "cpu", "device_kind": "cpu", "num_local_devices": 1}
    index = cuda.current_device() if cuda.is_initialized() else 0
    fields: Dict[str, Any] = {"platform": "gpu", "device_kind": cuda.get_device_name(index),
                              "num_local_devices": cuda.device_count()}
    if getattr(torch.version, "cuda", None):
        fields["cuda_version"] = torch.version.cuda
    try:
        fields["cudnn_version"] = torch.backends.cudnn.version()
    except Exception:
        pass
    return fields


def run_metadata() -> Dict[str, Any]:
    """What a PyTorch run records once (a dict for ``record_metadata(**...)``).

    Returns:
      ``framework`` ("pytorch"), versions, ``platform``, ``device_kind``
      (the CUDA device name, or "cpu"), ``num_local_devices``,
      ``num_processes`` (the world size), ``num_devices`` (one device per
      process on CUDA, as torchrun runs them; the world size on the CPU),
      ``backend`` (the process group's), ``peak_flops_per_device`` when the
      device kind is in the table, and ``torchelastic`` (rank, local rank,
      world sizes, restart count, run id: only the variables set).
    """
    torch = _probe.require_torch()
    fields: Dict[str, Any] = {"framework": "pytorch", **versions()}
    fields.update(device_facts(torch))
    world = _probe.world_size() or 1
    fields["num_processes"] = world
    fields["num_devices"] = world
    if _probe.dist_initialized():
        try:
            fields["backend"] = str(torch.distributed.get_backend())
        except Exception:
            pass
    peak = peak_flops_per_device(fields.get("device_kind"))
    if peak is not None:
        fields["peak_flops_per_device"] = peak
    elastic = _probe.elastic_env()
    if elastic:
        fields["torchelastic"] = elastic
    return fields
