"""``metric_types``: the ML-diagnostics SDK's predefined metric names.

``metrics.record(MetricType.LOSS, ...)`` stores the metric under the
member's value (``"loss"``): these names are stable (reports, TensorBoard
``metrics/<name>`` tags and the Prometheus ``goodput_metric{name=...}``
label use them). Any other string is a custom metric name.
"""

from __future__ import annotations

import enum

__all__ = ["MetricType", "METRIC_UNITS", "AcceleratorType"]


class MetricType(enum.Enum):
    """Predefined metric types (names and values as in the SDK)."""

    # model quality
    LEARNING_RATE = "learning_rate"
    LOSS = "loss"
    GRADIENT_NORM = "gradient_norm"
    TOTAL_WEIGHTS = "total_weights"
    # model performance
    STEP_TIME = "step_time"
    THROUGHPUT = "throughput"
    LATENCY = "latency"
    MFU = "mfu"
    TFLOPS = "tflops"
    # system utilisation (the SDK collects these itself; here they are
    # recorded only when the program records them)
    TPU_DUTY_CYCLE = "tpu_duty_cycle"
    TPU_TENSORCORE_UTILIZATION = "tpu_tensorcore_utilization"
    HBM_UTILIZATION = "hbm_utilization"
    GPU_DUTY_CYCLE = "gpu_duty_cycle"
    GPU_UTILIZATION = "gpu_utilization"
    GPU_TENSORCORE_UTILIZATION = "gpu_tensorcore_utilization"
    VRAM_UTILIZATION = "vram_utilization"
    HOST_CPU_UTILIZATION = "host_cpu_utilization"
    HOST_MEMORY_UTILIZATION = "host_memory_utilization"
    # the step number itself
    STEP = "step"


_PERCENT = ("mfu", "tpu_duty_cycle", "tpu_tensorcore_utilization", "hbm_utilization",
            "gpu_duty_cycle", "gpu_utilization", "gpu_tensorcore_utilization",
            "vram_utilization", "host_cpu_utilization", "host_memory_utilization")

#: Units of the predefined metrics (informational: values are stored as given).
METRIC_UNITS = {m.value: "1" for m in MetricType}
METRIC_UNITS.update({name: "%" for name in _PERCENT})
METRIC_UNITS.update({"step_time": "s", "latency": "s", "throughput": "1/s", "tflops": "TFLOPS"})


class AcceleratorType(enum.Enum):
    """Accelerator kinds (as the SDK's ``hardwareConfigs.accelerator_type``)."""

    TPU = "tpu"
    GPU = "gpu"
    CPU = "cpu"
    UNKNOWN = "unknown"
