"""Runs written event by event for the checkpoint-advice tests (10 s steps,
12 s saves between steps), so that every input of the advice is derived by
hand."""

from __future__ import annotations

from goodput_core import Calculator
from goodput_core.events import EventRecord, Kind

STEP, SAVE = 10.0, 12.0


class AdviceRun:
    """Writes a run: 10 s steps, 12 s saves between steps."""

    def __init__(self):
        self.events = []
        self.t = 0.0

    def ev(self, kind, t=None, step=None, extra=None):
        self.events.append(EventRecord("adv", int(kind), float(self.t if t is None else t), step,
                                       extra))

    def steps(self, first, last):
        for k in range(first, last + 1):
            self.ev(Kind.STEP_START, step=k)
            self.t += STEP

    def save(self, step):
        self.ev(Kind.CHECKPOINT_SAVE_START, step=step)
        self.t += SAVE
        self.ev(Kind.CHECKPOINT_SAVE_END, step=step)

    def phase(self, start, end, seconds):
        self.ev(start)
        self.t += seconds
        self.ev(end)

    def calc(self):
        c = Calculator()
        c.add(self.events)
        return c


def two_attempts():
    """Attempt 1 from 0: steps 0-9, save, 10-19, save, 20-49, save, 50-54, a
    save cut by a SIGKILL 4 s after it started. Attempt 2 from 700: TPU init
    10 s, preparation 10 s, restore 20 s, compile 10 s, then steps 50-59, save,
    60-69, save, step 70, job end.

    Times: saves start at 100, 212, 524 (attempt 1: 10 steps of 10 s, +12 s per
    save before), the cut save at 586, the disruption at 590; attempt 2's step
    50 at 750, saves at 850 and 962, step 70 at 974, job end 984."""
    r = AdviceRun()
    r.ev(Kind.JOB_START)
    r.steps(0, 9), r.save(9), r.steps(10, 19), r.save(19), r.steps(20, 49), r.save(49)
    r.steps(50, 54)
    r.ev(Kind.CHECKPOINT_SAVE_START, step=54)
    assert r.t == 586.0
    r.ev(Kind.DISRUPTION, 590.0, extra={"disruption_cause": "sigkill"})
    r.t = 700.0
    r.ev(Kind.JOB_START)
    r.phase(Kind.TPU_INIT_START, Kind.TPU_INIT_END, 10.0)
    r.phase(Kind.TRAINING_PREP_START, Kind.TRAINING_PREP_END, 10.0)
    r.phase(Kind.CHECKPOINT_RESTORE_START, Kind.CHECKPOINT_RESTORE_END, 20.0)
    r.phase(Kind.PROGRAM_STARTUP_START, Kind.PROGRAM_STARTUP_END, 10.0)
    r.steps(50, 59), r.save(59), r.steps(60, 69), r.save(69), r.steps(70, 70)
    r.ev(Kind.STEP_END, step=70)
    r.ev(Kind.JOB_END)
    assert r.t == 984.0
    return r
