"""``goodput runs`` and ``goodput events`` on a real sqlite store.

Expected output is written out from what each test recorded (the
reference's payload field names as literals), not from our serialiser.
"""

from __future__ import annotations

import json
import os

import pytest

from goodput_core.cli import main
from goodput_core.record.recorder import Recorder

T0 = 1_700_000_000.0


@pytest.fixture
def store(tmp_path):
    """A store holding runs 'beta' (a short job) then 'alpha' (two events)."""
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder("beta", url, strict=True)
    rec.record_job_start_time(T0)
    rec.record_step_start_time(0, T0 + 1.5)
    rec.record_custom_badput_event_start_time(T0 + 2.0, "eval")
    rec.record_custom_badput_event_end_time(T0 + 2.25, "eval")
    rec.record_job_end_time(T0 + 3.0)
    assert rec.close(30)
    rec = Recorder("alpha", url, strict=True)
    rec.record_job_start_time(T0 + 10)
    rec.record_job_end_time(T0 + 20)
    assert rec.close(30)
    return url


def _out(capsys):
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def test_runs_lists_every_run_oldest_first(store, capsys):
    assert main(["runs", "--store", store]) == 0
    assert _out(capsys) == "beta\nalpha\n"


def test_runs_of_an_empty_store_prints_nothing(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    Recorder("x", url).close(30)  # creates the file, records nothing
    assert main(["runs", "--store", url]) == 0
    assert _out(capsys) == ""


def test_runs_of_a_missing_store_is_one_line_and_creates_nothing(tmp_path, capsys):
    path = tmp_path / "nowhere.sqlite"
    assert main(["runs", "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("goodput runs: error: ") and err.count("\n") == 1
    assert not path.exists()


def test_events_prints_the_reference_payloads_in_order(store, capsys):
    assert main(["events", "beta", "--store", store]) == 0
    lines = _out(capsys).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"job_name": "beta", "job_start_time": T0},
        {"job_name": "beta", "step_count": 0, "step_start_time": T0 + 1.5},
        {"job_name": "beta", "custom_badput_event_type": "eval",
         "custom_badput_event_start_time": T0 + 2.0},
        {"job_name": "beta", "custom_badput_event_type": "eval",
         "custom_badput_event_end_time": T0 + 2.25},
        {"job_name": "beta", "job_end_time": T0 + 3.0},
    ]


def test_events_meta_adds_the_writer(store, capsys):
    assert main(["events", "alpha", "--store", store, "--meta"]) == 0
    payloads = [json.loads(line) for line in _out(capsys).splitlines()]
    writers = [p.pop("_writer") for p in payloads]
    assert payloads == [{"job_name": "alpha", "job_start_time": T0 + 10},
                        {"job_name": "alpha", "job_end_time": T0 + 20}]
    first, second = writers
    assert set(first) == {"process_index", "host", "pid", "attempt", "seq", "write_time"}
    # both recorded by this process, one recorder: same writer, sequence in order
    for w in writers:
        assert w["pid"] == os.getpid() and w["process_index"] == 0
        assert isinstance(w["write_time"], float)
    assert (first["host"], first["attempt"]) == (second["host"], second["attempt"])
    assert first["host"] and first["attempt"]
    assert second["seq"] == first["seq"] + 1


def test_events_of_an_unknown_run_is_one_line(store, capsys):
    assert main(["events", "gamma", "--store", store]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("goodput events: error: no run named 'gamma'")
    assert "goodput runs" in captured.err and captured.err.count("\n") == 1
