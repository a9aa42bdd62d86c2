"""Step times kept incrementally equal the full computation, whatever arrives when.

The Calculator keeps step times incrementally (only the spans its timeline
may still change are recomputed); after every batch they must equal
:func:`step_times` computed from scratch over the same timeline, through
restarts, step ends, sparse steps, late events from another host and
events old enough to make the timeline rebuild everything.
"""

import random

import numpy as np
import pytest

from goodput_core.events import EventRecord, Kind
from goodput_core.queries.calculator import Calculator
from goodput_core.queries.step_stats import step_times

RUN = "inc"


def _job(rng, attempts=4, steps=300):
    """Events of a job with crashes and restarts from checkpoints, sparse
    steps, step ends and data loads (times increasing within each attempt)."""
    out, t, step = [], 1000.0, 0
    for a in range(attempts):
        out.append(EventRecord(RUN, int(Kind.JOB_START), t))
        t += 5.0
        for _ in range(steps):
            out.append(EventRecord(RUN, int(Kind.STEP_START), t, step))
            if rng.random() < 0.1:
                out.append(EventRecord(RUN, int(Kind.STEP_END), t + 0.5, step))
            t += rng.uniform(0.8, 1.2)
            step += rng.choice((1, 1, 1, 2, 5))  # sparse logging now and then
        if a < attempts - 1:
            step = max(0, step - rng.randint(1, 50))  # restart from a checkpoint
            t += 20.0
    out.append(EventRecord(RUN, int(Kind.STEP_END), t, step))
    out.append(EventRecord(RUN, int(Kind.JOB_END), t + 1.0))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_incremental_step_times_equal_the_full_computation(seed):
    rng = random.Random(seed)
    events = _job(rng)
    if seed % 2:  # late events: a few arrive long after their time (another host)
        late = set(rng.sample(range(len(events) // 2), 15))
        moved = [events[i] for i in sorted(late)]
        events = [e for i, e in enumerate(events) if i not in late]
        for e in moved:
            events.insert(rng.randrange(len(events) // 2, len(events)), e)
    calc = Calculator(RUN)
    pos, checks, rebuilds = 0, 0, set()
    while pos < len(events):
        n = rng.choice((1, 3, 17, 60))
        calc.add(events[pos:pos + n])
        pos += n
        got = calc.step_stats()
        full_steps, full_times = step_times(calc._tl)  # from scratch
        assert got.steps.tolist() == full_steps.tolist()
        np.testing.assert_array_equal(got.step_times, full_times)
        rebuilds.add(calc._tl.full_rebuilds)
        checks += 1
    assert checks > 50 and len(got.steps) > 500
    if seed % 2:
        assert max(rebuilds) > 0  # the late events made the timeline start afresh
    # the incremental path was taken: the base holds frozen steps
    assert len(calc._step_times._steps) > 0
