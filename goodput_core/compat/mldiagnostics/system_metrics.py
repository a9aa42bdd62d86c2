"""System metrics, sampled off the training thread: ``SystemMetrics``.

The ML-diagnostics SDK collects host and accelerator utilisation itself when
a run has ``log_system_metrics=True``; so does our compat
(:func:`~goodput_core.compat.mldiagnostics.machinelearning_run`), and any
recorder can ask for the same (the MaxText and AXLearn shims, the JAX
adapter: opt-in)::

    from goodput_core.compat.mldiagnostics.system_metrics import SystemMetrics

    sampler = SystemMetrics(recorder, interval_s=10).start()
    ...
    sampler.stop()

Every ``interval_s`` seconds (10 by default, the SDK's
``metrics_record_interval_sec``) a daemon thread reads the sources of
:mod:`._system_sources` (host CPU and memory with psutil, GPUs with NVML,
TPUs with libtpu: whichever this machine has) and records each value as a
model metric under the SDK's ``MetricType`` name (``host_cpu_utilization``,
``tpu_duty_cycle``, ...; percent), stamped with the sample's time. The
training thread only starts the thread: libraries are imported and opened,
and every sample is taken, on the sampler's own thread; recording is the
recorder's O(1) enqueue. A failing reading is skipped and counted
(:meth:`SystemMetrics.stats`); nothing raises into the program.

Each host samples once (the SDK: its local rank 0). The values of the
process with index 0 are stored under the plain names; another process
adds its index as a label, ``host_cpu_utilization{process_index=3}``, as
the compat folds labels into names, so every host's series stays apart.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

from goodput_core.compat.mldiagnostics import _system_sources

__all__ = ["SystemMetrics", "SYSTEM_METRIC_NAMES", "DEFAULT_INTERVAL_S", "stored_name"]

logger = logging.getLogger("goodput")

DEFAULT_INTERVAL_S = 10.0
#: The SDK's system metric names (``MetricType`` values), in the order shown.
SYSTEM_METRIC_NAMES = ("host_cpu_utilization", "host_memory_utilization", "tpu_duty_cycle",
                       "tpu_tensorcore_utilization", "hbm_utilization", "gpu_duty_cycle",
                       "gpu_utilization", "gpu_tensorcore_utilization", "vram_utilization")


def stored_name(name: str, process_index: int) -> str:
    """The name a process stores a system metric under (module docstring)."""
    return name if not process_index else f"{name}{{process_index={int(process_index)}}}"


class SystemMetrics:
    """A background sampler of system metrics into a recorder.

    Args:
      recorder: anything with ``record_metric(name, value, step=None, time=None)``
        (our :class:`~goodput_core.Recorder`).
      interval_s: seconds between samples (positive).
      process_index: this process's index (0: plain names; module docstring).
      clock: the time source of the samples' timestamps (tests inject one).
      wait: ``wait(seconds) -> bool``, True to stop (tests: advance a fake
        clock instead of sleeping); default: the stop event's wait.
      sources: the sources to read (default: host, NVML, libtpu).

    Raises:
      ValueError: a bad interval, or a recorder without ``record_metric``.
    """

    def __init__(self, recorder: Any, *, interval_s: float = DEFAULT_INTERVAL_S,
                 process_index: int = 0, clock: Callable[[], float] = time.time,
                 wait: Optional[Callable[[float], bool]] = None,
                 sources: Optional[Iterable[Any]] = None):
        try:
            interval_s = float(interval_s)
        except (TypeError, ValueError):
            raise ValueError(f"interval_s={interval_s!r}: expected seconds") from None
        if not interval_s > 0 or interval_s == float("inf"):
            raise ValueError(f"interval_s={interval_s!r}: expected a positive number of seconds")
        if not callable(getattr(recorder, "record_metric", None)):
            raise ValueError("recorder must have record_metric(name, value, step, time)")
        self.recorder = recorder
        self.interval_s = interval_s
        self.process_index = int(process_index)
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._sources: List[Any] = (list(sources) if sources is not None
                                    else _system_sources.default_sources())
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._stats: Dict[str, Any] = {"samples": 0, "points": 0, "cpu_seconds": 0.0,
                                       "failed": {}, "sources": []}

    # -------------------------------------------------------------- control
    def start(self) -> "SystemMetrics":
        """Starts the sampling thread (idempotent); returns self."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="goodput-system-metrics")
                self._thread.start()
        return self

    def stop(self, timeout: Optional[float] = 5.0) -> bool:
        """Stops sampling; True when the thread ended within ``timeout``."""
        self._stop.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def thread(self) -> Optional[threading.Thread]:
        """The sampling thread (None before :meth:`start`)."""
        return self._thread

    def stats(self) -> Dict[str, Any]:
        """``samples`` taken, metric ``points`` recorded, ``cpu_seconds`` the
        sampling thread spent (CPU time, waits excluded), ``failed`` readings
        by source, and the ``sources`` that offered metrics here."""
        with self._lock:
            out = dict(self._stats)
            out["failed"] = dict(out["failed"])
            out["sources"] = list(out["sources"])
            return out

    # --------------------------------------------------------------- thread
    def _run(self) -> None:
        cpu0 = time.thread_time()
        opened = [s for s in self._sources if self._open(s)]
        with self._lock:
            self._stats["sources"] = [s.name for s in opened]
            self._stats["cpu_seconds"] += time.thread_time() - cpu0
        try:
            while opened and not self._stop.is_set() and not self._wait(self.interval_s):
                if self._stop.is_set():
                    break
                cpu0 = time.thread_time()
                points = self._sample(opened)
                with self._lock:
                    self._stats["samples"] += 1
                    self._stats["points"] += points
                    self._stats["cpu_seconds"] += time.thread_time() - cpu0
        except Exception:  # never raise out of a daemon thread: log and stop sampling
            logger.warning("goodput: system metrics stopped", exc_info=True)
        finally:
            for source in opened:
                try:
                    source.close()
                except Exception:
                    pass

    def _open(self, source: Any) -> bool:
        try:
            return bool(source.open())
        except Exception:
            logger.warning("goodput: system metrics source %s unavailable",
                           getattr(source, "name", source), exc_info=True)
            return False

    def _sample(self, sources: List[Any]) -> int:
        when = self._clock()
        points = 0
        for source in sources:
            try:
                values = source.sample()
            except Exception:
                self._failed(source)
                continue
            for name, value in values.items():
                self.recorder.record_metric(stored_name(name, self.process_index), value,
                                            time=when)
                points += 1
        return points

    def _failed(self, source: Any) -> None:
        name = getattr(source, "name", "source")
        with self._lock:
            failed = self._stats["failed"]
            first = name not in failed
            failed[name] = failed.get(name, 0) + 1
        if first:
            logger.warning("goodput: reading system metrics from %s failed (further "
                           "failures are counted in stats())", name, exc_info=True)
