"""The whole MaxText process in the report: from the process's start to its exit.

MaxText records its job start only after its imports and config parsing
(13-38 s on real MaxText) and its job end before its shutdown (the final
monitor upload, Orbax and JAX teardown: 2-6 s). Under the launcher and the
fork helpers, :func:`track` makes the run's total cover the process:

* **head**: the first job start of the process is recorded at the time the
  operating system started the process (:func:`process_start_time`), and
  the time from there to MaxText's own job start is ``TRAINING_PREP``
  (imports and config before the framework's first phase);
* **tail**: after a graceful job end, at exit, the time from that job end
  to the exit is a custom badput event ``SHUTDOWN`` and the job end moves to
  the exit, so it is reported, not lost. A job that did not end gracefully
  keeps its disruption: nothing is added.

Times come from the recorder's clock; the process start from Linux's
``/proc`` (no psutil). Elsewhere there is no process start to read and
nothing is added.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any, Optional

__all__ = ["SHUTDOWN", "process_start_time", "track"]

logger = logging.getLogger("goodput")

#: The custom badput type of the time from the job end to the process's exit.
SHUTDOWN = "shutdown"
_FLUSH_AT_EXIT_S = 2.0
_lock = threading.Lock()
_head_taken = False


def process_start_time() -> Optional[float]:
    """POSIX time at which the OS started this process, or None when unknown.

    ``/proc/self/stat`` gives the start in clock ticks after boot and
    ``/proc/uptime`` the time since boot (both on the boot clock), so the
    start is ``now - (uptime - start ticks / ticks per second)``, to 10 ms.
    """
    try:
        with open("/proc/self/stat") as f:
            # the command name (field 2) may hold spaces: count after its ")"
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        now = time.time()
        return now - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def track(recorder: Any, process_start: Optional[float]) -> None:
    """Adds the head and tail of the process to ``recorder``'s job (see the
    module docstring); the head once per process. Never raises."""
    if process_start is None or not getattr(recorder, "enabled", True):
        return
    try:
        _wrap(recorder, process_start)
    except Exception:  # noqa: BLE001 - accounting must not break the job
        logger.warning("goodput: whole-process accounting is off", exc_info=True)


def _wrap(recorder: Any, process_start: float) -> None:
    start_job, end_job = recorder.record_job_start_time, recorder.record_job_end_time
    ended: dict = {}

    def record_job_start_time(start_time: Any = None) -> None:
        global _head_taken
        ended.clear()
        with _lock:
            head, _head_taken = not _head_taken and start_time is None, True
        now = recorder.clock()
        if not head or process_start >= now:
            start_job(start_time)
            return
        start_job(process_start)
        recorder.record_training_preparation_start_time(process_start)
        recorder.record_training_preparation_end_time(now)

    def record_job_end_time(end_time: Any = None) -> None:
        end_job(end_time)
        if end_time is None:
            first = not ended
            ended["at"] = recorder.clock()
            if first:
                atexit.register(tail)

    def tail() -> None:
        at = ended.get("at")
        if at is None or not recorder.job_ended:
            return  # a later job start, or a crash after the job end
        try:
            now = recorder.clock()
            if now > at:
                recorder.record_custom_badput_event_start_time(at, SHUTDOWN)
                recorder.record_custom_badput_event_end_time(now, SHUTDOWN)
                end_job(now)
            recorder.flush(_FLUSH_AT_EXIT_S)
        except Exception:  # noqa: BLE001 - at exit: say so, never raise
            logger.warning("goodput: recording the shutdown failed", exc_info=True)

    recorder.record_job_start_time = record_job_start_time
    recorder.record_job_end_time = record_job_end_time
