"""A test double of newer MaxText's goodput, diagnostics and workload-monitor
code, and a replay of ``train.py``'s call order, written to a temporary
``maxtext`` package.

Newer MaxText (after 0.2.5) is not on PyPI. Its sources were read, not
invented:

* ``maxtext/common/goodput.py``: MaxText's HEAD (2026-08-22, fetched) plus
  the rolling-window block its newer ``tests/unit/goodput_utils_test.py``
  pins (the newer module itself was not available): with
  ``enable_rolling_window_goodput`` the monitor's
  ``start_rolling_window_goodput_uploader(config.rolling_windows_seconds)``
  runs right after ``start_goodput_uploader()``; a failure to start it is
  logged and nothing is stopped for it; on exit the rolling uploader stops
  before the cumulative one, a failure to stop it is logged; an exception
  of the training propagates. The assignment MaxText HEAD still makes to
  its read-only config with ``report_performance_metric_for_gcp_monitoring``
  is kept.
* ``gcloud_stub.py``, ``managed_mldiagnostics.py``, ``metric_logger.py``
  and ``gcp_workload_monitor.py``: the parts of MaxText 0.2.4-HEAD that
  these flags reach, line for line in behaviour: ``GCPWorkloadMonitor``'s
  constructor builds the real ``monitoring_v3.MetricServiceClient`` (it
  raises ``DefaultCredentialsError`` without Google credentials); only its
  GCE metadata lookups are left out (they need the network). The JAX calls
  are left out too (``process_index()`` is 0).
* ``train.py``: the order of MaxText's ``train.py``: config, recorder, job
  start, ``maybe_monitor_goodput``, TPU init and preparation blocks, the
  ``MetricLogger`` (workload monitor and managed diagnostics run), steps
  with a data-loading block each and metrics per step, job end on a
  graceful end. Time is the launcher's fake clock.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

__all__ = ["write_fake_maxtext"]

GCLOUD_STUB = '''
def goodput_modules():
    from ml_goodput_measurement import goodput, monitoring
    return goodput, monitoring, False

def mldiagnostics_modules():
    import google_cloud_mldiagnostics as mldiag
    return mldiag, False

def workload_monitor():
    from maxtext.common.gcp_workload_monitor import GCPWorkloadMonitor
    return GCPWorkloadMonitor, False
'''

GOODPUT = '''
import contextlib
from enum import Enum
from maxtext.common.gcloud_stub import goodput_modules

goodput, monitoring, _GOODPUT_STUB = goodput_modules()
LOG = []

def process_index():
    return 0

class GoodputEvent(Enum):
    JOB = "job"
    TPU_INIT = "tpu_init"
    TRAINING_PREPARATION = "training_preparation"
    DATA_LOADING = "data_loading"
    STEP = "step"

RECORD_JOB_START_TIME = f"record_{GoodputEvent.JOB.value}_start_time"
RECORD_JOB_END_TIME = f"record_{GoodputEvent.JOB.value}_end_time"

@contextlib.contextmanager
def maybe_monitor_goodput(config):
    if not config.monitor_goodput or process_index() != 0:
        yield
        return
    goodput_monitor = None
    rolling_started = False
    try:
        if config.report_performance_metric_for_gcp_monitoring:
            config.enable_gcp_step_deviation_metrics = False
        gcp_options = monitoring.GCPOptions(
            enable_gcp_goodput_metrics=config.enable_gcp_goodput_metrics,
            enable_gcp_step_deviation_metrics=config.enable_gcp_step_deviation_metrics)
        goodput_monitor = monitoring.GoodputMonitor(
            job_name=config.run_name, logger_name=f"goodput_{config.run_name}",
            tensorboard_dir=config.tensorboard_dir,
            upload_interval=config.goodput_upload_interval_seconds, monitoring_enabled=True,
            pathway_enabled=config.enable_pathways_goodput, include_badput_breakdown=True,
            include_step_deviation=config.monitor_step_time_deviation,
            step_deviation_interval_seconds=config.step_deviation_interval_seconds,
            gcp_options=gcp_options)
        goodput_monitor.start_goodput_uploader()
        if config.enable_rolling_window_goodput:
            try:
                goodput_monitor.start_rolling_window_goodput_uploader(
                    config.rolling_windows_seconds)
                rolling_started = True
            except Exception as e:
                LOG.append(f"rolling start failed: {e}")
        yield
    finally:
        if goodput_monitor:
            if rolling_started:
                try:
                    goodput_monitor.stop_rolling_window_goodput_uploader()
                except Exception as e:
                    LOG.append(f"rolling stop failed: {e}")
            goodput_monitor.stop_goodput_uploader()

@contextlib.contextmanager
def maybe_record_goodput(recorder, event_name, *args):
    record_goodput(recorder, f"record_{event_name.value}_start_time", *args)
    completed = False
    try:
        yield
        completed = True
    finally:
        if completed:
            record_goodput(recorder, f"record_{event_name.value}_end_time", *args)

def record_goodput(recorder, event_name, *args):
    if recorder:
        record_func = getattr(recorder, event_name, None)
        if record_func:
            record_func(*args)

def create_goodput_recorder(config):
    if not config.enable_goodput_recording:
        return None
    return goodput.GoodputRecorder(config.run_name, f"goodput_{config.run_name}",
                                   process_index() == 0)
'''

WORKLOAD_MONITOR = '''
import queue, threading, time
from google.cloud import monitoring_v3

class GCPWorkloadMonitor:
    def __init__(self, run_name):
        self.workload_id = f"{run_name or 'maxtext-unnamed'}-0"
        self.client = monitoring_v3.MetricServiceClient()   # no credentials: raises
        self.heartbeat_reporting_started = False
        self.performance_reporting_started = False
        self.termination_event = threading.Event()

    def __del__(self):
        self.termination_event.set()

    def start_heartbeat_reporting_thread(self, interval):
        if self.heartbeat_reporting_started:
            raise RuntimeError("Heartbeat reporting thread already started")
        self.heartbeat_reporting_started = True
        threading.Thread(target=lambda: None, daemon=True).start()

    def start_performance_reporting_thread(self, metrics_queue):
        if self.performance_reporting_started:
            raise RuntimeError("Performance reporting thread already started")
        self.performance_reporting_started = True
        threading.Thread(target=lambda: None, daemon=True).start()
'''

MANAGED = '''
import json
from maxtext.common.gcloud_stub import mldiagnostics_modules

mldiag, _ = mldiagnostics_modules()

class ManagedMLDiagnostics:
    _instance = None

    def __new__(cls, *args, **kwargs):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __init__(self, config):
        if hasattr(self, "_initialized"):
            return
        self._initialized = True
        if not config.managed_mldiagnostics:
            return
        def should_log_key(key, value):
            try:
                json.dumps(value, allow_nan=False)
            except TypeError:
                return False
            return True
        config_dict = {k: v for k, v in config.get_keys().items() if should_log_key(k, v)}
        region = config.managed_mldiagnostics_region if config.managed_mldiagnostics_region else None
        mldiag.machinelearning_run(
            name=f"{config.run_name}",
            run_group=config.managed_mldiagnostics_run_group,
            configs=config_dict,
            gcs_path=config.managed_mldiagnostics_dir,
            on_demand_xprof=config.managed_mldiagnostics_on_demand_profiling,
            region=region,
        )
'''

METRIC_LOGGER = '''
import queue
from maxtext.common.gcloud_stub import mldiagnostics_modules, workload_monitor
from maxtext.common.managed_mldiagnostics import ManagedMLDiagnostics

mldiag, _ = mldiagnostics_modules()
GCPWorkloadMonitor, _monitor_is_stub = workload_monitor()
_METRICS_TO_MANAGED = {"learning/loss": "loss", "perf/step_time_seconds": "step_time"}

class MetricLogger:
    def __init__(self, config):
        self.config = config
        self.performance_metric_queue = self.get_performance_metric_queue(config)
        if config.managed_mldiagnostics:
            ManagedMLDiagnostics(config)

    def get_performance_metric_queue(self, config):
        performance_metric_queue = None
        if (config.report_heartbeat_metric_for_gcp_monitoring
                or config.report_performance_metric_for_gcp_monitoring):
            # a local, as in MaxText 0.2.5 (metric_logger.py): only the monitor's
            # threads keep it alive
            gcp_workload_monitor = GCPWorkloadMonitor(config.run_name)
            if config.report_heartbeat_metric_for_gcp_monitoring:
                gcp_workload_monitor.start_heartbeat_reporting_thread(
                    config.heartbeat_reporting_interval_in_seconds)
            if config.report_performance_metric_for_gcp_monitoring:
                performance_metric_queue = queue.Queue()
                gcp_workload_monitor.start_performance_reporting_thread(
                    performance_metric_queue)
        return performance_metric_queue

    def record_train_metrics(self, metrics, step, step_time):
        metrics["scalar"]["perf/step_time_seconds"] = step_time
        if self.performance_metric_queue:
            self.performance_metric_queue.put(step_time)
        if self.config.managed_mldiagnostics:
            for name, value in metrics["scalar"].items():
                if name in _METRICS_TO_MANAGED:
                    mldiag.metrics.record(_METRICS_TO_MANAGED[name], value, step=int(step))
'''

TRAIN = '''
import os, sys
from goodput_integrations.maxtext import alias
from maxtext.common.goodput import (GoodputEvent, RECORD_JOB_END_TIME, RECORD_JOB_START_TIME,
                                    create_goodput_recorder, maybe_monitor_goodput,
                                    maybe_record_goodput, record_goodput)
from maxtext.common.metric_logger import MetricLogger

clock = alias.active_session().clock
DEFAULTS = dict(
    enable_goodput_recording=False, monitor_goodput=False, goodput_upload_interval_seconds=30,
    enable_pathways_goodput=False, monitor_step_time_deviation=True,
    step_deviation_interval_seconds=30, enable_gcp_goodput_metrics=True,
    enable_gcp_step_deviation_metrics=True, report_heartbeat_metric_for_gcp_monitoring=False,
    heartbeat_reporting_interval_in_seconds=5,
    report_performance_metric_for_gcp_monitoring=False,
    enable_rolling_window_goodput=False, rolling_windows_seconds=[3600, 86400],
    managed_mldiagnostics=False, managed_mldiagnostics_on_demand_profiling=True,
    managed_mldiagnostics_run_group="", managed_mldiagnostics_region="",
    managed_mldiagnostics_storage_path="", elastic_enabled=False, steps=10)

class ReadOnlyConfig:
    """As MaxText's pyconfig.HyperParameters: attributes, read-only."""
    def __init__(self, values):
        object.__setattr__(self, "_values", values)
    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None
    def __setattr__(self, name, value):
        raise ValueError("Configuration is read-only")
    def get_keys(self):
        return dict(self._values)

def parse(value):
    if value in ("true", "false"):
        return value == "true"
    if value.startswith("["):
        return [int(v) for v in value.strip("[]").split(",") if v.strip()]
    return int(value) if value.isdigit() else value

def initialize(argv):
    values = dict(DEFAULTS)
    values.update((k, parse(v)) for k, v in (a.split("=", 1) for a in argv[2:]))
    run = os.path.join(values["base_output_directory"], values["run_name"])
    values["tensorboard_dir"] = os.path.join(run, "tensorboard", "")
    values["managed_mldiagnostics_dir"] = os.path.join(
        values["managed_mldiagnostics_storage_path"] or values["base_output_directory"],
        values["run_name"], "managed-mldiagnostics")
    return ReadOnlyConfig(values)

def train_loop(config, recorder):
    with maybe_record_goodput(recorder, GoodputEvent.TPU_INIT):
        clock.advance(2)
    with maybe_record_goodput(recorder, GoodputEvent.TRAINING_PREPARATION):
        clock.advance(3)
    metric_logger = MetricLogger(config)
    for step in range(config.steps):
        with maybe_record_goodput(recorder, GoodputEvent.DATA_LOADING):
            clock.advance(0.25)
        with maybe_record_goodput(recorder, GoodputEvent.STEP, step):
            clock.advance(1.0)
        metric_logger.record_train_metrics({"scalar": {"learning/loss": 2.0 - step / 10}},
                                           step, 1.0 + step / 1000)  # measured step times
    return metric_logger

def main(argv):
    config = initialize(argv)
    recorder = create_goodput_recorder(config)
    record_goodput(recorder, RECORD_JOB_START_TIME)
    with maybe_monitor_goodput(config):
        sys.modules["maxtext_replay_logger"] = train_loop(config, recorder)
        record_goodput(recorder, RECORD_JOB_END_TIME)

if __name__ == "__main__":
    main(sys.argv)
'''


def write_fake_maxtext(root: Path) -> Path:
    """Writes the ``maxtext`` package under ``root/site`` and ``root/train.py``;
    returns the train script's path (put ``root/site`` on ``sys.path``)."""
    common = root / "site" / "maxtext" / "common"
    common.mkdir(parents=True)
    (common.parent / "__init__.py").write_text("")
    (common / "__init__.py").write_text("")
    for name, text in (("gcloud_stub", GCLOUD_STUB), ("goodput", GOODPUT),
                       ("gcp_workload_monitor", WORKLOAD_MONITOR),
                       ("managed_mldiagnostics", MANAGED), ("metric_logger", METRIC_LOGGER)):
        (common / f"{name}.py").write_text(textwrap.dedent(text))
    train = root / "train.py"
    train.write_text(textwrap.dedent(TRAIN))
    return train
