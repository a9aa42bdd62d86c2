"""The monitor process: ``python -m goodput_core.monitor.child`` (started by a Monitor).

Not a command for users (that is ``goodput monitor RUN``): the training
process (:mod:`goodput_core.monitor.process`) starts it and talks to it
over two pipes, one JSON object per line.

stdin, from the training process: first the settings::

    {"run": ..., "store": URL or null, "monitor": {Monitor keyword arguments},
     "exporters": [{"exporter": "tensorboard", "kwargs": {...}}, ...], "reply_fd": N}

(each exporter a spec of :mod:`goodput_core.exporters.registry`)

then commands: ``{"dropped": n}`` (the recorder's dropped-event count),
``{"configure": {...}}`` (``Monitor.configure``), ``{"flush": seconds or null,
"parts": [...] or null, "id": n}`` (``Monitor.flush``), ``{"stop": seconds or null,
"skip_final": bool}``. End of input (the training process is gone) stops the
monitor as ``stop`` does, within the exit budget (``GOODPUT_EXIT_TIMEOUT_S``),
after letting go of the job's stdout and stderr (pointed at /dev/null): a
launcher that reads the job's pipes sees them end with the job.

The reply pipe, to the training process: ``{"ready": true}`` once the
exporters are built, ``{"stats": {...}}`` after each
cycle, ``{"flushed": n, "ok": bool}`` for each flush and ``{"stopped": ok,
"stats": {...}}`` last. The process also stops
when it finds itself re-parented (its parent died while another process
still held the pipe open). It runs at a lower CPU priority than the training
process (the idle class, else ``nice`` +10: :mod:`goodput_core.monitor.priority`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any, Dict, Optional

from goodput_core.exit_bound import exit_timeout_s
from goodput_core.monitor.priority import lower as lower_priority
from goodput_core.redact import redact

__all__ = ["main"]

logger = logging.getLogger("goodput")

_PARENT_CHECK_S = 1.0


class _Dropped:
    """Stands in for the training process's recorder: its forwarded dropped count."""

    def __init__(self) -> None:
        self.dropped: Optional[int] = None

    def stats(self) -> Dict[str, Any]:
        if self.dropped is None:
            raise LookupError("not forwarded yet")
        return {"dropped": self.dropped}


def _reply(fd: int, message: Dict[str, Any]) -> None:
    try:
        os.write(fd, (json.dumps(message) + "\n").encode())
    except OSError:
        pass  # the training process is gone: nobody to tell


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    # below the training process before any other thread starts (they inherit
    # it): where CPUs are short, the kernel runs the job first
    lower_priority()
    stdin = sys.stdin.buffer
    settings = json.loads(stdin.readline() or b"null")
    if not settings:
        return 0
    reply_fd = int(settings["reply_fd"])
    parent = os.getppid()
    # lazy: after lower_priority(): numpy's BLAS threads, started at its
    # import, inherit the lowered priority only if they start after it
    from goodput_core.exporters.registry import from_spec
    from goodput_core.monitor.loop import Monitor

    recorder = _Dropped()
    exporters = []
    for spec in settings["exporters"]:
        try:
            exporters.append(from_spec(spec))
        except Exception as exc:  # noqa: BLE001 - the other exporters still run
            logger.warning("goodput monitor %s: exporter %s could not start here (%s: %s)",
                           settings["run"], spec.get("exporter"), type(exc).__name__,
                           redact(exc))
    options = dict(settings["monitor"])
    options["rolling_windows"] = tuple(options.get("rolling_windows", ()))
    monitor = Monitor(settings["run"], settings["store"], exporters, process=False,
                      recorder=recorder, **options)
    monitor.on_cycle = lambda: _reply(reply_fd, {"stats": monitor.stats()})
    _reply(reply_fd, {"ready": True})  # the training process closes its copies now
    stop: Dict[str, Any] = {}
    got_stop = threading.Event()

    def flush(message: Dict[str, Any]) -> None:
        parts = message.get("parts")
        ok = monitor.flush(message["flush"], parts=None if parts is None else set(parts))
        _reply(reply_fd, {"flushed": message["id"], "ok": ok, "stats": monitor.stats()})

    def read_commands() -> None:
        for line in stdin:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "dropped" in message:
                recorder.dropped = int(message["dropped"])
            if "configure" in message:
                monitor.configure(**_configure_args(message["configure"]))
            if "flush" in message:
                threading.Thread(target=flush, args=(message,), daemon=True,
                                 name="goodput-monitor-flush-command").start()
            if "stop" in message:
                stop.update(message)
                break
        got_stop.set()  # a stop, or end of input: the training process is gone

    threading.Thread(target=read_commands, name="goodput-monitor-commands", daemon=True).start()
    monitor.start()
    while not got_stop.wait(_PARENT_CHECK_S):
        if os.getppid() != parent:  # re-parented: the training process died
            break
    if "stop" in stop:
        ok = monitor.stop(stop["stop"], skip_final_flush=bool(stop.get("skip_final")))
    else:
        # the training process is gone: its stdout and stderr are not ours to
        # hold (a launcher reading the job's pipes would wait for our final
        # cycle), and the final cycle keeps within the exit budget
        _release_job_streams()
        ok = monitor.stop(exit_timeout_s())
    _reply(reply_fd, {"stopped": ok, "stats": monitor.stats()})
    return 0


def _release_job_streams() -> None:
    """Points this process's stdout and stderr at /dev/null (they are the job's)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a pipe the job's reader closed
            pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
            os.dup2(null, 2)
        finally:
            os.close(null)
    except OSError:
        pass


def _configure_args(message: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(message)
    if out.get("rolling_windows") is not None:
        out["rolling_windows"] = tuple(out["rolling_windows"])
    return out


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:
        code = 0
    sys.stdout.flush()
    os._exit(code)  # daemon threads (a stuck exporter) must not hold the exit
