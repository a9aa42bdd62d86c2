"""Differential tests of goodput_core.compat.goodput_utils against the reference.

Each helper runs on the same inputs in both libraries (ml-goodput-measurement
0.2.3 imported for real) and must agree, except where we differ on purpose;
those tests assert the difference and say why. Metadata lookups run against a
loopback HTTP server, never the real network.
"""

import dataclasses
import datetime
import http.server
import inspect
import math
import random
import socket
import threading
import warnings

import pytest

from ml_goodput_measurement.src import goodput_utils as ref

from goodput_core import gcp  # noqa: E402  (the metadata helpers goodput_utils re-exports)
from goodput_core.compat import goodput_utils as ours  # noqa: E402

ENUMS = ("MetricType", "IntervalMetricType", "GoodputType", "BadputType", "MonitoringWindowType")
TYPED_DICTS = ("WorkloadMetricDetails", "IntervalWorkloadMetricDetails",
               "ElasticWorkloadMetricDetails", "ElasticIntervalWorkloadMetricDetails")


# ---- names, enums, data classes ---------------------------------------------

@pytest.mark.parametrize("name", ENUMS)
def test_enum_members_and_values_match(name):
    mine, theirs = getattr(ours, name), getattr(ref, name)
    assert [(m.name, m.value) for m in mine] == [(m.name, m.value) for m in theirs]


def test_badput_type_has_the_reference_codes_and_keys_engine_results():
    """The compat enum is the reference's (no HANG); its members compare and
    hash equal to the engine's, so they index the engine's results."""
    from goodput_core.timeline.buckets import BadputType
    assert "HANG" in BadputType.__members__ and "HANG" not in ours.BadputType.__members__
    for member in ours.BadputType:
        theirs = ref.BadputType[member.name]
        assert int(member) == theirs.value and member.name == theirs.name
        assert repr(member) == repr(theirs)
        engine = BadputType[member.name]
        assert member == engine and {engine: 1.0}[member] == 1.0


def test_badput_type_spells_like_the_reference():
    for member in ours.BadputType:
        theirs = ref.BadputType[member.name]
        assert str(member) == str(theirs) and f"{member}" == f"{theirs}"


@pytest.mark.parametrize("name", TYPED_DICTS)
def test_typed_dicts_have_the_same_keys(name):
    mine, theirs = getattr(ours, name), getattr(ref, name)
    assert list(mine.__annotations__) == list(theirs.__annotations__)
    assert mine.__required_keys__ == theirs.__required_keys__
    assert mine.__optional_keys__ == theirs.__optional_keys__


def test_gcp_options_fields_defaults_and_order():
    def shape(cls):
        return [(f.name, f.default) for f in dataclasses.fields(cls)]
    assert shape(ours.GCPOptions) == shape(ref.GCPOptions)
    assert ours.GCPOptions("p", "l") == ours.GCPOptions(project_id="p", location="l")
    a, b = ours.GCPOptions(), ours.GCPOptions()
    a.replica_id = "7"
    assert b.replica_id == "0"  # nothing shared between instances


def test_gcp_options_construction_touches_no_network(metadata_server, monkeypatch):
    monkeypatch.setattr(ours, "get_gcp_metadata", _forbidden)
    ours.GCPOptions()
    ours.GCPOptions(project_id="p", enable_gcp_goodput_metrics=False)
    assert metadata_server.requests == []


def _forbidden(*args, **kwargs):
    raise AssertionError("metadata lookup during construction")


@pytest.mark.parametrize("cls", ["GoodputInfo", "StepInfo"])
def test_info_classes_have_the_same_signature(cls):
    mine = inspect.signature(getattr(ours, cls))
    theirs = inspect.signature(getattr(ref, cls))
    assert list(mine.parameters) == list(theirs.parameters)
    for name, p in theirs.parameters.items():
        if name == "last_updated_timestamp":
            continue  # deliberate, see the next test
        assert mine.parameters[name].default == p.default


def test_goodput_info_timestamp_is_taken_per_instance():
    # The reference's default is evaluated once at import, so every
    # GoodputInfo() made later claims that stale time; ours stamps each one.
    before = datetime.datetime.now(datetime.timezone.utc)
    info = ours.GoodputInfo()
    assert info.last_updated_timestamp >= before
    assert ref.GoodputInfo().last_updated_timestamp < before
    assert info.total_unproductive_time == {} and info.total_unproductive_time is not \
        ours.GoodputInfo().total_unproductive_time
    stamp = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    args = (1.0, 2.0, {ours.BadputType.OTHER: 1.0}, 3, 4, stamp, 5, 6.0)
    assert vars(ours.GoodputInfo(*args)) == vars(ref.GoodputInfo(*args))
    assert vars(ours.StepInfo(1.5, {1: 0.5})) == vars(ref.StepInfo(1.5, {1: 0.5}))


def test_constants_match():
    assert list(ours.MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING.items()) == \
        list(ref.MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING.items())
    assert list(ours.ACTIVITY_EXCLUSION_LIST) == ref.ACTIVITY_EXCLUSION_LIST


# ---- statistics helpers -------------------------------------------------------

def _lists(seed, count=40):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.choice([1, 2, 3, 4, 7, 10, 51, 200])
        base = rng.uniform(1.0, 5.0)
        values = [base + rng.expovariate(4.0) for _ in range(n)]
        if n > 3 and rng.random() < 0.5:
            values[rng.randrange(n)] *= rng.uniform(5, 50)  # an outlier
        yield values


@pytest.mark.parametrize("percentile", [0, 10, 37.5, 50, 90, 99, 100])
def test_compute_percentile(percentile):
    assert ours.compute_percentile([], percentile) == ref.compute_percentile([], percentile) == 0.0
    for values in _lists(1):
        assert ours.compute_percentile(values, percentile) == \
            ref.compute_percentile(values, percentile)


@pytest.mark.parametrize("n", [0, 1, 50, 99, 100, 101, 500, 1099, 1100, 1101, 2500])
@pytest.mark.parametrize("mode", list(ref.MonitoringWindowType))
@pytest.mark.parametrize("windows", [(100, 1000, 90), (10, 50, 50), (0, 10, 99), (300, 200, 75)])
def test_compute_step_deviation_from_baseline(n, mode, windows):
    rng = random.Random(n)
    deviations = {k: rng.uniform(-2, 2) for k in range(n)}
    mine = ours.compute_step_deviation_from_baseline(
        deviations, ours.MonitoringWindowType(mode.value), *windows)
    theirs = ref.compute_step_deviation_from_baseline(deviations, mode, *windows)
    assert mine == pytest.approx(float(theirs), rel=1e-12, abs=1e-12)


def test_step_deviation_mode_validation():
    many = {k: 1.0 for k in range(150)}
    for module in (ours, ref):
        with pytest.raises(ValueError):
            module.compute_step_deviation_from_baseline(many, "bogus")
        # Below 100 steps the reference returns the mean before looking at mode.
        assert module.compute_step_deviation_from_baseline({1: -3.0}, "bogus") == 3.0
    # Deliberate: we also accept the mode's value string.
    assert ours.compute_step_deviation_from_baseline(many, "interval") == 1.0


def test_compute_ideal_step_time_agrees_when_every_step_is_at_least_one_second():
    for values in _lists(2):
        assert ours.compute_ideal_step_time(values) == pytest.approx(
            float(ref.compute_ideal_step_time(values)), rel=1e-12)
    assert ours.compute_ideal_step_time([]) is None and ref.compute_ideal_step_time([]) is None


def test_compute_ideal_step_time_keeps_fast_steps():
    # semantics.md rule 12: the reference drops steps under one second, which
    # leaves fast jobs without an ideal step time at all.
    fast = [0.25] * 10
    assert ref.compute_ideal_step_time(fast) is None
    assert ours.compute_ideal_step_time(fast) == 0.25
    # Mixed: median 2, MAD 0 -> everything <= 2 is normal, the fast steps too.
    assert ref.compute_ideal_step_time([0.5, 0.5, 2, 2, 2]) == 2.0
    assert ours.compute_ideal_step_time([0.5, 0.5, 2, 2, 2]) == pytest.approx(1.4)
    # The statistic is scale-equivariant, so scaling sub-second steps above
    # one second neutralises the reference's filter: ours(x) = ref(c x) / c.
    for values in _lists(3):
        tiny = [v / 10.0 for v in values]
        assert ours.compute_ideal_step_time(tiny) == pytest.approx(
            float(ref.compute_ideal_step_time(values)) / 10.0, rel=1e-12)
    # Garbage is ignored rather than poisoning the median.
    assert ours.compute_ideal_step_time([1.0, float("nan"), -5.0, float("inf"), 1.0]) == 1.0


def test_anomalous_and_normal_step_times():
    for values in _lists(4):
        assert ours.get_anomalous_and_normal_step_times(values) == \
            ref.get_anomalous_and_normal_step_times(values)
    assert ours.get_anomalous_and_normal_step_times([5, 1, 1, 1]) == ([5], [1, 1, 1])


def test_extra_time_from_anomalous_steps():
    for values in _lists(5):
        assert ours.get_extra_time_from_anomalous_steps(values) == pytest.approx(
            float(ref.get_extra_time_from_anomalous_steps(values)), rel=1e-9, abs=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns about the empty mean
        assert math.isnan(ref.get_extra_time_from_anomalous_steps([]))
    assert ours.get_extra_time_from_anomalous_steps([]) == 0.0  # deliberate: no NaN


@pytest.mark.parametrize("entry", [
    {"job_name": "j", "step_count": 3, "step_start_time": 1_700_000_000.25},
    {"job_name": "j", "job_start_time": 1_700_000_000},
    {"job_name": "j", "custom_badput_event_type": "eval", "custom_badput_event_end_time": 5.5},
    {"job_name": "j"},
    {"step": 5, "event_type": "save", "wait_for_prev_start_time": 1_700_000_001.5,
     "time_between_consecutive_saves_sec": 3.0},
])
def test_get_timestamp_from_log_entry(entry):
    assert ours.get_timestamp_from_log_entry(entry) == ref.get_timestamp_from_log_entry(entry)


def test_get_timestamp_from_log_entry_with_a_null_time():
    # Orbax writes None for start times it did not measure; the reference
    # then raises inside interval queries.
    entry = {"step": 5, "event_type": "save", "wait_for_prev_start_time": None}
    with pytest.raises(TypeError):
        ref.get_timestamp_from_log_entry(entry)
    assert ours.get_timestamp_from_log_entry(entry) is None


# ---- metadata server (loopback) -----------------------------------------------

class _MetadataHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server naming)
        server = self.server
        server.requests.append((self.path, self.headers.get("Metadata-Flavor")))
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._reply(403, "Missing Metadata-Flavor header")
        failures = server.failures.get(self.path)
        if failures:
            return self._reply(failures.pop(0), "try again")
        value = server.values.get(self.path)
        return self._reply(200, value) if value is not None else self._reply(404, "not found")

    def _reply(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


_PREFIX = "/computeMetadata/v1/"


@pytest.fixture
def metadata_server(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MetadataHandler)
    server.daemon_threads = True
    server.requests, server.failures = [], {}
    server.values = {
        _PREFIX + "project/project-id": "my-project",
        _PREFIX + "instance/zone": "projects/123456789/zones/us-central1-a",
        _PREFIX + "instance/machine-type": "projects/123456789/machineTypes/ct5lp-hightpu-4t",
        _PREFIX + "instance/attributes/cluster-name": "my-cluster",
    }
    # A short poll interval: shutdown() waits up to one interval.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    host = f"127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv(ours.METADATA_HOST_ENV, host)
    # The reference has its URL hard-coded; point it at the same server.
    monkeypatch.setattr(ref, "_METADATA_SERVER_URL", f"http://{host}{_PREFIX}")
    for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def no_sleep(monkeypatch):
    """A fake monotonic clock that only ``_sleep`` advances; records each sleep."""
    state = {"now": 1000.0, "sleeps": []}

    def sleep(seconds):
        state["sleeps"].append(seconds)
        state["now"] += seconds
    monkeypatch.setattr(gcp, "_monotonic", lambda: state["now"])
    monkeypatch.setattr(gcp, "_sleep", sleep)
    return state


@pytest.mark.parametrize("helper", ["get_gcp_project_id", "get_node_zone",
                                    "get_accelerator_type", "get_cluster_name"])
def test_metadata_helpers_agree_with_reference(metadata_server, no_sleep, helper):
    assert getattr(ours, helper)() == getattr(ref, helper)()
    assert all(flavor == "Google" for _, flavor in metadata_server.requests)
    metadata_server.values.clear()  # now every lookup is a 404 (not retried)
    assert getattr(ours, helper)() == getattr(ref, helper)()


@pytest.mark.parametrize("machine", ["tpu7x-standard-4t", "ct6e-standard-8t", "ct5p-hightpu-4t",
                                     "ct5l-hightpu-8t", "ct4p-hightpu-4t", "ct3-hightpu-4t",
                                     "tpu-v2-8", "a3-megagpu-8g", "a3-ultragpu-8g", "a2-highgpu-1g",
                                     "g2-standard-4", "n2-standard-8", "A3-HIGHGPU-8G"])
def test_accelerator_type_mapping(metadata_server, machine):
    metadata_server.values[_PREFIX + "instance/machine-type"] = f"projects/1/machineTypes/{machine}"
    assert ours.get_accelerator_type() == ref.get_accelerator_type()


def test_metadata_retries_transient_errors_without_sleeping(metadata_server, no_sleep):
    path = _PREFIX + "project/project-id"
    metadata_server.failures[path] = [503, 500]
    assert ours.get_gcp_metadata("project", "project-id") == "my-project"
    assert len(metadata_server.requests) == 3
    assert no_sleep["sleeps"] == [1.0]  # first retry at once, then backoff 0.5 * 2


def test_metadata_gives_up_after_retries(metadata_server, no_sleep):
    metadata_server.failures[_PREFIX + "project/project-id"] = [503] * 10
    assert ours.get_gcp_metadata("project", "project-id", timeout=100, retries=3) is None
    assert len(metadata_server.requests) == 4
    assert no_sleep["sleeps"] == [1.0, 2.0]


def test_metadata_timeout_is_an_overall_deadline(metadata_server, no_sleep):
    metadata_server.failures[_PREFIX + "project/project-id"] = [503] * 10
    assert ours.get_gcp_metadata("project", "project-id", timeout=1.5, retries=10) is None
    # t=0 503, retry at once; t=0 503, sleep 1; t=1 503, sleep cut to 0.5; deadline.
    assert len(metadata_server.requests) == 3
    assert no_sleep["sleeps"] == [1.0, 0.5]


def test_metadata_not_found_is_not_retried(metadata_server, no_sleep):
    assert ours.get_gcp_metadata("instance", "attributes/nothing") is None
    assert len(metadata_server.requests) == 1 and no_sleep["sleeps"] == []


def test_unreachable_metadata_server_fails_fast(monkeypatch, no_sleep):
    with socket.socket() as s:  # a port that was free a moment ago: refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(ours.METADATA_HOST_ENV, f"127.0.0.1:{port}")
    assert ours.get_gcp_metadata("project", "project-id") is None
    assert ours.get_node_zone() is None
    assert ours.get_accelerator_type() == "UNKNOWN"
    assert no_sleep["sleeps"] == []


def test_metadata_requests_bypass_proxies(metadata_server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # would refuse
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY")
    assert ours.get_gcp_project_id() == "my-project"


def test_metadata_base_url(monkeypatch):
    monkeypatch.delenv(ours.METADATA_HOST_ENV, raising=False)
    monkeypatch.delenv("GCE_METADATA_ROOT", raising=False)
    assert ours.metadata_base_url() == "http://169.254.169.254/computeMetadata/v1/"
    monkeypatch.setenv("GCE_METADATA_ROOT", "legacy.example:8080")
    assert ours.metadata_base_url() == "http://legacy.example:8080/computeMetadata/v1/"
    monkeypatch.setenv(ours.METADATA_HOST_ENV, "http://10.0.0.1/")
    assert ours.metadata_base_url() == "http://10.0.0.1/computeMetadata/v1/"


def test_helper_signatures_match():
    for name in ("compute_percentile", "compute_step_deviation_from_baseline",
                 "compute_ideal_step_time", "get_anomalous_and_normal_step_times",
                 "get_extra_time_from_anomalous_steps", "get_timestamp_from_log_entry",
                 "get_gcp_metadata", "get_gcp_project_id", "get_node_zone",
                 "get_accelerator_type", "get_cluster_name"):
        mine, theirs = inspect.signature(getattr(ours, name)), inspect.signature(getattr(ref, name))
        assert _shape(mine) == _shape(theirs), name


def _shape(signature):
    # Enum defaults come from each library's own enum: compare their values.
    return [(p.name, getattr(p.default, "value", p.default), p.kind)
            for p in signature.parameters.values()]
