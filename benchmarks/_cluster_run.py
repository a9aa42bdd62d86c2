"""A run recorded by many writer processes (semantics rule 13), for
``bench_many_writers.py --writers``: one job of about ``events`` events
written by ``writers`` hosts in lockstep, with ``restarts`` restarts (every
host starts a new process: a new pid and job start), a disruption recorded
by the last host only before each restart (the lead borrows it), each
host's blocking load a little longer than the previous host's (a straggler
in every step: the lead's steps get carved stalls) and, in 1 % of steps, a
load 0.3 s longer on one host; each restart resumes a third of a segment
back. Deterministic (seeded)."""

from __future__ import annotations

import random

from goodput_core.events import EventRecord, Kind


def cluster_run(events: int, writers: int, restarts: int = 5, seed: int = 1) -> list:
    rnd = random.Random(seed)
    steps = max(1, (events // writers - 2 * (restarts + 1)) // 5)
    segment = max(1, steps // (restarts + 1))
    out = []
    for host in range(writers):
        seq = iter(range(1, 1 << 62))
        t, step = 0.0, 0
        for attempt in range(restarts + 1):
            pid = 1000 + host + 100_000 * attempt

            def ev(kind, when, k=None):
                return EventRecord("bench", int(kind), when, k, None, host, f"host{host}", pid,
                                   "a", next(seq), when)

            out.append(ev(Kind.JOB_START, t))
            for _ in range(segment):
                t += 1.0
                load = 0.1 + 0.01 * host + (0.3 if rnd.random() < 0.01 else 0.0)
                out += [ev(Kind.STEP_START, t, step), ev(Kind.DATA_LOADING_START, t + 0.5),
                        ev(Kind.BLOCKING_LOAD_START, t + 0.5),
                        ev(Kind.BLOCKING_LOAD_END, t + 0.5 + load),
                        ev(Kind.DATA_LOADING_END, t + 0.5 + load)]
                step += 1
            if attempt < restarts:
                if host == writers - 1:
                    out.append(ev(Kind.DISRUPTION, t + 0.9))
                out.append(ev(Kind.JOB_END, t + 0.95))
                t += 5.0
                step -= segment // 3
            else:
                out.append(ev(Kind.JOB_END, t + 1.0))
    return out
