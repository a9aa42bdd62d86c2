"""``goodput report`` edge cases a user meets: a window beside the run, overlapped
loading in ``--json``, and the commands the demo tells the user to run next.

Expected numbers come from the hand-built run below, never from the output.
"""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from goodput_core.cli import main
from goodput_core.record.recorder import Recorder

T0 = 1_700_000_000.0


@pytest.fixture
def store(tmp_path):
    """Run 'loads': job start at T0, steps 0..4 every 10 s from T0, job end at
    T0 + 50; an overlapped load [22, 25) inside step 2 (3 s, DATA_LOADING_ASYNC)
    and a custom event [41, 43) in the last step (closed by the job end, so it
    is not in the mean of rule 6: no program-startup excess)."""
    url = f"sqlite:///{tmp_path / 'edges.sqlite'}"
    rec = Recorder("loads", url, strict=True)
    rec.record_job_start_time(T0)
    for s in range(5):
        rec.record_step_start_time(s, T0 + 10 * s)
    rec.record_data_loading_start_time(T0 + 22)
    rec.record_data_loading_end_time(T0 + 25)
    rec.record_custom_badput_event_start_time(T0 + 41, "eval")
    rec.record_custom_badput_event_end_time(T0 + 43, "eval")
    rec.record_job_end_time(T0 + 50)
    assert rec.flush(10)
    rec.close()
    return url


@pytest.mark.parametrize("window", [
    f"{T0 - 1000!r}/{T0 - 500!r}",          # before the run
    f"{T0 + 60!r}/{T0 + 3600!r}",           # after it
    f"{T0 - 10!r}/{T0!r}",                  # touching its start only
])
def test_a_window_beside_the_lifetime_is_an_error(capsys, store, window):
    assert main(["report", "loads", "--store", store, "--window", window]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "does not overlap the lifetime of run 'loads'" in err
    assert "2023-11-14T22:13:20Z -> 2023-11-14T22:14:10Z" in err  # the lifetime, for help
    assert main(["timeline", "loads", "--store", store, "--window", window,
                 "-o", "unused.html"]) == 2
    assert "does not overlap" in capsys.readouterr().err


def test_a_window_that_overlaps_is_reported(capsys, store):
    assert main(["report", "loads", "--store", store, "--json",
                 "--window", f"{T0 - 100!r}/{T0 + 10!r}"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["total_seconds"] == 10.0 and rep["goodput_percent"] == 100.0


def test_json_keeps_overlapped_loading_apart_from_the_partition(capsys, store):
    assert main(["report", "loads", "--store", store, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert "DATA_LOADING_ASYNC" not in rep["badput_seconds"]
    assert "DATA_LOADING_ASYNC" not in rep["badput_percent"]
    assert rep["data_loading_async_seconds"] == 3.0
    assert rep["data_loading_async_percent"] == pytest.approx(100 * 3 / 50)
    # the partition: 48 s productive (the load overlaps a step: still productive),
    # 2 s of custom events, nothing else
    assert rep["productive_seconds"] == 48.0 and rep["total_seconds"] == 50.0
    assert rep["badput_seconds"]["CUSTOM_BADPUT_EVENTS"] == 2.0
    assert rep["productive_seconds"] + sum(rep["badput_seconds"].values()) == 50.0
    assert rep["goodput_percent"] + sum(rep["badput_percent"].values()) == pytest.approx(100.0)
    # the table lists it once, below the total, marked as not in it
    assert main(["report", "loads", "--store", store]) == 0
    table = capsys.readouterr().out
    assert table.count("DATA_LOADING_ASYNC") == 1
    assert "6.00 %" in table.split("DATA_LOADING_ASYNC")[1].splitlines()[0]
    assert "not in total" in table


def test_the_demo_prints_commands_that_work_as_printed(tmp_path, capsys):
    outdir = tmp_path / "demo out"  # a space: the commands must quote it
    assert main(["demo", "--synthetic", "--run", "synth", "--outdir", str(outdir)]) == 0
    out = capsys.readouterr().out
    tail = out.split("Look again")[1].splitlines()[1:]
    commands = [line.strip() for line in tail if " --store " in line]
    assert [shlex.split(c)[1] for c in commands] == ["report", "runs", "timeline", "serve"]
    _check_the_dashboard_as_printed(commands.pop(), tail, tmp_path)
    results = {}
    for command in commands:  # run exactly as printed: `goodput` only when the shell finds it
        argv = shlex.split(command)
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, (command, proc.stderr)
        results[argv[1]] = proc.stdout
    assert "synth" in results["runs"].split()
    assert "Goodput:" in results["report"] and "disruptions (restarts)   1" in results["report"]
    assert (tmp_path / "timeline.html").exists()


def _check_the_dashboard_as_printed(command, tail, cwd):
    """The printed ``goodput serve`` starts (on a free port here: 8765 may be
    taken on a shared machine) and serves the printed run page's run."""
    import re
    import urllib.parse

    from tests.support.dashboard import get_json

    (url,) = [line.split("then open ", 1)[1].strip() for line in tail if "then open " in line]
    page = urllib.parse.urlsplit(url)
    assert (page.hostname, page.port) == ("127.0.0.1", 8765)
    assert page.path == "/run/synth"
    proc = subprocess.Popen(shlex.split(command) + ["--port", "0"], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        first = proc.stdout.readline()
        served = re.search(r"on (http://127\.0\.0\.1:\d+/)", first)
        assert served, (first, proc.stderr.read() if proc.poll() is not None else "")
        run = page.path[len("/run/"):]
        report = get_json(f"{served.group(1)}api/runs/{run}/report")
        assert report["run"] == "synth" and report["disruptions"] == 1
    finally:
        proc.terminate()
        proc.wait(30)
