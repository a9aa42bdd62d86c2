"""The default Monitor runs its cycles in a monitor process of its own.

Real child processes, a real SQLite store, TensorBoard files read back and
Prometheus scraped over HTTP. Every wait on the child has a deadline; the
stop deadlines of a hung child are reached through FakeDeadlines (no sleep).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("tensorboardX")

from goodput_core.cli.synthetic import record_synthetic_job  # noqa: E402
from goodput_core.exporters.prometheus import PrometheusExporter  # noqa: E402
from goodput_core.exporters.tensorboard import TensorBoardExporter  # noqa: E402
from goodput_core.monitor import Monitor  # noqa: E402
from goodput_core.monitor.placement import ENV  # noqa: E402
from goodput_core.queries.calculator import Calculator  # noqa: E402
from goodput_core.record.recorder import Recorder  # noqa: E402
from goodput_core.stores.memory import MemoryStore  # noqa: E402
from tests.support.fake_deadlines import FakeDeadlines  # noqa: E402
from tests.support.prometheus_scrape import scrape  # noqa: E402
from tests.support.tfevents import read_scalars  # noqa: E402

RUN = "child-run"
T0 = 1_700_000_000.0
DEADLINE_S = 120.0  # a guard against a hang of the test, never reached when it passes


def _finished_run(tmp_path):
    """A finished synthetic run (a crash, a restart, steps) in a real SQLite store."""
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder(RUN, url, clock=lambda: T0)
    record_synthetic_job(rec, T0)
    assert rec.close(30)
    return url


def _until(predicate, what):
    """Polls ``predicate`` (real events of a real process) until it holds."""
    give_up = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        threading.Event().wait(0.02)


def _scrape_when_ready(url):
    def ready():
        try:
            got = scrape(url)
        except OSError:
            return None
        return got if ("goodput_ratio", frozenset({("run", RUN)})) in got else None

    _until(lambda: ready() is not None, "the monitor process's first cycle")
    return scrape(url)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_default_monitor_runs_elsewhere_and_exports_the_calculators_figures(tmp_path):
    url = _finished_run(tmp_path)
    prom = PrometheusExporter(0)
    class Rec:  # the training process's recorder: its dropped count is forwarded
        def stats(self):
            return {"dropped": 3}

    m = Monitor(RUN, url, [TensorBoardExporter(str(tmp_path / "tb")), prom], interval_s=0.2,
                rolling_windows=(3600,), recorder=Rec())
    assert m.in_process
    before = set(threading.enumerate())  # other tests' monitors may have left threads
    m.start()
    try:
        got = _scrape_when_ready(prom.url)  # the port the caller chose, served by the child
        pid = m.process_id
        assert pid is not None and pid != os.getpid() and _alive(pid)
        dropped = ("goodput_recorder_dropped_events_total", frozenset({("run", RUN)}))
        _until(lambda: scrape(prom.url).get(dropped) == 3, "the forwarded dropped count")
        # nothing of the cycles runs here: no exporter worker, no final-cycle thread
        assert not [t.name for t in set(threading.enumerate()) - before
                    if t.name.startswith(("goodput-export-", "goodput-flush-"))]
    finally:
        assert m.stop(60)
    assert not _alive(pid)
    assert m.stats()["cycles"] >= 2  # the child's count (at least one cycle and the final)

    calc = Calculator(RUN, url)
    calc.refresh()
    r = calc.cumulative()  # a finished run: the same at any later query time
    run = ("run", RUN)
    assert got[("goodput_ratio", frozenset({run}))] == r.goodput / 100
    assert got[("goodput_total_seconds", frozenset({run}))] == r.total_seconds
    assert got[("goodput_disruptions", frozenset({run}))] == r.disruptions == 1
    assert got[("goodput_max_productive_step", frozenset({run}))] == r.max_productive_step

    tb = read_scalars(str(tmp_path / "tb" / "goodput"))
    assert [v for _, v, _ in tb["goodput/goodput"]] == pytest.approx(
        [r.goodput] * len(tb["goodput/goodput"]), rel=1e-6)  # float32 in the file
    stats = calc.step_stats()
    # each step's deviation once, in step order, as the calculator computes it
    assert [s for s, _, _ in tb["step_deviation"]] == stats.steps.tolist()
    assert [v for _, v, _ in tb["step_deviation"]] == pytest.approx(
        stats.deviations.tolist(), rel=1e-6, abs=1e-7)
    # the caller's own exporter objects left no event file behind
    assert len(os.listdir(tmp_path / "tb" / "goodput")) == 1


def test_the_final_cycle_sees_what_the_job_recorded_just_before_stop(tmp_path):
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder(RUN, url)
    rec.record_job_start_time()
    m = Monitor(RUN, url, [TensorBoardExporter(str(tmp_path / "tb"))], interval_s=600,
                include_insights=False, include_step_deviation=False)
    m.start()
    _until(lambda: m.process_id is not None, "the spawn")
    rec.record_step_start_time(7)
    rec.record_job_end_time()
    assert m.stop(60)  # flushes the recorder first: the child's final cycle reads step 7
    rec.close(30)
    tb = read_scalars(str(tmp_path / "tb" / "goodput"))
    # (the cycle at start may have come before step 7 or after it): the last is the final
    assert [s for s, _, _ in tb["goodput/goodput"]][-1] == 7


def test_a_killed_monitor_process_never_stops_the_job(tmp_path):
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder(RUN, url)
    rec.record_job_start_time()
    prom = PrometheusExporter(0)
    deadlines = FakeDeadlines(settled=lambda: True)
    m = Monitor(RUN, url, [prom], interval_s=0.2, deadlines=deadlines)
    m.start()
    _scrape_when_ready(prom.url)
    os.kill(m.process_id, signal.SIGKILL)
    # the forwarder sees the reply pipe close (the test reads that private event)
    _until(m._child._exited.is_set, "the training process to notice")
    for step in range(100):  # the job goes on recording
        rec.record_step_start_time(step)
    rec.record_job_end_time()
    assert rec.flush(30)
    assert m.stop(10) is False  # the final cycle could not run: said so
    assert deadlines.expired == []  # it saw the death; it did not wait out the deadline
    rec.close(30)
    calc = Calculator(RUN, url)
    calc.refresh()
    assert calc.cumulative().max_productive_step == 99


def test_a_hung_monitor_process_is_killed_at_the_stop_deadline(tmp_path):
    url = _finished_run(tmp_path)
    prom = PrometheusExporter(0)
    deadlines = FakeDeadlines(settled=lambda: True)
    m = Monitor(RUN, url, [prom], interval_s=0.2, deadlines=deadlines)
    m.start()
    _scrape_when_ready(prom.url)
    pid = m.process_id
    os.kill(pid, signal.SIGSTOP)  # hung: it reads no command and never exits
    try:
        assert m.stop(10) is False
        assert sum(deadlines.expired) == pytest.approx(10)  # the whole deadline, no more
        assert not _alive(pid)  # killed (and reaped): it does not outlive the job
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_monitor_process_ends_when_the_training_process_is_killed(tmp_path):
    url = _finished_run(tmp_path)
    script = (
        "import sys, threading\n"
        "from goodput_core.monitor import Monitor\n"
        "from goodput_core.exporters.prometheus import PrometheusExporter\n"
        f"m = Monitor({RUN!r}, {url!r}, [PrometheusExporter(0)], interval_s=0.2).start()\n"
        "while m.process_id is None: threading.Event().wait(0.01)\n"
        "print(m.process_id, flush=True)\n"
        "threading.Event().wait()\n")
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(job.stdout.readline())
        assert _alive(child)
        job.kill()
        job.wait(DEADLINE_S)
        _until(lambda: not _alive(child) or _zombie(child), "the monitor process to exit")
    finally:
        if job.poll() is None:
            job.kill()


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("python", ["missing", "/bin/false"], ids=["no-spawn", "exits-at-once"])
def test_a_monitor_process_that_cannot_start_falls_back_to_a_thread(tmp_path, monkeypatch,
                                                                     python):
    url = _finished_run(tmp_path)
    # no such program; or one that runs but is not a Python that can be the monitor
    monkeypatch.setattr(sys, "executable",
                        str(tmp_path / "no-such-python") if python == "missing" else python)
    prom = PrometheusExporter(0)
    m = Monitor(RUN, url, [prom], interval_s=0.2)
    m.start()
    got = _scrape_when_ready(prom.url)  # served from this process again
    assert m.stats()["cycles"] >= 1  # this process's cycles
    assert got[("goodput_disruptions", frozenset({("run", RUN)}))] == 1
    assert m.stop(60)


def test_where_the_monitor_runs_is_chosen(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    tb = str(tmp_path / "tb")
    assert Monitor(RUN, url, [TensorBoardExporter(tb)]).in_process
    # a memory store, an injected clock or an exporter that lives here: a thread
    assert not Monitor(RUN, MemoryStore("m"), [TensorBoardExporter(tb)]).in_process
    assert not Monitor(RUN, url, [TensorBoardExporter(tb)], clock=lambda: T0).in_process
    assert not Monitor(RUN, url, [TensorBoardExporter(tb, writer=object())]).in_process
    with pytest.raises(ValueError, match="process=False"):
        Monitor(RUN, MemoryStore("m"), [], process=True)
    assert not Monitor(RUN, url, [], process=False).in_process
    monkeypatch.setenv(ENV, "0")
    assert not Monitor(RUN, url, [TensorBoardExporter(tb)]).in_process


def test_the_compat_goodput_monitor_runs_in_a_monitor_process(tmp_path):
    # what MaxText's and AXLearn's shims build: the reference's GoodputMonitor
    from goodput_core.compat.monitoring import GoodputMonitor

    url = _finished_run(tmp_path)
    gm = GoodputMonitor(RUN, "log", str(tmp_path / "tb"), 1, monitoring_enabled=True,
                        include_step_deviation=True, store=url,
                        gcp_options=_no_gcm())
    gm.start_goodput_uploader()
    gm.start_step_deviation_uploader()
    monitor = gm.monitor
    assert monitor.in_process
    _until(lambda: monitor.process_id is not None, "the spawn")
    assert monitor.process_id != os.getpid()
    gm.stop_step_deviation_uploader()  # a final step-deviation cycle there, then that part off
    gm.stop_goodput_uploader()  # the last part: the process ends
    assert not _alive(monitor.process_id)
    calc = Calculator(RUN, url)
    calc.refresh()
    tb = read_scalars(str(tmp_path / "tb" / "goodput"))
    assert tb["goodput/goodput"][-1][1] == pytest.approx(calc.cumulative().goodput, rel=1e-6)
    assert [s for s, _, _ in tb["step_deviation"]] == calc.step_stats().steps.tolist()


def _no_gcm():
    from goodput_core.gcp import GCPOptions

    return GCPOptions(enable_gcp_goodput_metrics=False, enable_gcp_step_deviation_metrics=False)


@pytest.mark.parametrize("priority", [None, "nice"])
def test_the_monitor_process_runs_below_the_training_process_s_priority(tmp_path, monkeypatch,
                                                                        priority):
    """By default in the idle class (every thread: they inherit it), else nice +10."""
    from goodput_core.monitor.priority import ENV, NICE

    if priority is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, priority)
    url = _finished_run(tmp_path)
    prom = PrometheusExporter(0)
    m = Monitor(RUN, url, [prom], interval_s=0.2)
    m.start()
    try:
        _scrape_when_ready(prom.url)  # the child has set its priority before its first cycle
        here = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, m.process_id) == min(here + NICE, 19)
        threads = os.listdir(f"/proc/{m.process_id}/task")
        assert len(threads) > 1  # the command reader, the exporters' workers, the server
        want = os.SCHED_OTHER if priority == "nice" else os.SCHED_IDLE
        assert {os.sched_getscheduler(int(tid)) for tid in threads} == {want}
        # Ctrl-C to the job's process group is the job's; but the job's session
        # (its autogroup, where the kernel has them: else the priority would only
        # rank the monitor against itself)
        assert os.getpgid(m.process_id) != os.getpgid(0)
        if sys.version_info >= (3, 11):
            assert os.getsid(m.process_id) == os.getsid(0)
            if os.path.exists("/proc/self/autogroup"):
                with open("/proc/self/autogroup") as a, open(f"/proc/{m.process_id}/autogroup") as b:
                    assert a.read() == b.read()
    finally:
        assert m.stop(60)


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroups here")
def test_a_monitor_process_alone_in_its_session_lowers_its_autogroup():
    """Python 3.10 cannot give the child a process group without a session:
    alone in its autogroup, it lowers that group's weight (the kernel would
    otherwise share the CPUs between it and the whole job as equals)."""
    from goodput_core.monitor.priority import AUTOGROUP_NICE

    code = ("from goodput_core.monitor.priority import lower; lower(); "
            "print(open('/proc/self/autogroup').read())")
    out = subprocess.run([sys.executable, "-c", code], start_new_session=True, check=True,
                         capture_output=True, text=True).stdout
    assert out.split()[-2:] == ["nice", str(AUTOGROUP_NICE)]
    same = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout
    with open("/proc/self/autogroup") as f:
        assert same.strip() == f.read().strip()  # the job's session: its autogroup, as it is


def test_the_compat_monitor_process_keeps_rule_1(tmp_path):
    """The reference-compatible monitor keeps rule 1 in its monitor process too:
    an open attempt runs to the query time, whatever its last event (liveness
    off). A run that stopped an hour ago on a recorded crash: rule 15 would
    freeze it at 10 s (90 % goodput); rule 1 counts the hour since."""
    from goodput_core.compat.monitoring import GoodputMonitor
    from goodput_core.stores import open_store

    url = f"sqlite:///{tmp_path}/r1.sqlite"
    t0 = time.time() - 3600
    rec = Recorder(RUN, open_store(url))
    rec.record_job_start_time(t0)
    for k in range(10):
        rec.record_step_start_time(k, t0 + 1 + k)
    rec.record_disruption("exception:KeyboardInterrupt", t0 + 10.5)
    assert rec.close(30)
    gm = GoodputMonitor(RUN, "log", str(tmp_path / "tb"), 1, monitoring_enabled=True,
                        store=url, gcp_options=_no_gcm())
    gm.start_goodput_uploader()
    assert gm.monitor.in_process
    gm.stop_goodput_uploader()
    goodput = read_scalars(str(tmp_path / "tb" / "goodput"))["goodput/goodput"][-1][1]
    assert goodput < 1.0  # ~9 productive seconds of ~3600
    live = Calculator(RUN, url)
    live.refresh()
    assert live.cumulative().goodput > 50  # rule 15: stopped at the crash
