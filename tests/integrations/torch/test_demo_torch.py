"""``goodput demo --torch`` end to end: real torchrun, rank 1 SIGKILLed, a
restart from the last DCP checkpoint, then the report."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

from goodput_core import Calculator, open_store  # noqa: E402
from goodput_core.events import Kind  # noqa: E402
from goodput_core.timeline.buckets import BadputType as B  # noqa: E402

from tests.integrations.torch.conftest import ROOT, child_env  # noqa: E402


@pytest.mark.timeout(900)
def test_goodput_demo_torch_kills_a_rank_and_restarts_from_the_checkpoint(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "goodput_core.cli", "demo", "--torch",
                           "--outdir", str(out), "--run", "td", "--steps", "40",
                           "--save-every", "10", "--crash-at", "25"], env=child_env(),
                          cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "CRASH after step 25" in done.stdout
    assert "restored the checkpoint of step 20" in done.stdout
    store = str(out / "goodput.sqlite")
    calc = Calculator("td", store)
    calc.refresh()
    r = calc.cumulative()
    assert r.disruptions == 1 and r.max_productive_step == 39
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] > 0
    assert r.badput_seconds[B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME] > 0
    events, _ = open_store(store).read("td")
    # every rank records its own job start (rec.job() is not gated): 2 ranks x 2 attempts
    assert sum(e.kind == Kind.JOB_START for e in events) == 4
    # rank 0 was stopped by torchrun's SIGTERM, or its collective failed first
    causes = [e.extra["disruption_cause"] for e in events if e.kind == Kind.DISRUPTION]
    assert causes in (["sigterm"], ["exception:RuntimeError"])
    assert not (out / "checkpoints" / "td").exists()  # removed at the end
