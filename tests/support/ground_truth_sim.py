"""The ground-truth simulator (semantics.md, "The acceptance test"); its tests
are tests/core/timeline/test_ground_truth.py.

A synthetic job with known phase durations (accelerator init, preparation
with a checkpoint restore, a sync load, compile (explicit spans or a slow
first step), steps with overlapped loads, evaluations as custom events,
saves (Orbax statistics or explicit spans), crashes at chosen steps with or
without a recorded disruption, crashes before the first step (during
accelerator init, preparation or compilation; rule 2), recovery gaps,
restarts from the last checkpoint, planned stops with idle gaps, a save or an
evaluation still open at the query time (rule 14), a last attempt stopped
without a restart by Ctrl-C or SIGKILL (rule 15)) is played through the public
:class:`~goodput_core.record.recorder.Recorder` with a fake clock into a memory
store (by one writer, or by three lockstep hosts that each record the job, as
``per_host`` recording does: the later hosts learn their index after their
job start, one host's disruption stands for the job's, and the stragglers'
longer input stalls gate the job: in the steps, where each other host may
block longer (in one interval or two) and the slowest sets the job's wait,
and before the first step, where one host's first load runs on; loads
through the reference's
methods or the native context manager, blocking or overlapped), read back by a :class:`Calculator` (refreshed at random points, so
the incremental path is exercised), and every bucket must equal the true
duration to 1e-9 s.

The simulator books each phase's duration where it physically belongs; the
only rule-dependent bookkeeping is for work that was later redone (wasted)
and for the slow first step when compile time is not recorded (its excess
over the other steps is startup when the segment has another kept step to
compare with). Durations are multiples of 1/64 s, so sums are exact.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import random
import uuid
from typing import Dict, List, Optional

from hypothesis import strategies as st

from goodput_core.queries.calculator import Calculator
from goodput_core.events import Kind
from tests.support.fake_clock import FakeClock
from tests.support.host_recorders import Hosts, host_recorders

TICK = 1 / 64
HEARTBEAT_S = 1.0  # the interval the simulated lead writer's heartbeats declare
T0 = 1_700_000_000.0
PROD, HEUR = "PRODUCTIVE", "HEURISTIC_COMPILE"


@dataclasses.dataclass
class AttemptPlan:
    """One attempt of the synthetic job (durations in ticks)."""

    gap: int              # OTHER between job start and init
    tpu: int
    prep_a: int
    restore: int          # 0: no restore inside prep
    prep_b: int
    sync_load: int
    compile_mode: str     # 'explicit', 'heuristic' or 'none'
    compile: int
    step: int             # compute time of every step
    load: int             # overlapped load at the start of every step (<= step)
    eval_every: int       # 0: never
    eval: int
    save_every: int       # 0: never
    save: int
    n_steps: int          # full steps before the ending
    ending: str           # 'crash', 'end' or (last attempt only) 'open'
    partial: int          # crash: compute done in the crashed step
    disruption: bool      # crash: record_disruption at the crash
    gap_after: int        # crash: recovery gap; end: teardown + idle gap
    resume_from_ckpt: bool  # after 'end': restart from the last checkpoint
    orbax: bool           # Orbax statistics (else explicit checkpoint spans)
    orbax_no_start: bool  # Orbax save entries without a start time
    step_ends: bool       # record_step_end_time after every step
    stall: int = 0        # the load's last ticks with the device idle (<= load; rule 7)
    early_crash: str = ""  # not last: crash before any step, in 'init', 'prep' or 'compile'
    early_at: int = 0     # ticks into that phase when it crashes
    early_end: bool = False  # the phase's end is recorded at the crash (a context
                             # manager unwinding); else its start stays unmatched
    open_phase: str = ""  # last attempt, 'open': '', 'save' or 'eval' still open at the query
    stop: str = ""        # last attempt, 'open': '', 'interrupt' (Ctrl-C) or 'kill' (SIGKILL)
    load_api: str = "reference"  # 'reference' (record_data_loading_*), 'blocking'
                                 # (with rec.data_loading()) or 'overlapped'
    straggle: int = 0     # several writers: the most a host's extra input stall takes in
                          # a step followed by another (<= step - load)
    first_straggle: int = 0  # one host's extra stall after the first load, before the
                             # first step (every host waits for it)


class Span:
    def __init__(self, step: int):
        self.step = step
        self.parts: Dict[str, float] = collections.Counter()
        self.kind = "between"  # 'between', 'last' (closed), 'open', 'crash'


class Simulator:
    """Plays attempts through a Recorder and books the true durations."""

    def __init__(self, seed: int, writers: int = 1):
        self.clock = FakeClock(T0)
        self.store = f"memory://gt-{uuid.uuid4().hex}"
        self.run = "gt"
        recs = host_recorders(self.run, self.store, self.clock, writers)
        self.rec = recs[0] if writers == 1 else Hosts(recs)
        self.writers = writers
        self.calc = Calculator(self.run, self.store, clock=self.clock)
        self.rng = random.Random(seed)
        self.truth: Dict[str, float] = collections.Counter()
        self.custom: Dict[str, float] = collections.Counter()
        self.async_load = self.idle = 0.0
        self.segments: List[dict] = []
        self.ckpt: Optional[int] = None
        self.disruptions = 0
        self.unmatched = 0          # starts replaced by a later start of their kind
        self.pending: Dict[str, bool] = {}
        # kind -> (bucket, seconds) of a phase cut by a crash with a recorded
        # disruption and its end unrecorded: booked OTHER until settle() knows
        # that no later start replaced it (then it was open up to the
        # attempt's last sign of life, the disruption: rules 14-15)
        self.open_phases: Dict[str, tuple] = {}

    def started(self, kind: str) -> None:
        """A start of ``kind``: a pending one is replaced (rule 7: unmatched,
        so it is no open phase any more, rule 14)."""
        if self.pending.get(kind, False):
            self.unmatched += 1
            self.open_phases.pop(kind, None)

    def spend(self, ticks: int, label: Optional[str] = None) -> float:
        d = ticks * TICK
        self.clock.t += d
        if label:
            self.truth[label] += d
        return d

    def maybe_refresh(self) -> None:
        if self.rng.random() < 0.3:
            self.rec.flush()
            self.calc.refresh()
            self.calc.cumulative()  # forces an incremental update

    # ------------------------------------------------------------ phases
    def phase(self, kind: str, p: AttemptPlan, ticks: int, label: str, crashes: bool) -> bool:
        """A start/end phase; returns False when the attempt crashed in it."""
        getattr(self.rec, f"record_{kind}_start_time")()
        self.started(kind)
        self.pending[kind] = True
        if crashes:
            ticks = min(p.early_at, ticks)
        d = self.spend(ticks, label if not crashes or p.early_end else "OTHER")
        if crashes and not p.early_end and p.disruption:
            self.open_phases[kind] = (label, d)
        if not crashes or p.early_end:
            getattr(self.rec, f"record_{kind}_end_time")()
            self.pending[kind] = False
        if crashes:  # rule 2: a recorded disruption counts, the gap is recovery
            if p.disruption:
                self.rec.record_disruption("preemption")
                self.disruptions += 1
            self.spend(p.gap_after, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"
                       if p.disruption else "OTHER")
        return not crashes

    def attempt(self, p: AttemptPlan, first_step: int) -> None:
        rec = self.rec
        rec.record_job_start_time()
        self.spend(p.gap, "OTHER")
        if not self.phase("tpu_init", p, p.tpu, "TPU_INITIALIZATION", p.early_crash == "init"):
            return
        if p.early_crash == "prep":
            self.phase("training_preparation", p, p.prep_a, "TRAINING_PREP", True)
            return
        rec.record_training_preparation_start_time()
        self.started("training_preparation")
        self.pending["training_preparation"] = False
        self.spend(p.prep_a, "TRAINING_PREP")
        if p.restore:
            self.checkpoint(p, "restore", p.restore, self.ckpt)
        self.spend(p.prep_b, "TRAINING_PREP")
        rec.record_training_preparation_end_time()
        with self.load(p):  # outside steps: blocking whatever the API says
            self.spend(p.sync_load, "DATA_LOADING_SYNC")
        if p.early_crash == "compile":  # compiled ahead of the first step
            self.phase("program_startup", p, p.compile, "PROGRAM_STARTUP", True)
            return
        if p.first_straggle:  # one host's first load runs on: every host waits (rule 13)
            host = self.rng.randrange(self.writers)
            t = self.clock.t
            if self.writers == 1:
                self.rec.record_input_stall_start_time(t)
                self.rec.record_input_stall_end_time(t + p.first_straggle * TICK)
            else:
                self.rec.stall(host, t, t + p.first_straggle * TICK)
            self.spend(p.first_straggle, "DATA_LOADING_SYNC")
        self.maybe_refresh()
        self.straggles = {h: self.rng.choice((0, p.straggle // 2, p.straggle))
                          for h in range(1, self.writers)}
        seg = {"spans": [], "heuristic": p.compile_mode == "heuristic"}
        self.segments.append(seg)
        for i in range(p.n_steps):
            seg["spans"].append(self.step(p, first_step + i, first=(i == 0),
                                          last_step=first_step + p.n_steps - 1))
            self.maybe_refresh()
        last = first_step + p.n_steps - 1
        if p.ending == "crash":
            self.crash(p, seg, first_step + p.n_steps)
        elif p.ending == "end":
            self.end(p, seg)
        else:
            self.open(p, seg)
        seg["last"] = last

    @contextlib.contextmanager
    def load(self, p: AttemptPlan):
        """One load through the plan's API."""
        if p.load_api == "reference":
            self.rec.record_data_loading_start_time()
            yield
            self.rec.record_data_loading_end_time()
        else:
            with self.rec.data_loading(overlapped=p.load_api == "overlapped"):
                yield

    def step(self, p: AttemptPlan, s: int, first: bool, last_step: int) -> Span:
        rec, span = self.rec, Span(s)
        rec.record_step_start_time(s)
        if first and p.compile_mode == "explicit":
            rec.record_program_startup_start_time(fun_name="train_step")
            self.started("program_startup")
            self.pending["program_startup"] = False
            span.parts["PROGRAM_STARTUP"] += self.spend(p.compile)
            rec.record_program_startup_end_time(fun_name="train_step")
        with self.load(p):
            if p.load_api == "blocking":  # rule 16: the whole load blocks, even in an open step
                span.parts["DATA_LOADING_SYNC"] += self.spend(p.load - p.stall)
            else:
                span.parts[PROD] += self.spend(p.load - p.stall)
                self.async_load += (p.load - p.stall) * TICK
            if p.stall:  # an input stall: sync loading wherever it lies, even in an open step
                rec.record_input_stall_start_time()
                span.parts["DATA_LOADING_SYNC"] += self.spend(p.stall)
                rec.record_input_stall_end_time()
        if self.writers > 1 and p.straggle and s < last_step and p.compile_mode != "heuristic":
            # the other hosts' input stalls run on after the lead's load, in one
            # interval or two: the job waited for the slowest (rule 13), in a span
            # closed by the next step start (not with the startup heuristic: the
            # simulator books its excess as if every step span had the same
            # productive time)
            # (without explicit compile spans each host keeps its amount through
            # the attempt: rule 6's heuristic compares the spans' productive time)
            t, room, worst = self.clock.t, p.step - p.load, 0
            for host in range(1, self.writers):
                ticks = self.rng.choice((0, p.straggle // 2, p.straggle)) \
                    if p.compile_mode == "explicit" else self.straggles[host]
                first = ticks // 2 if ticks > 1 and self.rng.random() < 0.5 else ticks
                gap = self.rng.randint(0, room - ticks) if first < ticks else 0
                if first:
                    self.rec.stall(host, t, t + first * TICK)
                if ticks - first:
                    a = t + (first + gap) * TICK
                    self.rec.stall(host, a, a + (ticks - first) * TICK)
                worst = max(worst, ticks)
            span.parts["DATA_LOADING_SYNC"] += worst * TICK
            span.parts[PROD] -= worst * TICK
        span.parts[PROD] += self.spend(p.step - p.load)
        if first and p.compile_mode == "heuristic":
            span.parts[HEUR] += self.spend(p.compile)
        if p.eval_every and s % p.eval_every == 0:
            rec.record_custom_badput_event_start_time(custom_badput_event_type="eval")
            span.parts["CUSTOM:EVAL"] += self.spend(p.eval)
            rec.record_custom_badput_event_end_time(custom_badput_event_type="eval")
        if p.save_every and s % p.save_every == 0:
            span.parts["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] += self.checkpoint(p, "save", p.save, s)
            self.ckpt = s
        if p.step_ends:
            rec.record_step_end_time(s)
        return span

    def checkpoint(self, p: AttemptPlan, op: str, ticks: int, step: Optional[int]) -> float:
        """A blocking save or restore; returns its duration (booked by the caller
        for saves, here for restores)."""
        start = self.clock.t
        if not p.orbax:
            (self.rec.record_checkpoint_save_start_time if op == "save"
             else self.rec.record_checkpoint_restore_start_time)(step)
        d = self.spend(ticks, "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME" if op == "restore" else None)
        if not p.orbax:
            (self.rec.record_checkpoint_save_end_time if op == "save"
             else self.rec.record_checkpoint_restore_end_time)(step)
        elif op == "save":
            entry = {"event_type": "save", "step": step, "directory": "gs://b/ckpt",
                     "synchronous": False, "checkpoint_manager_blocking_duration_secs": d}
            if not p.orbax_no_start:
                entry["checkpoint_manager_blocking_start_time"] = start
            self.rec.record_checkpoint_stats(entry)
        else:
            self.rec.record_checkpoint_stats({
                "event_type": "restore", "step": step, "directory": "gs://b/ckpt",
                "checkpoint_manager_start_time": start, "checkpoint_manager_duration_secs": d})
        return d

    def crash(self, p: AttemptPlan, seg: dict, s: int) -> None:
        self.rec.record_step_start_time(s)
        span = Span(s)
        span.kind = "crash"
        seg["spans"].append(span)
        partial = self.spend(p.partial)
        if p.disruption:
            self.rec.record_disruption("preemption")
            span.parts[PROD] += partial
            span.kind = "crash_closed"
        else:
            self.truth["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] += partial
        self.spend(p.gap_after, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION")

    def end(self, p: AttemptPlan, seg: dict) -> None:
        seg["spans"][-1].kind = "last"
        teardown = self.spend(p.gap_after)
        if p.step_ends:
            self.truth["OTHER"] += teardown
        else:  # the last step is closed by the job end: teardown is part of it
            seg["spans"][-1].parts[PROD] += teardown
        self.rec.record_job_end_time()

    def open(self, p: AttemptPlan, seg: dict) -> None:
        """The last attempt has no job end: it runs at the query time, maybe
        inside a phase that is still open (rule 14), or it stopped without a
        restart (rule 15): Ctrl-C (a disruption, then a heartbeat written on
        the way out) or SIGKILL (silence after its last heartbeat)."""
        seg["spans"][-1].kind = "last" if p.step_ends else "open"
        label = "OTHER"  # nothing recorded until the query
        if p.open_phase == "save":
            self.rec.record_checkpoint_save_start_time(seg["spans"][-1].step)
            label = "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"
        elif p.open_phase == "eval":
            self.rec.record_custom_badput_event_start_time(custom_badput_event_type="eval")
            label = "CUSTOM_BADPUT_EVENTS"
        d = self.spend(p.gap_after, label)
        if label == "CUSTOM_BADPUT_EVENTS":
            self.custom["EVAL"] += d
        lead = getattr(self.rec, "lead", self.rec)  # the lead writer beats (and stops here)
        if p.stop == "interrupt":
            lead.record_disruption("exception:KeyboardInterrupt")
            self.spend(16)  # exiting: not part of the lifetime any more
            lead.record(Kind.HEARTBEAT, heartbeat_seconds=HEARTBEAT_S)
        elif p.stop == "kill":
            lead.record(Kind.HEARTBEAT, heartbeat_seconds=HEARTBEAT_S)
        if p.stop:
            self.spend(p.gap)  # dead: nothing is recorded, nothing counts

    # ---------------------------------------------------- rule bookkeeping
    def settle(self) -> int:
        """Books step spans (wasted, startup) once every segment's fate is
        known; returns the largest kept step."""
        for label, d in self.open_phases.values():  # never replaced: open phases
            self.truth["OTHER"] -= d
            self.truth[label] += d
        max_kept = 0
        for k, seg in enumerate(self.segments):
            nxt = self.segments[k + 1] if k + 1 < len(self.segments) else None
            r = nxt["spans"][0].step if nxt and nxt.get("restart") else None
            spans = seg["spans"]
            between = spans[:-1] if spans[-1].kind != "between" else spans
            kept_between = [sp for sp in between[1:] if r is None or sp.step < r]
            for i, sp in enumerate(spans):
                wasted = r is not None and sp.step >= r and sp.kind != "crash"
                for label, d in sp.parts.items():
                    if sp.kind == "open" and label in (PROD, HEUR):
                        label = "OTHER"  # the open step's time is OTHER (rule 3)
                    elif wasted:
                        label = "WASTED_PROGRESS_FROM_DISRUPTION"
                    elif label == HEUR:
                        label = "PROGRAM_STARTUP" if kept_between else PROD
                    if label.startswith("CUSTOM:"):
                        self.custom[label[7:]] += d
                        label = "CUSTOM_BADPUT_EVENTS"
                    self.truth[label] += d
            done = seg["last"] if spans[-1].kind == "last" else seg["last"] - 1
            if spans[-1].kind.startswith("crash"):
                done = spans[-1].step - 1
            kept = min(done, r - 1) if r is not None else done
            if kept >= spans[0].step:
                max_kept = max(max_kept, kept)
        return max_kept

    def play(self, plans: List[AttemptPlan]) -> None:
        """Plays the attempts; decides where each one resumes."""
        before: Optional[AttemptPlan] = None  # the plan of the last attempt with steps
        for i, p in enumerate(plans):
            first, restart = 0, False
            if before is not None:
                prev = self.segments[-1]
                prev_step = prev["spans"][-1].step
                crashed = prev["spans"][-1].kind.startswith("crash")
                ckpt = self.ckpt
                if crashed:  # restart from the last checkpoint (or from scratch)
                    first = ckpt + 1 if ckpt is not None else 0
                else:  # planned stop: idle, then resume after the last step
                    if plans[i - 1] is before:  # (an early crash already spent its gap)
                        self.idle += self.spend(before.gap_after)
                    first = prev_step + 1
                    if before.resume_from_ckpt and ckpt is not None and ckpt < prev_step:
                        first = ckpt + 1
                restart = crashed or first <= prev_step
            self.attempt(p, first)
            if p.early_crash:
                continue  # no steps: no segment (its disruption is counted in phase())
            self.disruptions += restart
            self.segments[-1]["restart"] = restart
            before = p


def _plan(draw, last: bool) -> AttemptPlan:
    ticks = st.integers(0, 200)
    step = draw(st.integers(8, 120))
    ending = draw(st.sampled_from(["end", "open"] if last else ["crash", "end"]))
    return AttemptPlan(
        gap=draw(ticks), tpu=draw(ticks), prep_a=draw(ticks),
        restore=draw(st.sampled_from([0, 0, 30, 90])), prep_b=draw(ticks),
        sync_load=draw(st.integers(1, 100)),
        compile_mode=draw(st.sampled_from(["explicit", "heuristic", "none"])),
        compile=draw(st.integers(1, 600)), step=step, load=(load := draw(st.integers(0, step))),
        stall=draw(st.sampled_from([0, 0, load // 2, load])),
        eval_every=draw(st.sampled_from([0, 3, 5])), eval=draw(st.integers(1, 100)),
        save_every=draw(st.sampled_from([0, 2, 4])), save=draw(st.integers(1, 50)),
        n_steps=draw(st.integers(1, 12)), ending=ending, partial=draw(st.integers(0, step)),
        disruption=draw(st.booleans()), gap_after=draw(st.integers(1, 500)),
        resume_from_ckpt=draw(st.booleans()), orbax=draw(st.booleans()),
        orbax_no_start=draw(st.booleans()), step_ends=draw(st.booleans()),
        early_crash="" if last else draw(st.sampled_from(["", "", "init", "prep", "compile"])),
        early_at=draw(ticks), early_end=draw(st.booleans()),
        open_phase=draw(st.sampled_from(["", "save", "eval"])) if last else "",
        stop=draw(st.sampled_from(["", "interrupt", "kill"])) if last else "",
        load_api=draw(st.sampled_from(["reference", "blocking", "overlapped"])),
        straggle=draw(st.sampled_from([0, (step - load) // 2, step - load])),
        first_straggle=draw(st.sampled_from([0, 0, 1, 16, 64])))


@st.composite
def jobs(draw):
    n = draw(st.integers(1, 4))
    return ([_plan(draw, last=(i == n - 1)) for i in range(n)], draw(st.integers(0, 2 ** 31)),
            draw(st.sampled_from([1, 3])))
