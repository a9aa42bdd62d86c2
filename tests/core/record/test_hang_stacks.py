"""Hangs users can act on: the stack of the thread that hung comes first.

A real training process whose loop runs in a thread of its own ("trainer")
gets stuck 4 s in ``stuck_in_training_step()`` with the issue's settings
(``HangSettings(factor=5, min_seconds=1)``, imported from ``goodput_core``).
The report, ``--json``, the dashboard's API and the warning all lead with
that thread and that function, never with goodput's own writer or watchdog
(their stacks are left out, their names listed last). Summaries written by
earlier versions (every thread, in any order) are read the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from goodput_core import Calculator
from goodput_core.queries.hangs import Hang
from goodput_core.record.stacks import OWN_THREADS, ordered_threads
from tests.support.cli_process import goodput
from tests.support.dashboard import dashboard, get_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

_STUCK = textwrap.dedent("""
    import sys, threading, time
    from goodput_core import HangSettings, Recorder

    store = sys.argv[1]
    rec = Recorder("stuck", store, flush_interval_s=0.02,
                   hang_detection=HangSettings(factor=5, min_seconds=1, check_interval_s=0.05))

    def stuck_in_training_step():
        time.sleep(4.0)          # a collective that does not return, for 4 s

    def train():
        with rec.job():
            for step in range(40):
                with rec.step(step):
                    if step == 30:
                        stuck_in_training_step()
                    time.sleep(0.01)

    def side_work():               # a thread of the user's that is not the loop
        time.sleep(6.0)

    threading.Thread(target=side_work, name="side", daemon=True).start()
    trainer = threading.Thread(target=train, name="trainer")
    trainer.start()
    trainer.join()
    rec.close()
""")


@pytest.fixture(scope="module")
def stuck_run(tmp_path_factory):
    store = f"sqlite:///{tmp_path_factory.mktemp('stuck')}/stuck.sqlite"
    out = subprocess.run([sys.executable, "-c", _STUCK, store], capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    return store, out.stderr


def test_the_hung_threads_function_is_the_first_frame_everywhere(stuck_run):
    store, stderr = stuck_run
    calc = Calculator("stuck", store)
    calc.refresh()
    (hang,) = calc.hangs()
    assert hang.step == 30 and hang.ended_by == "progress"
    assert hang.thread == "trainer"
    assert hang.top_frames()[0].endswith(" stuck_in_training_step")
    assert hang.top_frames()[1].endswith(" train")
    # then the user's other threads; goodput's own only by name, last
    names = [name for name, _ in ordered_threads(hang.stack)]
    assert names[0] == "trainer" and "side" in names and "MainThread" in names
    assert not any(n.startswith("goodput") for n in names)
    last = hang.stack.splitlines()[-1]
    assert last.startswith(OWN_THREADS) and "goodput-writer" in last

    # goodput report (text) and --json
    text = goodput("report", "stuck", "--store", store)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  step 30: "))
    assert lines[at + 1].strip() == "thread trainer, innermost frame first:"
    assert lines[at + 2].strip().endswith(" stuck_in_training_step")
    rep = json.loads(goodput("report", "stuck", "--store", store, "--json").stdout)
    (h,) = rep["insights"]["hangs"]
    assert h["thread"] == "trainer" and h["top_frames"][0].endswith(" stuck_in_training_step")
    assert (h["step"], h["start"], h["seconds"]) == (30, hang.start, pytest.approx(hang.seconds))

    # the dashboard's report is the same JSON
    with dashboard(store) as server:
        api = get_json(server.url + "api/runs/stuck/report")
    assert api["insights"]["hangs"] == rep["insights"]["hangs"]

    # the warning names the thread and where it is stuck, before the stacks
    (warning,) = [line for line in stderr.splitlines() if "looks hung" in line]
    assert "thread trainer is in " in warning and warning.endswith(
        "stuck_in_training_step. Stacks:")
    after = stderr.split("Stacks:\n", 1)[1].splitlines()
    assert after[0] == "thread trainer (recorded the last step):"
    assert after[1].strip().endswith(" stuck_in_training_step")


def test_a_summary_of_an_earlier_version_names_the_training_thread_too():
    # every thread with its stack, goodput's writer first (what reports showed)
    old = ("thread goodput-writer-r:\n  threading.py:331 wait\n  writer.py:90 _loop\n"
           "thread MainThread:\n  train.py:41 stuck_in_training_step\n  train.py:60 main\n"
           "thread goodput-hang-watchdog:\n  threading.py:331 wait")
    hang = Hang(7, 1.0, 2.0, 3.0, None, "open", 1.0, old)
    assert hang.thread == "MainThread"
    assert hang.top_frames() == ["train.py:41 stuck_in_training_step", "train.py:60 main"]
    assert [n for n, _ in ordered_threads(old)] == [
        "MainThread", "goodput-writer-r", "goodput-hang-watchdog"]
    assert Hang(7, 1.0, 2.0, 3.0, None, "open", 1.0, "").top_frames() == []
