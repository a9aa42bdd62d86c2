"""The Cloud Logging store across ``os.fork()`` and at interpreter exit.

Against the loopback :class:`FakeCloudLogging` (TLS, anonymous credentials):

* a forked child gets a store of its own (a new client, its own send buffer)
  and delivers its events once; the parent's keep flowing;
* a process whose last statement is ``record_job_end_time()``, or a plain
  ``store.append()`` (no flush, no close, a send interval far longer than its
  life), still delivers every event: the exit hooks flush the recorder into
  the store and the store to the server.

Mutations killed: the store's exit hook removed
(``test_events_recorded_just_before_exit_are_delivered[store]``); the record
layer's exit flush left out of ``exit_bound.before_stores_close``
(``test_events_recorded_just_before_exit_are_delivered[recorder]``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import types

import pytest

from goodput_core.events import EventRecord, Kind
from tests.support.children import wait_child
from tests.support.fake_cloud_logging import FakeCloudLogging, cloud_store_factory

PROJECT, LOG = "proj-life", "goodput-life"
T0 = 1_700_000_000.0
RECENT = float(int(time.time()) - 3600)  # reads look back 7 days from now


@pytest.fixture
def fake():
    with FakeCloudLogging() as server:
        yield server


@pytest.fixture
def make_store(fake, tmp_path):
    with cloud_store_factory(fake, tmp_path / "spill", PROJECT, LOG) as make:
        yield make


def _step(run, step, attempt):
    t = RECENT + step
    return EventRecord(run, int(Kind.STEP_START), t, step, None, 0, "host", os.getpid(),
                       attempt, step + 1, t)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_delivers_its_own_events_once(fake, make_store):
    store = make_store()
    store.append([_step("run", 0, "parent")])
    assert store.flush(30)
    pid = os.fork()
    if pid == 0:  # the child: the parent's gRPC channel and buffer are not usable here
        code = 1
        try:
            store.append([_step("run", 1, "child"), _step("run", 2, "child")])
            code = 0 if store.flush(30) else 2
        finally:
            os._exit(code)
    assert wait_child(pid, 120, "child appending to the Cloud Logging store") == 0
    store.append([_step("run", 3, "parent")])
    assert store.flush(30)
    # every event once, none lost or sent twice by either process
    assert sorted(p["step_count"] for p in fake.payloads("run")) == [0, 1, 2, 3]
    assert store.stats()["delivered"] == 2  # the parent's own two


_EXITING = textwrap.dedent("""
    import sys
    from google.auth.credentials import AnonymousCredentials
    from goodput_core.events import EventRecord, Kind
    from goodput_core.record.recorder import Recorder
    from goodput_core.stores.cloud_logging import CloudLoggingStore

    endpoint, spill, project, log, how = sys.argv[1:6]
    store = CloudLoggingStore(project, log, credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": endpoint}, spill_dir=spill,
                              flush_interval_s=3600.0)
    times = (1700000000.0, 1700000001.0, 1700000002.0)
    if how == "recorder":
        rec = Recorder("exiting", store, flush_interval_s=3600.0)
        rec.record_job_start_time(times[0])
        rec.record_step_start_time(0, times[1])
        rec.record_job_end_time(times[2])
    else:  # the store used directly, as an import tool does
        kinds = ((Kind.JOB_START, None), (Kind.STEP_START, 0), (Kind.JOB_END, None))
        store.append([EventRecord("exiting", int(k), t, s, None, 0, "h", 1, "a", i, t)
                      for i, ((k, s), t) in enumerate(zip(kinds, times))])
""")


@pytest.mark.parametrize("how", ["recorder", "store"])
def test_events_recorded_just_before_exit_are_delivered(fake, tmp_path, how):
    spill = tmp_path / "spill"
    proc = subprocess.run([sys.executable, "-c", _EXITING, fake.endpoint, str(spill),
                           PROJECT, LOG, how], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert fake.payloads("exiting") == [
        {"job_name": "exiting", "job_start_time": T0},
        {"job_name": "exiting", "step_count": 0.0, "step_start_time": T0 + 1},
        {"job_name": "exiting", "job_end_time": T0 + 2},
    ]
    # delivered, not left behind for a later process
    leftovers = [f for _, _, files in os.walk(spill) for f in files] if spill.exists() else []
    assert leftovers == []


# ----------------------------------------------------------- edges of the API
def test_reads_retry_transient_errors_then_give_up_with_a_store_error(fake, make_store):
    import grpc

    from goodput_core.stores.base import StoreError

    writer = make_store()
    writer.append([_step("run", 0, "a")])
    assert writer.flush(30)
    fake.fail(grpc.StatusCode.UNAVAILABLE)
    healing = make_store(sleep=lambda s: fake.heal(), read_attempts=2)
    events, _ = healing.read("run")  # failed once, healed during the backoff
    assert [e.step for e in events] == [0]
    fake.fail(grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(StoreError, match="reading .* failed"):
        make_store(read_attempts=2).read("run")
    fake.fail(grpc.StatusCode.PERMISSION_DENIED, "no access")
    with pytest.raises(StoreError, match="refused the query"):
        make_store().read("run")
    fake.heal()


def test_an_event_appended_after_close_is_kept_for_the_next_store(fake, make_store):
    first = make_store()
    assert first.close(10)
    first.append([_step("late", 0, "a")])  # nothing sent: kept on disk
    assert fake.payloads("late") == []
    second = make_store()  # same spill directory: adopts and delivers it
    assert second.flush(30)
    assert [p["step_count"] for p in fake.payloads("late")] == [0]


def test_an_event_that_cannot_be_written_is_counted_and_skipped(fake, make_store):
    store = make_store()
    bad = _step("mixed", 1, "a")._replace(kind=999)  # no such kind
    store.append([bad])  # alone: nothing to send
    store.append([_step("mixed", 0, "a"), bad, _step("mixed", 2, "a")])
    assert store.flush(30)
    assert [p["step_count"] for p in fake.payloads("mixed")] == [0, 2]
    assert store.stats()["rejected"] == 2


@pytest.mark.parametrize("resource", [
    {"type": "k8s_container", "labels": {"cluster_name": "c1", "pod_name": 7}},
    types.SimpleNamespace(type="k8s_container", labels={"cluster_name": "c1", "pod_name": 7}),
])
def test_a_given_monitored_resource_is_used(fake, make_store, resource):
    store = make_store(resource=resource)
    store.append([_step("res", 0, "a")])
    assert store.flush(30)
    (entry,) = fake.entries()
    assert entry.resource.type == "k8s_container"
    assert dict(entry.resource.labels) == {"cluster_name": "c1", "pod_name": "7"}


def test_bad_arguments_are_clear_errors_at_construction(fake, tmp_path):
    from google.auth.credentials import AnonymousCredentials

    from goodput_core.stores.base import StoreError
    from goodput_core.stores.cloud_logging import CloudLoggingStore

    def make(**kw):
        kw.setdefault("credentials", AnonymousCredentials())
        kw.setdefault("client_options", {"api_endpoint": fake.endpoint})
        return CloudLoggingStore(PROJECT, LOG, spill_dir=str(tmp_path), **kw)

    with pytest.raises(ValueError, match="resource needs a 'type'"):
        make(resource={"labels": {}})
    with pytest.raises(ValueError, match="must be >= 1"):
        make(batch_size=0)
    # two sources of credentials: the client library refuses to build
    with pytest.raises(StoreError, match="cannot connect to Cloud Logging"):
        make(client_options={"api_endpoint": fake.endpoint,
                             "credentials_file": str(tmp_path / "key.json")})
