"""The monitor process's CPU priority: below everything the job runs.

``nice`` +10 is not enough on a machine whose cores are all busy: a nice +10
process still weighs about a tenth of a normal one in the kernel's fair
scheduler, so when the training thread, the recorder's writer and other
processes share the cores, the monitor's cycles come out of the training
thread's time. The Linux ``SCHED_IDLE`` class (weight 3 against 1024) runs a
process only on a core nothing else wants, and never preempts the job.

``GOODPUT_MONITOR_PRIORITY`` chooses:

* ``idle`` (default): ``SCHED_IDLE`` where the system has it (Linux; an
  unprivileged process may always lower itself to it), else ``nice`` +10;
* ``nice``: ``nice`` +10 only (where every core is always busy, e.g. data
  loader workers on every core, an idle-class monitor may not run at all
  until the job ends: this keeps it a small share).

Both are relative to the processes of the monitor's *autogroup*: where Linux
groups processes by session (``/proc/sys/kernel/sched_autogroup_enabled``, on
by default in most distributions), the kernel first shares the CPUs between
sessions as equals, then between the processes of each. The monitor process
therefore stays in the job's session (a process group of its own, for Ctrl-C:
:mod:`goodput_core.monitor.process`); where it had to get a session of its own
(Python 3.10), :func:`lower` lowers its autogroup's weight too (``nice`` 19,
:data:`AUTOGROUP_NICE`).

Threads inherit their creator's policy: :func:`lower` is called by the
monitor process's main thread before it starts any other.
"""

from __future__ import annotations

import os

__all__ = ["AUTOGROUP_NICE", "ENV", "NICE", "lower"]

#: ``idle`` (default) or ``nice``.
ENV = "GOODPUT_MONITOR_PRIORITY"
#: How far below the training process the monitor runs when not in the idle class.
NICE = 10
#: The nice value of the monitor process's autogroup when it is alone in one.
AUTOGROUP_NICE = 19


def lower() -> str:
    """Lowers this process's (calling thread's) CPU priority.

    Returns:
      What it runs at now: ``"idle"`` (``SCHED_IDLE``, and ``nice`` +10 too),
      ``"nice"`` (``nice`` +10 only) or ``"unchanged"`` (neither was permitted).
    """
    try:
        os.nice(NICE)  # also under SCHED_IDLE: it is kept should the class be left
        lowered = "nice"
    except OSError:
        lowered = "unchanged"
    _lower_own_autogroup()
    wanted = os.environ.get(ENV, "idle").strip().lower()
    if wanted != "nice" and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            lowered = "idle"
        except OSError:  # a system without it (or a sandbox refusing it): nice only
            pass
    return lowered


def _lower_own_autogroup() -> None:
    """In a session of its own, the process is alone in its autogroup, which
    the kernel weighs as much as the job's: lower that weight."""
    try:
        if os.getsid(0) != os.getpid():
            # not the leader of a session of its own: the job's session, whose
            # autogroup is the job's too (never lower that)
            return
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(AUTOGROUP_NICE))
    except OSError:  # no autogroups (not Linux, or switched off), or refused
        pass
