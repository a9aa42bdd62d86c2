"""Fixtures of the PyTorch adapter tests: real torch on the CPU.

These tests run with ``make test-torch`` (and in CI after ``make test``):
torch, Lightning and transformers are installed there. Without torch every
test here is skipped, except those that check the adapter's behaviour
without torch (they run in a child process that cannot import it).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid
from typing import Dict, List

import pytest

from goodput_core import Recorder, open_store
from goodput_core.events import Kind

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "torch_training_loop.py"  # runs goodput_integrations.demo.torch_train


def child_env(**extra: str) -> Dict[str, str]:
    """A child's environment: the repository importable, quiet, unbuffered."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
           "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    env.update(extra)
    return env


def read_truth(folder: pathlib.Path) -> Dict[str, dict]:
    """The example's own timing, by file name (``truth-r<rank>-a<attempt>``):
    ``{"spans": {kind: [span, ...]}, "job": [t0, t1 or None]}``."""
    out = {}
    for path in sorted(folder.glob("truth-*.jsonl")):
        spans: Dict[str, list] = {}
        for line in path.read_text().splitlines():
            span = json.loads(line)
            spans.setdefault(span.pop("kind"), []).append(span)
        job = spans.pop("job", [{"t0": None, "t1": None}])[0]
        out[path.stem] = {"spans": spans, "job": [job["t0"], job["t1"]]}
    return out


def kinds(store: str, run: str) -> List[str]:
    events, _ = open_store(store).read(run)
    return [Kind(e.kind).name for e in events]


class RecorderFixture:
    """A strict recorder on its own memory store, and a way to read it back."""

    def __init__(self, **kwargs):
        self.run = f"run-{uuid.uuid4().hex[:8]}"
        self.url = f"memory://torch-tests-{uuid.uuid4().hex}"
        self.recorder = Recorder(self.run, self.url, strict=True, **kwargs)

    def records(self):
        assert self.recorder.flush(10)
        events, _ = open_store(self.url).read(self.run)
        return events

    def names(self):
        return [Kind(e.kind).name for e in self.records()]


@pytest.fixture
def rec():
    fixture = RecorderFixture()
    yield fixture
    fixture.recorder.close()


@pytest.fixture(autouse=True)
def _uninstrument_after():
    """No adapter outlives its test (callbacks, handlers and patches removed)."""
    yield
    if "torch" in sys.modules:
        import goodput_integrations.torch as gtorch

        gtorch.uninstrument()


def run_example(tmp_path: pathlib.Path, *args: str, timeout: float = 500) -> str:
    """Runs examples/torch_training_loop.py as a user would; returns its output."""
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], env=child_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def truth_buckets(truth: dict) -> Dict[str, float]:
    """The loop's own timing of one attempt of the example, by bucket.

    Compilation: for every step during which TorchDynamo's own frame counter
    rose, that step's time beyond the median step (the loop cannot time the
    compiler from outside; torch's counter says which steps compiled).
    Productive: from each step's call to the next load (or to its end for the
    last one), less the saves and compilation in between.
    """
    spans = truth["spans"]

    def total(kind: str) -> float:
        return sum(s["t1"] - s["t0"] for s in spans.get(kind, []))

    steps = spans.get("step", [])
    loads = sorted(spans.get("load", []), key=lambda s: s["t0"])
    durations = sorted(s["t1"] - s["t0"] for s in steps)
    median = durations[len(durations) // 2] if durations else 0.0
    compile_s, frames = 0.0, 0
    for s in steps:
        if s["frames"] != frames:
            compile_s += (s["t1"] - s["t0"]) - median
        frames = s["frames"]
    productive = 0.0
    for s in steps:
        later = [ld["t0"] for ld in loads if ld["t0"] >= s["t1"]]
        end = min(later) if later else s["t1"]
        inside = sum(v["t1"] - v["t0"] for v in spans.get("save", [])
                     if s["t0"] <= v["t0"] < end)
        productive += end - s["t0"] - inside
    out = {"TPU_INITIALIZATION": total("init"),
           "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": total("restore"),
           "TRAINING_PREP": total("prep") - total("restore"),
           "DATA_LOADING_SYNC": total("load"),
           "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": total("save"),
           "PROGRAM_STARTUP": compile_s,
           "productive": productive - compile_s}
    job = truth["job"]
    if job[1] is not None:
        out["total"] = job[1] - job[0]
    return out
