"""The compat GoodputMonitor: signature, no-op when disabled, uploads, and
TensorBoard output equal to the reference's on the same run."""

import inspect
import logging
import os
import sys
import threading
import types
import uuid

import pytest

pytest.importorskip("tensorboardX")

from goodput_core.compat.goodput_utils import GCPOptions  # noqa: E402
from goodput_core.compat.monitoring import GoodputMonitor  # noqa: E402
from goodput_core.compat.monitoring_elastic import ElasticGoodputMonitor  # noqa: E402
from goodput_core.events import to_payload  # noqa: E402
from goodput_core.exporters.base import Exporter  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from tests.support.tfevents import display_names, read_scalars  # noqa: E402

T0 = 1_700_000_000.0
GUARD_S = 30.0
NO_GCP = dict(enable_gcp_goodput_metrics=False, enable_gcp_step_deviation_metrics=False)
GCM_MODULE = "goodput_core.exporters.cloud_monitoring"


def clean_run(store, run="job"):
    """Init 5 s, prep 3 s, load 0.5 s, 20 steps of 2 s (step 0: +6 s compile,
    step 12: +1 s), a 3 s eval after step 10; no crash. Returns the end time."""
    rec = Recorder(run, store, clock=lambda: T0)
    t = T0
    rec.record_job_start_time(t)
    rec.record_tpu_init_start_time(t)
    t += 5
    rec.record_tpu_init_end_time(t)
    rec.record_training_preparation_start_time(t)
    t += 3
    rec.record_training_preparation_end_time(t)
    rec.record_data_loading_start_time(t)
    t += 0.5
    rec.record_data_loading_end_time(t)
    for k in range(20):
        rec.record_step_start_time(k, t)
        t += 2.0 + (6.0 if k == 0 else 0.0) + (1.0 if k == 12 else 0.0)
        if k == 10:
            rec.record_custom_badput_event_start_time(t, "eval")
            t += 3
            rec.record_custom_badput_event_end_time(t, "eval")
    rec.record_step_end_time(19, t)
    rec.record_job_end_time(t)
    assert rec.close(GUARD_S)
    return t


def _monitor(tmp_path, store, now, **kwargs):
    kwargs.setdefault("gcp_options", GCPOptions(**NO_GCP))
    return GoodputMonitor("job", "log", str(tmp_path), 30, monitoring_enabled=True,
                          store=store, clock=lambda: now, **kwargs)


# ------------------------------------------------------------- signature
def _compare_signature(ours, ref, mutable_default="gcp_options"):
    ref_params = list(inspect.signature(ref).parameters.values())
    our_params = list(inspect.signature(ours).parameters.values())
    head, extra = our_params[:len(ref_params)], our_params[len(ref_params):]
    assert [p.name for p in head] == [p.name for p in ref_params]
    assert [p.kind for p in head] == [p.kind for p in ref_params]
    for o, r in zip(head, ref_params):
        if o.name == mutable_default:
            assert o.default is None  # a fresh GCPOptions() each time instead
        else:
            assert o.default == r.default, o.name
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in extra)


def test_signatures_equal_the_reference():
    from ml_goodput_measurement.src import monitoring as ref
    from ml_goodput_measurement.src import monitoring_elastic as ref_elastic
    _compare_signature(GoodputMonitor.__init__, ref.GoodputMonitor.__init__)
    _compare_signature(ElasticGoodputMonitor.__init__, ref_elastic.ElasticGoodputMonitor.__init__)
    public = [n for n in vars(ref.GoodputMonitor) if not n.startswith("_")]
    assert public
    for name in public:
        _compare_signature(getattr(GoodputMonitor, name), getattr(ref.GoodputMonitor, name))
    our_extra = {p.name for p in inspect.signature(GoodputMonitor.__init__).parameters.values()
                 if p.kind is p.KEYWORD_ONLY}
    assert {"store", "clock", "prometheus_port", "exporters"} <= our_extra


def test_disabled_monitor_does_nothing(tmp_path):
    before = set(threading.enumerate())
    tb = tmp_path / "tb"
    # a store that could not even be opened: a disabled monitor never opens it
    m = GoodputMonitor("job", "log", str(tb), 30, store=f"sqlite:///{tmp_path}/no/such/dir/x")
    for call in (m.start_goodput_uploader, m.stop_goodput_uploader,
                 m.start_step_deviation_uploader, m.stop_step_deviation_uploader,
                 m.stop_rolling_window_goodput_uploader):
        assert call() is None
    assert m.start_rolling_window_goodput_uploader([60]) is None
    assert m.monitor is None and not tb.exists()
    assert set(threading.enumerate()) == before
    e = ElasticGoodputMonitor("job", "log", str(tb), 30)
    e.start_goodput_uploader()
    assert e.monitor is None and not tb.exists()


def test_gcp_options_are_never_shared_or_modified(tmp_path, monkeypatch):
    made = []

    class FakeGCM(Exporter):
        name = "gcm"

        def __init__(self, run, options, **kwargs):
            options.project_id = "filled-in-by-the-exporter"
            made.append((run, options, kwargs))

        def export(self, snapshot):
            pass

    monkeypatch.setitem(sys.modules, GCM_MODULE,
                        types.SimpleNamespace(CloudMonitoringExporter=FakeGCM))
    store = MemoryStore(uuid.uuid4().hex)
    end = clean_run(store)
    mine = GCPOptions(location="us-central2-b")
    m = _monitor(tmp_path, store, end, gcp_options=mine)
    m.stop_goodput_uploader()
    assert mine == GCPOptions(location="us-central2-b")  # untouched
    (run, options, kwargs), = made
    assert run == "job" and options is not mine and options.location == "us-central2-b"
    assert kwargs == {"include_badput_breakdown": True, "include_step_deviation": True}
    a = GoodputMonitor("job", "log", str(tmp_path), 30, monitoring_enabled=True, store=store)
    b = GoodputMonitor("job", "log", str(tmp_path), 30, monitoring_enabled=True, store=store)
    assert a._gcp_options is not b._gcp_options and a._gcp_options == GCPOptions()


@pytest.mark.parametrize("broken", ["import", "construct"])
def test_cloud_monitoring_failure_is_logged_once_and_the_rest_goes_on(
        tmp_path, monkeypatch, caplog, broken):
    if broken == "import":
        monkeypatch.setitem(sys.modules, GCM_MODULE, None)  # import raises ImportError
    else:
        def explode(*args, **kwargs):
            raise RuntimeError("no credentials")

        monkeypatch.setitem(sys.modules, GCM_MODULE,
                            types.SimpleNamespace(CloudMonitoringExporter=explode))
    store = MemoryStore(uuid.uuid4().hex)
    end = clean_run(store)
    caplog.set_level(logging.WARNING)
    m = _monitor(tmp_path, store, end, gcp_options=GCPOptions(project_id="p", location="l"),
                 include_step_deviation=True)
    m.stop_step_deviation_uploader()
    m.stop_goodput_uploader()
    tags = read_scalars(str(tmp_path / "goodput"))
    assert {"goodput/goodput", "step_deviation"} <= set(tags)
    assert len([r for r in caplog.records if "Cloud Monitoring export unavailable"
                in r.getMessage()]) == 1


# ------------------------------------------------------------ uploaders
def test_uploaders_run_on_the_injected_clock_and_flush_at_stop(tmp_path):
    store = MemoryStore(uuid.uuid4().hex)
    end = clean_run(store)
    clock = [end + 100]
    waits, parked, go = [], threading.Event(), threading.Event()

    def wait(seconds):
        if not go.is_set():  # hold the loop until both uploaders are on
            go.wait(GUARD_S)
            return False  # a spurious wake-up: the loop plans again
        waits.append(seconds)
        if len(waits) > 3:
            parked.set()
            m.monitor.stop_requested.wait(GUARD_S)
            return True
        clock[0] += seconds
        return False

    m = GoodputMonitor("job", "log", str(tmp_path), 30, monitoring_enabled=True,
                       include_step_deviation=True, step_deviation_interval_seconds=10,
                       gcp_options=GCPOptions(**NO_GCP), store=store,
                       clock=lambda: clock[0], wait=wait)
    m.start_goodput_uploader()
    m.start_goodput_uploader()  # already running: a warning, nothing else
    m.start_step_deviation_uploader()
    go.set()
    assert parked.wait(GUARD_S)
    assert waits[:3] == pytest.approx([10, 10, 10])
    engine = m.monitor
    m.stop_step_deviation_uploader()
    assert m.monitor is engine and engine.parts == {"goodput"}
    m.stop_goodput_uploader()
    assert m.monitor is None
    tags = read_scalars(str(tmp_path / "goodput"))
    # cycles at +0 (goodput: the first cycle at start, held until both uploaders were
    # on; the step uploader, switched on while it ran, one interval later), +10, +20
    # (steps), +30 (goodput and steps); then each stop's final upload
    assert [round(w - end - 100) for _, _, w in tags["goodput/goodput"]] == [0, 30, 30]
    assert sorted(s for s, _, _ in tags["step_deviation"]) == list(range(19))  # once each
    assert engine.stats()["cycles"] == 6


def test_stop_without_start_uploads_once_and_rolling_windows(tmp_path):
    store = MemoryStore(uuid.uuid4().hex)
    end = clean_run(store)
    m = _monitor(tmp_path, store, end + 10, include_badput_breakdown=True)
    m.stop_step_deviation_uploader()  # include_step_deviation is False: nothing
    m.stop_rolling_window_goodput_uploader()  # no windows were ever set: nothing
    assert read_scalars(str(tmp_path / "goodput")) == {}
    m.start_rolling_window_goodput_uploader([60, 3600])
    m.stop_rolling_window_goodput_uploader()
    m.stop_goodput_uploader(skip_final_flush=True)
    tags = read_scalars(str(tmp_path / "goodput"))
    assert set(tags) == {"goodput/rolling_60s", "goodput/rolling_3600s"}
    m.stop_goodput_uploader()
    tags = read_scalars(str(tmp_path / "goodput"))
    assert "goodput/goodput" in tags and "badput/custom_badput_events/eval" in tags


def test_prometheus_and_extra_exporters(tmp_path):
    pytest.importorskip("prometheus_client")
    store = MemoryStore(uuid.uuid4().hex)
    end = clean_run(store)
    seen = []

    class Extra(Exporter):
        def export(self, snapshot):
            seen.append(snapshot)

    m = _monitor(tmp_path, store, end, prometheus_port=0, exporters=[Extra()])
    prom = [e for e in m.monitor.exporters if e.name == "prometheus"][0]
    assert prom.port > 0 and prom.addr == "127.0.0.1"
    m.stop_goodput_uploader()
    assert len(seen) == 1 and seen[0].final and seen[0].cumulative.goodput > 0


def test_elastic_monitor_accepts_slice_efficiency(tmp_path):
    # a run without slice counts: nothing elastic to publish, the rest as usual
    # (runs with slice counts: tests/core/monitor/test_monitor_elastic.py)
    store = MemoryStore(uuid.uuid4().hex)
    end = clean_run(store)
    m = ElasticGoodputMonitor("job", "log", str(tmp_path), 30, monitoring_enabled=True,
                              include_slice_efficiency=True, gcp_options=GCPOptions(**NO_GCP),
                              store=store, clock=lambda: end)
    assert m.include_slice_efficiency
    m.stop_goodput_uploader()
    tags = read_scalars(str(tmp_path / "goodput"))
    assert "goodput/goodput" in tags
    assert not any(tag.startswith("elastic/") for tag in tags)


# ------------------------------------------------ against the reference
def test_tensorboard_output_equals_the_reference(tmp_path):
    """The reference's own per-cycle upload functions (what its uploader
    processes run) over its calculator, vs our compat monitor, same run."""
    from ml_goodput_measurement.src import monitoring as ref_monitoring
    from ml_goodput_measurement.src import goodput as ref_goodput
    from ml_goodput_measurement.src import goodput_utils as ref_utils
    from tensorboardX import SummaryWriter

    from tests.support.reference_harness import FakeCloudLogger, frozen_reference_clock

    store = MemoryStore(uuid.uuid4().hex)
    end = clean_run(store)
    now = end + 5
    events, _ = store.read("job")
    fake = FakeCloudLogger("job", clock=lambda: now)
    for event in events:
        fake.append(to_payload(event))
    ref_dir = str(tmp_path / "ref")
    config = {"job_name": "job", "include_badput_breakdown": True,
              "configured_ideal_step_time": None,
              "gcp_options": ref_utils.GCPOptions(**NO_GCP)}
    with frozen_reference_clock(now):
        calc = ref_goodput.GoodputCalculator("job", "log", cloud_logger=fake,
                                             cache_dir=str(tmp_path / "cache"))
        writer = SummaryWriter(ref_dir)
        ref_monitoring._query_and_upload_goodput_once(calc, writer, None, config, 0)
        ref_monitoring._query_and_upload_step_deviation_once(calc, writer, None, config, 0)
        writer.close()
    m = _monitor(tmp_path / "ours", store, now, include_badput_breakdown=True,
                 include_step_deviation=True)
    m.stop_goodput_uploader()
    m.stop_step_deviation_uploader()
    ref = read_scalars(ref_dir)
    ours = read_scalars(str(tmp_path / "ours" / "goodput"))
    assert len(ref) == 13 and set(ours) == set(ref)
    for tag in ref:
        assert [(s, pytest.approx(v, rel=1e-6, abs=1e-6)) for s, v, _ in ref[tag]] == [
            (s, v) for s, v, _ in ours[tag]], tag
    assert display_names(str(tmp_path / "ours" / "goodput")) == display_names(ref_dir)
    assert os.path.isdir(tmp_path / "ours" / "goodput")
