"""Bounded waits for forked children: a hung child fails the test, clearly.

``os.waitpid(pid, 0)`` waits forever; under coverage one hung a run for the
whole pytest-timeout. :func:`wait_child` waits at most ``timeout`` seconds
(on a pidfd where the kernel has them, so nothing polls), then kills the
child and fails with its pid and what it was doing.
"""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

__all__ = ["wait_child"]


def _wait(pid: int, timeout: float):
    """The child's wait status, or None when it still runs after ``timeout`` s."""
    fd = None
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # no pidfd support: poll below
            fd = None
    if fd is not None:
        try:
            if not select.select([fd], [], [], timeout)[0]:
                return None
        finally:
            os.close(fd)
        return os.waitpid(pid, 0)[1]
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def wait_child(pid: int, timeout: float = 120.0, what: str = "forked child") -> int:
    """Reaps ``pid`` within ``timeout`` seconds and returns its exit code.

    Raises:
      Failed (pytest.fail): the child was still running at the deadline; it
        is killed (SIGKILL) and reaped first.
    """
    status = _wait(pid, timeout)
    if status is None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # pragma: no cover - exited just now
            pass
        os.waitpid(pid, 0)  # SIGKILL cannot be ignored: this returns
        pytest.fail(f"{what} (pid {pid}) was still running after {timeout:g} s; killed it")
    return os.waitstatus_to_exitcode(status)
