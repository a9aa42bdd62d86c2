"""System metrics on a GPU or TPU machine: the NVML and libtpu paths for real.

Not part of the suite (it needs the hardware). Run it on a machine with an
NVIDIA GPU (driver and ``nvidia-ml-py``) or a Cloud TPU VM (``libtpu``),
with this project installed::

    python tests/external/system_metrics_check.py [--seconds 20] [--interval 2]

What it does and checks:

1. opens each source (:mod:`goodput_core.compat.mldiagnostics._system_sources`)
   and says which offer metrics here; at least one of NVML and libtpu must;
2. keeps the accelerator busy for half the time, if jax sees it (a matmul
   loop on a thread), and idle the other half, while a real
   :class:`~goodput_core.compat.mldiagnostics.system_metrics.SystemMetrics`
   samples every ``--interval`` seconds into a memory store;
3. checks that every sample is stored at its interval, that each metric the
   source offers is a percentage in [0, 100], and (with jax) that the duty
   cycle while busy is above the one while idle;
4. prints the sampler's CPU per sample and as a share of one core at 10 s;
5. compares with the SDK's own readers when ``google-cloud-mldiagnostics``
   is installed (``gpu_metric.get_gpu_duty_cycle`` /
   ``libtpu_metric.get_tpu_duty_cycle``): the same order of magnitude.

Exit status 0 when every check passed; the figures go to stdout as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any, Dict, List


def _busy(stop: threading.Event) -> Any:
    """Keeps the default jax device busy until ``stop``: the thread, or None without jax."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    x = jnp.ones((4096, 4096), jnp.bfloat16)
    f = jax.jit(lambda a: (a @ a).sum())

    def loop():
        while not stop.is_set():
            f(x).block_until_ready()
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args(argv)

    from goodput_core import Recorder
    from goodput_core.compat.mldiagnostics import _system_sources
    from goodput_core.compat.mldiagnostics.system_metrics import SystemMetrics
    from goodput_core.queries.calculator import Calculator
    from goodput_core.stores.memory import MemoryStore

    failures: List[str] = []
    out: Dict[str, Any] = {"sources": {}}
    for src in _system_sources.default_sources():
        ok = src.open()
        out["sources"][src.name] = sorted(src.sample()) if ok else None
        src.close()
    if not (out["sources"].get("nvml") or out["sources"].get("libtpu")):
        failures.append("neither NVML nor libtpu offers metrics on this machine")

    store = MemoryStore("system-metrics-check")
    rec = Recorder("check", store)
    rec.record_job_start_time()
    sampler = SystemMetrics(rec, interval_s=args.interval).start()
    stop = threading.Event()
    t0 = time.time()
    time.sleep(args.seconds / 2)                  # idle half
    busy_from = time.time()
    busy = _busy(stop)
    out["jax_busy"] = busy is not None
    time.sleep(args.seconds / 2)                  # busy half
    stop.set()
    if busy is not None:
        busy.join(60)  # not in the middle of a computation at exit
    sampler.stop(30)
    stats = sampler.stats()
    rec.record_job_end_time()
    rec.close()
    calc = Calculator("check", store)
    calc.refresh()

    series = {}
    for name in sorted({n for names in out["sources"].values() if names for n in names}):
        s = calc.metrics(name)
        series[name] = list(zip(s.times.tolist(), s.values.tolist()))
        values = s.values.tolist()
        if not values:
            failures.append(f"{name}: no sample stored")
        if any(not 0.0 <= v <= 100.0 for v in values):
            failures.append(f"{name}: a value outside [0, 100]: {values}")
        gaps = [b - a for (a, _), (b, _) in zip(series[name], series[name][1:])]
        if any(abs(g - args.interval) > max(0.5, args.interval / 2) for g in gaps):
            failures.append(f"{name}: samples not {args.interval} s apart: {gaps}")
    for duty in ("gpu_duty_cycle", "tpu_duty_cycle"):
        if out["jax_busy"] and series.get(duty):
            idle = [v for t, v in series[duty] if t < busy_from]
            busy = [v for t, v in series[duty] if t >= busy_from + args.interval]
            if idle and busy and not max(busy) > min(idle):
                failures.append(f"{duty}: busy {busy} not above idle {idle}")
    per_sample = stats["cpu_seconds"] / max(stats["samples"], 1)
    out.update(samples=stats["samples"], failed=stats["failed"],
               cpu_ms_per_sample=round(1e3 * per_sample, 3),
               share_of_a_core_at_10s_percent=round(100 * per_sample / 10, 5),
               series=series, wall_seconds=round(time.time() - t0, 1))
    if per_sample / 10 >= 0.01:
        failures.append(f"the sampler costs {100 * per_sample / 10:.3f} % of a core at 10 s")
    try:  # the SDK's own readers, for comparison
        if out["sources"].get("nvml"):
            from google_cloud_mldiagnostics.utils.gpu_utils import gpu_metric
            out["sdk_gpu_duty_cycle"] = list(gpu_metric.get_gpu_duty_cycle())
        if out["sources"].get("libtpu"):
            from google_cloud_mldiagnostics.utils.libtpu_utils import libtpu_metric
            out["sdk_tpu_duty_cycle"] = libtpu_metric.get_tpu_duty_cycle()
    except ImportError:
        out["sdk"] = "google-cloud-mldiagnostics not installed"
    out["failures"] = failures
    print(json.dumps(out, indent=2))
    print("system_metrics_check:", "PASSED" if not failures else "FAILED")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
