"""The ML-diagnostics interface with real JAX on CPU: a script written for the
SDK (import line changed) end to end, multi-process profiling with a shared
session id, the on-demand profiler server and the hardware configs."""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from goodput_core.queries.calculator import Calculator
from goodput_core.cli import main
from goodput_core.compat import mldiagnostics as mld
from goodput_core.compat.mldiagnostics import machinelearning_run, metrics

ROOT = Path(__file__).resolve().parents[3]
CHILD_ENV = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))

# The SDK README's example, grown into a training loop; only the import line differs.
SDK_SCRIPT = textwrap.dedent("""
    import logging, sys
    import yaml
    import jax, jax.numpy as jnp
    # from google_cloud_mldiagnostics import machinelearning_run, metrics, xprof, metric_types
    from goodput_core.compat.mldiagnostics import machinelearning_run, metrics, xprof, metric_types

    with open(sys.argv[2]) as yaml_file:
        yaml_data = yaml.safe_load(yaml_file)
    try:
        run = machinelearning_run(name=sys.argv[1], run_group="slice-sweep", configs=yaml_data,
                                  project="some-project", region="us-central1",
                                  gcs_path=sys.argv[3], on_demand_xprof=False)
        logging.info(f"MLRun created: {run.name}")

        @jax.jit
        def train_step(w, x):
            loss = jnp.mean((x @ w) ** 2)
            return w - 0.1 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w), loss

        @xprof()
        def evaluate(w, x):
            return float(jnp.mean(x @ w))

        w, x = jnp.ones((4, 1)), jnp.ones((8, 4)) / 4
        for step in range(10):
            if step == 3:
                with xprof():
                    w, loss = train_step(w, x)
                    loss = float(loss)
            else:
                w, loss = train_step(w, x)
                loss = float(loss)
            metrics.record_metrics([
                {"metric_name": metric_types.MetricType.LEARNING_RATE, "value": 0.1},
                {"metric_name": metric_types.MetricType.LOSS, "value": loss},
                {"metric_name": metric_types.MetricType.GRADIENT_NORM, "value": 0.5},
                {"metric_name": metric_types.MetricType.TOTAL_WEIGHTS, "value": 4},
                {"metric_name": metric_types.MetricType.STEP_TIME, "value": 0.01},
                {"metric_name": metric_types.MetricType.THROUGHPUT, "value": 800.0},
                {"metric_name": metric_types.MetricType.LATENCY, "value": 0.01},
                {"metric_name": metric_types.MetricType.TFLOPS, "value": 1.5},
                {"metric_name": metric_types.MetricType.MFU, "value": 12.5},
            ], step=step + 1)
            metrics.record("custom_metrics_1", 2 * step, step=step + 1)
        metrics.record("eval", evaluate(w, x))
        prof = xprof()
        prof.start(session_id="profiling_session")
        train_step(w, x)[1].block_until_ready()
        prof.stop()
    except Exception as e:
        logging.error(f"Error during MLRun: {e}", exc_info=True)
        sys.exit(3)
""")


def xplanes(folder):
    return sorted(glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.xplane.pb")))


@pytest.fixture(autouse=True)
def no_run_left(monkeypatch):
    # one workload id: run names are "<name>-t" (else the time of the call is appended)
    monkeypatch.setenv("RUN_WORKLOAD_ID", "t")
    for env in ("SLURM_JOB_ID", "GKE_DIAGON_METADATA", "LOCAL_RANK", "SLURM_LOCALID",
                "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv(env, raising=False)
    mld.end_run()
    yield
    mld.end_run()


def test_a_script_written_for_the_sdk_runs_and_every_view_shows_it(tmp_path, capsys):
    store = tmp_path / "sdk.sqlite"
    (tmp_path / "config.yaml").write_text("epochs: 10\nmodel:\n  layers: 2\n  width: 4\n")
    env = dict(CHILD_ENV, GOODPUT_STORE=str(store), RUN_WORKLOAD_ID="w1")
    proc = subprocess.run([sys.executable, "-c", SDK_SCRIPT, "sdk-run",
                           str(tmp_path / "config.yaml"), str(tmp_path / "gcs")],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    name = "sdk-run-w1"  # the SDK's rule: the name, then the workload id
    profile_dir = tmp_path / "gcs" / name
    assert f"profiles of run '{name}' go to {profile_dir}" in proc.stderr

    # goodput report: goodput, steps and the latest value of every metric
    assert main(["report", name, "--store", str(store), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["last_step"] == 10 and rep["disruptions"] == 0
    assert 0 < rep["goodput_percent"] < 100
    assert set(rep["metrics"]) == {"learning_rate", "loss", "gradient_norm", "total_weights",
                                   "step_time", "throughput", "latency", "tflops", "mfu",
                                   "custom_metrics_1", "eval"}
    custom = rep["metrics"]["custom_metrics_1"]
    assert (custom["step"], custom["value"]) == (10, 18.0)
    # configs and group with the run; hardware from jax's devices
    calc = Calculator(name, f"sqlite:///{store}")
    calc.refresh()
    meta = calc.metadata()
    assert meta["configs"] == {"epochs": 10, "model": {"layers": 2, "width": 4}}
    assert meta["run_group"] == "slice-sweep"
    assert meta["hardware_configs"]["accelerator_type"] == "cpu"
    assert meta["num_devices"] == 1 and meta["device_kind"] == "cpu"
    # profiles: the context manager, the decorator and start/stop, one session each
    files = xplanes(str(profile_dir))
    assert len(files) == 3 and all(os.path.getsize(f) > 0 for f in files)
    assert os.path.exists(profile_dir / "plugins" / "profile" / "profiling_session" /
                          f"{socket.gethostname()}.p0.xplane.pb")
    assert not os.path.exists(profile_dir / ".staging")
    # TensorBoard and Prometheus, through the monitor
    pytest.importorskip("tensorboardX")
    pytest.importorskip("prometheus_client")
    from goodput_core.exporters.prometheus import PrometheusExporter
    from goodput_core.exporters.tensorboard import TensorBoardExporter
    from goodput_core.monitor import Monitor
    from tests.support.prometheus_scrape import scrape
    from tests.support.tfevents import read_scalars

    prom = PrometheusExporter(0)
    try:
        monitor = Monitor(name, f"sqlite:///{store}",
                          [TensorBoardExporter(str(tmp_path / "tb")), prom])
        monitor.run_once()
        got = scrape(prom.url)
        assert monitor.stop(10)
    finally:
        prom.close()
    loss = calc.metrics("loss")
    scalars = read_scalars(str(tmp_path / "tb" / "goodput"))
    assert [s for s, _, _ in scalars["metrics/loss"]] == list(range(1, 11))
    assert [v for _, v, _ in scalars["metrics/loss"]] == pytest.approx(
        loss.values.tolist(), rel=1e-6)
    assert got[("goodput_metric", frozenset({"run": name, "name": "loss"}.items()))] == \
        pytest.approx(loss.values[-1])
    assert got[("goodput_metric", frozenset({"run": name, "name": "mfu"}.items()))] == 12.5


CHILD = textwrap.dedent("""
    import json, sys, jax, jax.numpy as jnp
    port, pid, n, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n,
                               process_id=pid)
    from goodput_core.compat.mldiagnostics import machinelearning_run, metrics, xprof
    run = machinelearning_run(name="multi", gcs_path=root + "/gcs", store=root + "/s.sqlite",
                              run_workload_id="job")
    prof = xprof(process_index_list=[0, 2])
    prof.start(session_id="shared")
    jnp.ones(8).sum().block_until_ready()
    prof.stop()
    metrics.record("loss", 1.0 + pid, step=1, record_on_all_hosts=True)
    print(json.dumps({"index": run.process_index, "dir": prof.session_dir}))
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_processes_with_one_session_id_share_one_session(tmp_path):
    port, n = _free_port(), 3
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(port), str(i), str(n),
                               str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=CHILD_ENV, cwd=tmp_path) for i in range(n)]
    outs, errs = [], []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
        errs.append(err)
    # where profiles go is printed by the capturing processes only
    assert ["profiles of run 'multi-job' go to" in err for err in errs] == [True, False, True]
    session = tmp_path / "gcs" / "multi-job" / "plugins" / "profile" / "shared"
    # indices come from jax.distributed; process 1 is not in process_index_list
    assert [o["index"] for o in outs] == [0, 1, 2]
    assert [o["dir"] for o in outs] == [str(session), None, str(session)]
    host = socket.gethostname()
    assert sorted(os.listdir(session)) == sorted(
        f"{host}.p{i}.{suffix}" for i in (0, 2) for suffix in ("xplane.pb", "trace.json.gz"))
    assert all(os.path.getsize(session / f) > 0 for f in os.listdir(session))
    calc = Calculator("multi-job", f"sqlite:///{tmp_path / 's.sqlite'}")
    calc.refresh()
    assert sorted(calc.metrics("loss").values.tolist()) == [1.0, 2.0, 3.0]


def test_on_demand_server_on_the_chosen_processes(monkeypatch, tmp_path):
    started, stopped = [], []
    monkeypatch.setattr(jax.profiler, "start_server", lambda port: started.append(port) or port)
    monkeypatch.setattr(jax.profiler, "stop_server", lambda: stopped.append(1))
    store = f"sqlite:///{tmp_path / 'od.sqlite'}"
    machinelearning_run("od", on_demand_xprof=True, store=store, process_index=0)
    assert started == [9999]
    mld.end_run()
    assert stopped == [1]
    machinelearning_run("od", on_demand_xprof=True, store=store, process_index=0,
                        on_demand_xprof_processes=[1])
    machinelearning_run("od", on_demand_xprof=True, metric_only_run=True, store=store,
                        process_index=0)
    assert started == [9999]
    mld.end_run()
    # by default local rank 0 of each host serves, as the SDK: a second process on the
    # host (LOCAL_RANK=1) would clash on the port, whatever its process index
    monkeypatch.setenv("LOCAL_RANK", "1")
    machinelearning_run("od", on_demand_xprof=True, store=store, process_index=0)
    mld.core.xprof.start_on_demand_xprof()
    assert started == [9999]
    mld.end_run()
    monkeypatch.setenv("LOCAL_RANK", "0")
    machinelearning_run("od", on_demand_xprof=True, store=store, process_index=3)
    assert started == [9999, 9999]
    mld.end_run()
    mld.core.xprof.start_on_demand_xprof(port=9000)
    mld.core.xprof.stop_on_demand_xprof()
    assert started == [9999, 9999, 9000] and len(stopped) == 3


def test_hardware_configs_once_jax_backends_exist(tmp_path):
    jax.devices()  # backends up: collected when the run starts
    run = machinelearning_run("hw", store=f"sqlite:///{tmp_path / 'hw.sqlite'}",
                              process_index=0)
    assert run.configs.hardwareConfigs == {
        "device_type": jax.devices()[0].device_kind, "num_slices": "1",
        "devices_per_slice": str(jax.device_count()), "accelerator_type": "cpu"}
    metrics.record("loss", jax.numpy.float32(1.5), step=1)  # a jax scalar is a number
    mld.end_run()
    calc = Calculator("hw-t", f"sqlite:///{tmp_path / 'hw.sqlite'}")
    calc.refresh()
    assert calc.metrics("loss").values.tolist() == [1.5]


def test_gs_path_sessions_are_uploaded(monkeypatch, tmp_path):
    pytest.importorskip("google.cloud.storage")
    from goodput_core.compat.mldiagnostics import _gcs, xprof
    from tests.support.fake_gcs import FakeGcs

    with FakeGcs() as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        monkeypatch.setenv("GOODPUT_PROFILE_DIR", str(tmp_path / "local"))
        run = machinelearning_run("up", gcs_path="gs://bucket//runs/", process_index=0,
                                  store=f"sqlite:///{tmp_path / 'up.sqlite'}")
        assert run.profile_dir == str(tmp_path / "local" / "up-t")  # staged locally
        with xprof() as prof:
            jax.numpy.ones(4).sum().block_until_ready()
        assert _gcs.wait_for_uploads(60)
    local = sorted(os.listdir(prof.session_dir))
    sid = os.path.basename(prof.session_dir)
    assert sorted(gcs.objects) == [
        ("bucket", f"runs/up-t/plugins/profile/{sid}/{name}") for name in local]
    for name in local:
        with open(os.path.join(prof.session_dir, name), "rb") as f:
            assert gcs.objects[("bucket", f"runs/up-t/plugins/profile/{sid}/{name}")] == f.read()


def test_gs_path_without_the_storage_package_stays_local(monkeypatch, tmp_path, caplog):
    from goodput_core.compat.mldiagnostics import xprof

    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)  # import fails
    monkeypatch.setenv("GOODPUT_PROFILE_DIR", str(tmp_path / "local"))
    machinelearning_run("nogcs", gcs_path="gs://b/p", process_index=0,
                        store=f"sqlite:///{tmp_path / 'n.sqlite'}")
    with caplog.at_level("WARNING", "goodput"):
        with xprof() as prof:
            jax.numpy.ones(4).sum().block_until_ready()
    assert xplanes(str(tmp_path / "local" / "nogcs-t")) and prof.session_dir
    assert any("google-cloud-storage is not installed" in r.getMessage()
               for r in caplog.records)
