"""examples/jax_training_loop.py, run as a user would: two real processes,
the second resuming from the first one's checkpoint."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from goodput_core import open_store
from goodput_core.calculator import Calculator
from goodput_core.events import Kind

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "jax_training_loop.py"


def run_example(tmp_path, *extra):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [sys.executable, str(EXAMPLE), "--store", str(tmp_path / "g.sqlite"), "--run", "ex",
            "--ckpt-dir", str(tmp_path / "ckpt"), "--steps", "40", "--save-every", "10", *extra]
    done = subprocess.run(args, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_example_resumes_where_its_checkpoint_left_off(tmp_path):
    assert "steps 0..24 done" in run_example(tmp_path, "--stop-at", "25")
    # the second attempt restores step 25 before decorating: start_step = 25
    assert "steps 25..39 done" in run_example(tmp_path)
    events, _ = open_store(str(tmp_path / "g.sqlite")).read("ex")
    starts = [e for e in events if e.kind == Kind.JOB_START]
    steps = [(e.time, e.step) for e in events if e.kind == Kind.STEP_START]
    second = [s for t, s in steps if t >= starts[1].time]
    assert len(starts) == 2 and second[0] == 25
    assert sorted(s for _, s in steps) == list(range(40))
    calc = Calculator("ex", str(tmp_path / "g.sqlite"))
    calc.refresh()
    r = calc.cumulative()
    assert r.disruptions == 0 and r.max_productive_step == 39
    assert r.skipped == {}
    assert r.productive_seconds > 0 and r.badput_seconds
    names = {e.kind for e in events}
    assert {Kind.TRAINING_PREP_START, Kind.PROGRAM_STARTUP_START, Kind.CHECKPOINT_STATS,
            Kind.DATA_LOADING_START, Kind.JOB_END} <= names
