"""A real ``jax.distributed`` job on CPU: three processes, gloo collectives,
instrumented as the README shows, every host's job start recorded before
JAX knows its index. The job's figures are process 0's; with
``per_host=True`` and one host's loader 3x slower (its first batch 1 s),
that host is the outlier and its input stalls are the job's
``DATA_LOADING_SYNC``, its first load before step 0 too (semantics rule 13).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")

from goodput_core import Calculator, open_store  # noqa: E402
from goodput_core.events import Kind  # noqa: E402
from goodput_core.timeline.buckets import BadputType as B  # noqa: E402
from goodput_core.timeline.streams import stream_indices, writer_key  # noqa: E402

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_child.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(CHILD))))
# 50 steps: each host's accelerator init (host-local time too, up to ~1 s on a
# loaded machine) must not hide a loader 3x slower than the others
HOSTS, SLOW, LOAD_S, STEPS, FIRST_S = 3, 2, 0.05, 50, 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(store: str, run: str, per_host: bool, slow: int = SLOW, steps: int = STEPS,
         first_s: float = LOAD_S * 3) -> None:
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
    procs = [subprocess.Popen([sys.executable, CHILD, store, run, str(i), str(HOSTS), str(port),
                               "1" if per_host else "0", str(slow), str(LOAD_S), str(steps),
                               str(first_s)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(HOSTS)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a jax.distributed process hung")
    codes = [p.returncode for p in procs]
    if 3 in codes or any("gloo" in o.lower() and "unavailable" in o.lower() for o in outs):
        pytest.skip("gloo CPU collectives are unavailable in this jaxlib")
    assert codes == [0] * HOSTS, "\n".join(o[-2000:] for o in outs)


def _process_alone(store: str, run: str, index: int = 0) -> Calculator:
    """A calculator of process ``index``'s own events only: its truth."""
    events, _ = open_store(store).read(run)
    mine = [k for k, i in stream_indices(events).items() if i == index]
    assert len(mine) == 1
    calc = Calculator(run)
    calc.add([e for e in events if writer_key(e) == mine[0]])
    return calc


def _sync_between(calc: Calculator, now: float, a: float, b: float) -> float:
    """The calculator's DATA_LOADING_SYNC seconds inside ``[a, b)``."""
    s, e = calc.span_arrays(now=now)["DATA_LOADING_SYNC"]
    return float((np.clip(e, a, b) - np.clip(s, a, b)).sum())


def _steps(calc: Calculator):
    """The first two step starts of the calculator's timeline."""
    return calc.timeline.tables["step_start"]["t"][:2].tolist()


def test_real_jax_distributed_job_figures_and_straggler(tmp_path):
    store = f"sqlite:///{tmp_path / 'jax.sqlite'}"
    _job(store, "per-host", per_host=True, first_s=FIRST_S)
    calc = Calculator("per-host", store)
    calc.refresh()
    now = calc.lifetime()[1] + 100
    job = calc.cumulative(now=now)
    p0 = _process_alone(store, "per-host")
    alone = p0.cumulative(now=now)
    # the job's figures are process 0's: its lifetime, no restart, nothing skipped,
    # its steps; only the straggler's waits move time to sync loading: from
    # process 0's unlabelled time before its first step, and from productive time
    assert job.disruptions == 0 and job.skipped == {}
    assert job.total_seconds == pytest.approx(alone.total_seconds, abs=1e-9)
    assert len(calc.step_stats().step_times) == len(p0.step_stats().step_times) == STEPS - 1
    moved = job.badput_seconds[B.DATA_LOADING_SYNC] - alone.badput_seconds[B.DATA_LOADING_SYNC]
    taken = (alone.productive_seconds - job.productive_seconds
             + alone.badput_seconds[B.OTHER] - job.badput_seconds[B.OTHER])
    assert taken == pytest.approx(moved, abs=1e-6)
    for b in (B.PROGRAM_STARTUP, B.TPU_INITIALIZATION):
        assert job.badput_seconds[b] == pytest.approx(alone.badput_seconds[b], abs=1e-6)
    # the straggler's first batch (1 s) is the job's: every host waited for it
    # before, or at the collective of, its step 0. Its own sync loading before
    # its first step (the load, less the compile inside it) is at least 1 s;
    # the job's before process 0's step 1 holds all of it
    slow = _process_alone(store, "per-host", SLOW)
    slow_first = _steps(slow)[0]
    slow_before = _sync_between(slow, now, slow.lifetime()[0], slow_first)
    assert slow_before >= FIRST_S
    job_first, job_second = _steps(calc)
    own_before = _sync_between(p0, now, p0.lifetime()[0], job_first)
    assert own_before < 0.5 * FIRST_S  # process 0's own first load is short
    assert _sync_between(calc, now, calc.lifetime()[0], job_second) >= slow_before - 1e-6
    # the slow host waited ~3 x 0.05 s for each of its 50 batches, the others ~0.05 s:
    # the job's sync loading is the straggler's, not process 0's
    assert job.badput_seconds[B.DATA_LOADING_SYNC] > 0.8 * STEPS * 3 * LOAD_S
    assert alone.badput_seconds[B.DATA_LOADING_SYNC] < 0.6 * STEPS * 3 * LOAD_S
    # the adapter records its loads as overlapped plus the stalls it measured
    # (rule 16), never as native blocking loads
    events, _ = open_store(store).read("per-host")
    kinds = {e.kind for e in events}
    assert int(Kind.INPUT_STALL_START) in kinds and int(Kind.DATA_LOADING_START) in kinds
    assert int(Kind.BLOCKING_LOAD_START) not in kinds
    hosts = calc.hosts()
    assert sorted(h.process_index for h in hosts.hosts) == [0, 1, 2]
    assert [(o[0], o[1]) for o in hosts.outliers] == [(SLOW, "DATA_LOADING")]

    # without per_host only process 0 writes: the same job figures from it alone
    _job(store, "lead-only", per_host=False, slow=-1, steps=10)
    calc = Calculator("lead-only", store)
    calc.refresh()
    # every process recorded its job start and end (rec.job() is not gated),
    # all under index 0; the one that recorded the training leads
    events, _ = open_store(store).read("lead-only")
    assert len(stream_indices(events)) == HOSTS
    r = calc.cumulative(now=calc.lifetime()[1] + 100)
    assert r.disruptions == 0 and r.skipped == {}
    assert r.max_productive_step == 9
    assert len(calc.step_stats().step_times) == 9
