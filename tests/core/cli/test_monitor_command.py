"""``goodput monitor`` as a long-running process, stopped by a signal.

A real child process runs the command on a finished run; once it has
printed a cycle (so its signal handlers are in place) it gets SIGTERM (a
process manager) or SIGINT (Ctrl-C) and must run a final cycle, flush it to
every exporter and exit 0. Every wait on the child has a deadline.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time
import sys
import urllib.parse

import pytest

from goodput_core.record.recorder import Recorder
from goodput_core.cli.synthetic import record_synthetic_job
from tests.support.tfevents import read_scalars

RUN = "monitored"
DEADLINE_S = 120.0


def _first_line(proc, timeout):
    """The child's first stdout line, or a failure naming what it printed."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"no monitor cycle within {timeout} s; stdout {out!r}, stderr {err!r}")
    return proc.stdout.readline()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_runs_a_final_cycle_and_exits_zero(tmp_path, signum):
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder(RUN, url, clock=lambda: 1_700_000_000.0)
    record_synthetic_job(rec, 1_700_000_000.0)
    assert rec.close(30)
    tb = tmp_path / "tb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "goodput_core.cli", "monitor", RUN, "--store", url,
         "--interval", "0.2", "--tensorboard", str(tb)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        bufsize=1)
    try:
        first = _first_line(proc, DEADLINE_S)
        assert first.startswith(f"goodput run={RUN} goodput="), first
        assert "(final)" not in first
        proc.send_signal(signum)
        rest, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = [first.rstrip("\n")] + rest.splitlines()
    assert all(line.startswith(f"goodput run={RUN} goodput=") for line in lines), lines
    # the final cycle ran once, last
    assert [line.endswith("(final)") for line in lines] == [False] * (len(lines) - 1) + [True]
    # and reached TensorBoard: one goodput point per cycle, none lost at exit
    points = read_scalars(str(tb / "goodput"))["goodput/goodput"]
    assert len(points) == len(lines)
    goodput = {line.split(" goodput=")[1].split("%")[0] for line in lines}
    assert len(goodput) == 1  # a finished run: every cycle says the same
    assert {f"{value:.2f}" for _, value, _ in points} == goodput



# ------------------------------------------------ start-up errors, in-process
def test_a_busy_prometheus_port_is_one_line(tmp_path, capsys):
    from goodput_core.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code = main(["monitor", RUN, "--store", f"sqlite:///{tmp_path / 'g.sqlite'}",
                     "--quiet", "--prometheus", str(port)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"goodput monitor: error: cannot serve Prometheus metrics on port {port}")
    assert err.count("\n") == 1


def test_a_bad_interval_frees_the_prometheus_port_it_opened(tmp_path, capsys):
    from goodput_core.cli import main

    code = main(["monitor", RUN, "--store", f"sqlite:///{tmp_path / 'g.sqlite'}", "--quiet",
                 "--prometheus", "0", "--interval", "-1"])
    assert code == 2
    out, err = capsys.readouterr()
    assert err.startswith("goodput monitor: error: ") and "interval" in err
    url = out.split("Serving Prometheus metrics on ")[1].split()[0]
    port = urllib.parse.urlsplit(url).port
    with socket.socket() as again:  # the exporter was closed: the port is free
        again.bind(("127.0.0.1", port))


def test_sigterm_in_process_stops_the_loop_and_restores_the_handler(tmp_path, capsys):
    """The same loop in this process (measured by coverage): SIGTERM is sent
    only once the command's handler is in place, never to pytest itself."""
    import threading

    from goodput_core.cli import main

    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder(RUN, url, clock=lambda: 1_700_000_000.0)
    record_synthetic_job(rec, 1_700_000_000.0)
    assert rec.close(30)
    ours = signal.getsignal(signal.SIGTERM)
    sent = threading.Event()

    def send_when_handled():
        for _ in range(int(DEADLINE_S / 0.01)):
            if signal.getsignal(signal.SIGTERM) is not ours:  # the command's handler
                os.kill(os.getpid(), signal.SIGTERM)
                sent.set()
                return
            sent.wait(0.01)

    sender = threading.Thread(target=send_when_handled, daemon=True)
    sender.start()
    assert main(["monitor", RUN, "--store", url, "--interval", "3600"]) == 0
    sender.join(DEADLINE_S)
    assert sent.is_set()
    assert signal.getsignal(signal.SIGTERM) is ours  # put back
    lines = capsys.readouterr().out.splitlines()
    # the cycle at start (when the loop got to it before the signal), then no
    # other one was due within the hour: the final one
    assert 1 <= len(lines) <= 2 and all(x.startswith(f"goodput run={RUN} goodput=")
                                        for x in lines)
    assert lines[-1].endswith("(final)") and not lines[0].endswith("(final)") or len(lines) == 1


def test_the_first_cycle_runs_at_start_so_metrics_are_never_empty(tmp_path):
    """``goodput monitor RUN --prometheus 0`` with the default 30 s interval: the
    first console line and a full ``/metrics`` come at start, not 30 s later
    (the child is given 25 s at most: less than one interval)."""
    from tests.support.prometheus_scrape import scrape

    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    rec = Recorder(RUN, url, clock=lambda: 1_700_000_000.0)
    record_synthetic_job(rec, 1_700_000_000.0)
    assert rec.close(30)
    proc = subprocess.Popen(
        [sys.executable, "-m", "goodput_core.cli", "monitor", RUN, "--store", url,
         "--prometheus", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        bufsize=1)
    try:
        serving = _first_line(proc, DEADLINE_S)
        assert serving.startswith("Serving Prometheus metrics on "), serving
        metrics_url = serving.split(" on ", 1)[1].strip()
        cycle = _first_line(proc, 25.0)
        assert cycle.startswith(f"goodput run={RUN} goodput="), cycle
        # each exporter takes the first cycle on its own thread: the console's
        # line may come a moment before the Prometheus registry has it
        give_up = time.monotonic() + 25.0
        got = scrape(metrics_url)
        while ("goodput_ratio", frozenset({("run", RUN)})) not in got:
            assert time.monotonic() < give_up, got
            time.sleep(0.05)  # polling a condition, bounded by give_up
            got = scrape(metrics_url)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
