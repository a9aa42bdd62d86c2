"""The recorder: payloads, validation, queueing, flushing, context managers."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import math
import threading

import pytest

from goodput_core import NULL_RECORDER, Recorder
from goodput_core.events import EventRecord, Kind, to_payload
from goodput_core.stores.memory import MemoryStore


class FakeClock:
    """A clock that advances by ``tick`` seconds on each read."""

    def __init__(self, start=1_000.0, tick=1.0):
        self.t = start
        self.tick = tick

    def __call__(self):
        self.t += self.tick
        return self.t


@pytest.fixture
def store():
    return MemoryStore()


def payloads(store, run="run"):
    store_events, _ = store.read(run)
    return [to_payload(e) for e in store_events]


def test_each_reference_method_writes_the_reference_payload(store):
    rec = Recorder("run", store, clock=FakeClock(), strict=True)
    t = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    ts = t.timestamp()
    rec.record_job_start_time(t)
    rec.record_tpu_init_start_time(t)
    rec.record_step_start_time(7, t)
    rec.record_custom_badput_event_start_time(t, "eval")
    rec.record_custom_badput_event_end_time(t, "eval")
    rec.record_elastic_slice_counts(2, 4, 3, t)
    rec.record_elastic_wait_start_time("SCALE_UP", t)
    rec.record_job_end_time(t)
    assert rec.flush(5)
    assert payloads(store) == [
        {"job_name": "run", "job_start_time": ts},
        {"job_name": "run", "tpu_init_start_time": ts},
        {"job_name": "run", "step_count": 7, "step_start_time": ts},
        {"job_name": "run", "custom_badput_event_type": "eval",
         "custom_badput_event_start_time": ts},
        {"job_name": "run", "custom_badput_event_type": "eval",
         "custom_badput_event_end_time": ts},
        {"job_name": "run", "active_slices": 2, "total_slices": 4, "available_slices": 3,
         "elastic_slice_counts_timestamp": ts},
        {"job_name": "run", "elastic_wait_event_type": "SCALE_UP",
         "elastic_wait_start_time": ts},
        {"job_name": "run", "job_end_time": ts},
    ]


class ListLogger:
    """The reference's duck-typed cloud_logger contract, keeping payloads in a list."""

    def __init__(self, job_name):
        self.job_name = job_name
        self.entries = []

    def write_cloud_logging_entry(self, entry):
        self.entries.append(entry)

    def read_cloud_logging_entries(self, *args, **kwargs):
        return self.entries, (None, None)


def _drive(recorder, t):
    recorder.record_job_start_time(t)
    recorder.record_tpu_init_start_time(t)
    recorder.record_tpu_init_end_time(t)
    recorder.record_training_preparation_start_time(t)
    recorder.record_training_preparation_end_time(t)
    recorder.record_data_loading_start_time(t)
    recorder.record_data_loading_end_time(t)
    recorder.record_step_start_time(3, t)
    recorder.record_custom_badput_event_start_time(t, "eval")
    recorder.record_custom_badput_event_end_time(t)
    recorder.record_job_end_time(t)


def test_payloads_match_the_reference_recorder_byte_for_byte():
    """The same calls on the reference's recorder and ours give identical payloads."""
    from ml_goodput_measurement.src import goodput as goodput_ref
    from goodput_core.compat import goodput as ours

    t = dt.datetime(2025, 6, 1, 12, 0, 0, 250000, tzinfo=dt.timezone.utc)
    ref_logger, our_logger = ListLogger("job"), ListLogger("job")
    _drive(goodput_ref.GoodputRecorder("job", "log", True, ref_logger), t)
    _drive(ours.GoodputRecorder("job", "log", True, our_logger), t)
    assert our_logger.entries == ref_logger.entries
    import json

    assert [json.dumps(e) for e in our_logger.entries] == [
        json.dumps(e) for e in ref_logger.entries]


@pytest.mark.parametrize("bad_step", [1.5, "3", None, True, object()])
def test_bad_step_is_dropped_counted_and_warned_once(store, caplog, bad_step):
    rec = Recorder("run", store)
    with caplog.at_level(logging.WARNING, logger="goodput"):
        rec.record_step_start_time(bad_step)
        rec.record_step_start_time(bad_step)
    rec.flush(5)
    assert store.read("run")[0] == []
    assert rec.stats()["rejected"] == {"step_start": 2}
    assert len([r for r in caplog.records if "step_start" in r.getMessage()]) == 1


def test_integral_non_int_steps_are_accepted(store):
    import numpy as np
    rec = Recorder("run", store, strict=True)
    rec.record_step_start_time(np.int64(5))
    rec.record_step_start_time(6.0)
    rec.flush(5)
    steps = [e.step for e in store.read("run")[0]]
    assert steps == [5, 6] and all(type(s) is int for s in steps)


@pytest.mark.parametrize("bad_time", ["yesterday", math.nan, math.inf, [1]])
def test_strict_mode_raises_on_bad_time(store, bad_time):
    rec = Recorder("run", store, strict=True)
    with pytest.raises(ValueError):
        rec.record_job_start_time(bad_time)


def test_a_failing_clock_never_raises_into_the_caller(store):
    def broken():
        raise RuntimeError("clock broke")

    rec = Recorder("run", store, clock=broken)
    rec.record_job_start_time()
    assert rec.stats()["rejected"] == {"job_start": 1}


class BlockingStore(MemoryStore):
    """A store whose append waits until released (a slow disk)."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def append(self, batch):
        self.release.wait(30)
        super().append(batch)


def test_full_queue_drops_and_counts_without_blocking():
    store = BlockingStore()
    rec = Recorder("run", store, queue_size=10, flush_interval_s=0.01)
    for i in range(100):
        rec.record_step_start_time(i)
    # The writer may have taken at most one batch off the queue before blocking.
    assert rec.dropped >= 100 - 20
    assert not rec.flush(timeout=0.05)  # store still blocked: the fence times out
    store.release.set()
    assert rec.flush(timeout=10)
    stored = len(store.read("run")[0])
    assert stored + rec.dropped == 100


class FlakyStore(MemoryStore):
    """Fails the first ``failures`` appends, then works."""

    def __init__(self, failures):
        super().__init__()
        self.failures = failures

    def append(self, batch):
        if self.failures > 0:
            self.failures -= 1
            raise OSError("disk hiccup")
        super().append(batch)


def test_failed_writes_are_retried_and_nothing_is_lost_or_duplicated():
    store = FlakyStore(failures=3)
    rec = Recorder("run", store, strict=True)
    for i in range(50):
        rec.record_step_start_time(i)
    assert rec.flush(timeout=30)
    assert [e.step for e in store.read("run")[0]] == list(range(50))
    assert rec.stats()["write_errors"] == 3


def test_writer_metadata(store):
    rec = Recorder("run", store, clock=FakeClock(), process_index=3)
    for i in range(3):
        rec.record_step_start_time(i)
    rec.flush(5)
    events = store.read("run")[0]
    assert [e.seq for e in events] == [1, 2, 3]
    assert {(e.process_index, e.attempt) for e in events} == {(3, rec.attempt)}
    assert all(e.write_time == e.time for e in events)


def test_backfilled_time_keeps_the_record_time_as_write_time(store):
    clock = FakeClock(start=500.0)
    rec = Recorder("run", store, clock=clock)
    rec.record_step_start_time(1, 10.0)
    rec.flush(5)
    (event,) = store.read("run")[0]
    assert event.time == 10.0 and event.write_time == 501.0


def kinds(store, run="run"):
    return [Kind(e.kind).name for e in store.read(run)[0]]


def test_context_managers_and_decorators(store):
    rec = Recorder("run", store, clock=FakeClock(), strict=True)
    with rec.job():
        with rec.tpu_init():
            pass
        with rec.training_preparation():
            pass

        @rec.track_steps(first_step=10)
        def train_step(x):
            with rec.data_loading():
                return x + 1

        assert train_step(1) == 2 and train_step(2) == 3
        with rec.custom_badput_event("eval"), rec.checkpoint_save(11):
            pass
        with rec.program_startup("f"):
            pass
    rec.flush(5)
    assert kinds(store) == [
        "JOB_START", "TPU_INIT_START", "TPU_INIT_END", "TRAINING_PREP_START",
        "TRAINING_PREP_END", "STEP_START", "DATA_LOADING_START", "BLOCKING_LOAD_START",
        "BLOCKING_LOAD_END", "DATA_LOADING_END", "STEP_END", "STEP_START",
        "DATA_LOADING_START", "BLOCKING_LOAD_START", "BLOCKING_LOAD_END",
        "DATA_LOADING_END", "STEP_END",
        "CUSTOM_BADPUT_START", "CHECKPOINT_SAVE_START", "CHECKPOINT_SAVE_END",
        "CUSTOM_BADPUT_END", "PROGRAM_STARTUP_START", "PROGRAM_STARTUP_END", "JOB_END"]
    steps = [e.step for e in store.read("run")[0] if e.kind == Kind.STEP_START]
    assert steps == [10, 11]


def test_job_that_raises_records_a_disruption_not_an_end(store):
    rec = Recorder("run", store, clock=FakeClock(), strict=True)
    with pytest.raises(ZeroDivisionError):
        with rec.job():
            with rec.step(0):
                1 / 0
    rec.flush(5)
    events = store.read("run")[0]
    assert kinds(store) == ["JOB_START", "STEP_START", "DISRUPTION"]
    assert events[-1].extra == {"disruption_cause": "exception:ZeroDivisionError"}


def test_disabled_recorders_are_null_objects():
    # An unusable store is never opened when recording is disabled.
    rec = Recorder("run", "nope://x", enabled=False)
    rec.record_step_start_time(1)
    with rec.step(2), rec.job():
        pass
    assert rec.flush() and rec.stats()["written"] == 0
    NULL_RECORDER.record_job_start_time()
    with NULL_RECORDER.data_loading():
        pass
    assert NULL_RECORDER.flush()


def test_compat_recorder_disabled_by_default_like_the_reference():
    from goodput_core.compat.goodput import GoodputRecorder

    rec = GoodputRecorder("job", "logger")
    rec.record_job_start_time()
    assert rec.stats()["written"] == 0 and rec.logger_name == "logger"


def test_cloud_logger_gets_payloads_synchronously_and_its_errors_are_contained():
    log = ListLogger("job")
    rec = Recorder("job", cloud_logger=log, clock=FakeClock(start=0.0))
    rec.record_step_start_time(4)
    assert log.entries == [{"job_name": "job", "step_count": 4, "step_start_time": 1.0}]

    class Broken:
        def write_cloud_logging_entry(self, entry):
            raise ConnectionError("down")

    rec = Recorder("job", cloud_logger=Broken())
    rec.record_job_start_time()  # must not raise
    assert rec.stats()["write_errors"] == 1


def test_many_threads_record_without_loss_or_duplicates(store):
    rec = Recorder("run", store, strict=True)
    n_threads, per_thread = 8, 5_000
    counter = itertools.count()

    def work():
        for _ in range(per_thread):
            rec.record_step_start_time(next(counter))

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rec.flush(30)
    steps = sorted(e.step for e in store.read("run")[0])
    assert steps == list(range(n_threads * per_thread))


def test_record_with_an_unknown_kind_is_counted(store):
    rec = Recorder("run", store)
    rec.record(999)
    assert rec.stats()["rejected"] == {"unknown_kind": 1}
    rec.record(Kind.METRIC, 5.0, 3, metric_name="loss", metric_value=0.5)
    rec.flush(5)
    assert to_payload(store.read("run")[0][0]) == {
        "job_name": "run", "step_count": 3, "metric_name": "loss", "metric_value": 0.5,
        "metric_time": 5.0}


def test_constructor_rejects_bad_arguments():
    from goodput_core import StoreError

    with pytest.raises(ValueError):
        Recorder("", "memory://x")
    with pytest.raises(StoreError):
        Recorder("run", "ftp://somewhere")
    assert isinstance(EventRecord("r", 1, 0.0), tuple)
