"""Fresh processes: lazy process index, accelerator init, SIGTERM, uncaught exceptions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

CHILD = Path(__file__).with_name("jax_child.py")
ROOT = Path(__file__).resolve().parents[3]


def run_child(scenario, tmp_path):
    events = tmp_path / "events.jsonl"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(CHILD), scenario, str(events)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    payloads = []
    if events.exists():
        payloads = [json.loads(line) for line in events.read_text().splitlines()]
    return proc, payloads, events


def disruptions(payloads):
    return [p["disruption_cause"] for p in payloads if "disruption_time" in p]


def test_instrument_touches_no_backend_and_times_the_first_init(tmp_path):
    proc, payloads, events = run_child("lazy_init", tmp_path)
    assert proc.returncode == 0, proc.stderr
    state = json.loads(Path(str(events) + ".state").read_text())
    assert state["after_instrument"] is False  # safe before jax.distributed.initialize
    assert state["decision"] is None  # the process index was not asked yet
    assert state["after_devices"] is True and state["decision_after"] is True
    assert state["missed"] is False
    starts = [p["tpu_init_start_time"] for p in payloads if "tpu_init_start_time" in p]
    ends = [p["tpu_init_end_time"] for p in payloads if "tpu_init_end_time" in p]
    assert len(starts) == len(ends) == 1 and ends[0] >= starts[0]
    meta = [p for p in payloads if "metadata_time" in p]
    assert len(meta) == 1 and meta[0]["framework"] == "jax"


def test_sigterm_records_a_disruption_and_calls_the_previous_handler(tmp_path):
    proc, payloads, events = run_child("sigterm_chained", tmp_path)
    assert proc.returncode == 7, proc.stderr  # the previous handler's sys.exit(7)
    assert Path(str(events) + ".prev").read_text() == \
        f"previous handler called with {int(signal.SIGTERM)}"
    assert disruptions(payloads) == ["sigterm"]


def test_sigterm_with_the_default_handler_still_terminates(tmp_path):
    proc, payloads, _ = run_child("sigterm_default", tmp_path)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stdout, proc.stderr)
    assert "still alive" not in proc.stdout
    assert disruptions(payloads) == ["sigterm"]


def test_uncaught_exception_records_a_disruption_and_chains_the_hook(tmp_path):
    proc, payloads, _ = run_child("exception", tmp_path)
    assert proc.returncode == 1
    assert "ValueError: boom in training" in proc.stderr  # the default hook still ran
    assert disruptions(payloads) == ["exception:ValueError"]


def test_an_exception_already_recorded_is_not_recorded_twice(tmp_path):
    proc, payloads, _ = run_child("exception_recorded_by_job", tmp_path)
    assert proc.returncode == 1
    assert disruptions(payloads) == ["exception:KeyError"]  # from rec.job() only


def test_a_job_inside_an_unrelated_except_block_ends_cleanly(tmp_path):
    proc, payloads, _ = run_child("clean_inside_except", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert disruptions(payloads) == []
    assert sum("job_end_time" in p for p in payloads) == 1


def test_a_crash_inside_an_unrelated_except_block_is_one_disruption(tmp_path):
    proc, payloads, _ = run_child("crash_inside_except", tmp_path)
    assert proc.returncode == 1
    assert "ValueError: boom in training" in proc.stderr
    assert disruptions(payloads) == ["exception:ValueError"]  # not the FileNotFoundError
    assert not any("job_end_time" in p for p in payloads)


def test_an_exception_after_a_graceful_job_end_is_not_a_disruption(tmp_path):
    proc, payloads, _ = run_child("exception_after_job_end", tmp_path)
    assert proc.returncode == 1
    assert "ValueError: uploading the final artifacts failed" in proc.stderr
    assert disruptions(payloads) == []
    assert sum("job_end_time" in p for p in payloads) == 1
