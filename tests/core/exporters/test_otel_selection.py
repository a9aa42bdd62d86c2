"""Turning the OpenTelemetry exporters on: by environment (GOODPUT_OTEL, read by
the compatible GoodputMonitor that the MaxText and AXLearn shims build) and on
the command line (``goodput monitor --otel``)."""

import os
import subprocess
import sys
import uuid

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("tensorboardX")

from goodput_core.compat.goodput_utils import GCPOptions  # noqa: E402
from goodput_core.compat.monitoring import GoodputMonitor  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.settings import parse_otel_signals  # noqa: E402
from goodput_core.stores import open_store  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from tests.support.otlp_receivers import (  # noqa: E402
    HttpReceiver, clear_otel_env, gauge_points, spans)

T0 = 1_700_000_000.0
NO_GCP = dict(enable_gcp_goodput_metrics=False, enable_gcp_step_deviation_metrics=False)


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch):
    """The shell's OpenTelemetry settings never reach these tests."""
    clear_otel_env(monkeypatch)


def _run(rec):
    """Job start 0, steps 0..9 one second each from 1, save [5.5, 6], job end 11."""
    rec.record_job_start_time(T0)
    for k in range(10):
        rec.record_step_start_time(k, T0 + 1 + k)
    rec.record_checkpoint_save_start_time(4, T0 + 5.5)
    rec.record_checkpoint_save_end_time(4, T0 + 6)
    rec.record_step_end_time(9, T0 + 11)
    rec.record_job_end_time(T0 + 11)


@pytest.mark.parametrize("text,want", [
    ("metrics", ("metrics",)), ("traces", ("traces",)), ("traces, metrics", ("metrics", "traces")),
    ("1", ("metrics",)), ("on", ("metrics",)), ("", ()), ("0", ()), ("off", ()), (None, ())])
def test_parse_otel_signals(text, want):
    assert parse_otel_signals(text, "GOODPUT_OTEL") == want


def test_a_bad_value_names_the_setting():
    with pytest.raises(ValueError, match="GOODPUT_OTEL=logs: expected metrics, traces"):
        parse_otel_signals("logs", "GOODPUT_OTEL")


def test_goodput_otel_turns_both_on_in_the_compatible_monitor(tmp_path, monkeypatch):
    store = MemoryStore(uuid.uuid4().hex)
    rec = Recorder("job", store, clock=lambda: T0)
    _run(rec)
    assert rec.close(30)
    receiver = HttpReceiver()
    try:
        monkeypatch.setenv("GOODPUT_OTEL", "metrics,traces")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        m = GoodputMonitor("job", "log", str(tmp_path), 30, monitoring_enabled=True,
                           store=store, clock=lambda: T0 + 11, gcp_options=GCPOptions(**NO_GCP))
        m.stop_goodput_uploader()  # one final upload
        calc = Calculator("job", store)
        calc.refresh()
        r = calc.cumulative(T0 + 11)
        got = gauge_points(receiver.metrics)
        # By hand: 11 s in all; productive = 10 step seconds - the 0.5 s save - the
        # startup heuristic's excess of step 0 (1 s) over the mean of steps 1..8
        # ((7 + 0.5) / 8 = 0.9375): 9.4375 s.
        assert got[("goodput.ratio", frozenset({("goodput.run", "job")}))] == \
            pytest.approx(r.goodput / 100) == pytest.approx(9.4375 / 11)
        names = [(s.name, (s.start_time_unix_nano - int(T0 * 1e9)) / 1e9,
                  (s.end_time_unix_nano - int(T0 * 1e9)) / 1e9) for s in spans(receiver.traces)]
        phases = sorted((n for n in names if not n[0].startswith("attempt")),
                        key=lambda n: n[1])
        assert [(n[0], round(n[1], 6), round(n[2], 6)) for n in phases] == [
            ("other", 0, 1), ("program_startup", 1, 1.0625), ("productive", 1.0625, 5.5),
            ("unproductive_checkpoint_save_time", 5.5, 6), ("productive", 6, 11)]
        assert ("attempt 1", 0.0, 11.0) in [(a, round(b, 6), round(c, 6)) for a, b, c in names]
    finally:
        receiver.close()


def test_a_bad_goodput_otel_fails_at_construction(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_OTEL", "everything")
    with pytest.raises(ValueError, match="GOODPUT_OTEL=everything"):
        GoodputMonitor("job", "log", str(tmp_path), 30, monitoring_enabled=True,
                       store=MemoryStore(uuid.uuid4().hex), gcp_options=GCPOptions(**NO_GCP))


def test_goodput_monitor_otel_on_the_command_line(tmp_path):
    url = f"sqlite:///{tmp_path}/g.sqlite"
    store = open_store(url)
    rec = Recorder("job", store, clock=lambda: T0)
    _run(rec)
    assert rec.close(30)
    receiver = HttpReceiver()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    try:
        p = subprocess.run([sys.executable, "-m", "goodput_core.cli", "monitor", "job",
                            "--store", url, "--once", "--quiet", "--otel", "metrics,traces",
                            "--otel-endpoint", receiver.endpoint],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        assert len(receiver.metrics) == 1
        assert {s.name for s in spans(receiver.traces)} >= {"attempt 1", "productive"}
        bad = subprocess.run([sys.executable, "-m", "goodput_core.cli", "monitor", "job",
                              "--store", url, "--once", "--otel-endpoint", receiver.endpoint],
                             capture_output=True, text=True, timeout=120, env=env)
        assert bad.returncode == 2 and "go with --otel" in bad.stderr
    finally:
        receiver.close()


def test_goodput_otel_exporters_run_in_the_monitor_process(tmp_path, monkeypatch):
    """The compatible GoodputMonitor (MaxText, AXLearn) runs in a monitor process:
    its GOODPUT_OTEL exporters are built there, from the OTEL_* variables it inherits."""
    import os as _os

    from goodput_core.stores import open_store as _open

    url = f"sqlite:///{tmp_path}/g.sqlite"
    rec = Recorder("job", _open(url), strict=True, clock=lambda: T0)
    _run(rec)
    assert rec.close(30)
    receiver = HttpReceiver()
    try:
        monkeypatch.setenv("GOODPUT_OTEL", "metrics,traces")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        m = GoodputMonitor("job", "log", str(tmp_path / "tb"), 30, monitoring_enabled=True,
                           store=url, gcp_options=GCPOptions(**NO_GCP))
        m.start_goodput_uploader()
        mon = m.monitor
        assert mon.in_process  # every exporter could be rebuilt there
        m.stop_goodput_uploader()  # a final cycle in the monitor process
        assert mon.process_id is not None and mon.process_id != _os.getpid()
        assert any(("goodput.ratio", frozenset({("goodput.run", "job")})) == k
                   for k in gauge_points(receiver.metrics))
        assert "attempt 1" in {s.name for s in spans(receiver.traces)}
    finally:
        receiver.close()
