"""Issue 11 §2 with the real adapter: SIGTERM while compiling, before any
step, then a restart. The report counts one disruption and books the time
from the SIGTERM to the restart as infrastructure recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from goodput_core import open_store
from goodput_core.buckets import BadputType as B
from goodput_core.calculator import Calculator
from goodput_core.events import Kind

CHILD = Path(__file__).with_name("preempt_child.py")


def attempt(store, mode):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, str(CHILD), store, "job", mode], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=240)


def test_a_sigterm_during_compilation_is_a_disruption(tmp_path):
    store = str(tmp_path / "g.sqlite")
    first = attempt(store, "compile")
    assert first.returncode == -signal.SIGTERM, first.stderr[-2000:]
    second = attempt(store, "train")
    assert second.returncode == 0, second.stderr[-2000:]
    events, _ = open_store(store).read("job")
    (disruption,) = [e for e in events if e.kind == Kind.DISRUPTION]
    assert disruption.extra == {"disruption_cause": "sigterm"}
    starts = sorted(e.time for e in events if e.kind == Kind.JOB_START)
    first_step = min(e.time for e in events if e.kind == Kind.STEP_START)
    assert starts[0] < disruption.time < starts[1] < first_step  # no step before it
    calc = Calculator("job", store)
    calc.refresh()
    r = calc.cumulative()
    assert r.disruptions == 1
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(
        starts[1] - disruption.time, abs=1e-6)
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == 0
