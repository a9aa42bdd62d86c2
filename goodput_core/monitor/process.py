"""The monitor's process: reading, computing and exporting outside the training process.

A monitor thread inside the training process competes with the training thread
for the GIL (a cycle over a long run, TensorBoard's writer, the Prometheus
server are all Python code). By default a :class:`~goodput_core.monitor.Monitor`
therefore runs its cycles in a child process (``python -m
goodput_core.monitor.child``, the same interpreter; a ``subprocess``, never a
``fork`` of a JAX process), and the training process only forwards:

* the recorder writes the events to the store as always; the child reads the store;
* the child is spawned from a background thread (``start()`` costs the caller
  one thread start), with the exporters' settings on its stdin (never on its
  command line: a store URL may hold a password); a Prometheus exporter hands
  its listening socket over, so its port stays the same;
* it runs in the job's session, in a process group of its own, below the job's
  CPU priority (:mod:`goodput_core.monitor.priority`);
* one forwarding thread in the training process sleeps between cycles, sends
  the recorder's dropped-event count when it changes and reads the child's
  counters (``stats()``);
* ``stop(timeout)`` flushes the recorder, asks the child for its final cycle
  and waits for it until the deadline; a child that does not exit by then
  (hung, stopped) is killed. A child that dies is logged once: the job goes on.

The child ends with the job in every case: it stops when told, when its stdin
closes (the training process exited or was killed) or when it is re-parented.

When a monitor cannot run in a process (a memory store, an injected clock, a
calculator or an exporter that only lives in this process), or when
``Monitor(process=False)`` or ``GOODPUT_MONITOR_PROCESS=0`` asks for it, the
cycles run on a thread of the training process as before.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

from goodput_core.monitor.runner import Deadlines
from goodput_core.record.hooks import flush_before_read
from goodput_core.stores import canonical_store_url

__all__ = ["ProcessMonitor"]

logger = logging.getLogger(__name__)

_POLL_CAP_S = 1.0  # the forwarder's longest sleep (dropped counts, child exit)
_KILL_WAIT_S = 2.0  # how long a killed child may take to be reaped (not counted as ours)
#: Ctrl-C to the job's process group is the job's: the child gets a group of its
#: own, in the job's session where Python can (3.11+). A session of its own would
#: put it in an autogroup of its own (Linux's default on most distributions), where
#: the kernel shares the CPUs between it and the whole job as equals, whatever its
#: priority (the child then lowers its autogroup: monitor/priority.py).
_OWN_GROUP = ({"process_group": 0} if sys.version_info >= (3, 11)
              else {"start_new_session": True})


class ProcessMonitor:
    """The training-process side of a monitor running in a child process.

    Args:
      run: the run name (logs).
      spec: the child's settings (:mod:`goodput_core.monitor.child`), JSON-able.
      exporters: the exporters in this process; each hands its resources over
        (``hand_over()``) before the child starts and is closed here once it has.
      interval_s: the monitor's shortest interval (the forwarder's pace).
      recorder: a Recorder whose dropped count is forwarded (and which is
        flushed before the final cycle).
      deadlines: the time ``stop()`` keeps its deadline in.
      python: the interpreter to run (default ``sys.executable``).
      on_failure: called (on the spawning thread) when the child cannot be started.
    """

    def __init__(self, run: str, spec: Dict[str, Any], exporters: Sequence[Any], *,
                 interval_s: float, recorder: Any = None,
                 deadlines: Optional[Deadlines] = None, python: Optional[str] = None,
                 on_failure: Optional[Callable[[], Any]] = None):
        self.run = run
        self._spec = dict(spec)
        self._exporters = list(exporters)
        self._pace = max(0.05, min(float(interval_s), _POLL_CAP_S))
        self._recorder = recorder
        self._time = deadlines if deadlines is not None else Deadlines()
        self._python = python or sys.executable
        self._on_failure = on_failure
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._ready = False  # the settings went out: commands go straight to the child
        self._up = False  # the child said it is up (its exporters built)
        self._proc: Optional[subprocess.Popen] = None
        self._reply: Optional[int] = None
        self._started = threading.Event()  # the spawn attempt is over (either way)
        self._exited = threading.Event()  # the child's reply pipe closed: it is gone
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._stats: Dict[str, Any] = {"cycles": 0, "errors": {}}
        self._final: Optional[bool] = None  # the child's own verdict on its stop
        self._dropped_sent: Optional[int] = None
        self._pending: List[Dict[str, Any]] = []  # commands given before the spawn
        self._flushes: Dict[int, Any] = {}  # flush id -> (event, outcome)
        self._flush_ids = iter(range(1, 1 << 62))
        #: Set when the child could not be started (the error), for tests and logs.
        self.error: Optional[BaseException] = None

    # --------------------------------------------------------------- start
    def start(self) -> None:
        """Spawns the child from a daemon thread; returns at once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, daemon=True,
                                                name=f"goodput-monitor-{self.run}")
                self._thread.start()

    @property
    def pid(self) -> Optional[int]:
        """The child's process id once it was spawned (None before or after a failure)."""
        proc = self._proc
        return None if proc is None else proc.pid

    def wait_started(self, timeout: Optional[float] = None) -> bool:
        """Waits until the child was spawned (or could not be); True once it was."""
        self._started.wait(timeout)
        return self._proc is not None

    def _main(self) -> None:
        try:
            self._spawn()
        except BaseException as exc:  # noqa: BLE001 - the job must not see it
            self.error = exc
            logger.warning("goodput monitor %s: could not start the monitor process; "
                           "monitoring from a thread of this process instead (%s: %s)",
                           self.run, type(exc).__name__, exc)
            self._exited.set()
            self._started.set()
            if self._on_failure is not None:
                self._on_failure()
            return
        finally:
            self._started.set()
        self._forward()

    def _spawn(self) -> None:
        fds: List[int] = []
        handed = []
        try:
            for exporter, spec in zip(self._exporters, self._spec["exporters"]):
                fd = exporter.hand_over() if hasattr(exporter, "hand_over") else None
                handed.append(exporter)
                if fd is not None:
                    spec["kwargs"]["inherit_fd"] = fd
                    fds.append(fd)
            reply_r, reply_w = os.pipe()
            self._spec["reply_fd"] = reply_w
            try:
                proc = subprocess.Popen(
                    [self._python, "-m", "goodput_core.monitor.child"],
                    stdin=subprocess.PIPE, pass_fds=fds + [reply_w], close_fds=True,
                    **_OWN_GROUP)
            except BaseException:
                os.close(reply_r)
                raise
            finally:
                os.close(reply_w)
        except BaseException:
            for exporter in handed:  # serve from here again; the thread will not run
                if hasattr(exporter, "take_back"):
                    exporter.take_back()
            raise
        os.set_blocking(proc.stdin.fileno(), False)  # a stuck child never blocks a write
        self._proc, self._reply = proc, reply_r
        self._send(self._spec)  # first: the child reads its settings before any command
        while True:  # then what was asked meanwhile, in order
            with self._lock:
                pending, self._pending = self._pending, []
                if not pending:
                    self._ready = True
                    break
            for message in pending:
                self._send(message)

    def _release_exporters(self) -> None:
        """The child is up and holds its own copies: close ours."""
        for exporter in self._exporters:
            try:
                exporter.close()
            except Exception:  # noqa: BLE001 - our copy only
                logger.debug("closing a handed-over exporter failed", exc_info=True)

    def _fall_back(self, code: Optional[int]) -> None:
        """The child exited before it was up (not a Python that can run it, an
        import failing there): the exporters serve from here, on a thread."""
        self.error = RuntimeError(f"the monitor process exited before it started (code {code})")
        logger.warning("goodput monitor %s: %s; monitoring from a thread of this process "
                       "instead", self.run, self.error)
        for exporter in self._exporters:
            if hasattr(exporter, "take_back"):
                try:
                    exporter.take_back()
                except Exception:  # noqa: BLE001 - that exporter stays quiet
                    logger.debug("taking an exporter back failed", exc_info=True)
        if self._on_failure is not None:
            self._on_failure()

    # ------------------------------------------------------------ forwarding
    def _send(self, message: Dict[str, Any]) -> bool:
        """Writes one line to the child without ever blocking; False if it was not taken."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return False
        data = (json.dumps(message) + "\n").encode()
        try:
            with self._write_lock:
                n = os.write(proc.stdin.fileno(), data)
        except (BlockingIOError, BrokenPipeError, OSError, ValueError):
            return False
        return n == len(data)  # a partial line would confuse the child: pipes take
        # writes up to PIPE_BUF (4 KiB) whole, and our lines are far shorter

    def command(self, message: Dict[str, Any]) -> None:
        """Sends a command now, or once the child has started."""
        with self._lock:
            if not self._ready:
                if not self._started.is_set():
                    self._pending.append(message)
                return  # (else it could not start: nothing to tell)
        self._send(message)

    def _forward(self) -> None:
        buf = b""
        while not self._exited.is_set():
            try:
                ready, _, _ = select.select([self._reply], [], [], self._pace)
                if ready:
                    chunk = os.read(self._reply, 65536)
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        self._on_reply(line)
                self._forward_dropped()
            except Exception:  # noqa: BLE001 - the forwarder must not die on a bad line
                logger.debug("goodput monitor %s: forwarding failed", self.run, exc_info=True)
        code = _exit_code(self._proc)
        if not self._up and not self._stopping.is_set():
            self._fall_back(code)
        elif not self._stopping.is_set():
            logger.warning("goodput monitor %s: the monitor process exited (code %s); "
                           "monitoring stopped, training goes on", self.run, code)
        try:
            os.close(self._reply)
        except OSError:
            pass
        self._exited.set()

    def _on_reply(self, line: bytes) -> None:
        message = json.loads(line)
        if "ready" in message:
            self._up = True
            self._release_exporters()
        if "stats" in message:
            self._stats = message["stats"]
        if "flushed" in message:
            waiter = self._flushes.pop(message["flushed"], None)
            if waiter is not None:
                waiter[1]["ok"] = bool(message.get("ok"))
                waiter[0].set()
        if "stopped" in message:
            self._final = bool(message["stopped"])

    def _forward_dropped(self) -> None:
        if self._recorder is None:
            return
        try:
            dropped = int(self._recorder.stats()["dropped"])
        except Exception:  # noqa: BLE001 - a diagnostic figure
            return
        if dropped != self._dropped_sent and self._send({"dropped": dropped}):
            self._dropped_sent = dropped

    def flush(self, timeout: Optional[float], parts: Optional[Sequence[str]]) -> bool:
        """Asks the child for one cycle (``Monitor.flush``) and waits for it
        until the deadline (the recorder's events are stored first).

        Returns:
          True when the child reported the cycle complete in time.
        """
        deadline = self._time.after(timeout)
        if not self._time.wait_until(self._started, deadline) or self._proc is None:
            return False
        self._flush_recorder(self._time.remaining(deadline))
        done, outcome = threading.Event(), {}
        key = next(self._flush_ids)
        self._flushes[key] = (done, outcome)
        self.command({"flush": self._time.remaining(deadline), "id": key,
                      "parts": None if parts is None else sorted(parts)})
        if not self._time.wait_until(done, deadline):
            self._flushes.pop(key, None)
            return False
        return outcome.get("ok", False)

    def stats(self) -> Dict[str, Any]:
        """The child's counters as last reported (cycles, errors)."""
        return {"cycles": int(self._stats.get("cycles", 0)),
                "errors": dict(self._stats.get("errors", {}))}

    # ---------------------------------------------------------------- stop
    def stop(self, timeout: Optional[float], skip_final: bool) -> Optional[bool]:
        """Ends the child within ``timeout`` seconds (None: unbounded).

        The recorder's events are stored first (so the final cycle sees them),
        then the child runs its final cycle; past the deadline it is killed.

        Returns:
          True when the child finished its final cycle and exited in time;
          None when it never started (``error``): the caller stops its own thread.
        """
        deadline = self._time.after(timeout)
        self._stopping.set()
        if self._thread is None:
            return True
        if not self._time.wait_until(self._started, deadline):
            logger.warning("goodput monitor %s: the monitor process did not start in time",
                           self.run)
            return False
        proc = self._proc
        if proc is None or self.error is not None:  # it could not start (logged)
            return None
        if not skip_final:
            self._flush_recorder(self._time.remaining(deadline))
        left = self._time.remaining(deadline)
        self._forward_dropped()
        self._send({"stop": left, "skip_final": skip_final})
        ok = self._time.wait_until(self._exited, deadline)
        if not ok:
            logger.warning("goodput monitor %s: the monitor process did not end in time; "
                           "killed so that the job can end", self.run)
            _kill(proc)
        elif proc.poll() is None:
            try:
                proc.wait(_KILL_WAIT_S)  # it closed its pipe: exiting now
            except subprocess.TimeoutExpired:
                _kill(proc)
        _close_stdin(proc)
        self._release_exporters()  # (idempotent) also when it never said it was up
        return ok and bool(self._final)


    def _flush_recorder(self, timeout: Optional[float]) -> None:
        """Stores this process's events of the run: the final cycle reads the store."""
        try:
            # recorders are matched by the URL their open store reports
            flush_before_read(self.run, _Url(canonical_store_url(self._spec["store"])), timeout)
        except Exception:  # noqa: BLE001 - the final cycle reads what is there
            logger.debug("flushing the recorder failed", exc_info=True)


class _Url:
    """What flush_before_read needs of a store: its URL."""

    def __init__(self, url: Optional[str]):
        self.url = url


def _exit_code(proc: Optional[subprocess.Popen]) -> Optional[int]:
    """The child's exit status once it has exited (it closed its pipe: soon)."""
    if proc is None:
        return None
    try:
        return proc.wait(_KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        return None


def _kill(proc: subprocess.Popen) -> None:
    try:
        proc.kill()  # SIGKILL ends a stopped (SIGSTOP) process too
        proc.wait(_KILL_WAIT_S)
    except Exception:  # noqa: BLE001 - best effort: the job must end
        pass


def _close_stdin(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
