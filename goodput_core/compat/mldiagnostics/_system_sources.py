"""Where system metrics come from: the host (psutil), NVIDIA GPUs (NVML),
TPUs (libtpu's monitoring interface).

Each source is opened, sampled and closed on the sampler's thread (never on
the training thread: opening NVML or libtpu can take a while) and reports
its values under the ML-diagnostics SDK's metric names (``MetricType``
values). A value over several devices is their mean, as the SDK records a
list. A source whose library is missing, or that finds no device, reports
nothing; a reading that fails is skipped and counted, never raised.

Facts checked on the SDK 1.0.10 (``google_cloud_mldiagnostics.utils``),
psutil 7.2 and nvidia-ml-py 13.615:

* host: ``host_cpu_utilization`` (the SDK: ``psutil.cpu_percent(interval=0.1)``,
  a 0.1 s sample that blocks its thread; here ``cpu_percent(None)``: the
  whole interval since the previous sample, without blocking) and
  ``host_memory_utilization`` (``virtual_memory().percent``);
* GPU: ``gpu_duty_cycle`` and ``gpu_utilization`` (the SDK records both, the
  same value: ``nvmlDeviceGetUtilizationRates(h).gpu``), ``vram_utilization``
  (used / total memory), ``gpu_tensorcore_utilization``: the SDK reads NVML
  field 156, which nvidia-ml-py names ``NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L8``
  (an NVLink error counter), and falls back to the duty cycle; here it is
  GPU Performance Monitoring's ``NVML_GPM_METRIC_ANY_TENSOR_UTIL`` between two
  samples (Hopper and later), and not recorded where GPM is unsupported;
* TPU: ``tpu_duty_cycle`` (``duty_cycle_pct``), ``tpu_tensorcore_utilization``
  (``tensorcore_util``), ``hbm_utilization`` (``hbm_capacity_usage`` /
  ``hbm_capacity_total``) from ``libtpu.sdk.tpumonitoring`` (or ``.monitoring``).
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any, Dict, List, Optional, Sequence

logger = logging.getLogger("goodput")

__all__ = ["HostSource", "NvmlSource", "LibtpuSource", "default_sources", "mean"]


def mean(values: Sequence[Any]) -> Optional[float]:
    """The mean of the finite values (None when there is none)."""
    numbers = [float(v) for v in values]
    numbers = [v for v in numbers if math.isfinite(v)]
    return math.fsum(numbers) / len(numbers) if numbers else None


class Source:
    """A source of system metrics (see the module docstring)."""

    name = "source"

    def open(self) -> bool:
        """Prepares sampling; False when the source has nothing to offer here."""
        raise NotImplementedError

    def sample(self) -> Dict[str, float]:
        """The current values, by metric name (only those that could be read)."""
        raise NotImplementedError

    def close(self) -> None:
        """Releases what :meth:`open` took."""


class HostSource(Source):
    """Host CPU and memory utilisation (percent) from psutil."""

    name = "host"

    def __init__(self) -> None:
        self._psutil: Any = None

    def open(self) -> bool:
        try:
            import psutil
        except ImportError:
            logger.info("goodput: psutil is not installed: no host metrics "
                        "(pip install 'goodput-core[system]')")
            return False
        self._psutil = psutil
        psutil.cpu_percent(interval=None)  # the first call starts the measurement
        return True

    def sample(self) -> Dict[str, float]:
        ps = self._psutil
        return {"host_cpu_utilization": float(ps.cpu_percent(interval=None)),
                "host_memory_utilization": float(ps.virtual_memory().percent)}


def _import_nvml() -> Any:
    with warnings.catch_warnings():  # the deprecated 'pynvml' wrapper warns on import
        warnings.simplefilter("ignore")
        import pynvml
    return pynvml


class NvmlSource(Source):
    """NVIDIA GPUs through NVML (nvidia-ml-py): duty cycle, VRAM, tensor cores."""

    name = "nvml"

    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: List[Any] = []
        self._gpm: List[Any] = []      # per device: the previous GPM sample, or None
        self._started = False

    def open(self) -> bool:
        try:
            nv = _import_nvml()
            nv.nvmlInit()
        except Exception:  # no library, no driver: no GPU metrics
            return False
        self._nv, self._started = nv, True
        try:
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i)
                             for i in range(nv.nvmlDeviceGetCount())]
        except Exception:
            logger.warning("goodput: NVML found no usable device", exc_info=True)
            self._handles = []
        if not self._handles:
            self.close()
            return False
        self._gpm = [self._first_gpm_sample(h) for h in self._handles]
        return True

    def _first_gpm_sample(self, handle: Any) -> Any:
        nv = self._nv
        try:
            if not nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
            sample = nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(handle, sample)
            return sample
        except Exception:  # an older GPU or driver: no tensor-core figure
            return None

    def _tensor_util(self, i: int) -> Optional[float]:
        nv, before = self._nv, self._gpm[i]
        if before is None:
            return None
        after = nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(self._handles[i], after)
        try:
            query = nv.c_nvmlGpmMetricsGet_t()
            query.version = nv.NVML_GPM_METRICS_GET_VERSION
            query.numMetrics = 1
            query.sample1, query.sample2 = before, after
            query.metrics[0].metricId = nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL
            nv.nvmlGpmMetricsGet(query)
            metric = query.metrics[0]
            return float(metric.value) if metric.nvmlReturn == nv.NVML_SUCCESS else None
        finally:
            nv.nvmlGpmSampleFree(before)
            self._gpm[i] = after

    def sample(self) -> Dict[str, float]:
        nv = self._nv
        duty, vram, tensor = [], [], []
        for i, handle in enumerate(self._handles):
            duty.append(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            if mem.total:
                vram.append(100.0 * mem.used / mem.total)
            try:
                value = self._tensor_util(i)
            except Exception:
                value = None
            if value is not None:
                tensor.append(value)
        out = {}
        for name, values in (("gpu_duty_cycle", duty), ("gpu_utilization", duty),
                             ("vram_utilization", vram),
                             ("gpu_tensorcore_utilization", tensor)):
            value = mean(values)
            if value is not None:
                out[name] = value
        return out

    def close(self) -> None:
        nv = self._nv
        if nv is None:
            return
        for sample in self._gpm:
            if sample is not None:
                try:
                    nv.nvmlGpmSampleFree(sample)
                except Exception:
                    pass
        self._gpm = []
        if self._started:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass
        self._nv, self._started, self._handles = None, False, []


class LibtpuSource(Source):
    """TPUs through libtpu's monitoring interface (``libtpu.sdk.tpumonitoring``)."""

    name = "libtpu"

    def __init__(self) -> None:
        self._mon: Any = None

    def open(self) -> bool:
        try:
            from libtpu import sdk
        except Exception:  # not a TPU machine, or an old libtpu
            return False
        self._mon = getattr(sdk, "tpumonitoring", None) or getattr(sdk, "monitoring", None)
        return self._mon is not None

    def _data(self, metric: str) -> List[Any]:
        return list(self._mon.get_metric(metric).data())

    def sample(self) -> Dict[str, float]:
        out: Dict[str, float] = {}
        for name, metric in (("tpu_duty_cycle", "duty_cycle_pct"),
                             ("tpu_tensorcore_utilization", "tensorcore_util")):
            try:
                value = mean(self._data(metric))
            except Exception:
                continue
            if value is not None:
                out[name] = value
        try:
            used, total = self._data("hbm_capacity_usage"), self._data("hbm_capacity_total")
            value = mean([100.0 * float(u) / float(t) for u, t in zip(used, total)
                          if float(t) > 0])
        except Exception:
            value = None
        if value is not None:
            out["hbm_utilization"] = value
        return out


def default_sources() -> List[Source]:
    """Host, then NVML, then libtpu: each reports what it finds on this machine."""
    return [HostSource(), NvmlSource(), LibtpuSource()]
