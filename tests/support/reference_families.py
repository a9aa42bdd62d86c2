"""Well-formed payload streams for the five families of the compatibility contract.

semantics.md promises agreement with ml-goodput-measurement 0.2.3 (1e-6
relative) on: (1) a clean run, (2) the same with a compile-heavy first step,
(3) restarts that re-record an already seen step with a new job start, (4)
custom badput events inside ordinary steps, (5) Orbax saves at distinct steps
inside steps. Each generator here returns ``(payloads, query_time, expected)``:

* ``payloads``: reference-format dicts in write order (Orbax entries included,
  as Orbax's cloud logger writes them: its statistics fields, then
  ``job_name``), accepted by both the reference and
  ``goodput_core.events.from_payload``;
* ``query_time``: a POSIX time after the job's end;
* ``expected``: the ground truth the generator built in, in seconds:
  ``total_seconds``, ``productive_seconds``, ``buckets`` (every base bucket
  name -> seconds, ``CUSTOM_BADPUT_EVENTS`` a dict), ``max_productive_step``,
  ``disruptions``, plus ``family``, ``job_name``, ``seed`` and ``notes`` (why
  the stream is shaped the way it is: each note names a reference quirk the
  family steers clear of, with the semantics.md rule that marks it).

Every time is a multiple of 1/64 s on an integral epoch, so sums and
differences are exact in binary floating point and survive the reference's
round trip through ``datetime`` (1 us resolution) unchanged.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = [
    "FAMILIES",
    "clean_run",
    "compile_heavy_run",
    "custom_event_run",
    "orbax_save_run",
    "restart_run",
]

T0 = 1_700_000_000.0
_TICK = 64  # times are multiples of 1/_TICK seconds

Family = Tuple[List[Dict[str, Any]], float, Dict[str, Any]]


def _q(rng: random.Random, lo: float, hi: float) -> float:
    """A random duration in [lo, hi], on the 1/64 s grid."""
    return rng.randint(round(lo * _TICK), round(hi * _TICK)) / _TICK


class _Job:
    """Writes payloads in order and keeps the ground truth as it goes."""

    def __init__(self, family: str, seed: int):
        self.job = f"ref-{family}-{seed}"
        self.family, self.seed = family, seed
        self.payloads: List[Dict[str, Any]] = []
        self.buckets: Dict[str, Any] = {
            "TPU_INITIALIZATION": 0.0, "TRAINING_PREP": 0.0, "PROGRAM_STARTUP": 0.0,
            "DATA_LOADING_SYNC": 0.0, "DATA_LOADING_ASYNC": 0.0,
            "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 0.0, "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 0.0,
            "WASTED_PROGRESS_FROM_DISRUPTION": 0.0, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 0.0,
            "CUSTOM_BADPUT_EVENTS": {}, "OTHER": 0.0,
        }
        self.notes: List[str] = []
        self.start = self.end = None
        self.disruptions = 0

    def put(self, **fields: Any) -> None:
        self.payloads.append({"job_name": self.job, **fields})

    def span(self, kind: str, a: float, b: float, bucket: Optional[str] = None) -> None:
        """A start/end pair of ``kind`` (e.g. 'tpu_init'), counted in ``bucket``."""
        self.put(**{f"{kind}_start_time": a})
        self.put(**{f"{kind}_end_time": b})
        if bucket:
            self.buckets[bucket] += b - a

    def custom(self, a: float, b: float, event_type: str) -> None:
        self.put(custom_badput_event_type=event_type, custom_badput_event_start_time=a)
        self.put(custom_badput_event_type=event_type, custom_badput_event_end_time=b)
        per_type = self.buckets["CUSTOM_BADPUT_EVENTS"]
        per_type[event_type.upper()] = per_type.get(event_type.upper(), 0.0) + (b - a)

    def orbax_save(self, rng: random.Random, step: int, a: float, blocking: float,
                   previous: Optional[float]) -> None:
        """An Orbax ``SaveStepStatistics`` entry whose blocking part is [a, a+blocking]."""
        wait, get_old = blocking / 8, blocking / 16
        checkpointer = blocking - wait - get_old - _q(rng, 0, blocking / 8)
        self.payloads.append({
            "step": step, "event_type": "save", "directory": "gs://bucket/checkpoints",
            "reached_preemption": False, "preemption_received_at": None, "synchronous": False,
            "wait_for_prev_start_time": a, "wait_for_prev_duration_secs": wait,
            "time_between_consecutive_saves_sec": None if previous is None else a - previous,
            "checkpointer_blocking_start_time": a + wait,
            "checkpointer_blocking_duration_secs": checkpointer,
            "get_old_steps_start_time": a + wait + checkpointer,
            "get_old_steps_duration_secs": get_old,
            "checkpoint_manager_blocking_start_time": a,
            "checkpoint_manager_blocking_duration_secs": blocking,
            "job_name": self.job,  # Orbax's CloudLogger appends it last
        })
        self.buckets["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] += blocking

    def attempt_prologue(self, rng: random.Random, t: float, load: bool = True) -> float:
        """Job start, accelerator init, training prep, the blocking first load."""
        self.start = t if self.start is None else self.start
        self.put(job_start_time=t)
        for kind, bucket, lo, hi in (("tpu_init", "TPU_INITIALIZATION", 0.5, 3.0),
                                     ("training_prep", "TRAINING_PREP", 1.0, 5.0),
                                     ("data_loading", "DATA_LOADING_SYNC", 0.25, 2.0)):
            if kind == "data_loading" and not load:
                continue
            d = _q(rng, lo, hi)
            self.span(kind, t, t + d, bucket)
            t += d
        return t

    def finish(self, t: float, rng: random.Random, max_step: int, productive: float) -> Family:
        self.put(job_end_time=t)
        self.end = t
        total = self.end - self.start
        assert abs(total - productive - _flat_badput(self.buckets)) < 1e-9, "family partition"
        expected = {
            "family": self.family, "job_name": self.job, "seed": self.seed,
            "total_seconds": total, "productive_seconds": productive,
            "buckets": self.buckets, "max_productive_step": max_step,
            "disruptions": self.disruptions, "notes": self.notes,
        }
        return self.payloads, t + _q(rng, 0, 60), expected


def _flat_badput(buckets: Dict[str, Any]) -> float:
    total = 0.0
    for name, value in buckets.items():
        if name == "DATA_LOADING_ASYNC":
            continue  # overlapped with steps: not part of the partition
        total += sum(value.values()) if isinstance(value, dict) else value
    return total


def _startup_excess(first: float, others: List[float]) -> float:
    """semantics.md rule 6 / the reference heuristic on kept, carved step spans."""
    if not others:
        return 0.0
    return max(0.0, first - sum(others) / len(others))


def _steps(job: _Job, rng: random.Random, t: float, steps: range, step_time,
           first_extra: float = 0.0, loads: bool = True,
           inside: Optional[Callable[[int, float, float], float]] = None) -> Tuple[float, List[float]]:
    """Records ``steps`` starting at t; returns (end time, productive part of each step).

    ``inside(k, a, b)`` may record badput inside step k's span [a, b] and
    returns how much it recorded (added to the span, not productive).
    """
    productive = []
    for i, k in enumerate(steps):
        job.put(step_count=k, step_start_time=t)
        work = _q(rng, *step_time) + (first_extra if i == 0 else 0.0)
        if loads:  # an overlapped load somewhere inside the step's work
            d = _q(rng, 1 / _TICK, work / 4)
            a = t + _q(rng, 0, work - d)
            job.span("data_loading", a, a + d, "DATA_LOADING_ASYNC")
        extra = inside(k, t, t + work) if inside else 0.0
        productive.append(work)
        t += work + extra
    return t, productive


def _single_segment(job: _Job, rng: random.Random, t: float, steps: int, step_time,
                    first_extra: float = 0.0, inside=None) -> Family:
    t, work = _steps(job, rng, t, range(steps), step_time, first_extra, inside=inside)
    # The last span is closed by the job end and is not in the heuristic's mean.
    startup = _startup_excess(work[0], work[1:-1])
    job.buckets["PROGRAM_STARTUP"] += startup
    return job.finish(t, rng, steps - 1, sum(work) - startup)


def clean_run(seed: int = 0, *, steps: int = 20, step_time=(0.5, 2.0)) -> Family:
    """Init, prep, a blocking first load, ``steps`` steps each with an overlapped load, job end."""
    rng, job = random.Random(seed), _Job("clean", seed)
    t = job.attempt_prologue(rng, T0)
    return _single_segment(job, rng, t, steps, step_time)


def compile_heavy_run(seed: int = 0, *, steps: int = 20, step_time=(0.5, 2.0),
                      compile_time=(5.0, 60.0)) -> Family:
    """As :func:`clean_run`, the first step carrying ``compile_time`` of tracing/compilation."""
    rng, job = random.Random(seed), _Job("compile_heavy", seed)
    t = job.attempt_prologue(rng, T0)
    return _single_segment(job, rng, t, steps, step_time, first_extra=_q(rng, *compile_time))


def restart_run(seed: int = 0, *, steps: int = 30, restarts: int = 2, step_time=(0.5, 2.0),
                loads_after_restart: bool = False) -> Family:
    """Crashes without job end, each followed by a new attempt that re-records a seen step.

    Every attempt runs init and prep before its first step; the first two
    attempts also a blocking load. The restart step r lies after the crashed
    segment's first step and at or before its last recorded step. The crashed
    step itself records no load (its time is recovery).

    At every restart the reference adds the latest data load to
    DATA_LOADING_SYNC again and counts the next load as sync too (rule 7):
    ``loads_after_restart=True`` adds overlapped loads to restarted segments
    and a blocking load to every attempt, after which ``expected`` (our
    semantics) no longer matches the reference.
    """
    rng, job = random.Random(seed), _Job("restart", seed)
    job.notes.append("restart step r > first step of the crashed segment: the reference "
                     "records nothing for a restart at step 0 (rule 4)")
    if not loads_after_restart:
        job.notes.append("no overlapped loads after a restart and no blocking load after the "
                         "second attempt: the reference re-books the latest load as "
                         "DATA_LOADING_SYNC at each restart and counts the next load as sync "
                         "(rule 7), which double counts them")
    t, first, productive = job.attempt_prologue(rng, T0), 0, 0.0
    for attempt in range(restarts + 1):
        final = attempt == restarts
        last = steps - 1 if final else min(rng.randint(first + 2, first + 2 + steps // 3), steps - 2)
        assert first < last, "too many restarts for the number of steps"
        starts, work = [], []
        for k in range(first, last + 1):  # one step at a time to keep its start time
            starts.append(t)
            # The crashed step gets no load: its time belongs to the recovery.
            t, w = _steps(job, rng, t, range(k, k + 1), step_time,
                          first_extra=_q(rng, 2.0, 10.0) if k == first else 0.0,
                          loads=(attempt == 0 or loads_after_restart) and (final or k < last))
            work += w
        if final:
            startup = _startup_excess(work[0], work[1:-1])
            productive += sum(work) - startup
            job.buckets["PROGRAM_STARTUP"] += startup
            return job.finish(t, rng, steps - 1, productive)
        # Crash inside step `last`, then a new attempt restarting at r.
        r = rng.randint(first + 1, last)
        kept = work[:r - first]  # spans of steps first .. r-1
        startup = _startup_excess(kept[0], kept[1:])
        productive += sum(kept) - startup
        job.buckets["PROGRAM_STARTUP"] += startup
        job.buckets["WASTED_PROGRESS_FROM_DISRUPTION"] += starts[-1] - starts[r - first]
        restart_at = starts[-1] + _q(rng, 0.0, work[-1]) + _q(rng, 5.0, 120.0)
        job.buckets["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] += restart_at - starts[-1]
        job.disruptions += 1
        t = job.attempt_prologue(rng, restart_at, load=loads_after_restart or attempt == 0)
        first = r
    raise AssertionError("unreachable")


def custom_event_run(seed: int = 0, *, steps: int = 20, step_time=(0.5, 2.0),
                     event_types=("eval", "sdc_check"), every: int = 4) -> Family:
    """A clean run with a custom badput event inside every ``every``-th step.

    Events sit strictly inside steps 1 .. steps-2: the reference ignores an
    event in the last step (the span closed by the job end), and one that
    crosses a step boundary (rule 5).
    """
    rng, job = random.Random(seed), _Job("custom_events", seed)
    job.notes.append("custom events only inside steps 1..n-2: the reference ignores one in the "
                     "last step and one that crosses a step start (rule 5)")

    def inside(k: int, a: float, b: float) -> float:
        if k == 0 or k >= steps - 1 or k % every:
            return 0.0
        d = _q(rng, 0.25, 5.0)
        offset = _q(rng, 0, b - a)
        job.custom(a + offset, a + offset + d, event_types[(k // every) % len(event_types)])
        return d

    t = job.attempt_prologue(rng, T0)
    return _single_segment(job, rng, t, steps, step_time, inside=inside)


def orbax_save_run(seed: int = 0, *, steps: int = 20, step_time=(0.5, 2.0),
                   save_every: int = 5) -> Family:
    """A clean run with an Orbax save blocking inside every ``save_every``-th step (not step 0).

    The first step takes no longer than any other step's productive part: the
    reference averages step times before it subtracts save time, we carve the
    saves out first, and the two agree only when the first step has no excess.
    """
    rng, job = random.Random(seed), _Job("orbax_saves", seed)
    job.notes.append("first step without excess: the reference's startup heuristic averages "
                     "step times that still include save time (compatibility contract note)")
    job.notes.append("saves at distinct steps: the reference averages entries of the same step")
    previous: List[float] = []

    def inside(k: int, a: float, b: float) -> float:
        if k == 0 or k % save_every:
            return 0.0
        blocking = _q(rng, 0.5, 8.0)
        job.orbax_save(rng, k, b, blocking, previous[-1] if previous else None)
        previous.append(b)
        return blocking

    t = job.attempt_prologue(rng, T0)
    return _orbax_segment(job, rng, t, steps, step_time, inside)


def _orbax_segment(job: _Job, rng: random.Random, t: float, steps: int, step_time, inside) -> Family:
    lo, hi = step_time
    t, work0 = _steps(job, rng, t, range(1), (lo, lo))  # step 0: the shortest step time
    t, work = _steps(job, rng, t, range(1, steps), (lo, hi), inside=inside)
    work = work0 + work
    startup = _startup_excess(work[0], work[1:-1])
    assert startup == 0.0
    return job.finish(t, rng, steps - 1, sum(work))


FAMILIES: Dict[str, Callable[..., Family]] = {
    "clean": clean_run,
    "compile_heavy": compile_heavy_run,
    "restart": restart_run,
    "custom_events": custom_event_run,
    "orbax_saves": orbax_save_run,
}
