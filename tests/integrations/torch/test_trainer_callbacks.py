"""Lightning and the Hugging Face Trainer give the same buckets as the same job
instrumented by hand (tests/integrations/torch/trainer_jobs.py: one job whose
loads, forward passes, evaluations and checkpoints take known times).

Each run is a real framework run on the CPU, in its own process. Every bucket
holds at least the time the job spent there by construction, and agrees with
the hand-instrumented loop's to within 25 % (+ 50 ms): the frameworks do a
little more in each phase than the hand loop (Lightning's checkpoint also
holds the optimizer and loop state; both run hooks and logging between
steps), and that shows, but nothing lands in another bucket.
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
            "steps": calc.step_stats().count}


# what the job spends in each bucket by construction (a lower bound)
EVALS = job.STEPS // job.EVERY
FLOOR = {"productive": job.STEPS * job.STEP_S,
         "load": job.STEPS * job.LOAD_S,
         "eval": EVALS * job.EVAL_BATCHES * (job.LOAD_S + job.STEP_S),
         "save": EVALS * job.SAVE_S}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_framework_callback_gives_the_hand_loops_buckets(tmp_path, framework):
    pytest.importorskip({"lightning": "lightning", "hf": "transformers"}[framework])
    store = str(tmp_path / "g.sqlite")
    hand = _run(tmp_path, "hand", store)
    other = _run(tmp_path, framework, store)
    for name, floor in FLOOR.items():
        assert hand[name] >= 0.99 * floor, (name, hand)
        assert other[name] >= 0.99 * floor, (name, other)
        assert other[name] == pytest.approx(hand[name], rel=0.25, abs=0.05), (name, hand, other)
    for name in ("restore", "wasted"):
        assert hand[name] == other[name] == 0.0
    assert hand["steps"] == other["steps"]
