"""Shared helpers for the benchmark scripts: machine description and medians."""

from __future__ import annotations

import os
import platform
import statistics
import sys


def machine() -> str:
    """One line naming the machine a benchmark ran on."""
    return (f"{platform.machine()} {os.cpu_count()} cores, {platform.system()} "
            f"{platform.release()}, Python {sys.version.split()[0]}")


def median(values) -> float:
    return statistics.median(values)



# A child's peak RSS as wait4 gives it counts the resident memory of the
# process it was forked from (Linux folds the address space a child replaces
# at exec into its maximum): a benchmark holding a million events makes every
# command it starts read as at least that big. This small launcher forks the
# command instead and writes its wall time and rusage to the fd it is given.
_LAUNCHER = r"""
import json, os, sys, time
out = int(sys.argv[1])
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.close(out)
    os.execv(sys.executable, [sys.executable] + sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
os.write(out, json.dumps([time.perf_counter() - t0, os.waitstatus_to_exitcode(status),
                          ru.ru_utime + ru.ru_stime, ru.ru_maxrss]).encode())
"""


def run_measured(args, **popen):
    """Runs ``python *args`` as a process (``popen``: Popen's env, cwd,
    stdout); returns ``(wall s, exit code, CPU s, peak RSS MiB, stderr)``
    of the command alone (the launcher's start and memory excluded)."""
    import json
    import subprocess

    r, w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(w), *args], pass_fds=(w,),
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, **popen)
    finally:
        os.close(w)
    err = proc.stderr.read().decode()
    proc.wait()
    with os.fdopen(r, "rb") as f:
        wall, code, cpu, maxrss = json.loads(f.read() or b"[0, -1, 0, 0]")
    return wall, code, cpu, maxrss / 1024, err
