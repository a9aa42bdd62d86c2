"""Opt-in external test: our AXLearn recorder through AXLearn's own code.

Run it with ``make test-axlearn AXLEARN_SRC=/path/to/axlearn`` (a source
checkout of apple/axlearn; not part of ``make test``). It

1. creates its own Python 3.12 environment (``build/axlearn-venv``; AXLearn
   needs Python 3.12) with the few packages that ``axlearn.common.measurement``
   imports (``attrs``, ``absl-py``) and this project with its ``axlearn`` extra;
2. with the checkout on ``PYTHONPATH``, runs a job through AXLearn's real
   registry: ``measurement.initialize(fv)`` with
   ``--recorder_type=goodput_integrations.axlearn:goodput_suite``, then
   ``maybe_monitor_all()``, ``record_event(EventType.JOB / ACCELERATOR_INIT /
   TRAINING_PREPARATION / STEP)`` and ``measurement.record_event(Event...)``;
3. builds the recorder from a Python config, as AXLearn users do
   (``default_config().set(upload_dir=..., ...).instantiate()``), checks that
   AXLearn's config system refuses an unknown field, and that every field of
   AXLearn's own ``GoodputRecorder.Config`` (read from
   ``axlearn/cloud/gcp/measurement.py``'s source: importing it needs JAX and
   ml-goodput-measurement) is a field of ours;
4. checks the run's events in the store and the TensorBoard files the
   monitor wrote.

Usage::

    python3 tests/external/axlearn_e2e.py --axlearn-src DIR [--python PYTHON3.12]
        [--venv DIR] [--work DIR] [--skip-install]
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from maxtext_e2e import Failure, check, find_python312, sh  # noqa: E402 - the same helpers

DEPS = ["attrs>=23.1", "absl-py>=2.1"]


def upstream_config_fields(src: Path) -> set:
    """The annotated fields of ``GoodputRecorder.Config`` in AXLearn's source."""
    tree = ast.parse((src / "axlearn" / "cloud" / "gcp" / "measurement.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "GoodputRecorder":
            for inner in node.body:
                if isinstance(inner, ast.ClassDef) and inner.name == "Config":
                    return {s.target.id for s in inner.body if isinstance(s, ast.AnnAssign)}
    raise Failure("no GoodputRecorder.Config in axlearn/cloud/gcp/measurement.py")


def inside(src: Path, work: Path) -> int:
    import types

    from axlearn.common import measurement
    from axlearn.common.config import UnknownFieldError

    import goodput_integrations.axlearn as gax
    from goodput_core import open_store
    from goodput_core.events import Kind

    check(gax.AXLEARN_AVAILABLE, "our shim did not find AXLearn's measurement module")
    store = f"sqlite:///{work / 'axlearn.sqlite'}"
    upload = work / "summaries"
    fv = types.SimpleNamespace(
        recorder_type="goodput_integrations.axlearn:goodput_suite",
        recorder_spec=["name=ax-e2e", f"upload_dir={upload}", "upload_interval=1",
                       "rolling_window_size=60", f"store={store}",
                       "enable_gcp_goodput_metrics=false",
                       "enable_gcp_step_deviation_metrics=false"])
    measurement.initialize(fv)
    rec = measurement.global_recorder
    check(isinstance(rec, gax.GoodputSuiteRecorder), f"initialize built {rec!r}")
    check(measurement._recorders.get(gax.NAME) is type(rec), "not in AXLearn's registry")
    events = measurement.EventType
    with rec.maybe_monitor_all():
        with rec.record_event(events.JOB):
            with rec.record_event(events.ACCELERATOR_INIT):
                pass
            with rec.record_event(events.TRAINING_PREPARATION):
                pass
            measurement.record_event(measurement.Event.START_DATA_LOADING)
            measurement.record_event(measurement.Event.END_DATA_LOADING)
            for step in range(5):
                with rec.record_event(events.STEP, step):
                    pass
    check(rec.close(60), "the recorder did not flush")
    kinds = [e.kind for e in open_store(store).read("ax-e2e")[0]]
    for kind in (Kind.JOB_START, Kind.JOB_END, Kind.TPU_INIT_START, Kind.STEP_START):
        check(kind in kinds, f"no {kind} in the store: {kinds}")
    check(kinds.count(Kind.STEP_START) == 5, f"steps: {kinds}")
    tb = [p for p in upload.rglob("events.out.tfevents.*")]
    check(bool(tb), f"no TensorBoard files under {upload}")

    # a Python config, as AXLearn users write one
    cfg = gax.GoodputSuiteRecorder.default_config().set(
        name="ax-cfg", upload_dir=str(upload), upload_interval=0,
        rolling_window_size=[3600, 86400], jax_backend="proxy", enable_monitoring=True,
        store=store)
    built = cfg.instantiate()
    check(built.spec.upload_interval == 0 and built.spec.rolling_window_size == (3600, 86400)
          and built.spec.pathways, f"config fields lost: {built.spec}")
    built.close(10)
    try:
        gax.GoodputSuiteRecorder.default_config().set(name="x", uplod_dir="/typo")
        raise Failure("AXLearn's config system accepted an unknown field")
    except UnknownFieldError:
        pass
    ours = {"name"} | set(gax.recorder.CONFIG_FIELDS)
    theirs = upstream_config_fields(src)
    check(theirs <= ours, f"AXLearn's fields missing from ours: {sorted(theirs - ours)}")
    print(f"axlearn_e2e: OK (AXLearn's fields {sorted(theirs)} all offered; "
          f"{len(kinds)} events; {len(tb)} TensorBoard files)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--axlearn-src", required=True, type=Path)
    parser.add_argument("--python")
    parser.add_argument("--venv", default=str(ROOT / "build" / "axlearn-venv"))
    parser.add_argument("--work", default=str(ROOT / "build" / "axlearn-work"))
    parser.add_argument("--skip-install", action="store_true")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    src, work = args.axlearn_src.resolve(), Path(args.work).resolve()
    if not (src / "axlearn" / "common" / "measurement.py").exists():
        raise SystemExit(f"axlearn_e2e: {src} is not an AXLearn checkout "
                         "(no axlearn/common/measurement.py)")
    if args.inside:
        return inside(src, work)
    venv = Path(args.venv)
    py = venv / "bin" / "python"
    if not args.skip_install:
        if not py.exists():
            sh([find_python312(args.python), "-m", "venv", venv])
        sh([py, "-m", "pip", "install", "-q", *DEPS])
        sh([py, "-m", "pip", "install", "-q", "-e", f"{ROOT}[axlearn]"])
    if work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT)]))
    return subprocess.call([str(py), __file__, "--inside", "--axlearn-src", str(src),
                            "--work", str(work)], env=env)


if __name__ == "__main__":
    sys.exit(main())
