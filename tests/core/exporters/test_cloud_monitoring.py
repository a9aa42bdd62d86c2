"""CloudMonitoringExporter against a real gRPC MetricService on loopback.

The real ``MetricServiceClient`` talks to :class:`FakeCloudMonitoring` (TLS
via ``client_options.api_endpoint``, or an insecure channel via
``transport=``); GCE metadata comes from a loopback HTTP server named by
``GCE_METADATA_HOST`` (set for every test here, so nothing can reach the real
one). Expected values come from our Calculator over the synthetic job.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import subprocess
import sys
import threading
import uuid

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials

from goodput_core.timeline.buckets import BadputType
from goodput_core.queries.calculator import Calculator
from goodput_core import gcp
from goodput_core.compat.goodput_utils import GCPOptions
from goodput_core.exporters.base import MonitorSnapshot
from goodput_core.exporters.cloud_monitoring import (
    MAX_SERIES_PER_CALL,
    CloudMonitoringExporter,
)
from goodput_core.record.recorder import Recorder
from goodput_core.cli.synthetic import record_synthetic_job
from tests.support.fake_cloud_monitoring import FakeCloudMonitoring, FakeMetadataServer

RUN = "gcm-run"
START = 1_700_000_000.0
WINDOWS = (60, 3600)
METADATA = {
    "project/project-id": "meta-project",
    "instance/zone": "projects/123/zones/us-east5-a",
    "instance/machine-type": "projects/123/machineTypes/ct5p-hightpu-4t",
}
LOGGER = "goodput_core.exporters.cloud_monitoring"
# Literals, not the exporter's constants: a typo there must fail here.
METRIC_PREFIX = "compute.googleapis.com/workload/"
RESOURCE_TYPE = "compute.googleapis.com/Workload"


# ------------------------------------------------------------------ fixtures
@pytest.fixture(autouse=True)
def metadata(monkeypatch):
    """Every test: metadata lookups can only reach this loopback server."""
    with FakeMetadataServer(METADATA) as server:
        monkeypatch.setenv(gcp.METADATA_HOST_ENV, server.host)
        yield server


@pytest.fixture
def gcm():
    with FakeCloudMonitoring() as fake:
        yield fake


def _job(custom_types=(), run=RUN):
    """(calculator, query time) of the synthetic job plus extra custom events."""
    store = f"memory://gcm-{uuid.uuid4().hex}"
    rec = Recorder(run, store, clock=lambda: START, strict=True)
    end = record_synthetic_job(rec, START)["end"]
    for i, name in enumerate(custom_types):  # short events inside the first step
        rec.record_custom_badput_event_start_time(START + 1 + i * 1e-3, name)
        rec.record_custom_badput_event_end_time(START + 1 + (i + 0.5) * 1e-3, name)
    rec.flush()
    rec.close()
    query_time = end + 10.0
    calc = Calculator(run, store, clock=lambda: query_time)
    calc.refresh()
    return calc, query_time


def _snapshot(calc, query_time, windows=WINDOWS, run=RUN):
    rolling = dict(zip(windows, calc.rolling(windows, now=query_time)))
    return MonitorSnapshot(run, query_time, calc.cumulative(now=query_time), rolling,
                           calc.step_stats())


def _options(**kw):
    base = dict(project_id="proj", location="us-central1-a", acc_type="TPU-v5p",
                replica_id="3")
    base.update(kw)
    return GCPOptions(**base)


def _exporter(fake, run=RUN, options=None, clock=None, **kw):
    return CloudMonitoringExporter(
        run, options if options is not None else _options(),
        client_options={"api_endpoint": fake.endpoint},
        credentials=kw.pop("credentials", AnonymousCredentials()),
        clock=clock or (lambda: 2e9), **kw)


def _value(ts):
    kind = ts.points[0].value.WhichOneof("value")
    return kind, getattr(ts.points[0].value, kind)


def _received(fake):
    """{(short metric, frozenset(labels)): (value kind, value)} of every series."""
    out = {}
    for ts in fake.series():
        assert ts.metric.type.startswith(METRIC_PREFIX), ts.metric.type
        key = (ts.metric.type[len(METRIC_PREFIX):], frozenset(ts.metric.labels.items()))
        assert key not in out, f"series sent twice: {key}"
        out[key] = _value(ts)
    return out


def _expected(snap, acc="TPU-v5p", extra=()):
    """What the exporter must send for ``snap``, built from the results directly."""
    def L(**labels):
        return frozenset(list(labels.items()) + list(extra))

    cum, stats = snap.cumulative, snap.step_stats
    exp = {
        ("goodput_time", L(goodput_source="TOTAL", accelerator_type=acc)):
            ("double_value", cum.productive_seconds),
        ("disruptions", L(accelerator_type=acc, window_type="cumulative")):
            ("int64_value", cum.disruptions),
        ("max_productive_steps", L(accelerator_type=acc)):
            ("int64_value", cum.max_productive_step),
        ("total_elapsed_time", L(accelerator_type=acc, window_type="cumulative")):
            ("double_value", cum.total_seconds),
        ("step_time_deviation", L(accelerator_type=acc)):
            ("double_value", stats.deviation_aggregate),
        ("performance", frozenset()): ("double_value", stats.ideal_step_time),
    }

    def badput(metric, res, percent, **more):
        values = res.badput_percent if percent else res.badput_seconds
        for bucket, v in values.items():
            if bucket not in (BadputType.DATA_LOADING_ASYNC, BadputType.CUSTOM_BADPUT_EVENTS):
                exp[(metric, L(badput_source=bucket.name, accelerator_type=acc, **more))] = (
                    "double_value", v)
        custom = res.custom_badput_percent if percent else res.custom_badput_seconds
        for name, v in custom.items():
            exp[(metric, L(badput_source=f"CUSTOM_BADPUT_EVENTS.{name}", accelerator_type=acc,
                           **more))] = ("double_value", v)

    badput("badput_time", cum, False)
    for size, res in snap.rolling.items():
        exp[("interval_goodput", L(goodput_source="TOTAL", accelerator_type=acc,
                                   rolling_window_size=str(size)))] = ("double_value", res.goodput)
        badput("interval_badput", res, True, rolling_window_size=str(size))
    return exp


# ------------------------------------------------------------------ content
def test_every_series_matches_the_calculator_result(gcm, metadata):
    calc, qt = _job()
    snap = _snapshot(calc, qt)
    assert snap.cumulative.custom_badput_seconds == {"EVAL": 2.0}  # the job has one type
    exp = _exporter(gcm, clock=lambda: qt)
    exp.export(snap)

    assert len(gcm.requests) == 1 and gcm.violations == []
    req = gcm.requests[0]
    assert req.name == "projects/proj"
    for ts in req.series:
        assert ts.resource.type == RESOURCE_TYPE
        assert dict(ts.resource.labels) == {"location": "us-central1-a", "workload_id": RUN,
                                            "replica_id": "3"}
        assert len(ts.points) == 1
        assert ts.points[0].interval.end_time.ToNanoseconds() == round(qt * 1e9)
        assert not ts.points[0].interval.HasField("start_time")  # gauge points
    assert _received(gcm) == _expected(snap)
    assert exp.stats["series"] == len(req.series) and exp.stats["failed_calls"] == 0
    assert metadata.requests == []  # everything was configured: no lookups


def test_async_loading_and_the_custom_total_are_not_buckets(gcm):
    calc, qt = _job()
    _exporter(gcm, clock=lambda: qt).export(_snapshot(calc, qt))
    sources = {dict(ts.metric.labels).get("badput_source") for ts in gcm.series()}
    assert "DATA_LOADING_ASYNC" not in sources
    assert "CUSTOM_BADPUT_EVENTS" not in sources
    assert "CUSTOM_BADPUT_EVENTS.EVAL" in sources


def test_performance_carries_only_the_ideal_step_time(gcm):
    calc, qt = _job()
    snap = _snapshot(calc, qt)
    stats = snap.step_stats
    mean_deviation = float(stats.deviations.mean())
    assert not math.isclose(stats.ideal_step_time, mean_deviation)  # distinguishable
    exp = _exporter(gcm, clock=lambda: qt)
    exp.export(snap)
    exp.export(dataclasses.replace(snap, query_time=qt + 30))
    perf = [ts for ts in gcm.series() if ts.metric.type == METRIC_PREFIX + "performance"]
    assert len(perf) == 2
    assert all(_value(ts) == ("double_value", stats.ideal_step_time) for ts in perf)
    assert all(dict(ts.metric.labels) == {} for ts in perf)


def test_cluster_name_is_an_extra_label_except_on_performance(gcm):
    calc, qt = _job()
    snap = _snapshot(calc, qt)
    _exporter(gcm, options=_options(cluster_name="c-1"), clock=lambda: qt).export(snap)
    want = _expected(snap, extra=[("cluster_name", "c-1")])
    perf = [k for k in want if k[0] == "performance"][0]
    want[("performance", frozenset())] = want.pop(perf)
    assert _received(gcm) == want


def test_more_than_200_series_are_chunked(gcm):
    types = [f"T{i:03d}" for i in range(250)]
    calc, qt = _job(custom_types=types)
    snap = _snapshot(calc, qt)
    _exporter(gcm, clock=lambda: qt).export(snap)
    sizes = [len(r.series) for r in gcm.requests]
    assert len(sizes) >= 2 and max(sizes) <= MAX_SERIES_PER_CALL
    assert sizes[0] == MAX_SERIES_PER_CALL
    assert gcm.violations == []
    assert _received(gcm) == _expected(snap)  # all of them, none twice


def test_end_times_strictly_increase_even_for_repeated_query_times(gcm):
    calc, qt = _job()
    snap = _snapshot(calc, qt)
    exp = _exporter(gcm, clock=lambda: qt)
    for query_time in (qt, qt, qt - 5.0, qt):  # repeated and backwards query times
        exp.export(dataclasses.replace(snap, query_time=query_time))
    assert len(gcm.requests) == 4 and gcm.violations == []
    ends = [r.series[0].points[0].interval.end_time.ToNanoseconds() for r in gcm.requests]
    assert all(b > a for a, b in zip(ends, ends[1:]))
    for r in gcm.requests:  # one end time per call
        assert len({ts.points[0].interval.end_time.ToNanoseconds() for ts in r.series}) == 1


def test_end_time_is_capped_at_the_clock(gcm):
    calc, qt = _job()
    _exporter(gcm, clock=lambda: qt - 1.0).export(_snapshot(calc, qt))
    end = gcm.requests[0].series[0].points[0].interval.end_time.ToNanoseconds()
    assert end == round((qt - 1.0) * 1e9)


def test_results_without_measured_time_send_nothing(gcm):
    calc, qt = _job()
    # A 5 s window after the job's end holds only idle time (a rolling window
    # would end where the job ended: this one is built by hand)
    snap = _snapshot(calc, qt, windows=(60,))
    snap.rolling[5] = calc.window(qt - 5, qt, now=qt)
    assert snap.rolling[5].total_seconds == 0
    empty = Calculator(RUN, clock=lambda: qt)
    exp = _exporter(gcm, clock=lambda: qt)
    exp.export(dataclasses.replace(snap, cumulative=empty.cumulative(), step_stats=None))
    sizes = {dict(ts.metric.labels).get("rolling_window_size") for ts in gcm.series()}
    assert sizes == {"60"}
    exp.export(MonitorSnapshot(RUN, qt + 1, empty.cumulative(), {}, None))
    assert len(gcm.requests) == 1  # nothing to send: no call


def test_flags_select_the_series(gcm):
    calc, qt = _job()
    snap = _snapshot(calc, qt)

    def sent(**kw):
        before = len(gcm.series())
        options = _options(**{k: kw.pop(k) for k in list(kw) if k.startswith("enable")})
        _exporter(gcm, run=f"{RUN}-{uuid.uuid4().hex[:6]}", options=options,
                  clock=lambda: qt, **kw).export(snap)
        return {ts.metric.type[len(METRIC_PREFIX):] for ts in gcm.series()[before:]}

    every = {"goodput_time", "badput_time", "disruptions", "max_productive_steps",
             "total_elapsed_time", "step_time_deviation", "performance", "interval_goodput",
             "interval_badput"}
    assert sent() == every
    assert sent(enable_gcp_goodput_metrics=False) == {"step_time_deviation", "performance"}
    assert sent(enable_gcp_step_deviation_metrics=False) == every - {"step_time_deviation",
                                                                     "performance"}
    assert sent(include_step_deviation=False) == every - {"step_time_deviation", "performance"}
    assert sent(include_badput_breakdown=False) == every - {"badput_time", "interval_badput"}
    assert sent(include_rolling=False) == every - {"interval_goodput", "interval_badput"}
    assert sent(enable_gcp_goodput_metrics=False, enable_gcp_step_deviation_metrics=False) == set()
    assert gcm.violations == []


# ------------------------------------------------------------------ metadata and options
def test_metadata_is_looked_up_lazily_once_on_the_exporting_thread(gcm, metadata, monkeypatch):
    threads = []
    real = gcp.get_gcp_metadata

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(gcp, "get_gcp_metadata", spy)
    options = GCPOptions(replica_id="7")
    snapshot = dataclasses.asdict(options)
    calc, qt = _job()
    snap = _snapshot(calc, qt)
    exp = _exporter(gcm, options=options, clock=lambda: qt)
    assert metadata.requests == [] and threads == []  # nothing at construction

    worker = threading.Thread(target=exp.export, args=(snap,), name="monitor-thread")
    worker.start()
    worker.join()
    assert set(threads) == {"monitor-thread"}
    assert sorted(metadata.requests) == sorted(
        "/computeMetadata/v1/" + k for k in METADATA)
    exp.export(dataclasses.replace(snap, query_time=qt + 60))
    assert len(metadata.requests) == 3  # once, not per cycle

    assert gcm.violations == [] and len(gcm.requests) == 2
    assert {r.name for r in gcm.requests} == {"projects/meta-project"}
    for ts in gcm.series():
        assert dict(ts.resource.labels) == {"location": "us-east5-a", "workload_id": RUN,
                                            "replica_id": "7"}
        if "accelerator_type" in ts.metric.labels:
            assert ts.metric.labels["accelerator_type"] == "TPU-v5p"
    assert dataclasses.asdict(options) == snapshot  # the caller's object is untouched
    assert exp.options.project_id == "meta-project"  # the exporter's copy is filled in


def test_constructing_touches_neither_network_nor_client(gcm, metadata):
    exp = _exporter(gcm, options=GCPOptions())
    assert metadata.requests == [] and gcm.requests == []
    exp.close()
    assert metadata.requests == [] and gcm.requests == []


def test_without_project_or_zone_the_exporter_disables_itself(gcm, metadata, caplog):
    metadata.values.clear()  # not on Google Cloud: every lookup is a 404
    calc, qt = _job()
    snap = _snapshot(calc, qt)
    exp = _exporter(gcm, options=GCPOptions(), clock=lambda: qt)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        exp.export(snap)
        asked = len(metadata.requests)
        exp.export(dataclasses.replace(snap, query_time=qt + 60))
    assert exp.disabled and gcm.requests == []
    assert asked >= 2 and len(metadata.requests) == asked  # no second lookup
    assert sum("disabled" in r.getMessage() for r in caplog.records) == 1


def test_no_cloud_feature_means_no_lookups(gcm, metadata):
    calc, qt = _job()
    options = GCPOptions(enable_gcp_goodput_metrics=False,
                         enable_gcp_step_deviation_metrics=False)
    exp = _exporter(gcm, options=options, clock=lambda: qt)
    exp.export(_snapshot(calc, qt))
    assert metadata.requests == [] and gcm.requests == []


# ------------------------------------------------------------------ errors and security
def test_server_errors_are_logged_once_without_headers_and_do_not_raise(gcm, caplog):
    from google.oauth2.credentials import Credentials

    secret = "ya29.SECRET-token-do-not-log"
    gcm.fail(grpc.StatusCode.PERMISSION_DENIED, "Permission monitoring.timeSeries.create denied")
    calc, qt = _job()
    snap = _snapshot(calc, qt)
    exp = _exporter(gcm, clock=lambda: qt + 100, credentials=Credentials(token=secret))
    with caplog.at_level(logging.DEBUG):
        for i in range(3):
            exp.export(dataclasses.replace(snap, query_time=qt + i))  # must not raise
    # The token really travelled in the request headers...
    assert gcm.requests[0].metadata.get("authorization") == f"Bearer {secret}"
    # ...but no log record carries it, any header, or a traceback.
    text = caplog.text + "\n".join(str(r.args) for r in caplog.records)  # with tracebacks
    assert secret not in text and "Bearer" not in text
    assert "authorization" not in text.lower() and "x-goog" not in text.lower()
    ours = [r for r in caplog.records if r.name == LOGGER]
    assert all(r.exc_info is None for r in ours)  # no traceback, no chained gRPC error
    failures = [r for r in ours if r.levelno >= logging.WARNING]
    assert len(failures) == 1 and "PERMISSION_DENIED" in failures[0].getMessage()
    assert "timeSeries.create denied" in failures[0].getMessage()
    assert exp.stats["failed_calls"] == 3 and exp.stats["errors"] == {"PERMISSION_DENIED": 3}

    gcm.heal()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        exp.export(dataclasses.replace(snap, query_time=qt + 10))
    assert exp.stats["failed_calls"] == 3 and exp.stats["series"] > 0
    assert any("succeed again" in r.getMessage() for r in caplog.records)
    assert gcm.violations == []


def test_an_unreachable_service_is_counted_not_raised(caplog):
    with FakeCloudMonitoring() as fake:
        endpoint = fake.endpoint
    calc, qt = _job()
    exp = CloudMonitoringExporter(RUN, _options(), client_options={"api_endpoint": endpoint},
                                  credentials=AnonymousCredentials(), timeout=5.0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        exp.export(_snapshot(calc, qt))
    assert exp.stats["failed_calls"] == 1 and "UNAVAILABLE" in exp.stats["errors"]
    exp.close()


def test_a_hostile_run_name_is_a_plain_label_value(gcm):
    hostile = 'evil" OR workload_id="x\nlabels.y=\\"z\\" {}\'; DROP'
    calc, qt = _job(run=hostile)
    _exporter(gcm, run=hostile, clock=lambda: qt).export(_snapshot(calc, qt, run=hostile))
    assert gcm.violations == [] and gcm.series()
    assert {ts.resource.labels["workload_id"] for ts in gcm.series()} == {hostile}


# ------------------------------------------------------------------ client wiring
def test_a_client_on_an_insecure_transport_is_used_and_left_open():
    with FakeCloudMonitoring(tls=False) as fake:
        client = fake.insecure_client()
        calc, qt = _job()
        snap = _snapshot(calc, qt)
        exp = CloudMonitoringExporter(RUN, _options(), client=client, clock=lambda: qt)
        exp.export(snap)
        exp.close()
        assert len(fake.requests) == 1 and fake.violations == []
        # The caller's client still works after close(): the exporter does not own it.
        client.create_time_series(name="projects/proj",
                                  time_series=[_bump(fake.requests[0].series[0])])
        assert len(fake.requests) == 2 and fake.violations == []
        client.transport.close()


def _bump(ts):
    """A copy of a recorded series with a later point (proto-plus for the client)."""
    from google.cloud import monitoring_v3

    copy = monitoring_v3.TimeSeries.pb()()
    copy.CopyFrom(ts)
    end = copy.points[0].interval.end_time
    end.seconds += 60
    return monitoring_v3.TimeSeries(copy)


def test_export_after_close_sends_nothing(gcm):
    calc, qt = _job()
    exp = _exporter(gcm, clock=lambda: qt)
    exp.close()
    exp.export(_snapshot(calc, qt))
    assert gcm.requests == []


def test_the_client_library_is_imported_only_when_exporting():
    code = ("import sys; import goodput_core.exporters, goodput_core.exporters.cloud_monitoring;"
            "from goodput_core.exporters.cloud_monitoring import CloudMonitoringExporter as C;"
            "C('r', None);"
            "assert 'google.cloud.monitoring_v3' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
