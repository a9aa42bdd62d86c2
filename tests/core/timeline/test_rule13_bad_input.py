"""Bad input to semantics rule 13 (many writers, one job), each with the rule
docs/semantics.md states for it ("Bad input"), figures derived by hand: a
process writing under two indices, an index that changes mid-run, a host
whose clock is off by seconds, an attempt only non-lead hosts wrote, an
observer's custom event that starts before the lead's job end. None raises;
each gives the stated figures."""

from __future__ import annotations

import pytest

from goodput_core.events import Kind
from goodput_core.timeline.buckets import BadputType as B
from goodput_core.timeline.streams import stream_indices
from tests.support.writers import Writer, calculator_of, job

NOW = 1000.0
SYNC, REC, WASTED = B.DATA_LOADING_SYNC, B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, \
    B.WASTED_PROGRESS_FROM_DISRUPTION

# each test twice: records given to the calculator, and a SQLite store read by
# columns per writer (tests/core/conftest.py, read_path)
pytestmark = pytest.mark.usefixtures("read_path")


def _figures(calc):
    r = calc.cumulative(now=NOW)
    return r, {b: v for b, v in r.badput_seconds.items()
               if abs(v) > 1e-9 and b is not B.DATA_LOADING_ASYNC}


def _lead(load=0.1):
    """Process 0: job start 0, S0@1 .. S9@10 with a ``load`` s load 0.5 s in, job end 11."""
    w = Writer(0, "h0").ev(Kind.JOB_START, 0.0).steps(0, [1.0 + k for k in range(10)], load=load)
    return w.ev(Kind.JOB_END, 11.0)


def test_one_process_writing_under_two_indices_is_one_host():
    """Two recorders in one process (indices 1 and 2) record the same steps,
    with loads [0.5, 0.6) and [0.5, 0.8) into each: one writer process is one
    stream whatever indices its events carry, read as one recorder's: a step
    recorded twice at one instant is one step, and its loads pair in time
    order (rule 7: the second start replaces the first, the first end closes
    it, the second end has no start), 0.1 s a step, the lead's own."""
    a = Writer(1, "hx", pid=7)
    b = Writer(2, "hx", pid=7)
    for w, load in ((a, 0.1), (b, 0.3)):
        w.ev(Kind.JOB_START, 0.0)
    for k in range(10):  # interleaved, as two recorders of one loop write them
        for w, load in ((a, 0.1), (b, 0.3)):
            w.ev(Kind.STEP_START, 1.0 + k, k)
            w.pair(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END, 1.5 + k, 1.5 + k + load)
    for w in (a, b):
        w.ev(Kind.JOB_END, 11.0)
    calc = calculator_of(_lead().events, sorted(a.events + b.events, key=lambda e: e.time))
    r, bad = _figures(calc)
    # the lead's 10 spans of 1 s, 0.1 s loading each (hx's paired 0.1 s is no
    # longer): sync 1, productive 9; OTHER [0, 1) = 1; the job never restarted
    assert r.disruptions == 0 and r.skipped == {}
    assert bad == pytest.approx({SYNC: 1.0, B.OTHER: 1.0})
    assert r.productive_seconds == pytest.approx(9.0)
    # two hosts: process 0 and process hx, under the index of its latest event
    indices = stream_indices(_lead().events + a.events + b.events)
    assert indices.keys() == {("h0", 1), ("hx", 7)} and indices[("hx", 7)] in (1, 2)


def test_a_host_whose_processes_had_other_indices_in_other_attempts():
    """Machine m1 ran index 1 in attempt 1 and index 0 in attempt 2 (ranks
    reassigned after the restart), m0 the other way round: each process is
    its own stream, and each attempt is led by its own index 0."""
    w = []
    for attempt, (t0, first) in enumerate(((0.0, 0), (20.0, 3))):
        for machine in ("m0", "m1"):
            index = (machine == "m1") if attempt == 0 else (machine == "m0")
            load = 0.1 if machine == "m0" else 0.3
            x = Writer(int(index), machine, pid=10 + attempt).ev(Kind.JOB_START, t0)
            x.steps(first, [t0 + 1.0 + k for k in range(5)], load=load)
            if attempt == 1:
                x.ev(Kind.JOB_END, t0 + 6.0)
            w.append(x)
    r, bad = _figures(job(*w))
    # attempt 1: S0..S4 [1, 5) spans, S4 crashed (no end): recovery [5, 20) =
    # 15; restart at step 3: S3 [4, 5) wasted = 1; S0..S2 kept, each gated by
    # m1's 0.3 s: sync 0.9, productive 2.1. attempt 2: S3..S7 [21, 26), 0.3 s
    # each: sync 1.5, productive 3.5. OTHER [0, 1) + [20, 21) = 2; total 26
    assert r.disruptions == 1
    assert r.total_seconds == pytest.approx(26.0)
    assert bad == pytest.approx({REC: 15.0, WASTED: 1.0, SYNC: 2.4, B.OTHER: 2.0})
    assert r.productive_seconds == pytest.approx(5.6)


@pytest.mark.parametrize("new_index", [1, 0])
def test_an_index_that_changes_mid_run_is_the_last_one_for_the_whole_stream(new_index):
    """Process X records its job start under 0, S0..S4 under 2, then S5..S9
    under ``new_index`` (re-ranked): a stream's index is the one its latest
    event carries, for the whole stream. Under 1, X is one more host; under
    0, X and process 0 are two writers of index 0 with steps at once: the
    earliest to start leads (process 0, at 0; X started at 0.25)."""
    x = Writer(2, "hx", pid=7).ev(Kind.JOB_START, 0.25, index=0)
    for k in range(10):
        idx = 2 if k < 5 else new_index
        x.ev(Kind.STEP_START, 1.0 + k, k, index=idx)
        x.ev(Kind.BLOCKING_LOAD_START, 1.5 + k, index=idx)
        x.ev(Kind.BLOCKING_LOAD_END, 1.8 + k, index=idx)
    x.ev(Kind.JOB_END, 11.0, index=new_index)
    lead = _lead()
    calc = job(lead, x)
    assert stream_indices(lead.events + x.events) == {("h0", 1): 0, ("hx", 7): new_index}
    r, bad = _figures(calc)
    # process 0 leads; X blocks 0.3 s in each of its steps, all ten gate the
    # job: sync 3, productive 7, OTHER [0, 1) = 1, total 11
    assert r.total_seconds == pytest.approx(11.0)
    assert bad == pytest.approx({SYNC: 3.0, B.OTHER: 1.0})
    assert r.disruptions == 0


@pytest.mark.parametrize("skew", [2.0, -2.0, 0.0])
def test_a_host_whose_clock_is_off_by_seconds_gates_as_if_it_were_not(skew):
    """Host 2's clock runs ``skew`` s off: its first load (1.5 s, the others'
    0.5 s) and its steps are compared inside its own time before its first
    step and its own steps, so the offset changes nothing."""
    hosts = []
    for i in range(3):
        w = Writer(i, f"h{i}", skew=skew if i == 2 else 0.0).ev(Kind.JOB_START, 0.0)
        w.pair(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END, 1.0, 2.5 if i == 2 else 1.5)
        w.steps(0, [3.0 + k for k in range(5)], load=0.4 if i == 2 else 0.1)
        hosts.append(w.ev(Kind.JOB_END, 8.0))
    r, bad = _figures(job(*hosts))
    # before S0: host 2's 1.5 s (carved [1.5, 2.5) beside the lead's [1, 1.5));
    # S0..S4: host 2's 0.4 s each = 2; sync 3.5; OTHER [0, 1) + [2.5, 3) = 1.5;
    # productive 5 - 2 = 3; total 8
    assert bad == pytest.approx({SYNC: 3.5, B.OTHER: 1.5})
    assert r.productive_seconds == pytest.approx(3.0)
    assert r.total_seconds == pytest.approx(8.0)


@pytest.mark.parametrize("skew, recovery, wasted", [
    # ahead: its disruption at 6.5 reads 8.5: S5 [6, 8.5) is closed there and
    # wasted with S4 [5, 6): 3.5; recovery [8.5, 20) = 11.5
    (2.0, 11.5, 3.5),
    # behind: it reads 4.5, before the lead's last step start (6): it starts
    # no recovery (rule 4); the crashed S5 opens it: [6, 20) = 14; S4 wasted: 1
    (-2.0, 14.0, 1.0),
    (0.0, 13.5, 1.5)])
def test_a_disruption_from_a_host_whose_clock_is_off_counts_once_where_stamped(
        skew, recovery, wasted):
    """Host 2 (its clock ``skew`` s off) records the only disruption, at its
    6.5; attempt 2 (job start 20) resumes at step 4. The disruption counts
    once, at the time host 2 stamped it."""
    hosts = []
    for i in range(3):
        off = skew if i == 2 else 0.0
        w = Writer(i, f"h{i}", pid=1, skew=off).ev(Kind.JOB_START, 0.0)
        w.steps(0, [1.0 + k for k in range(6)])
        if i == 2:
            w.disruption(6.5)
        w2 = Writer(i, f"h{i}", pid=2, skew=off).ev(Kind.JOB_START, 20.0)
        hosts += [w, w2.steps(4, [21.0 + k for k in range(4)]).ev(Kind.JOB_END, 25.0)]
    r, bad = _figures(job(*hosts))
    # productive S0..S3 [1, 5) = 4 and S4..S7 [21, 25) = 4; OTHER 2; total 25
    assert r.disruptions == 1
    assert r.total_seconds == pytest.approx(25.0)
    assert bad == pytest.approx({REC: recovery, WASTED: wasted, B.OTHER: 2.0})
    assert r.productive_seconds == pytest.approx(8.0)


def test_an_attempt_only_non_lead_hosts_wrote_is_led_by_the_lowest_index_that_did():
    """Attempt 2 reached the store from hosts 1 and 2 only (host 0's events
    lost): host 1 leads it. Loads: host 0 0.1 s, host 1 0.2 s, host 2 0.1 s."""
    loads = {0: 0.1, 1: 0.2, 2: 0.1}
    plan = [(0.0, 0, 5, (0, 1, 2)), (10.0, 3, 4, (1, 2)), (20.0, 5, 4, (0, 1, 2))]
    writers = []
    for n, (t0, first, steps, hosts) in enumerate(plan):
        for i in hosts:
            w = Writer(i, f"h{i}", pid=n).ev(Kind.JOB_START, t0)
            w.steps(first, [t0 + 1.0 + k for k in range(steps - 1)], load=loads[i])
            w.ev(Kind.STEP_START, t0 + steps, first + steps - 1)  # crashed in it / last
            if n == 2:
                w.pair(Kind.BLOCKING_LOAD_START, Kind.BLOCKING_LOAD_END, 24.5, 24.5 + loads[i])
                w.ev(Kind.JOB_END, 25.0)
            writers.append(w)
    r, bad = _figures(job(*writers))
    # attempt 1 (host 0): S0..S3 [1, 5), S4@5 crashed: recovery [5, 10) = 5;
    # attempt 2 restarts at 3: S3 [4, 5) wasted = 1; S0..S2 gated by host 1's
    # 0.2 s: sync 0.6, productive 2.4.
    # attempt 2 (host 1 leads): S3..S5 [11, 14), S6@14 crashed: recovery
    # [14, 20) = 6; attempt 3 restarts at 5: S5 [13, 14) wasted = 1; S3, S4:
    # sync 0.4 (its own 0.2 s), productive 1.6.
    # attempt 3 (host 0): S5..S8 [21, 25), host 1's 0.2 s each: sync 0.8,
    # productive 3.2. OTHER [0, 1) + [10, 11) + [20, 21) = 3; total 25
    assert r.disruptions == 2
    assert r.total_seconds == pytest.approx(25.0)
    assert bad == pytest.approx({REC: 11.0, WASTED: 2.0, SYNC: 1.8, B.OTHER: 3.0})
    assert r.productive_seconds == pytest.approx(7.2)


def test_an_observers_custom_event_that_starts_before_the_leads_job_end_is_no_tail():
    """An observer of index 0 (no job start, no step) records a shutdown
    [9, 14) and a job end at 14 beside process 0 (job end 11): its custom
    event claims the lead's own time before its job end (a watcher whose
    clock runs behind, a misplaced start), so it is no tail (rule 13, an
    observer's tail: a custom badput start from the lead's job end on):
    the job ends at 11. (Broken: the tail taken from its first custom event
    whatever its start: the job ends at 14.)"""
    shutdown = {"custom_badput_event_type": "shutdown"}
    watch = Writer(0, "h0", pid=9).ev(Kind.CUSTOM_BADPUT_START, 9.0, extra=shutdown)
    watch.ev(Kind.CUSTOM_BADPUT_END, 14.0, extra=shutdown).ev(Kind.JOB_END, 14.0)
    r, bad = _figures(job(_lead(), watch))
    # the lead alone: 10 spans of 1 s with 0.1 s loads: sync 1, productive 9;
    # OTHER [0, 1) = 1; total 11
    assert r.lifetime == (0.0, 11.0)
    assert r.custom_badput_percent == {}
    assert bad == pytest.approx({SYNC: 1.0, B.OTHER: 1.0})
    assert r.productive_seconds == pytest.approx(9.0)
