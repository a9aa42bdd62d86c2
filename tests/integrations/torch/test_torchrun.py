"""The example loop under real torchrun on the CPU (two ranks, gloo, DDP).

* One rank's loader 3x slower, ``per_host=True``: the job's figures are rank
  0's, its input stalls the straggler's (semantics rule 13), and the slow
  rank is the one named.
* One rank killed with SIGKILL under ``--max-restarts 1``: exactly one
  disruption, and the steps done after the last DCP checkpoint are redone
  by the restarted workers (wasted progress), the restart resuming at the
  checkpoint's step.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

from goodput_core import Calculator, open_store  # noqa: E402
from goodput_core.events import Kind  # noqa: E402
from goodput_core.timeline.buckets import BadputType as B  # noqa: E402
from goodput_core.timeline.streams import stream_indices, writer_key  # noqa: E402

from tests.integrations.torch.conftest import EXAMPLE, child_env, read_truth  # noqa: E402

LOAD_MS, STEPS = 40.0, 40


def torchrun(tmp_path, *args: str, restarts: int = 0, timeout: float = 600) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "2", "--max-restarts", str(restarts), "--monitor-interval", "0.1",
           str(EXAMPLE), *args]
    done = subprocess.run(cmd, env=child_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done.stdout + done.stderr


def _common(tmp_path, store: str, run: str, steps: int = STEPS):
    return ["--store", store, "--run-name", run, "--ckpt-dir", str(tmp_path / f"ckpt-{run}"),
            "--steps", str(steps), "--compile", "aot_eager", "--workers", "0",
            "--load-ms", str(LOAD_MS), "--truth", str(tmp_path / run)]


def _rank0_alone(store: str, run: str) -> Calculator:
    """A calculator of rank 0's own events only: its truth as the engine sees it."""
    events, _ = open_store(store).read(run)
    zero = [k for k, i in stream_indices(events).items() if i == 0]
    assert len(zero) == 1
    calc = Calculator(run)
    calc.add([e for e in events if writer_key(e) == zero[0]])
    return calc


@pytest.mark.timeout(900)
def test_torchrun_straggler_job_figures_are_rank0s_with_the_slow_ranks_stalls(tmp_path):
    store = str(tmp_path / "g.sqlite")
    (tmp_path / "slow").mkdir()
    torchrun(tmp_path, *_common(tmp_path, store, "slow"), "--per-host", "--slow-rank", "1",
             "--slow-factor", "3", "--save-every", "20")
    truth = read_truth(tmp_path / "slow")
    fast, slow = truth["truth-r0-a0"]["spans"], truth["truth-r1-a0"]["spans"]
    calc = Calculator("slow", store)
    calc.refresh()
    job = calc.cumulative()
    assert job.disruptions == 0 and job.skipped == {} and job.max_productive_step == STEPS - 1
    # the job's lifetime is rank 0's (its job start to its job end)
    t0, t1 = truth["truth-r0-a0"]["job"]
    assert job.total_seconds == pytest.approx(t1 - t0, rel=0.01)
    # the job waited, in each step, for the slower of the two loaders; before
    # the first step for rank 0's (or, once stragglers before the first step
    # gate the job too, the slower's: within the tolerance either way)
    first = min(s["t0"] for s in fast["step"])
    before = sum(s["t1"] - s["t0"] for s in fast["load"] if s["t1"] <= first)
    by_step = {}
    for spans in (fast, slow):
        # in time order: iter(), batch 0 (before step 0), then batch k+1 inside step k
        loads = sorted(spans["load"], key=lambda s: s["t0"])[2:]
        for k, s in enumerate(loads):
            by_step[k] = max(by_step.get(k, 0.0), s["t1"] - s["t0"])
    expected = before + sum(by_step.values())
    sync = job.badput_seconds[B.DATA_LOADING_SYNC]
    assert sync == pytest.approx(expected, rel=0.05)
    # rank 0 alone saw only its own loads: 3x less than the job's
    alone = _rank0_alone(store, "slow").cumulative()
    own = sum(s["t1"] - s["t0"] for s in fast["load"])
    assert alone.badput_seconds[B.DATA_LOADING_SYNC] == pytest.approx(own, rel=0.05)
    assert sync > 2 * alone.badput_seconds[B.DATA_LOADING_SYNC]
    # what moved into sync loading came out of rank 0's productive time, but
    # for the wait before the first step (rule 13: the slower rank's first load
    # gates the job), which comes out of rank 0's time before its first step
    moved = sync - alone.badput_seconds[B.DATA_LOADING_SYNC]
    slow_first = min(s["t0"] for s in slow["step"])
    slow_before = sum(s["t1"] - s["t0"] for s in slow["load"] if s["t1"] <= slow_first)
    from_productive = alone.productive_seconds - job.productive_seconds
    assert -1e-6 <= moved - from_productive <= 1.05 * max(0.0, slow_before - before) + 1e-3
    assert job.total_seconds == pytest.approx(alone.total_seconds, abs=1e-6)
    # the slow rank is named: the per-host breakdown gives each rank's own
    # loading, rank 1's 3x rank 0's. (The outlier rule itself compares a host
    # with the median host and, by design, names none among two hosts: there
    # is no majority; test_torchrun_three_ranks_name_the_slow_one.)
    hosts = calc.hosts()
    assert sorted(h.process_index for h in hosts.hosts) == [0, 1]
    loading = {h.process_index: h.seconds["DATA_LOADING"] for h in hosts.hosts}
    assert max(loading, key=loading.get) == 1
    assert loading[1] == pytest.approx(sum(s["t1"] - s["t0"] for s in slow["load"]), rel=0.05)
    assert loading[1] > 2 * loading[0]


@pytest.mark.timeout(900)
def test_torchrun_sigkill_of_a_rank_is_one_disruption_redone_from_the_last_checkpoint(tmp_path):
    store = str(tmp_path / "g.sqlite")
    (tmp_path / "kill").mkdir()
    kill_at, save_every = 25, 10
    out = torchrun(tmp_path, *_common(tmp_path, store, "kill"), "--save-every", str(save_every),
                   "--kill-at", str(kill_at), "--kill-rank", "1", restarts=1)
    assert "steps 20..39 done" in out
    events, _ = open_store(store).read("kill")
    # one disruption: rank 0 recorded how it was stopped (torchrun's SIGTERM or
    # the collective that failed with its peer gone); rank 1 died without a word
    disruptions = [e for e in events if e.kind == Kind.DISRUPTION]
    assert len(disruptions) == 1, [e.extra for e in disruptions]
    calc = Calculator("kill", store)
    calc.refresh()
    r = calc.cumulative()
    assert r.disruptions == 1 and r.max_productive_step == STEPS - 1
    # the restart resumed at the last DCP checkpoint (step 20)...
    truth = read_truth(tmp_path / "kill")
    assert truth["truth-r0-a1"]["job"][0] is not None
    assert min(s["step"] for s in truth["truth-r0-a1"]["spans"]["step"]) == 20
    assert len(truth["truth-r0-a1"]["spans"]["restore"]) == 1
    assert len([e for e in events if e.kind == Kind.CHECKPOINT_RESTORE_END]) == 1
    # ...so rank 0's steps from 20 on were redone: wasted progress (rule 4),
    # from step 20's start to the end of the last step rank 0 started. Where
    # that step ends depends on where torchrun's SIGTERM (sent at its monitor's
    # next tick after rank 1 died) found rank 0: inside the step, blocked in
    # the collective that failed with rank 1 gone (an exception: the step ends
    # at the disruption, rule 4), or in the load after a finished step (the
    # step ends at its step end, rule 3; the interrupted load is recorded by
    # nobody)
    first = truth["truth-r0-a0"]["spans"]["step"]
    starts = {s["step"]: s["t0"] for s in first}
    done = {s["step"]: s["t1"] for s in first}
    assert max(starts) >= kill_at
    stopped = disruptions[0].time
    last = max(e.step for e in events if e.kind == Kind.STEP_START and e.time <= stopped)
    wasted = done.get(last, stopped) - starts[20]
    assert r.badput_seconds[B.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(wasted, rel=0.05)
    assert r.badput_seconds[B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] > 0
