"""The whole MaxText process in the report: from the process's start to its exit.

MaxText records its job start only after its imports and config parsing
(13-38 s on real MaxText) and its job end before its shutdown (the final
monitor upload, Orbax and JAX teardown: 2-6 s). Under the launcher and the
fork helpers, :func:`track` makes the run's total cover the process:

* **head**: the first job start of the process is recorded at the time the
  operating system started the process (:func:`process_start_time`), and
  the time from there to MaxText's own job start is ``TRAINING_PREP``
  (imports and config before the framework's first phase);
* **tail**: after a graceful job end, the time from that job end to the
  process's exit is a custom badput event ``SHUTDOWN`` and a job end is
  recorded at the exit, so it is reported, not lost. The exit is seen from
  outside: at the job end a small watcher process is started (its stdin a
  pipe from this process, its output discarded, in a session of its own);
  when this process is gone, whatever ran last (atexit handlers, thread
  joins, interpreter teardown), the pipe closes and the watcher records
  the tail into the same store (a writer of its own that records no job
  start and no step: semantics rule 13 reads its rows as an observer's
  tail, the job's). A later job start in this process cancels it. Where
  another process cannot write the store (``memory://``) or the clock is
  not the real time (tests), the tail is recorded by an atexit handler
  instead, which misses what runs after it. A job that did not
  end gracefully keeps its disruption: nothing is added.

Times come from the recorder's clock; the process start from Linux's
``/proc`` (no psutil). Elsewhere there is no process start to read and
nothing is added.

Run as ``python -m goodput_integrations.maxtext.whole_process --store URL
--run NAME --since T --process-index I``, this module is the watcher.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any, Optional, Sequence

from goodput_core.stores import schemes

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
        _cancel(ended)
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
        if end_time is not None or ended:
            end_job(end_time)
            return
        # the job end and the tail's start are one instant: a gap between them
        # would be read as the last step's (productive) time
        ended["at"] = at = recorder.clock()
        end_job(at)
        ended["watcher"] = _watch(recorder, at)
        if ended["watcher"] is None:
            atexit.register(tail)

    def tail() -> None:
        at = ended.get("at")
        if at is None or not recorder.job_ended:
            return  # a later job start, or a crash after the job end
        try:
            now = recorder.clock()
            if now > at:
                record_tail(recorder, at, now, end_job)
            recorder.flush(_FLUSH_AT_EXIT_S)
        except Exception:  # noqa: BLE001 - at exit: say so, never raise
            logger.warning("goodput: recording the shutdown failed", exc_info=True)

    recorder.record_job_start_time = record_job_start_time
    recorder.record_job_end_time = record_job_end_time


def record_tail(recorder: Any, since: float, until: float, end_job: Any = None) -> None:
    """``SHUTDOWN`` from ``since`` to ``until``, then a job end at ``until``."""
    recorder.record_custom_badput_event_start_time(since, SHUTDOWN)
    recorder.record_custom_badput_event_end_time(until, SHUTDOWN)
    (end_job or recorder.record_job_end_time)(until)


def _cancel(ended: dict) -> None:
    watcher = ended.get("watcher")
    ended.clear()
    if watcher is not None:
        try:
            watcher.stdin.write(b"cancel\n")
            watcher.stdin.close()
        except OSError:
            pass


def _watch(recorder: Any, since: float) -> Optional[subprocess.Popen]:
    """Starts the watcher for ``recorder``'s run, or None where it cannot
    record (a store other processes cannot write, a clock that is not time.time)."""
    url = getattr(getattr(recorder, "_store", None), "url", None)
    if recorder.clock is not time.time or not isinstance(url, str) or "://" not in url:
        return None  # a keyword DSN: none (as before the registry)
    scheme = schemes.scheme_of(url)[0]
    if scheme is None or not scheme.exit_watcher:
        return None
    try:
        return subprocess.Popen(
            [sys.executable, "-m", __name__, "--store", url, "--run", recorder.run,
             "--since", repr(since), "--process-index",
             str(getattr(recorder, "process_index", 0) or 0)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)
    except OSError:
        logger.warning("goodput: no watcher for the shutdown; recorded at exit instead",
                       exc_info=True)
        return None


def watcher_main(argv: Optional[Sequence[str]] = None) -> int:
    """The watcher: waits for EOF on stdin (its parent's exit), then records
    the tail, unless the parent wrote ``cancel``."""
    parser = argparse.ArgumentParser(prog="whole_process")
    parser.add_argument("--store", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--since", required=True, type=float)
    parser.add_argument("--process-index", type=int, default=0)
    args = parser.parse_args(argv)
    data = sys.stdin.buffer.read()  # returns when the parent is gone (or cancels)
    until = time.time()
    if b"cancel" in data or until <= args.since:
        return 0
    # lazy: the watcher waits on its pipe for minutes; a cancelled one never loads the recorder
    from goodput_core import Recorder

    recorder = Recorder(args.run, args.store, process_index=args.process_index)
    record_tail(recorder, args.since, until)
    return 0 if recorder.close(30) else 1


if __name__ == "__main__":
    sys.exit(watcher_main())
