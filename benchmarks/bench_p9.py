"""P9: what instrumentation costs the training thread outside ``record_*``.

Each scenario runs in a fresh interpreter (what a job pays once, cold: the
first call includes the imports it triggers) and times, with
``perf_counter``, each call on the caller's thread:

* recorder: ``Recorder(run, sqlite URL)``, the first ``record_*``, the second;
* monitor: ``Monitor.start()`` (TensorBoard exporter built before, timed too);
* compat: the reference-compatible ``GoodputMonitor(...)`` and its
  ``start_goodput_uploader()``;
* axlearn: the shim's import, ``initialize`` (``from_flags``),
  ``start_monitoring()``, the first and second ``record``, entering
  ``maybe_monitor_all()`` (AXLearn's default spec: Cloud Monitoring on);
* maxtext: the helpers' import, ``create_goodput_recorder``, the first and
  second ``record_goodput``, entering ``maybe_monitor_goodput(config)``
  (MaxText's default flags: Cloud Monitoring on).

numpy is imported before the clock starts (any training job has it).
Before a monitor block is entered the recorder is flushed, untimed: in
AXLearn and MaxText the block comes long after the recorder's first events,
whose background work (engine, store) has finished by then. No
scenario reaches the network: ``GCE_METADATA_HOST`` points at a closed
loopback port, as a machine off Google Cloud would refuse.

``--baseline REF`` also runs every scenario on the tree of git commit REF
(``git archive`` into a temporary directory, put first on ``sys.path``), in
the same run, so before/after medians come from the same machine state.

    python benchmarks/bench_p9.py [--samples 9] [--baseline f33e5b8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from typing import Dict, List, Optional

from _machine import machine, median

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PRELUDE = """
import json, os, sys, tempfile, time
import numpy  # noqa: F401  (every training job has it already)
pc = time.perf_counter
out = {}
d = tempfile.mkdtemp()
def timed(name, fn):
    t = pc(); r = fn(); out[name] = (pc() - t) * 1e3; return r
"""

SCENARIOS: Dict[str, str] = {
    "recorder": """
timed("import goodput_core", lambda: __import__("goodput_core"))
from goodput_core import Recorder
rec = timed("Recorder(run, sqlite URL)", lambda: Recorder("bench", f"sqlite:///{d}/s.sqlite"))
timed("first record_*", rec.record_job_start_time)
timed("second record_*", rec.record_tpu_init_start_time)
assert rec.flush(30)
""",
    "monitor": """
from goodput_core.monitor import Monitor
from goodput_core.exporters.tensorboard import TensorBoardExporter
exporter = timed("TensorBoardExporter(dir) (user code)", lambda: TensorBoardExporter(d))
m = timed("Monitor(run, store, [exporter])", lambda: Monitor("bench", f"sqlite:///{d}/s.sqlite",
                                                              [exporter], interval_s=30))
timed("Monitor.start()", m.start)
m.stop(10, skip_final_flush=True)
""",
    "compat": """
from goodput_core.compat.monitoring import GoodputMonitor
m = timed("GoodputMonitor(...) (reference API)", lambda: GoodputMonitor(
    "bench", "log", d, 30, monitoring_enabled=True, include_badput_breakdown=True,
    store=f"sqlite:///{d}/s.sqlite"))
timed("start_goodput_uploader()", m.start_goodput_uploader)
m.stop_goodput_uploader(skip_final_flush=True)
""",
    "axlearn": """
def imp():
    from goodput_integrations.axlearn import _base
    import goodput_integrations.axlearn.recorder  # noqa: F401
    return _base
_base = timed("import the shim", imp)
flags = ["--recorder_type=goodput_integrations.axlearn:goodput_suite",
         "--recorder_spec=name=bench", f"--recorder_spec=upload_dir={d}/tb",
         f"--recorder_spec=store=sqlite:///{d}/s.sqlite"]
rec = timed("initialize (from_flags)", lambda: _base.initialize(flags, process_index=0))
timed("start_monitoring()", rec.start_monitoring)
timed("first record (START_JOB)", lambda: rec.record(_base.Event.START_JOB))
timed("second record", lambda: rec.record(_base.Event.START_ACCELERATOR_INIT))
assert rec.flush(30)  # (AXLearn enters the block much later: the engine is built by then)
cm = rec.maybe_monitor_all()
timed("enter maybe_monitor_all()", cm.__enter__)
rec.record(_base.Event.END_JOB)
cm.__exit__(None, None, None)
""",
    "maxtext": """
import types
mt = timed("import the helpers", lambda: __import__("goodput_integrations.maxtext",
                                                    fromlist=["x"]))
config = types.SimpleNamespace(
    run_name="bench", base_output_directory=d, enable_goodput_recording=True,
    monitor_goodput=True, goodput_upload_interval_seconds=30, enable_pathways_goodput=False,
    monitor_step_time_deviation=True, step_deviation_interval_seconds=30,
    enable_gcp_goodput_metrics=True, enable_gcp_step_deviation_metrics=True,
    enable_checkpoint_cloud_logger=False, elastic_enabled=False,
    goodput_store=f"sqlite:///{d}/s.sqlite", _goodput_process_index=0)
rec = timed("create_goodput_recorder(config)", lambda: mt.create_goodput_recorder(config))
timed("first record_goodput", lambda: mt.record_goodput(rec, mt.RECORD_JOB_START_TIME))
timed("second record_goodput", lambda: mt.record_goodput(rec, "record_tpu_init_start_time"))
assert rec.flush(30)  # (MaxText enters the block much later: the store is open by then)
cm = mt.maybe_monitor_goodput(config)
timed("enter maybe_monitor_goodput(config)", cm.__enter__)
mt.record_goodput(rec, mt.RECORD_JOB_END_TIME)
cm.__exit__(None, None, None)
""",
}

_EPILOGUE = """
print("P9JSON " + json.dumps(out))
"""


def _baseline_tree(ref: str, into: str) -> str:
    """The tree of commit ``ref``, importable as goodput_core / goodput_integrations."""
    archive = os.path.join(into, "tree.tar")
    subprocess.run(["git", "-C", ROOT, "archive", "-o", archive, ref], check=True)
    tree = os.path.join(into, "tree")
    with tarfile.open(archive) as tar:
        tar.extractall(tree)  # our own repository's commit
    os.symlink(os.path.join(tree, "integrations"), os.path.join(tree, "goodput_integrations"))
    return tree


def _sample(scenario: str, tree: str) -> Dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree, JAX_PLATFORMS="cpu",
               GCE_METADATA_HOST="127.0.0.1:9")  # refused at once, as off Google Cloud
    code = _PRELUDE + SCENARIOS[scenario] + _EPILOGUE
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tempfile.gettempdir(), timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("P9JSON "):
            return json.loads(line[len("P9JSON "):])
    raise RuntimeError(f"{scenario} failed:\n{proc.stderr[-3000:]}")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--baseline", default=None, help="a git ref to compare with")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names")
    args = parser.parse_args(argv)
    print(f"P9 on {machine()}; {args.samples} fresh processes per scenario, medians (max)")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"now": ROOT}
        if args.baseline:
            trees = {args.baseline: _baseline_tree(args.baseline, tmp), "now": ROOT}
        for scenario in args.only or list(SCENARIOS):
            runs: Dict[str, List[Dict[str, float]]] = {name: [] for name in trees}
            for _ in range(args.samples):  # interleaved: drift hits both trees alike
                for name, tree in trees.items():
                    runs[name].append(_sample(scenario, tree))
            print(f"\n{scenario}:")
            header = "".join(f" | {name:>18}" for name in trees)
            print(f"  {'call on the caller thread':44}{header}")
            for key in runs["now"][0]:
                cells = []
                for name in trees:
                    values = [r[key] for r in runs[name] if key in r]
                    cells.append(f"{median(values):8.3f} ({max(values):7.2f}) ms"
                                 if values else f"{'-':>18}")
                print(f"  {key:44}" + "".join(f" | {c:>18}" for c in cells))


if __name__ == "__main__":
    main()
