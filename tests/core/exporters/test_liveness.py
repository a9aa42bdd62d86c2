"""A stopped run (semantics.md rule 15) through the monitor: Prometheus scraped
over HTTP, OpenTelemetry decoded by a loopback receiver, TensorBoard files read
back, the console line and the monitor's log all say "stopped at T (cause)",
and the figures they publish do not change when read later."""

from __future__ import annotations

import io
import logging
import uuid

import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.exporters.console import ConsoleExporter
from goodput_core.exporters.prometheus import PrometheusExporter
from goodput_core.exporters.tensorboard import TensorBoardExporter
from goodput_core.monitor import Monitor
from goodput_core.stores.memory import MemoryStore
from tests.support.prometheus_scrape import scrape
from tests.support.tfevents import read_events, read_scalars

T0 = 1_700_000_000.0
CAUSE = "exception:KeyboardInterrupt"


def _stopped_store():
    """Job start T0, heartbeat T0 + 0.5, steps 0..2 at T0 + 10, 20, 30, Ctrl-C
    at T0 + 35 and a heartbeat as the process exits: stopped at T0 + 35, total
    35 s (productive 20, OTHER 15)."""
    store = MemoryStore(uuid.uuid4().hex)
    ev = [EventRecord("st", int(Kind.JOB_START), T0),
          EventRecord("st", int(Kind.HEARTBEAT), T0 + 0.5, None, {"heartbeat_seconds": 10.0})]
    ev += [EventRecord("st", int(Kind.STEP_START), T0 + 10 * (k + 1), k) for k in range(3)]
    ev += [EventRecord("st", int(Kind.DISRUPTION), T0 + 35, None, {"disruption_cause": CAUSE}),
           EventRecord("st", int(Kind.HEARTBEAT), T0 + 35.2, None, {"heartbeat_seconds": 10.0})]
    store.append(ev)
    return store


def test_prometheus_console_tensorboard_and_the_log_say_stopped(tmp_path, caplog):
    clock = [T0 + 100]
    prom, out = PrometheusExporter(0), io.StringIO()
    m = Monitor("st", _stopped_store(), [prom, ConsoleExporter(out),
                                         TensorBoardExporter(str(tmp_path))],
                clock=lambda: clock[0], include_step_deviation=False)
    scrapes = []
    try:
        with caplog.at_level(logging.WARNING, logger="goodput_core.monitor.loop"):
            for now in (T0 + 100, T0 + 5000):
                clock[0] = now
                snap = m.run_once()
                assert snap.stopped and snap.cumulative.total_seconds == pytest.approx(35.0)
                scrapes.append(scrape(prom.url))
    finally:
        m.stop(10)
    for got in scrapes:
        assert got[("goodput_run_stopped", frozenset({("run", "st")}))] == 1.0
        assert got[("goodput_run_stopped_cause",
                    frozenset({("run", "st"), ("cause", CAUSE)}))] == 1.0
        assert got[("goodput_run_stopped_time_seconds", frozenset({("run", "st")}))] == T0 + 35
        assert got[("goodput_total_seconds", frozenset({("run", "st")}))] == pytest.approx(35.0)
    assert scrapes[0] == scrapes[1]  # nothing decays
    said = "stopped at 2023-11-14T22:13:55Z (exception:KeyboardInterrupt)"  # T0 + 35 in UTC
    lines = out.getvalue().splitlines()
    assert all("STOPPED at 2023-11-14T22:13:55Z (EXCEPTION:KEYBOARDINTERRUPT)" in line
               for line in lines[:2])
    assert [r.getMessage() for r in caplog.records].count(
        f"goodput monitor st: the run {said}; its figures end there") == 1  # said once
    # two cycles and the final one at stop()
    assert [v for _, v, _ in read_scalars(str(tmp_path / "goodput"))["run/stopped"]] == [1.0] * 3
    texts = [v.tensor.string_val[0].decode() for path in (tmp_path / "goodput").glob("events*")
             for e in read_events(str(path)) for v in e.summary.value if v.tag.startswith("run/state")]
    assert texts == [said]  # written once, when it stopped


def test_a_running_run_publishes_stopped_zero():
    store = MemoryStore(uuid.uuid4().hex)
    store.append([EventRecord("st", int(Kind.JOB_START), T0),
                  EventRecord("st", int(Kind.HEARTBEAT), T0 + 1, None, {"heartbeat_seconds": 10.0}),
                  EventRecord("st", int(Kind.STEP_START), T0 + 2, 0)])
    prom = PrometheusExporter(0)
    m = Monitor("st", store, [prom], clock=lambda: T0 + 20, include_step_deviation=False)
    try:
        assert not m.run_once().stopped
        got = scrape(prom.url)
    finally:
        m.stop(10)
    assert got[("goodput_run_stopped", frozenset({("run", "st")}))] == 0.0
    assert not any(k[0] in ("goodput_run_stopped_cause", "goodput_run_stopped_time_seconds")
                   for k in got)


def test_opentelemetry_says_stopped():
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from goodput_core.exporters.otel import OtelExporter
    from tests.support.otlp_receivers import HttpReceiver, gauge_points

    receiver = HttpReceiver()
    try:
        exp = OtelExporter(receiver.endpoint, protocol="http/protobuf", timeout_s=10)
        m = Monitor("st", _stopped_store(), [exp], clock=lambda: T0 + 100,
                    include_step_deviation=False)
        m.run_once()
        m.stop(10)
        got = gauge_points(receiver.metrics)
    finally:
        receiver.close()
    run = ("goodput.run", "st")
    assert got[("goodput.run.stopped", frozenset({run}))] == 1.0
    assert got[("goodput.run.stopped.cause", frozenset({run, ("goodput.stop.cause", CAUSE)}))] \
        == 1.0
    assert got[("goodput.run.stopped_time", frozenset({run}))] == T0 + 35
