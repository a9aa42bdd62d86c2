"""Run metadata and FLOPs: what program goodput (MFU) needs.

``run_metadata()`` describes the software, the flags and the devices
(recorded once the backends exist: asking earlier would initialise them).
``flops_per_step()`` asks XLA's cost analysis of the compiled step; with the
peak FLOP/s per device kind (the table lives in
:mod:`goodput_core.queries.program_goodput`, with its sources) the calculator gives
MFU = flops_per_step × productive steps per second / (peak × devices).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from goodput_core.queries.program_goodput import (
    PEAK_FLOPS_PER_DEVICE,
    peak_flops_per_device,
    register_peak_flops,
)
from goodput_integrations.base.versions import installed_versions

__all__ = [
    "JAX_CONFIG_FLAGS",
    "PEAK_FLOPS_PER_DEVICE",
    "flops_per_step",
    "peak_flops_per_device",
    "record_flops",
    "register_peak_flops",
    "run_metadata",
]

# jax config options that change numerics, partitioning or compile behaviour:
# worth knowing when two runs of the same code perform differently
JAX_CONFIG_FLAGS = (
    "jax_platforms",
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_use_shardy_partitioner",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_enable_pgle",
    "jax_optimization_level",
    "jax_memory_fitting_level",
    "jax_disable_jit",
    "jax_debug_nans",
    "jax_debug_infs",
    "jax_enable_checks",
)
# environment variables that carry compiler and runtime flags
_FLAG_ENV = (("xla_flags", "XLA_FLAGS"), ("libtpu_init_args", "LIBTPU_INIT_ARGS"))

_DISTRIBUTIONS = (
    ("framework_version", "jax"),
    ("jaxlib_version", "jaxlib"),
    ("flax_version", "flax"),
    ("orbax_version", "orbax-checkpoint"),
    ("optax_version", "optax"),
)


def versions() -> Dict[str, str]:
    """Installed versions of jax and friends, read without importing them."""
    return installed_versions(_DISTRIBUTIONS)


def jax_config_flags() -> Dict[str, Any]:
    """The values of :data:`JAX_CONFIG_FLAGS` this jax knows (others left out)."""
    import jax

    values = getattr(jax.config, "values", None)
    if not isinstance(values, dict):
        return {}
    out = {}
    for name in JAX_CONFIG_FLAGS:
        if name in values:
            value = values[name]
            # enums and other objects: their text (metadata must be JSON)
            out[name] = value if isinstance(value, (bool, int, float, str, type(None))) \
                else str(value)
    return out


def run_metadata() -> Dict[str, Any]:
    """Framework, versions, flags, devices, slices and hosts (initialises backends: call late).

    Returns:
      A dict for ``recorder.record_metadata(**...)``: ``framework``,
      versions, ``device_kind``, ``platform``, ``num_devices``,
      ``num_local_devices``, ``num_processes``, ``num_hosts`` (processes
      owning devices), ``num_slices`` (distinct ``device.slice_index``; 1
      when devices have none, e.g. CPU/GPU), ``peak_flops_per_device`` when
      the kind is in the table, ``xla_flags`` / ``libtpu_init_args`` when
      set, and ``jax_config`` (selected config flags).
    """
    import jax

    fields: Dict[str, Any] = {"framework": "jax", **versions()}
    devices = jax.devices()
    kind = devices[0].device_kind if devices else None
    slices = {getattr(d, "slice_index", None) for d in devices} - {None}
    fields.update(
        device_kind=kind,
        platform=devices[0].platform if devices else None,
        num_devices=jax.device_count(),
        num_local_devices=jax.local_device_count(),
        num_processes=jax.process_count(),
        num_hosts=len({getattr(d, "process_index", 0) for d in devices}) or 1,
        num_slices=len(slices) or 1,
    )
    peak = peak_flops_per_device(kind)
    if peak is not None:
        fields["peak_flops_per_device"] = peak
    for key, env in _FLAG_ENV:
        if os.environ.get(env):
            fields[key] = os.environ[env]
    fields["jax_config"] = jax_config_flags()
    return fields


def _executable_devices(compiled: Any) -> int:
    """How many devices a compiled executable runs on (1 when unknown)."""
    import jax

    n = 1
    for attr in ("input_shardings", "output_shardings"):
        try:
            for sharding in jax.tree_util.tree_leaves(getattr(compiled, attr)):
                n = max(n, len(sharding.device_set))
        except Exception:
            continue  # an odd executable: fall back to what we have
    return n


def flops_per_step(fn: Any, *args: Any, per_device: bool = False, **kwargs: Any
                   ) -> Optional[float]:
    """FLOPs of one call of ``fn(*args, **kwargs)`` from XLA's cost analysis.

    XLA analyses the partitioned (per-device) program: for a step sharded
    over N devices it reports 1/N of the work (checked on jax 0.10.2 with 4
    host devices). This returns the total over the devices the executable
    runs on, unless ``per_device``. The count is the compiled program's, so
    it includes rematerialisation and replicated work.

    This lowers and compiles ``fn`` (a jitted function; a plain one is
    jitted): the compile is real time and is recorded as program startup
    when the adapter is on. Call it once, e.g. right after the first step.

    Args:
      fn: the (jitted) step function.
      *args, **kwargs: example arguments (arrays or ``jax.ShapeDtypeStruct``).
      per_device: return the per-device count instead of the total.

    Returns:
      The FLOP count, or None when the backend reports none.
    """
    import jax

    lower = getattr(fn, "lower", None)
    if lower is None:
        lower = jax.jit(fn).lower
    compiled = lower(*args, **kwargs).compile()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older jax: one dict per executable
        cost = cost[0] if cost else None
    if not cost:
        return None
    flops = cost.get("flops")
    try:
        flops = float(flops)
    except (TypeError, ValueError):
        return None
    if not flops > 0:
        return None
    return flops if per_device else flops * _executable_devices(compiled)


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
    # num_devices too: program goodput needs it even without run_metadata()
    fields = {"flops_per_step": flops, "device_kind": kind, "num_devices": jax.device_count()}
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
