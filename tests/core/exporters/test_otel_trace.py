"""A run's timeline as an OpenTelemetry trace: sent through the real OTLP span
exporters to loopback receivers that decode the wire format; the spans are
checked against the calculator and against hand-derived times."""

import os
import subprocess
import sys
import uuid

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from goodput_core.exporters.otel_trace import OtelTraceExporter, export_run  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.queries.run_trace import span_id, trace_id  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from tests.support.otlp_receivers import (  # noqa: E402
    GrpcReceiver, HttpReceiver, clear_otel_env, span_attributes, spans)

T0 = 1_700_000_000.0


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch):
    """The shell's OpenTelemetry settings never reach these tests."""
    clear_otel_env(monkeypatch)


def _record_job(rec, upto=None):
    """A hand-made run (times after T0), recorded up to ``upto`` seconds:

    attempt 1: job start 0; TPU init [0, 2]; compile [2, 2.5] inside step 0;
      steps 0..5 start at 2, 3, 4, 5, 6, 7 (1 s each); a checkpoint save
      [4.5, 5] inside step 2; a preemption at 7.5 during step 5 (no job end).
    attempt 2: job start 10; steps 5, 6, 7 start at 11, 12, 13; step 7 ends at
      14; job end 14.
    """
    evs = [(0, lambda: rec.record_job_start_time(T0)),
           (0, lambda: rec.record_tpu_init_start_time(T0)),
           (2, lambda: rec.record_tpu_init_end_time(T0 + 2)),
           (2, lambda: rec.record_program_startup_start_time(T0 + 2)),
           (2.5, lambda: rec.record_program_startup_end_time(T0 + 2.5)),
           (4.5, lambda: rec.record_checkpoint_save_start_time(2, T0 + 4.5)),
           (5, lambda: rec.record_checkpoint_save_end_time(2, T0 + 5)),
           (7.5, lambda: rec.record_disruption("preemption", T0 + 7.5)),
           (10, lambda: rec.record_job_start_time(T0 + 10)),
           (14, lambda: rec.record_step_end_time(7, T0 + 14)),
           (14, lambda: rec.record_job_end_time(T0 + 14))]
    for k in range(6):
        evs.append((2 + k, lambda k=k: rec.record_step_start_time(k, T0 + 2 + k)))
    for i, k in enumerate(range(5, 8)):
        evs.append((11 + i, lambda k=k, i=i: rec.record_step_start_time(k, T0 + 11 + i)))
    for t, fn in sorted(evs, key=lambda e: e[0]):
        if upto is None or t <= upto:
            fn()


def _calc(upto=None):
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("tr", store, clock=lambda: T0)
    _record_job(rec, upto)
    assert rec.flush(30)
    calc = Calculator("tr", store)
    calc.refresh()
    return calc, store, rec


def _by_name(sent):
    return [(s.name, round(s.start_time_unix_nano / 1e9 - T0, 6),
             round(s.end_time_unix_nano / 1e9 - T0, 6)) for s in sent]


@pytest.mark.parametrize("kind", ["http/protobuf", "grpc"])
def test_a_run_is_one_trace_of_attempts_and_phases(kind):
    calc, _, rec = _calc()
    receiver = HttpReceiver() if kind == "http/protobuf" else GrpcReceiver()
    try:
        out = export_run(calc, T0 + 20, endpoint=receiver.endpoint, protocol=kind, timeout_s=10)
        assert out["failed"] == 0
        sent = spans(receiver.traces)
    finally:
        receiver.close()
        rec.close(10)
    assert out["spans"] == len(sent) == out["attempts"] + out["phases"]
    tid = trace_id("tr").to_bytes(16, "big")
    assert {s.trace_id for s in sent} == {tid}
    attempts = [s for s in sent if s.name.startswith("attempt")]
    phases = [s for s in sent if not s.name.startswith("attempt")]
    # attempt 1 runs from its job start to the next one (it crashed); attempt 2
    # from 10 to its job end at 14
    assert _by_name(attempts) == [("attempt 1", 0, 10), ("attempt 2", 10, 14)]
    assert all(s.parent_span_id == b"" for s in attempts)
    a1, a2 = attempts
    assert [(e.name, round(e.time_unix_nano / 1e9 - T0, 6)) for e in a1.events] == \
        [("disruption", 7.5)]
    assert {kv.key: kv.value.string_value for kv in a1.events[0].attributes} == \
        {"goodput.disruption.cause": "preemption"}
    assert [(e.name, round(e.time_unix_nano / 1e9 - T0, 6)) for e in a2.events] == \
        [("restart", 11)]
    # every phase is a child of the attempt it lies in
    for s in phases:
        parent = a1 if s.start_time_unix_nano < a2.start_time_unix_nano else a2
        assert s.parent_span_id == parent.span_id
    # Phases derived by hand (semantics rules 3-5, 8): init [0,2]; compile [2,2.5]
    # (explicit, inside step 0); productive [2.5,4.5] = steps 0 (rest)..2 (first
    # half); the save [4.5,5]; productive [5,7] = steps 3, 4; after the crash at
    # 7.5, step 5's span [7,7.5] is redone (restart at step 5): wasted; recovery
    # from the disruption to the next job start [7.5,10]; then attempt 2 has
    # OTHER [10,11] (no phase recorded before its first step) and productive
    # [11,14] = steps 5..7.
    assert _by_name(phases) == [
        ("tpu_initialization", 0, 2), ("program_startup", 2, 2.5), ("productive", 2.5, 4.5),
        ("unproductive_checkpoint_save_time", 4.5, 5), ("productive", 5, 7),
        ("wasted_progress_from_disruption", 7, 7.5),
        ("infrastructure_recovery_from_disruption", 7.5, 10),
        ("other", 10, 11), ("productive", 11, 14)]
    steps = [(span_attributes(s).get("goodput.step.first"),
              span_attributes(s).get("goodput.step.last"))
             for s in phases if s.name == "productive"]
    assert steps == [(0, 2), (3, 4), (5, 7)]
    # and the phases agree with the calculator: per category, their seconds are
    # the cumulative result's
    r = calc.cumulative(T0 + 20)
    secs = {}
    for s in phases:
        label = span_attributes(s)["goodput.bucket"]
        secs[label] = secs.get(label, 0) + (s.end_time_unix_nano - s.start_time_unix_nano) / 1e9
    assert secs.pop("PRODUCTIVE") == pytest.approx(r.productive_seconds)
    assert secs == pytest.approx({b.name: v for b, v in r.badput_seconds.items() if v > 0
                                  and b.name != "DATA_LOADING_ASYNC"})


def test_exporting_again_sends_the_same_ids():
    calc, _, rec = _calc()
    receiver = HttpReceiver()
    try:
        export_run(calc, T0 + 20, endpoint=receiver.endpoint, timeout_s=10)
        export_run(calc, T0 + 30, endpoint=receiver.endpoint, timeout_s=10)
        first, second = (spans([r]) for r in receiver.traces[:1]), None
        all_spans = spans(receiver.traces)
    finally:
        receiver.close()
        rec.close(10)
    half = len(all_spans) // 2
    key = [(s.trace_id, s.span_id, s.parent_span_id, s.start_time_unix_nano,
            s.end_time_unix_nano, s.name) for s in all_spans]
    assert key[:half] == key[half:]
    assert len({k[1] for k in key[:half]}) == half  # no two spans share an id
    del first, second


def test_the_monitor_sends_each_phase_once_as_it_ends():
    """Cycles mid-run send only the phases that ended; over the run, the spans
    sent are exactly those of one export of the finished run (same ids)."""
    store = MemoryStore(uuid.uuid4().hex)
    clock = [T0]
    rec = Recorder("tr", store, clock=lambda: clock[0])
    receiver = HttpReceiver()
    exp = OtelTraceExporter(receiver.endpoint, timeout_s=10)
    m = Monitor("tr", store, [exp], clock=lambda: clock[0])
    try:
        sent_by_cycle = []
        done = 0
        for upto in (3, 6, 9, 12, 14):
            # the events up to `upto` (the helper records in time order)
            fresh = MemoryStore(uuid.uuid4().hex)
            r2 = Recorder("tr", fresh, clock=lambda: clock[0])
            _record_job(r2, upto)
            assert r2.flush(30)
            events, _ = fresh.read("tr")
            store.append(events[done:])
            done = len(events)
            r2.close(10)
            clock[0] = T0 + upto
            m.run_once()
            sent_by_cycle.append(_by_name(spans(receiver.traces)))
        m.stop(timeout=10)
        all_sent = spans(receiver.traces)
        # at 3 s only init and the compile had ended (productive goes on)
        assert sent_by_cycle[0] == [("tpu_initialization", 0, 2), ("program_startup", 2, 2.5)]
        # attempt 1 is sent once it ended (by the cycle at 12 s), attempt 2 at the end
        names = [s.name for s in all_sent]
        assert names.count("attempt 1") == 1 and names.count("attempt 2") == 1
        assert len({s.span_id for s in all_sent}) == len(all_sent)  # nothing sent twice
        calc = Calculator("tr", store)
        calc.refresh()
        whole = HttpReceiver()
        try:
            export_run(calc, T0 + 14, endpoint=whole.endpoint, timeout_s=10)
            once = spans(whole.traces)
        finally:
            whole.close()

        def key(ss):
            return sorted((s.span_id, s.parent_span_id, s.start_time_unix_nano,
                           s.end_time_unix_nano, s.name) for s in ss)
        assert key(all_sent) == key(once)
    finally:
        receiver.close()
        rec.close(10)


def test_a_collector_that_is_down_is_counted_and_the_command_exits_1(tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    calc, _, rec = _calc()
    try:
        out = export_run(calc, T0 + 20, endpoint=f"http://127.0.0.1:{port}", timeout_s=0.5)
        assert out["failed"] == out["spans"] > 0
        exp = OtelTraceExporter(f"http://127.0.0.1:{port}", timeout_s=0.5)
        m = Monitor("tr", calc._store, [exp], clock=lambda: T0 + 20)
        m.run_once()
        assert exp.failed > 0 and exp.sent == 0
        assert m.stats()["errors"] == {}
        m.stop(timeout=5)
    finally:
        rec.close(10)


def test_goodput_export_format_otlp(tmp_path):
    """The command as users run it, over a real SQLite store."""
    store_url = f"sqlite:///{tmp_path}/g.sqlite"
    from goodput_core.stores import open_store
    store = open_store(store_url)
    rec = Recorder("tr", store, clock=lambda: T0)
    _record_job(rec)
    assert rec.close(30)
    receiver = HttpReceiver()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    try:
        cmd = [sys.executable, "-m", "goodput_core.cli", "export", "tr", "--store", store_url,
               "--format", "otlp", "--endpoint", receiver.endpoint]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        assert "as a trace of 11 spans (2 attempts, 9 phases)" in p.stderr
        assert len(spans(receiver.traces)) == 11
        bad = subprocess.run(cmd[:4] + ["nope"] + cmd[5:], capture_output=True, text=True,
                             timeout=120, env=env)
        assert bad.returncode == 2 and "no run named 'nope'" in bad.stderr
        assert "Traceback" not in bad.stderr
        import socket
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
        sock.close()
        env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "500"  # milliseconds, as the standard says
        down = subprocess.run(cmd[:-1] + [f"http://127.0.0.1:{closed}"], capture_output=True,
                              text=True, timeout=120, env=env)
        assert down.returncode == 1 and "did not take 11 of 11 spans" in down.stderr
        assert "Traceback" not in down.stderr
    finally:
        receiver.close()


def test_span_ids_depend_on_what_identifies_a_span():
    assert span_id("r", "PRODUCTIVE", 0, 1.0) == span_id("r", "PRODUCTIVE", 0, 1.0000000001)
    assert span_id("r", "PRODUCTIVE", 0, 1.0) != span_id("r", "PRODUCTIVE", 1, 1.0)
    assert span_id("r", "PRODUCTIVE", 0, 1.0) != span_id("s", "PRODUCTIVE", 0, 1.0)
    assert trace_id("r") != trace_id("s") and trace_id("r") > 0
