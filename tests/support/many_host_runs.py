"""Random runs written by many hosts (semantics rule 13), for the checks of
the columns path (goodput_core/queries/many_hosts.py) against the per-event
pass kept as the oracle (tests/support/lead_events_before.py).

A run: 2-6 hosts, each a process index (some hosts restarted under a new pid
or the same one, some joining late), steps on a coarse time grid (ties
between hosts), input stalls, blocking loads and loads before the first step
(the first load of a restarted attempt too) and inside steps (the last host
often the straggler), init, startup and evaluation phases before the first
step, step ends, step starts without a number, metrics, heartbeats from
index 0 (on or off; some stamped *now* beside explicit past times), restarts
that overlap the old process's shutdown (its heartbeats, a save, a late job
end while the new process trains), disruptions recorded by one host (the
lead borrows them) or by an observer that records nothing else, observers'
tails (a watcher's custom badput and job end after a process's job end), job ends,
and now and then times in the past (a backfill). Each writer's events get
sequence numbers in the order it records them; :func:`deliveries`
interleaves the writers' batches as a store receives them.
"""

from __future__ import annotations

import random
from typing import Iterator, List

from goodput_core.events import EventRecord, Kind

__all__ = ["random_run", "deliveries", "oracle_calculator", "summary", "RUN", "hosts_summary",
           "hosts_oracle", "plain_host", "real_host"]

RUN = "r"
_BLOCKS = [(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END),
           (Kind.INPUT_STALL_START, Kind.INPUT_STALL_END)]


class _Writer:
    """One writer process: its events in the order it records them."""

    def __init__(self, index: int, host: str, pid: int):
        self.index, self.host, self.pid = index, host, pid
        self.events: List[EventRecord] = []

    def ev(self, kind, t, step=None, extra=None, index=None):
        seq = len(self.events) + 1
        self.events.append(EventRecord(RUN, int(kind), float(t), step, extra,
                                       self.index if index is None else index, self.host,
                                       self.pid, f"a{self.pid}", seq, float(t)))


_FIRST_LOADS = _BLOCKS + [(Kind.DATA_LOADING_START, Kind.DATA_LOADING_END)]
_PHASES = [(Kind.TPU_INIT_START, Kind.TPU_INIT_END, None),
           (Kind.PROGRAM_STARTUP_START, Kind.PROGRAM_STARTUP_END, None),
           (Kind.CUSTOM_BADPUT_START, Kind.CUSTOM_BADPUT_END, {"custom_badput_event_type": "eval"})]
NOW = 1000.0  # "now" for heartbeats stamped beside explicit past times


def _host(rnd: random.Random, index: int, n_hosts: int, heartbeats: bool) -> List[_Writer]:
    writers = []
    pid = 100 * index + rnd.randrange(1, 5)
    t = rnd.choice((0.0, 0.0, 0.25, 3.0))  # a late joiner now and then
    step = 0
    slow = 2.0 if index == n_hosts - 1 and rnd.random() < 0.6 else 1.0
    beats = heartbeats and index == 0
    for attempt in range(rnd.randint(1, 3)):
        w = _Writer(index, f"h{index}", pid)
        writers.append(w)
        start = t + 0.125
        w.ev(Kind.JOB_START, start, index=0 if rnd.random() < 0.2 else None)
        if beats and rnd.random() < 0.15:  # explicit past times, a heartbeat stamped now
            w.ev(Kind.HEARTBEAT, NOW + rnd.random(), extra={"heartbeat_seconds": 1.0})
        if rnd.random() < 0.5:  # blocking before the first step (the first batch)
            kind = rnd.choice(_FIRST_LOADS)
            w.ev(kind[0], start + 0.25)
            w.ev(kind[1], start + 0.25 + slow * rnd.choice((0.25, 0.5, 1.0)))
        if rnd.random() < 0.25:  # init, startup, an evaluation before the first step
            s_kind, e_kind, extra = rnd.choice(_PHASES)
            a = start + rnd.choice((0.0, 0.125, 0.5))
            w.ev(s_kind, a, extra=extra)
            w.ev(e_kind, a + rnd.choice((0.125, 0.5)), extra=extra)
        t = start + rnd.choice((1.0, 2.0))
        if attempt and rnd.random() < 0.7:
            step = max(0, step - rnd.randrange(0, 4))  # resumed from a checkpoint
        for n in range(rnd.randint(0, 10)):
            w.ev(Kind.STEP_START, t, None if rnd.random() < 0.03 else step)
            if attempt and not n and rnd.random() < 0.3:  # a restarted pipeline's first load
                w.ev(Kind.DATA_LOADING_START, t + 0.125)
                w.ev(Kind.DATA_LOADING_END, t + 0.125 + slow * 0.5)
            for start_k, end_k in rnd.sample(_BLOCKS, rnd.randint(0, 2)):
                a = t + rnd.choice((0.0, 0.25, 0.5))
                w.ev(start_k, a)
                w.ev(end_k, a + slow * rnd.choice((0.0, 0.125, 0.25, 0.75)))
            if rnd.random() < 0.15:
                w.ev(Kind.DATA_LOADING_START, t + 0.5)
                w.ev(Kind.DATA_LOADING_END, t + 0.75)
            if rnd.random() < 0.1:
                w.ev(Kind.STEP_END, t + 0.75, step)
            if rnd.random() < 0.1:
                w.ev(Kind.METRIC, t + 0.5, step, {"metric_name": "loss", "metric_value": 1.0})
            if heartbeats and index == 0 and rnd.random() < 0.4:
                w.ev(Kind.HEARTBEAT, t + 0.625, extra={"heartbeat_seconds": 1.0})
            if rnd.random() < 0.05:  # a backfilled event: a time in the past
                w.ev(Kind.STEP_END, t - 1.5, max(step - 2, 0))
            t += rnd.choice((1.0, 1.0, 2.0))
            step += 1
        ended = rnd.random() < 0.6
        if rnd.random() < 0.35:
            w.ev(Kind.DISRUPTION, t + rnd.choice((0.125, 0.5)), extra={"disruption_cause": "crash"})
            ended = False
        if ended:
            w.ev(Kind.JOB_END, t + 0.375)
        if beats and rnd.random() < 0.5:  # shutting down, still beating
            w.ev(Kind.HEARTBEAT, t + 1.375, extra={"heartbeat_seconds": 1.0})
        if rnd.random() < 0.25:  # the next process starts while this one shuts down
            for k in range(rnd.randint(1, 4) if beats else 0):
                w.ev(Kind.HEARTBEAT, t + 3.0 + k, extra={"heartbeat_seconds": 1.0})
            if rnd.random() < 0.5:
                w.ev(Kind.CHECKPOINT_SAVE_START, t + 3.5, step)
                w.ev(Kind.CHECKPOINT_SAVE_END, t + 5.0, step)
            if not ended or rnd.random() < 0.3:
                w.ev(Kind.JOB_END, t + 6.0)
            pid += 7
            t += rnd.choice((1.0, 4.0))
            continue
        t += rnd.choice((0.0, 1.0, 5.0, 20.0))
        if rnd.random() < 0.7:
            pid += 7
    return writers


def random_run(rnd: random.Random) -> List[List[EventRecord]]:
    """The events of each writer process of a random run, in recording order."""
    n = rnd.randint(2, 6)
    heartbeats = rnd.random() < 0.5
    writers = []
    for index in range(n):
        writers += _host(rnd, index, n, heartbeats)
    # the same pid for two attempts of one host: one writer process, one stream
    merged = {}
    for w in writers:
        key = (w.host, w.pid)
        if key in merged:
            first = merged[key]
            for e in w.events:
                first.ev(e.kind, e.time, e.step, e.extra, e.process_index)
        else:
            merged[key] = w
    out = [w.events for w in merged.values()]
    for n in range(rnd.choice((0, 0, 0, 1, 2))):  # an observer: disruptions only
        watch = _Writer(0, "watch", 7 + n)
        watch.ev(Kind.DISRUPTION, rnd.choice((1.0, 4.0, 8.0, 15.0)),
                 extra={"disruption_cause": "watchdog"})
        out.append(watch.events)
    for n in range(rnd.choice((0, 0, 1, 1, 2))):  # an observer's tail: a watcher of an exit
        out.append(_observer_tail(rnd, out, n))
    if rnd.random() < 0.2:  # a launcher's scheduler times
        out.append([EventRecord(RUN, int(Kind.JOB_SUBMITTED), -5.0, None, None, 0, "launcher", 9,
                                "l", 1, -5.0),
                    EventRecord(RUN, int(Kind.RESOURCES_GRANTED), -1.0, None, None, 0,
                                "launcher", 9, "l", 2, -1.0)])
    return out


def _observer_tail(rnd: random.Random, writers: List[List[EventRecord]], n: int
                   ) -> List[EventRecord]:
    """A watcher of a process's exit (no job start, no step: semantics rule
    13, an observer's tail): the custom badput ``shutdown`` from a writer's
    job end (now and then near it, or anywhere) to its own job end, under
    index 0 mostly; now and then without the custom event or its end, with a
    disruption or a heartbeat among them."""
    lead = rnd.random() < 0.7  # (mostly an end of index 0: the lead's, where a tail counts)
    ends = [e.time for w in writers for e in w if e.kind == Kind.JOB_END and
            (not lead or e.process_index == 0)]
    since = rnd.choice(ends) if ends and rnd.random() < 0.85 else rnd.choice((2.0, 9.0))
    since += rnd.choice((0.0, 0.0, 0.0, 0.125, -0.25))
    until = since + rnd.choice((0.25, 1.0, 3.0, 12.0))
    watch = _Writer(rnd.choice((0, 0, 0, 1)), "exit", 30 + n)
    cb = {"custom_badput_event_type": "shutdown"}
    if rnd.random() < 0.85:
        watch.ev(Kind.CUSTOM_BADPUT_START, since, extra=cb)
    if rnd.random() < 0.15:
        watch.ev(Kind.DISRUPTION, since + 0.125, extra={"disruption_cause": "exit"})
    if rnd.random() < 0.15 and not watch.index:
        watch.ev(Kind.HEARTBEAT, since + 0.5, extra={"heartbeat_seconds": 1.0})
    if rnd.random() < 0.85:
        watch.ev(Kind.CUSTOM_BADPUT_END, until, extra=cb)
    watch.ev(Kind.JOB_END, until + rnd.choice((0.0, 0.0, 0.5)))
    return watch.events


def deliveries(rnd: random.Random, writers: List[List[EventRecord]]) -> Iterator[list]:
    """Batches as a store receives them: each writer's events in order, the
    writers interleaved."""
    pos = [0] * len(writers)
    while any(p < len(w) for p, w in zip(pos, writers)):
        i = rnd.choice([i for i, w in enumerate(writers) if pos[i] < len(w)])
        k = rnd.randint(1, 8)
        yield writers[i][pos[i]:pos[i] + k]
        pos[i] += k


def oracle_calculator(events):
    """A calculator of the oracle's lead events (the per-event pass)."""
    from goodput_core.queries.calculator import Calculator
    from tests.support import lead_events_before as before

    calc = Calculator(RUN)
    calc._feed.tl.add(before.lead_events(list(events)), RUN)
    return calc


def summary(calc, now: float) -> dict:
    """What the job's figures are, rounded as the suite compares incremental
    and one-shot results (6 decimals)."""
    r = calc.cumulative(now=now)
    st = calc.state(now=now)
    s = calc.step_stats()
    return {
        "total": round(r.total_seconds, 6), "productive": round(r.productive_seconds, 6),
        "buckets": {k.name: round(v, 6) for k, v in r.badput_seconds.items() if v},
        "async": round(r.data_loading_async_seconds, 6), "disruptions": r.disruptions,
        "last_step": r.last_step, "max_productive_step": r.max_productive_step,
        "skipped": dict(r.skipped), "state": (st.state, st.stopped_at, st.cause),
        "steps": s.count, "ideal": None if s.ideal_step_time is None else
        round(s.ideal_step_time, 9),
        "window": round(calc.window(2.0, 12.0, now=now).productive_seconds, 6),
    }


def hosts_summary(breakdown) -> tuple:
    """A host breakdown, rounded as :func:`summary` rounds (hosts, outliers)."""
    def r(v, digits=6):
        return None if v is None else round(v, digits)

    return ([(h.process_index, {k: r(v) for k, v in h.seconds.items()}, r(h.total_seconds),
              h.steps, r(h.median_step_seconds, 9), r(h.p90_step_seconds, 9))
             for h in breakdown.hosts],
            [(o[0], o[1], r(o[2])) for o in breakdown.outliers])


def hosts_oracle(events, now: float) -> tuple:
    """The host breakdown as a calculator reading a store gave it before the
    columns path: a calculator per host fed the host's records (none while
    the run has a single process index)."""
    import functools

    from goodput_core.queries.calculator import Calculator
    from goodput_core.queries.host_outliers import HostTracker

    if len({e.process_index for e in events}) < 2:
        return [], []
    tracker = HostTracker(RUN, None, new_calculator=functools.partial(Calculator, RUN))
    tracker.add(list(events))
    return hosts_summary(tracker.breakdown(now))


def plain_host(rnd: random.Random, index: int) -> List[EventRecord]:
    """One host of one attempt whose figures the columns path computes in
    closed form (docs/large-runs.md, plain hosts): a job start, steps with
    stalls, blocking loads and loads (some overlapping, some left open),
    metrics, heartbeats from index 0 (some with an interval that is not a
    number), a job end or none."""
    w = _Writer(index, f"h{index}", 100 + index)
    t = rnd.choice((0.0, 0.5, 3.0))
    w.ev(Kind.JOB_START, t)
    t += rnd.choice((0.125, 1.0))
    fams = [(Kind.INPUT_STALL_START, Kind.INPUT_STALL_END),
            (Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END),
            (Kind.DATA_LOADING_START, Kind.DATA_LOADING_END)]
    if rnd.random() < 0.5:  # the first batch, before the first step
        a = t + 0.25
        w.ev(Kind.INPUT_STALL_START, a)
        w.ev(Kind.INPUT_STALL_END, a + rnd.choice((0.0, 0.5, 2.0)))
    step, opened = rnd.randrange(0, 3), set()
    for _ in range(rnd.randint(0, 12)):
        t += rnd.choice((0.5, 1.0, 2.0))
        w.ev(Kind.STEP_START, t, step)
        step += 1
        for start, end in rnd.sample(fams, rnd.randint(0, 3)):
            if start in opened:
                continue
            a = t + rnd.choice((0.0, 0.25, 0.5))
            w.ev(start, a)
            if rnd.random() < 0.1:
                opened.add(start)  # left open: its end not written (yet)
                continue
            w.ev(end, a + rnd.choice((0.0, 0.25, 0.75, 1.5, 3.0)))
        if rnd.random() < 0.2:
            w.ev(Kind.METRIC, t + 0.125, step, {"metric_name": "loss", "metric_value": 1.0})
        if index == 0 and rnd.random() < 0.5:
            w.ev(Kind.HEARTBEAT, t + 0.375,
                 extra={"heartbeat_seconds": rnd.choice((1.0, 10.0, "x"))})
    if rnd.random() < 0.6:
        w.ev(Kind.JOB_END, max(e.time for e in w.events) + rnd.choice((0.25, 1.0)))
    # recorded in time order (a recorder's clock): sequence numbers follow
    events = sorted(w.events, key=lambda e: e.time)
    return [e._replace(seq=i + 1) for i, e in enumerate(events)]


def real_host(url: str, run: str, index: int, hosts: int) -> None:
    """One host of a job as a real process (``multiprocessing`` spawn target):
    ``Recorder(run, url, process_index=index)``, a job start, then per step a
    step start and an input stall (0.1 s in; the last host's
    :data:`real_host.SLOW` times longer), steps 1 s apart on the recorder's
    clock from :data:`real_host.T0`, a job end."""
    from goodput_core import Recorder

    now = [real_host.T0]
    rec = Recorder(run, url, process_index=index, clock=lambda: now[0], hang_detection=False,
                   heartbeat_seconds=0)
    stall = real_host.STALL * (real_host.SLOW if index == hosts - 1 else 1.0)
    rec.record_job_start_time(real_host.T0)
    for k in range(real_host.STEPS):
        t = now[0] = real_host.T0 + 1.0 + k
        rec.record_step_start_time(k, t)
        rec.record_input_stall_start_time(t + 0.1)
        rec.record_input_stall_end_time(t + 0.1 + stall)
    rec.record_job_end_time(real_host.T0 + 1.0 + real_host.STEPS)
    assert rec.flush(60)
    rec.close()


real_host.T0, real_host.STEPS, real_host.STALL, real_host.SLOW = 1_700_000_000.0, 30, 0.05, 3.0
