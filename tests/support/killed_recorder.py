"""A recording process killed with SIGKILL at a random instant, and what it said.

The child (``python -m tests.support.killed_recorder STORE RUN INTERVAL SEED``)
records events in a tight loop and writes one line to stdout *after* each
``record_*`` call returned: ``s K`` for step K's start, ``c K`` for a custom
badput event (an inline extra payload), ``m K`` for a metric whose long name
spills into the journal's continuation slots. Its pace is set by the parent
reading its output (a full pipe blocks it): no sleeps.

:func:`run_and_kill` starts one, reads a random number of lines, sends
SIGKILL while the child keeps recording (so the kill lands wherever the
child happens to be: in a ``record_*`` call, a drain, a store transaction,
the journal's header update), then reads what the child printed before it
died. Every event printed was returned by its ``record_*`` call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Dict, List, Tuple

__all__ = ["run_and_kill", "stored_keys", "LONG_METRIC", "NATIVE_ENV"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LONG_METRIC = "a metric name long enough to need continuation slots " * 3


def run_and_kill(store: str, run: str, lines: int, interval: float, env: Dict[str, str],
                 seed: int = 0) -> Tuple[List[Tuple[str, int]], int]:
    """Runs a child until it printed ``lines`` lines, kills it (SIGKILL).

    Returns:
      (every (kind letter, number) it printed, its exit status).
    """
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.killed_recorder", store, run,
                             str(interval), str(seed)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    said: List[Tuple[str, int]] = []
    try:
        assert proc.stdout.readline() == b"ready\n"
        for _ in range(lines):
            line = proc.stdout.readline()
            if not line:
                break
            said.append(_parse(line))
        os.kill(proc.pid, signal.SIGKILL)
        for line in proc.stdout.read().splitlines():  # printed before the kill landed
            if line.strip():
                said.append(_parse(line))
    finally:
        if proc.poll() is None:
            proc.kill()
        status = proc.wait(60)
        proc.stdout.close()
    return said, status


def _parse(line: bytes) -> Tuple[str, int]:
    kind, number = line.split()
    return kind.decode(), int(number)


def stored_keys(events) -> List[Tuple[str, int]]:
    """The (kind letter, number) of stored events, as the child prints them."""
    from goodput_core.events import Kind

    out = []
    for e in events:
        if e.kind == Kind.STEP_START:
            out.append(("s", e.step))
        elif e.kind == Kind.CUSTOM_BADPUT_START:
            out.append(("c", int(e.extra["custom_badput_event_type"][5:])))
        elif e.kind == Kind.METRIC:
            out.append(("m", e.step))
    return out


#: ``1`` in the child's environment: each step's start is recorded by the compiled
#: loop calls (goodput_core/record/native.py), with a load's stall before it
NATIVE_ENV = "KILLED_RECORDER_NATIVE"


def _step_start(rec):
    """The call that records step K's start: the recorder's, or a compiled ``Loop``'s
    (a load's stall kept, then written with the start: one write of three slots)."""
    if os.environ.get(NATIVE_ENV) != "1":
        return rec.record_step_start_time
    import types

    from goodput_core.record.native import native_loop

    def nothing():
        pass

    loop = native_loop(rec, every=0, lazy=nothing,
                       compile_spans=types.SimpleNamespace(_registered_in=None),
                       start_cb=nothing, record_stall=None, on_error=None)
    assert loop is not None, "the compiled loop calls are not built"
    clock = rec._clock

    def start(k):
        loop.loaded(clock())
        loop.start(k)
    return start


def _main(store: str, run: str, interval: float, seed: int) -> None:
    from goodput_core import Recorder

    rec = Recorder(run, store, flush_interval_s=interval)
    if seed % 2:  # half of them start with the store open (and what was left adopted)
        rec.flush(60)
    step_start = _step_start(rec)
    write = os.write
    write(1, b"ready\n")
    k = 0
    while True:
        step_start(k)
        write(1, b"s %d\n" % k)
        if k % 37 == seed % 37:
            rec.record_custom_badput_event_start_time(None, f"eval-{k}")
            write(1, b"c %d\n" % k)
        if k % 101 == seed % 101:
            rec.record_metric(LONG_METRIC, float(k), step=k)
            write(1, b"m %d\n" % k)
        k += 1


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
