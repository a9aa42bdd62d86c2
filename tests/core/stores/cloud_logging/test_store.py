"""The Cloud Logging store against a real gRPC server on loopback (no network).

The store's own client and the reference library's client both reach
:class:`tests.support.fake_cloud_logging.FakeCloudLogging` through their public
options: TLS to ``client_options={"api_endpoint": "localhost:PORT"}`` with
``AnonymousCredentials`` (the fake's self-signed certificate is trusted through
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, set when the fake module is imported).
Outages are switched on and off by the tests, and the store's backoff sleeps
on an injected function: nothing here waits on wall-clock time.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_core.events import EventRecord, Kind, to_payload
from goodput_core.record.recorder import Recorder
from goodput_core.stores.cloud_logging import wire
from goodput_core.stores.cloud_logging import CloudLoggingStore
from tests.support.fake_cloud_logging import FakeCloudLogging, cloud_store_factory, parse_filter, reference_client

PROJECT, LOG = "proj-1", "goodput-test"
T0 = float(int(time.time()) - 3600)  # recent: first reads look back 7 days
HOSTILE_NAMES = [
    '" OR severity=ERROR OR "',
    'x") OR ("',
    '\\',
    'abc\\',
    'a\\" OR "',
    '" OR "" OR "',
    'victim" OR jsonPayload.job_name="victim',
    '*',
    'victim\nOR ""',
]


class SimClock:
    """A fake POSIX clock that the injected sleep advances."""

    def __init__(self, start: float):
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake():
    with FakeCloudLogging() as server:
        yield server


@pytest.fixture
def make_store(fake, tmp_path):
    with cloud_store_factory(fake, tmp_path / "spill", PROJECT, LOG) as make:
        yield make


def event(run, kind, i, step=None, extra=None, attempt="a1", wt=None):
    t = T0 + i
    return EventRecord(run, int(kind), t, step, extra, 0, "host-0", 4242, attempt, i + 1,
                       t + 0.5 if wt is None else wt)


def sample_events(run="run-1"):
    return [
        event(run, Kind.JOB_START, 0),
        event(run, Kind.STEP_START, 1, step=0),
        event(run, Kind.CUSTOM_BADPUT_START, 2, extra={"custom_badput_event_type": "eval"}),
        event(run, Kind.ELASTIC_SLICE_COUNTS, 3,
              extra={"active_slices": 2, "total_slices": 4, "available_slices": 3}),
        event(run, Kind.METADATA, 4, extra={"framework": "jax", "num_devices": 8,
                                            "flops_per_step": 1.5e15,
                                            "configs": {"lr": 0.1, "layers": [1, 2]}}),
        event(run, Kind.METRIC, 5, step=7, extra={"metric_name": "loss", "metric_value": 2.0}),
        EventRecord(run, int(Kind.CHECKPOINT_STATS), T0 + 6, 10,
                    {"event_type": "save", "step": 10, "directory": "/ckpt", "synchronous": True,
                     "checkpoint_manager_blocking_start_time": T0 + 6,
                     "checkpoint_manager_blocking_duration_secs": 1.25},
                    0, "host-0", 4242, "a1", 7, T0 + 7.5),
        event(run, Kind.STEP_END, 8, step=0),
        event(run, Kind.JOB_END, 9),
    ]


def dumps(e):
    return json.dumps(to_payload(e))


# ----------------------------------------------------------------- round trip
def test_write_then_read_back_byte_equal_with_writer_metadata(fake, make_store):
    store = make_store(batch_size=4)
    events = sample_events()
    store.append(events)
    assert store.flush(10)
    assert fake.calls["write"] == 3  # one RPC per batch of 4, none per event
    got, cursor = store.read("run-1")
    assert [dumps(e) for e in got] == [dumps(e) for e in events]
    assert got == events  # writer metadata (labels) round trips too
    assert got[1].step == 0 and type(got[1].step) is int
    stored = fake.entries()
    assert {e.severity for e in stored} == {200}
    assert {e.log_name for e in stored} == {f"projects/{PROJECT}/logs/{LOG}"}
    assert stored[0].resource.type == "global"
    assert stored[0].resource.labels["project_id"] == PROJECT
    assert stored[0].labels["goodput_attempt"] == "a1" and stored[0].labels["goodput_seq"] == "1"
    assert fake.payloads("run-1")[1] == {"job_name": "run-1", "step_count": 0.0,
                                         "step_start_time": T0 + 1}
    assert cursor == (stored[-1].timestamp.seconds, stored[-1].timestamp.nanos,
                      stored[-1].insert_id)


def test_paged_reads_return_everything_in_order(fake, make_store):
    store = make_store(page_size=7)
    events = [event("paged", Kind.STEP_START, i, step=i) for i in range(50)]
    store.append(events)
    assert store.flush(10)
    got, _ = store.read("paged")
    assert [e.step for e in got] == list(range(50))
    assert fake.calls["list"] == 8  # ceil(50 / 7) pages


def test_cursor_reads_only_new_entries_and_splits_timestamp_ties(make_store):
    store = make_store(page_size=3)
    tied = [event("ties", Kind.STEP_START, i, step=i, wt=T0) for i in range(7)]
    store.append(tied)
    assert store.flush(10)
    seen, cursor = [], None
    for _ in range(10):
        batch, cursor = store.read("ties", since=cursor, limit=2)
        if not batch:
            break
        seen += batch
    assert [e.step for e in seen] == list(range(7))  # no loss, no repeat inside the tie
    again, same = store.read("ties", since=cursor)
    assert again == [] and same == cursor
    store.append([event("ties", Kind.STEP_START, i, step=i) for i in range(7, 10)])
    assert store.flush(10)
    new, _ = store.read("ties", since=cursor)
    assert [e.step for e in new] == [7, 8, 9]


def test_runs_lists_job_names_oldest_first(make_store):
    store = make_store()
    store.append([event("b-run", Kind.JOB_START, 0), event("a-run", Kind.JOB_START, 1),
                  event("b-run", Kind.JOB_END, 2)])
    assert store.flush(10)
    assert store.runs() == ["b-run", "a-run"]


# ----------------------------------------------------------------- security (S1)
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_run_name_cannot_widen_the_query(fake, make_store, name):
    store = make_store()
    store.append([event("victim", Kind.JOB_START, 0), event(name, Kind.JOB_START, 1),
                  event("victim", Kind.JOB_END, 2)])
    assert store.flush(10)
    got, _ = store.read(name)
    assert [e.run for e in got] == [name]  # its own event, nothing of "victim"
    tree = parse_filter(fake.filters[-1])
    assert tree[0] == "and" and len(tree[1]) == 4
    assert tree[1][2] == ("cmp", "jsonPayload.job_name", "=", name)


def test_the_fake_would_expose_an_unescaped_filter(fake, make_store):
    """Guards the test above: pasting the name raw does widen the query here."""
    store = make_store()
    store.append([event("victim", Kind.JOB_START, 0)])
    assert store.flush(10)
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

    naive = (f'logName="projects/{PROJECT}/logs/{LOG}" AND severity=INFO AND '
             'jsonPayload.job_name="" OR severity=ERROR OR ""')
    client = LoggingServiceV2Client(credentials=AnonymousCredentials(),
                                    client_options={"api_endpoint": fake.endpoint})
    pager = client.list_log_entries(
        request={"resource_names": [f"projects/{PROJECT}"], "filter": naive}, retry=None)
    assert [e.json_payload["job_name"] for e in pager] == ["victim"]


def test_run_names_differing_in_case_are_kept_apart(make_store):
    store = make_store()
    store.append([event("Run", Kind.JOB_START, 0), event("run", Kind.JOB_START, 1)])
    assert store.flush(10)
    got, _ = store.read("run")
    assert [e.run for e in got] == ["run"]  # the service matched both (case-blind)
    assert store.skipped["other_run"] == 1


def test_hostile_log_names_and_projects_are_rejected(tmp_path):
    for project, log in [(PROJECT, 'log" OR "'), (PROJECT, "a b"), ('p" OR "', LOG)]:
        with pytest.raises(ValueError):
            CloudLoggingStore(project, log, credentials=AnonymousCredentials(),
                              spill_dir=str(tmp_path))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_quoted_names_parse_back_to_themselves(name):
    tree = parse_filter(wire.run_filter(PROJECT, LOG, name, (1, 2, name), (0, 0)))
    assert tree[0] == "and" and len(tree[1]) == 4
    assert tree[1][2] == ("cmp", "jsonPayload.job_name", "=", name)
    cursor = tree[1][3]
    assert cursor[0] == "or" and cursor[1][1][1][1] == ("cmp", "insertId", ">", name)


# ----------------------------------------------------------------- skipped input
def test_diagnostic_entry_and_bad_payloads_are_skipped_and_counted(fake, make_store, monkeypatch):
    import google.cloud.logging
    import google.cloud.logging_v2

    monkeypatch.setattr(google.cloud.logging_v2, "_instrumentation_emitted", False)
    client = google.cloud.logging.Client(project=PROJECT, credentials=AnonymousCredentials(),
                                         client_options={"api_endpoint": fake.endpoint})
    log = client.logger(LOG, resource=google.cloud.logging.Resource(type="global", labels={}))
    log.log_struct({"job_name": "skips", "job_start_time": T0}, severity="INFO")
    log.log_struct({"job_name": "skips", "no_time_here": 1}, severity="INFO")
    log.log_struct({"job_name": "skips", "step_count": "x", "step_start_time": T0},
                   severity="INFO")
    diagnostic = [p for p in fake.payloads() if wire.DIAGNOSTIC_KEY in p]
    assert diagnostic and diagnostic[0][wire.DIAGNOSTIC_KEY]["instrumentation_source"][0][
        "name"] == "python"
    store = make_store()
    got, _ = store.read("skips")
    assert [e.kind for e in got] == [Kind.JOB_START]
    assert got[0].write_time == pytest.approx(fake.entries()[1].timestamp.ToNanoseconds() / 1e9)
    assert store.skipped["no_timestamp"] == 1 and store.skipped["bad_step"] == 1
    # Should a diagnostic entry ever match the query, it is still skipped.
    entry = fake.entries()[0]
    entry.severity = 200
    entry.json_payload.update({"job_name": "skips"})
    counts = {"diagnostic": 0}
    assert wire.decode_entry(entry, "skips", counts) is None and counts["diagnostic"] == 1


# ----------------------------------------------------------------- the reference
def test_reference_recorder_entries_are_read_by_our_store(fake, make_store):
    from ml_goodput_measurement.src import goodput as ref

    with reference_client(fake, PROJECT):
        rec = ref.GoodputRecorder("ref-job", LOG, logging_enabled=True,
                                  background_max_latency_s=0.01)
        try:
            rec.record_job_start_time()
            for step in range(3):
                rec.record_step_start_time(step)
            rec.record_custom_badput_event_start_time(custom_badput_event_type="eval")
            rec.record_job_end_time()
            rec.flush()
        finally:
            rec._cloud_logger._async_handler.close()
    got, _ = make_store().read("ref-job")
    assert [Kind(e.kind).name for e in got] == [
        "JOB_START", "STEP_START", "STEP_START", "STEP_START", "CUSTOM_BADPUT_START", "JOB_END"]
    assert [e.step for e in got[1:4]] == [0, 1, 2]
    assert all(type(e.step) is int for e in got[1:4])
    assert got[4].extra == {"custom_badput_event_type": "eval"}
    assert all(e.attempt == "" and e.seq == 0 and e.host == "" for e in got)
    assert all(math.isfinite(e.write_time) for e in got)


def test_our_entries_are_read_by_the_reference_cloud_logger(fake, make_store):
    from ml_goodput_measurement.src import goodput as ref

    store = make_store()
    rec = Recorder("ours", store=store, flush_interval_s=0.01)
    rec.record_job_start_time(T0)
    for step in range(5):
        rec.record_step_start_time(step, T0 + 1 + step)
    rec.record_job_end_time(T0 + 10)
    assert rec.close(10) and store.flush(10)
    ours, _ = store.read("ours")
    with reference_client(fake, PROJECT):
        cloud = ref._CloudLogger("ours", LOG, background_max_latency_s=0.01)
        try:
            payloads, last = cloud.read_cloud_logging_entries()
            more, _ = cloud.read_cloud_logging_entries(last_entry_info=last)
        finally:
            cloud._async_handler.close()
    assert payloads == [to_payload(e) for e in ours]  # steps come back as doubles
    assert more == []
    assert last[1] == fake.entries()[-1].insert_id


# ----------------------------------------------------------------- resilience (R2)
def test_r2_outage_keeps_recording_bounded_and_delivers_once_in_order(fake, make_store, tmp_path):
    outage_s, n = 30.0, 3000
    clock = SimClock(T0)
    recorded = threading.Event()
    sleeps = []

    def sleep(seconds):  # the backoff's sleep: simulated time, no real waiting
        sleeps.append(seconds)
        clock.now += seconds
        if clock.now - T0 >= outage_s:
            assert recorded.wait(60)  # the outage ends once the test recorded everything
            fake.heal()

    fake.fail(grpc.StatusCode.UNAVAILABLE)
    store = make_store(sleep=sleep, clock=clock, max_buffer=200, batch_size=50,
                       backoff_initial_s=0.5, backoff_max_s=8.0)
    rec = Recorder("r2", store=store, clock=clock, flush_interval_s=0.01, queue_size=n * 2)
    for step in range(n):
        rec.record_step_start_time(step)
    # The recorder handed everything to the store while the service was down:
    # append() only queues, so the training loop's queue never fills.
    assert rec.flush(30, wait_for_delivery=False) and fake.failing
    assert rec.stats()["dropped"] == 0
    stats = store.stats()
    assert stats["max_in_memory"] <= 200 and stats["in_memory"] <= 200
    assert stats["on_disk"] >= n - 200 - 50
    spill_files = os.listdir(tmp_path / "spill")
    assert len(spill_files) == 1 and spill_files[0].endswith(".jsonl")
    recorded.set()
    assert store.flush(30)
    assert clock.now - T0 >= outage_s and not fake.failing
    for k, seconds in enumerate(sleeps[:4]):  # exponential backoff with jitter
        assert 0.4 * 2 ** k <= seconds <= 0.6 * 2 ** k
    assert max(sleeps) <= 8.0 * 1.2
    steps = [int(p["step_count"]) for p in fake.payloads("r2")]
    assert steps == list(range(n))  # every event once, in order
    got, _ = store.read("r2")
    assert [e.step for e in got] == list(range(n))
    assert [e.seq for e in got] == sorted({e.seq for e in got})
    rec.close(5)
    assert store.close(5)
    assert os.listdir(tmp_path / "spill") == []


def test_lost_response_is_resent_without_duplicates(fake, make_store):
    store = make_store(batch_size=10)
    fake.lose_responses(1)
    store.append([event("lost", Kind.STEP_START, i, step=i) for i in range(10)])
    assert store.flush(10)
    assert fake.calls["duplicates"] == 10  # the resend carried the same insert ids
    assert [p["step_count"] for p in fake.payloads("lost")] == list(range(10))
    store.append([event("lost", Kind.STEP_START, 0, step=0)])  # a writer retrying a batch
    assert store.flush(10)
    assert len(fake.payloads("lost")) == 10


def test_connection_refused_until_the_server_starts(tmp_path, make_store):
    probe = FakeCloudLogging().start()
    port = probe.port
    probe.stop()  # nothing listens there now: connections are refused
    refused, started = threading.Event(), threading.Event()
    calls = []

    def sleep(seconds):
        calls.append(seconds)
        if len(calls) >= 2:
            refused.set()
            assert started.wait(60)

    server = FakeCloudLogging()
    server.port = port
    store = make_store(server=server, sleep=sleep)
    store.append([event("refused", Kind.STEP_START, i, step=i) for i in range(5)])
    assert refused.wait(60)
    assert "Unavailable" in store.stats()["last_error"]
    with server:
        started.set()
        assert store.flush(60)
        assert [p["step_count"] for p in server.payloads("refused")] == list(range(5))
        store.close(5)


def test_close_during_outage_leaves_a_file_the_next_store_delivers(fake, make_store, tmp_path):
    release = threading.Event()
    fake.fail()
    first = make_store(sleep=lambda s: release.wait(60), max_buffer=5)
    events = [event("later", Kind.STEP_START, i, step=i) for i in range(40)]
    first.append(events)
    assert first.close(timeout=0) is False
    release.set()
    (left,) = os.listdir(tmp_path / "spill")
    with open(tmp_path / "spill" / left) as f:
        assert len(f.readlines()) == 40
    fake.heal()
    second = make_store()
    assert second.flush(30)
    assert os.listdir(tmp_path / "spill") == []
    got, _ = second.read("later")
    assert got == events


# ----------------------------------------------------------------- the spill buffer
def test_spill_buffer_keeps_order_across_memory_file_and_orphans(tmp_path):
    from goodput_core.stores.spill_buffer import SpillBuffer

    def entries(a, b):
        return [{"p": {"n": i}, "i": str(i), "l": {}, "t": [0, 0]} for i in range(a, b)]

    # An orphan left by a dead process (with a line cut short by the crash) goes first.
    with open(tmp_path / "tag.1.x.jsonl", "w") as f:
        f.write("\n".join(json.dumps(e) for e in entries(-3, 0)) + '\n{"p": {"n"')
    buf = SpillBuffer(str(tmp_path), "tag", max_memory=3)
    assert buf.adopt_orphans() == 4
    out, nxt = [], 0
    while nxt < 20 or len(buf):
        if nxt < 20:
            buf.put(entries(nxt, nxt + 3))
            nxt += 3
        assert buf.in_memory() <= 3
        head = buf.peek(2)
        out += [e["p"]["n"] for e in head]
        buf.commit(len(head))
    assert out == list(range(-3, 21))
    assert buf.stats()["spill_bad_lines"] == 1 and buf.stats()["spilled_total"] > 0
    assert buf.close() is None and os.listdir(tmp_path) == []


def test_open_store_url_rejects_a_malformed_log_name():
    from goodput_core.stores import StoreError, open_store

    with pytest.raises(StoreError):
        open_store('cloud-logging://proj/bad"name')
