"""The Cloud Monitoring metric and resource types, checked from outside.

Expected names are literal strings here and, independently, what the
installed ``ml-goodput-measurement`` 0.2.3 hands to its own metrics sender
for the same job; never :mod:`goodput_core.exporters.cloud_monitoring`'s
constants (a typo there must fail these tests). Our series go through the
real client to the loopback :class:`FakeCloudMonitoring`.

Mutations killed: a typo in ``METRIC_PREFIX`` or ``RESOURCE_TYPE``.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from google.auth.credentials import AnonymousCredentials
from ml_goodput_measurement.src import goodput as ref_goodput
from ml_goodput_measurement.src import goodput_utils as ref_utils
from ml_goodput_measurement.src import monitoring as ref_monitoring

from goodput_core.queries.calculator import Calculator
from goodput_core.compat import goodput_utils
from goodput_core.compat.goodput_utils import GCPOptions
from goodput_core.events import to_payload
from goodput_core.exporters.base import MonitorSnapshot
from goodput_core.exporters.cloud_monitoring import CloudMonitoringExporter
from goodput_core.record.recorder import Recorder
from goodput_core.stores import open_store
from goodput_core.cli.synthetic import record_synthetic_job
from tests.support.fake_cloud_monitoring import FakeCloudMonitoring, FakeMetadataServer
from tests.support.reference_harness import FakeCloudLogger, frozen_reference_clock

RUN = "gcm-types"
START = 1_700_000_000.0
WINDOW = 3600
METRIC_TYPES = {f"compute.googleapis.com/workload/{name}" for name in (
    "goodput_time", "badput_time", "disruptions", "max_productive_steps", "total_elapsed_time",
    "step_time_deviation", "performance", "interval_goodput", "interval_badput")}
RESOURCE_TYPE = "compute.googleapis.com/Workload"
OPTIONS = dict(project_id="proj", location="us-central1-a", acc_type="TPU-v5p", replica_id="3")


@pytest.fixture(scope="module")
def job():
    """(store URL, query time) of the synthetic job."""
    store = f"memory://gcm-types-{uuid.uuid4().hex}"
    rec = Recorder(RUN, store, clock=lambda: START, strict=True)
    end = record_synthetic_job(rec, START)["end"]
    rec.flush()
    rec.close()
    return store, end + 10.0


def _ours(store, now, monkeypatch):
    calc = Calculator(RUN, store, clock=lambda: now)
    calc.refresh()
    (rolling,) = calc.rolling([WINDOW], now=now)
    snap = MonitorSnapshot(RUN, now, calc.cumulative(now=now), {WINDOW: rolling},
                           calc.step_stats())
    with FakeMetadataServer({}) as meta, FakeCloudMonitoring() as gcm:
        monkeypatch.setenv(goodput_utils.METADATA_HOST_ENV, meta.host)
        CloudMonitoringExporter(RUN, GCPOptions(**OPTIONS),
                                client_options={"api_endpoint": gcm.endpoint},
                                credentials=AnonymousCredentials(), clock=lambda: now
                                ).export(snap)
        assert gcm.violations == []
        return gcm.series()


class _Capture:
    """Stands in for the reference's ``GCPMetrics``: keeps what it is given."""

    def __init__(self):
        self.metrics = []

    def send_metrics(self, metrics, context=None):
        self.metrics.extend(metrics)


def _reference(store, now, tmp_path):
    """The metric dicts the reference's own upload functions build for the job."""
    events, _ = open_store(store).read(RUN)
    fake = FakeCloudLogger(RUN, clock=lambda: now)
    for event in events:
        fake.append(to_payload(event))
    config = {"job_name": RUN, "include_badput_breakdown": True,
              "configured_ideal_step_time": None,
              "gcp_options": ref_utils.GCPOptions(**OPTIONS)}
    sent = {}
    when = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    with frozen_reference_clock(now):
        ref = ref_goodput.GoodputCalculator(RUN, "log", cloud_logger=fake,
                                            cache_dir=str(tmp_path / "cache"))
        ref.get_job_goodput(include_badput_breakdown=True)  # as its uploader: fills the details
        for name, upload in (
                ("cumulative", lambda s: ref_monitoring._upload_goodput_metrics_to_gcm(
                    s, ref.get_job_goodput_details(), config)),
                ("deviation", lambda s: ref_monitoring._send_step_deviation_metric_to_gcp(
                    s, ref.get_step_deviation(None), config)),
                ("interval", lambda s: ref_monitoring._upload_interval_goodput_metrics_to_gcm(
                    s, ref.get_interval_metric_details(when - dt.timedelta(seconds=WINDOW), when),
                    config))):
            capture = _Capture()
            upload(capture)  # the reference logs and swallows its own errors:
            assert capture.metrics, f"the reference sent no {name} metric"
            sent[name] = capture.metrics
    return [m for metrics in sent.values() for m in metrics]


def test_metric_and_resource_types_are_the_documented_literals(job, monkeypatch):
    series = _ours(*job, monkeypatch)
    assert {ts.metric.type for ts in series} == METRIC_TYPES
    assert {ts.resource.type for ts in series} == {RESOURCE_TYPE}


def test_metric_and_resource_types_equal_the_references(job, monkeypatch, tmp_path):
    ours = _ours(*job, monkeypatch)
    ref = _reference(*job, tmp_path)
    # the reference computes all of these from the same job; what it sends
    # is the authority on the names
    assert {m["resource_type"] for m in ref} == {ts.resource.type for ts in ours}
    assert {m["metric_type"] for m in ref} == {ts.metric.type for ts in ours}
    assert {m["resource_type"] for m in ref} == {RESOURCE_TYPE}
