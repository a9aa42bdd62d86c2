"""Run metadata and FLOPs: what program goodput (MFU) needs.

``run_metadata()`` describes the software and the devices (recorded once the
backends exist: asking earlier would initialise them). ``flops_per_step()``
asks XLA's cost analysis of the compiled step; with a peak FLOP/s per device
kind it gives MFU = flops_per_step / step_time / (peak × devices).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, Dict, Optional

__all__ = [
    "PEAK_FLOPS_PER_DEVICE",
    "flops_per_step",
    "peak_flops_per_device",
    "record_flops",
    "run_metadata",
]

# Dense bf16 peak FLOP/s per chip from vendor data sheets, matched by a
# lower-case substring of ``device.device_kind`` (first match wins, so
# more specific names come first).
PEAK_FLOPS_PER_DEVICE = (
    ("tpu v6 lite", 918e12),   # Trillium (v6e)
    ("tpu v6e", 918e12),
    ("tpu v5p", 459e12),
    ("tpu v5 lite", 197e12),   # v5e
    ("tpu v5e", 197e12),
    ("tpu v4", 275e12),
    ("tpu v3", 123e12),
    ("tpu v2", 45e12),
    ("h200", 989e12),
    ("h100", 989e12),
    ("a100", 312e12),
    ("l4", 121e12),
)

_DISTRIBUTIONS = (
    ("framework_version", "jax"),
    ("jaxlib_version", "jaxlib"),
    ("flax_version", "flax"),
    ("orbax_version", "orbax-checkpoint"),
    ("optax_version", "optax"),
)


def peak_flops_per_device(device_kind: Optional[str]) -> Optional[float]:
    """Peak dense bf16 FLOP/s of one device of this kind, or None if unknown (CPUs)."""
    if not device_kind:
        return None
    kind = str(device_kind).lower()
    for needle, peak in PEAK_FLOPS_PER_DEVICE:
        if needle in kind:
            return peak
    return None


def versions() -> Dict[str, str]:
    """Installed versions of jax and friends, read without importing them."""
    found = {}
    for key, dist in _DISTRIBUTIONS:
        try:
            found[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def run_metadata() -> Dict[str, Any]:
    """Framework, versions, device kind and counts (initialises backends: call late).

    Returns:
      A dict for ``recorder.record_metadata(**...)``.
    """
    import jax

    fields: Dict[str, Any] = {"framework": "jax", **versions()}
    devices = jax.devices()
    kind = devices[0].device_kind if devices else None
    fields.update(
        device_kind=kind,
        platform=devices[0].platform if devices else None,
        num_devices=jax.device_count(),
        num_local_devices=jax.local_device_count(),
        num_processes=jax.process_count(),
    )
    peak = peak_flops_per_device(kind)
    if peak is not None:
        fields["peak_flops_per_device"] = peak
    return fields


def flops_per_step(fn: Any, *args: Any, **kwargs: Any) -> Optional[float]:
    """FLOPs of one call of ``fn(*args, **kwargs)`` from XLA's cost analysis.

    This lowers and compiles ``fn`` (a jitted function; a plain one is
    jitted): the compile is real time and is recorded as program startup
    when the adapter is on. Call it once, e.g. right after the first step.

    Args:
      fn: the (jitted) step function.
      *args, **kwargs: example arguments (arrays or ``jax.ShapeDtypeStruct``).

    Returns:
      The FLOP count, or None when the backend reports none.
    """
    import jax

    lower = getattr(fn, "lower", None)
    if lower is None:
        lower = jax.jit(fn).lower
    cost = lower(*args, **kwargs).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax: one dict per executable
        cost = cost[0] if cost else None
    if not cost:
        return None
    flops = cost.get("flops")
    try:
        flops = float(flops)
    except (TypeError, ValueError):
        return None
    return flops if flops > 0 else None


def record_flops(target: Any, fn: Any, *args: Any, **kwargs: Any) -> Optional[float]:
    """Computes :func:`flops_per_step` and records it as run metadata.

    Args:
      target: a :class:`JaxAdapter` (respects its process gate) or a recorder.
      fn, *args, **kwargs: as for :func:`flops_per_step`.

    Returns:
      The FLOP count (None when unknown; nothing is recorded then).
    """
    import jax

    flops = flops_per_step(fn, *args, **kwargs)
    if flops is None:
        return None
    devices = jax.devices()
    kind = devices[0].device_kind if devices else None
    fields = {"flops_per_step": flops, "device_kind": kind}
    peak = peak_flops_per_device(kind)
    if peak is not None:
        fields["peak_flops_per_device"] = peak
    emit = getattr(target, "emit", None)
    if emit is not None:
        emit(_record_metadata, target.recorder, fields)
    else:
        target.record_metadata(**fields)
    return flops


def _record_metadata(recorder: Any, fields: Dict[str, Any]) -> None:
    recorder.record_metadata(**fields)
