"""docs/quality.md R1: a real training process recording to the embedded store is
killed with SIGKILL at random points, 10+ times, and restarted from its last
checkpoint.

The process is the demo job (:mod:`goodput_integrations.demo.train`) with a
tiny model, a recorder flush after every step (the child reports the number
of events stored after each successful flush), synchronous checkpoints every
few steps (a step reported saved is on disk) and an eval every ten steps.
The parent kills each attempt with ``os.kill(pid, SIGKILL)`` after a random
number of flush reports (a seeded RNG) plus a random number of further
messages; the child keeps running meanwhile, so the kill lands wherever it
happens to be: in a step, a SQLite transaction, a checkpoint write, an eval,
a compile. No wall-clock sleeps: the parent only waits on the child's output.
The attempts share a persistent JAX compilation cache (entries of every
size and compile time): compiling is most of an attempt's start-up.
"""

from __future__ import annotations

import collections
import random
import signal

import pytest

from goodput_core.timeline.buckets import BadputType
from goodput_core.queries.calculator import Calculator
from goodput_core.events import Kind
from goodput_core.stores.sqlite import SqliteStore
from goodput_core.cli.demo_attempts import Attempt, DemoConfig, child_env, frameworks_missing

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(bool(frameworks_missing()),
                       reason="the demo job needs jax, flax, optax, orbax-checkpoint"),
]

KILLS = 11
SEED = 20_240_611
STEPS = 400  # far more than KILLS attempts reach: every killed attempt is still training


def _config(tmp_path):
    return DemoConfig(
        store=str(tmp_path / "r1.sqlite"), run="r1", workdir=str(tmp_path / "ckpt"),
        steps=STEPS, save_every=4, crash_at=None, eval_every=10, sync_every=1,
        flush_every=1, sync_checkpoints=True, batch_size=32, features=8, hidden=16,
        log_dir=str(tmp_path / "logs"))


def _env(tmp_path):
    env = child_env()
    env.update(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax-cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
    return env


def _run_and_kill(cfg, env, number, rng):
    """Starts an attempt, kills it at a random point after it flushed >= 1 step.

    Every killed attempt has a step stored, so its crash is a restart the
    calculator must count (an attempt dying before any step is not one).
    """
    att = Attempt(cfg.options(crash=False), f"{cfg.log_dir}/attempt-{number}.log", env=env)
    flushes_before_kill = rng.randint(1, 12)
    further_messages = rng.randint(0, 3)
    flushed, countdown = 0, None
    for msg in att.read():  # read to the end: reports sent before the kill landed count
        if msg["event"] == "flushed":
            flushed += 1
            if flushed == flushes_before_kill:
                countdown = further_messages
        if countdown is not None and not att.killed:
            if countdown == 0:
                att.kill()
            countdown -= 1
    rc = att.wait(60)
    assert rc == -signal.SIGKILL, (
        f"attempt {number} was not killed (exit status {rc}): {att.log_tail()}")
    return att


def _flushed(att):
    """The most events of its own the attempt reported stored (0: none reported)."""
    return max((m["own"] for m in att.messages if m["event"] == "flushed"), default=0)


def _restored(att):
    msg = att.last("restored")
    return 0 if msg is None else msg["step"]


def test_sigkill_at_random_points_loses_nothing_flushed(tmp_path):
    rng = random.Random(SEED)
    cfg, env = _config(tmp_path), _env(tmp_path)
    killed = [_run_and_kill(cfg, env, n, rng) for n in range(1, KILLS + 1)]
    final = Attempt(cfg.options(crash=False), f"{cfg.log_dir}/attempt-final.log", env=env)
    rc = final.wait(120)
    assert rc == 0 and final.last("done") is not None, final.log_tail()
    attempts = killed + [final]

    # each attempt resumed from the last checkpoint on disk: at or after the
    # last one reported saved before it, and never past what had been trained
    saved_so_far, trained_so_far = 0, 0
    for att in attempts:
        restored = _restored(att)
        assert saved_so_far <= restored <= trained_so_far, (restored, saved_so_far)
        saved_so_far = max([restored] + [m["step"] for m in att.messages
                                         if m["event"] == "saved"])
        trained_so_far = max([restored] + [m["step"] + 1 for m in att.messages
                                           if m["event"] == "step"])
    assert _restored(final) > 0  # the job made progress across the kills

    store = SqliteStore(cfg.store)
    assert store.integrity_check()
    events, _ = store.read(cfg.run)
    # nothing twice
    dupes = [k for k, n in collections.Counter((e.attempt, e.seq) for e in events).items()
             if n > 1]
    assert not dupes
    # everything flushed before a kill is there, and every step an attempt said it
    # started (after its events were recorded, flushed or not: R17)
    seqs = collections.defaultdict(set)
    steps = collections.defaultdict(set)
    kinds = collections.defaultdict(collections.Counter)
    for e in events:
        seqs[e.attempt].add(e.seq)
        kinds[e.attempt][Kind(e.kind)] += 1
        if e.kind == Kind.STEP_START:
            steps[e.attempt].add(e.step)
    for att in killed:
        assert 0 < _flushed(att) <= len(seqs[att.attempt_id])
        said = {m["step"] for m in att.messages if m["event"] == "step"}
        missing = said - steps[att.attempt_id]
        assert not missing, f"attempt {att.attempt_id}: steps it said lost: {sorted(missing)}"
        assert kinds[att.attempt_id][Kind.JOB_START] == 1
        assert kinds[att.attempt_id][Kind.JOB_END] == 0  # a crash: no job end
        assert kinds[att.attempt_id][Kind.STEP_START] >= 1
    assert kinds[final.attempt_id][Kind.JOB_END] == 1
    assert {a.attempt_id for a in attempts} == set(seqs)  # no stray attempt

    calc = Calculator(cfg.run, store)
    calc.refresh()
    result = calc.cumulative()
    assert result.disruptions == KILLS
    assert result.max_productive_step == STEPS - 1
    bad = result.badput_seconds
    assert bad[BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] > 0
    total = result.productive_seconds + sum(
        v for k, v in bad.items() if k is not BadputType.DATA_LOADING_ASYNC)
    assert total == pytest.approx(result.total_seconds, rel=1e-9, abs=1e-9)
    assert result.total_seconds == pytest.approx(
        result.lifetime[1] - result.lifetime[0] - result.idle_seconds, rel=1e-9)
