"""Lightning and the Hugging Face Trainer give the same buckets as the same job
instrumented by hand (tests/integrations/torch/trainer_jobs.py: one job whose
loads, forward and backward passes, optimizer steps, evaluations and
checkpoints move the recorder's fake clock by known amounts).

Each run is a real framework run on the CPU, in its own process. Only the
job's own work moves the clock, so every bucket is exact: each framework's
equals the hand-instrumented loop's, and both equal the job's time in that
phase by construction (``trainer_jobs.TRUTH``), to 1e-9 s, however loaded
the machine. A hook that stamped a time from another clock, or a phase
counted in another bucket, breaks the equality.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

from goodput_core import Calculator  # noqa: E402
from goodput_core.timeline.buckets import BadputType as B  # noqa: E402

from tests.integrations.torch import trainer_jobs as job  # noqa: E402
from tests.integrations.torch.conftest import ROOT, child_env  # noqa: E402


def _run(tmp_path, which: str, store: str) -> dict:
    folder = tmp_path / which
    folder.mkdir()
    done = subprocess.run([sys.executable, "-m", "tests.integrations.torch.trainer_jobs", which,
                           store, which, str(folder)], env=child_env(), cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    calc = Calculator(which, store)
    calc.refresh()
    r = calc.cumulative()
    assert r.disruptions == 0 and r.skipped == {} and r.max_productive_step == job.STEPS - 1
    assert set(r.custom_badput_seconds) == {"EVAL"}
    return {"productive": r.productive_seconds,
            "load": r.badput_seconds[B.DATA_LOADING_SYNC],
            "eval": r.custom_badput_seconds["EVAL"],
            "save": r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME],
            "restore": r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME],
            "wasted": r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION],
            "prep": r.badput_seconds[B.TRAINING_PREP],
            "other": r.badput_seconds[B.OTHER],
            "total": r.total_seconds,
            "steps": calc.step_stats().count}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_framework_callback_gives_the_hand_loops_buckets(tmp_path, framework):
    pytest.importorskip({"lightning": "lightning", "hf": "transformers"}[framework])
    store = str(tmp_path / "g.sqlite")
    hand = _run(tmp_path, "hand", store)
    other = _run(tmp_path, framework, store)
    for name, truth in job.TRUTH.items():
        assert hand[name] == pytest.approx(truth, abs=1e-9), (name, hand)
        assert other[name] == pytest.approx(hand[name], abs=1e-9), (name, hand, other)
    assert hand["steps"] == other["steps"]
