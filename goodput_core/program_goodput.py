"""Program goodput (MFU) and ML productivity goodput.

Runtime goodput says how much of the wall-clock time made kept progress;
program goodput says how well that productive time used the hardware::

    steps_per_second = productive_steps / productive_seconds
    program_goodput  = flops_per_step * steps_per_second
                       / (peak_flops_per_device * num_devices)     # = MFU
    ml_productivity_goodput = runtime_goodput * program_goodput

All three are fractions (0-1). ``flops_per_step`` is the FLOP count of one
training step over *all* devices (the JAX adapter's ``record_flops`` scales
XLA's per-device cost analysis by the devices the step runs on; pass your
own model-FLOPs count, e.g. 6·params·tokens, for MFU in the strict sense:
XLA's count includes rematerialisation). ``productive_steps`` are the steps
whose time is productive (completed, kept: not redone after a restart), over
exactly the time counted in ``productive_seconds``, so the rate excludes
every badput bucket: compile, checkpoints, evaluations and waits do not
dilute MFU, they lower runtime goodput instead.

Peak FLOP/s: :data:`PEAK_FLOPS_PER_DEVICE`, dense bf16 per chip from the
vendors' data sheets (a recorded ``peak_flops_per_device`` wins over the
table; :func:`register_peak_flops` adds or overrides entries process-wide).
No framework is imported here.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from typing import Any, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from goodput_core.segments import CLOSE_NONE

__all__ = [
    "PEAK_FLOPS_PER_DEVICE",
    "ProgramGoodput",
    "mfu",
    "peak_flops_per_device",
    "productive_steps",
    "program_goodput_of_run",
    "register_peak_flops",
    "unusable_metadata",
]

# Dense bf16 peak FLOP/s of one chip, matched against the lower-cased
# ``device_kind`` (JAX: "TPU v5 lite", "NVIDIA H100 80GB HBM3", ...). A needle
# matches when it occurs in the kind delimited by non-alphanumerics (so "l4"
# does not match "l40s"); the first match wins, so specific names come first.
# NVIDIA sheets quote bf16 "with sparsity": the dense figure is half of it.
PEAK_FLOPS_PER_DEVICE: Tuple[Tuple[str, Optional[float]], ...] = (
    # Cloud TPU docs, "TPU v6e" (Trillium): 918 TFLOP/s bf16 per chip
    ("tpu v6 lite", 918e12),
    ("tpu v6e", 918e12),
    # Cloud TPU docs, "TPU v5e": 197 TFLOP/s bf16 per chip (device_kind "TPU v5 lite")
    ("tpu v5 lite", 197e12),
    ("tpu v5e", 197e12),
    # Cloud TPU docs, "TPU v5p": 459 TFLOP/s bf16 per chip (device_kind "TPU v5")
    ("tpu v5p", 459e12),
    ("tpu v5", 459e12),
    # v4i (inference chip, "TPU v4 lite"): no figure here; listed so that it
    # does not match "tpu v4" below
    ("tpu v4 lite", None),
    # Cloud TPU docs, "TPU v4": 275 TFLOP/s bf16 per chip
    ("tpu v4", 275e12),
    # Cloud TPU docs, "TPU v3": 123 TFLOP/s bf16 per chip
    ("tpu v3", 123e12),
    # Cloud TPU docs, "TPU v2": 45 TFLOP/s bf16 per chip
    ("tpu v2", 45e12),
    # NVIDIA H200 data sheet: bf16 1,671 TFLOP/s sparse (NVL) / 1,979 (SXM)
    ("h200 nvl", 835e12),
    ("h200", 989e12),
    # NVIDIA H100 data sheet: bf16 1,513 sparse (PCIe), 1,671 (NVL), 1,979 (SXM)
    ("h100 pcie", 756e12),
    ("h100 nvl", 835e12),
    ("h100", 989e12),
    # NVIDIA A100 data sheet: bf16 312 TFLOP/s dense (624 sparse), SXM and PCIe
    ("a100", 312e12),
    # NVIDIA L4 data sheet: bf16 242 TFLOP/s sparse
    ("l4", 121e12),
)

_user_table: List[Tuple[str, Optional[float]]] = []
_user_lock = threading.Lock()


def register_peak_flops(device_kind: str, flops: Optional[float]) -> None:
    """Adds (or overrides) a peak FLOP/s entry for this process.

    Registered entries are tried before the built-in table, the latest first.

    Args:
      device_kind: a (part of a) device kind, e.g. "tpu v7" or "b200".
      flops: dense peak FLOP/s of one device (None: "unknown", stops the lookup).

    Raises:
      ValueError: an empty kind, or flops that is not a positive finite number.
    """
    if not isinstance(device_kind, str) or not device_kind.strip():
        raise ValueError(f"device_kind must be a non-empty string, got {device_kind!r}")
    if flops is not None and _positive(flops) is None:
        raise ValueError(f"flops must be a positive finite number, got {flops!r}")
    with _user_lock:
        _user_table.insert(0, (device_kind.strip().lower(), None if flops is None
                               else float(flops)))


def _matches(needle: str, kind: str) -> bool:
    return re.search(r"(?<![a-z0-9])" + re.escape(needle) + r"(?![a-z0-9])", kind) is not None


def peak_flops_per_device(device_kind: Optional[str],
                          table: Optional[Iterable[Tuple[str, Optional[float]]]] = None
                          ) -> Optional[float]:
    """Peak dense bf16 FLOP/s of one device of this kind.

    Args:
      device_kind: e.g. ``jax.devices()[0].device_kind``.
      table: ``(needle, flops)`` pairs to use instead of the registered
        entries and :data:`PEAK_FLOPS_PER_DEVICE`.

    Returns:
      The FLOP/s, or None when the kind is unknown (CPUs, new chips).
    """
    if not device_kind:
        return None
    kind = str(device_kind).lower()
    if table is None:
        with _user_lock:
            entries = list(_user_table) + list(PEAK_FLOPS_PER_DEVICE)
    else:
        entries = [(str(k).lower(), v) for k, v in table]
    for needle, peak in entries:
        if _matches(needle, kind):
            return peak
    return None


@dataclasses.dataclass(frozen=True)
class ProgramGoodput:
    """Program goodput of a run (fractions, not percent).

    Attributes:
      mfu: program goodput, model FLOPs utilisation during productive time.
      runtime_goodput: productive share of total time (``goodput / 100``).
      ml_productivity_goodput: ``runtime_goodput * mfu``.
      flops_per_step: FLOPs of one step over all devices.
      peak_flops_per_device: dense peak FLOP/s of one device.
      num_devices: devices the job runs on.
      productive_steps: steps whose time is productive.
      productive_seconds: their time.
      steps_per_second: ``productive_steps / productive_seconds``.
    """

    mfu: float
    runtime_goodput: float
    ml_productivity_goodput: float
    flops_per_step: float
    peak_flops_per_device: float
    num_devices: int
    productive_steps: int
    productive_seconds: float
    steps_per_second: float


def mfu(flops_per_step: float, steps_per_second: float, peak_flops_per_device: float,
        num_devices: int) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the devices' peak.

    Args:
      flops_per_step: FLOPs of one step over all devices.
      steps_per_second: the productive step rate.
      peak_flops_per_device: dense peak FLOP/s of one device.
      num_devices: number of devices.

    Returns:
      ``flops_per_step * steps_per_second / (peak_flops_per_device * num_devices)``.

    Raises:
      ValueError: a non-positive peak or device count.
    """
    if not (peak_flops_per_device > 0 and num_devices > 0):
        raise ValueError("peak FLOP/s and the device count must be positive")
    return float(flops_per_step) * float(steps_per_second) / (
        float(peak_flops_per_device) * float(num_devices))


def _positive(value: Any) -> Optional[float]:
    """A positive finite number (as float) or None: metadata is untrusted input."""
    if type(value) is bool or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) and f > 0 else None


def unusable_metadata(metadata: Mapping[str, Any]) -> List[str]:
    """The program-goodput fields of ``metadata`` present but unusable, as ``key=value``.

    Such fields (``num_devices=0.5``, an infinite ``flops_per_step``) leave
    program goodput uncomputed; the report names them instead of failing.
    """
    out = []
    for key in ("flops_per_step", "peak_flops_per_device", "num_devices"):
        if key not in metadata:
            continue
        value = metadata[key]
        number = _positive(value)
        if number is None or (key == "num_devices" and number != int(number)):
            out.append(f"{key}={value!r}"[:80])
    return out


def productive_steps(timeline, end: float = math.inf) -> int:
    """Number of steps whose time is productive, among spans that ended by ``end``.

    A span between two recorded step starts ``a < b`` covers ``b - a`` steps;
    a segment's last step counts when it was closed (step end, job end, or a
    crash after which progress was kept); spans redone after a restart
    (wasted progress) and the running step do not count, exactly as their
    time is not productive.

    Args:
      timeline: an up-to-date :class:`~goodput_core.timeline.Timeline`.
      end: only spans ending at or before this time count.
    """
    seg = timeline.segments
    if not len(seg):
        return 0
    st = timeline.tables["step_start"]
    t, s = st["t"], st["step"]
    i0, i1, w = seg["i0"], seg["i1"], seg["w"]
    kept_end = np.minimum(w, i1)  # spans j in [i0, kept_end) are kept
    # span j ends at t[j + 1]: the spans ended by `end` are those up to the
    # last step start at or before `end`
    jb = np.clip(np.searchsorted(t, end, side="right") - 1, i0, kept_end)
    n = s[jb] - s[i0]
    last = (w > i1) & (seg["close_kind"] != CLOSE_NONE) & (seg["close"] <= end)
    return int(n.sum() + last.sum())


def program_goodput_of_run(timeline, result, metadata: Mapping[str, Any], *,
                           flops_per_step: Optional[float] = None,
                           peak_flops: Optional[float] = None,
                           num_devices: Optional[int] = None) -> Optional[ProgramGoodput]:
    """Program goodput from a run's metadata and its cumulative result.

    Args:
      timeline: the up-to-date Timeline of the run.
      result: its cumulative :class:`~goodput_core.results.GoodputResult`.
      metadata: the run metadata (``flops_per_step``, ``peak_flops_per_device``
        or ``device_kind``, ``num_devices``).
      flops_per_step, peak_flops, num_devices: override the metadata.

    Returns:
      A :class:`ProgramGoodput`, or None when a figure is missing (or not a
      positive number) or no step has been productive yet.
    """
    flops = _positive(flops_per_step if flops_per_step is not None
                      else metadata.get("flops_per_step"))
    peak = _positive(peak_flops if peak_flops is not None
                     else metadata.get("peak_flops_per_device"))
    if peak is None and peak_flops is None:
        peak = _positive(peak_flops_per_device(metadata.get("device_kind")))
    devices = _positive(num_devices if num_devices is not None else metadata.get("num_devices"))
    if devices is not None and devices != int(devices):
        devices = None  # 0.5 devices: unusable metadata, not a reason to fail the report
    if flops is None or peak is None or devices is None:
        return None
    steps = productive_steps(timeline, result.window[1])
    seconds = result.productive_seconds
    if steps <= 0 or not seconds > 0:
        return None
    rate = steps / seconds
    value = mfu(flops, rate, peak, int(devices))
    if not math.isfinite(value):  # metadata fields each fine, their product overflows
        return None
    runtime = result.goodput / 100.0
    return ProgramGoodput(value, runtime, runtime * value, flops, peak, int(devices), steps,
                          seconds, rate)
