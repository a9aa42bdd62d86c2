"""The monitor: one background loop from the store to the exporters.

API summary::

    from goodput_core.monitor import Monitor
    from goodput_core.exporters.tensorboard import TensorBoardExporter

    m = Monitor("run-1", "sqlite:///goodput.sqlite",
                [TensorBoardExporter("/tmp/tb")], interval_s=30, rolling_windows=(3600,))
    m.start()            # a monitor process (or one daemon thread here, see below)
    ...
    m.stop(timeout=10)   # a final, deadline-bounded cycle; then closes the exporters

    m.run_once()         # or drive it yourself (tests, ``goodput monitor --once``)

Each cycle reads only the events new since the last one (the calculator is
incremental), computes the enabled *parts* (``"goodput"``: cumulative
result; ``"step_deviation"``: step statistics and the deviations of steps
not exported before; ``"rolling"``: rolling windows), builds one
:class:`~goodput_core.exporters.base.MonitorSnapshot` and hands it to every
exporter. With the goodput part come slice efficiency, program goodput
and new model-metric points; with the rolling part, per-window slice
efficiency (:mod:`goodput_core.monitor.cycle`; each can be switched off).

Reliability (docs/quality.md R5): every exporter runs on its own worker thread
and each cycle waits for them only up to ``export_timeout_s``. An exporter
that raises is logged once per error kind and then only counted; one that
hangs is skipped by later cycles until it returns (the step deviations it
missed are handed to it then), and never delays the others or the loop.
``stop()`` returns within its deadline whatever the exporters or the store do.

Where it runs: by default :meth:`Monitor.start` hands the cycles to a monitor
process (:mod:`goodput_core.monitor.process`), so that they never compete with
the training thread; ``process=False`` (or ``GOODPUT_MONITOR_PROCESS=0``), a
memory store, an injected clock, wait or calculator, or an exporter without
``process_spec()`` keep them on a thread here.

Time: ``clock`` gives the query time and drives the schedule; ``wait(s)``
blocks for ``s`` seconds (True asks the loop to stop); ``deadlines`` times the
exports and ``stop()``. Tests inject all three: no test sleeps or waits out a timeout.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from typing import Any, Callable, Collection, Dict, Iterable, List, Optional, Tuple


from goodput_core.exit_bound import exit_timeout_s
from goodput_core.monitor.runner import Deadlines, Runner
from goodput_core.exporters.base import Exporter, MonitorSnapshot
from goodput_core.monitor.cycle import Extras
from goodput_core.monitor.exporting import close_all, dispatch
from goodput_core.monitor.placement import child_spec
from goodput_core.monitor.process import ProcessMonitor
from goodput_core.monitor.schedule import Schedule
from goodput_core.monitor.snapshots import SnapshotBuilder
from goodput_core.monitor.arguments import (  # parse_windows: the command line's
    DEFAULT as _DEFAULT, parse_windows, positive as _positive, windows as _windows)
from goodput_core.stores import open_store

__all__ = ["Monitor", "PARTS", "parse_windows"]

logger = logging.getLogger(__name__)

#: What a cycle can compute (see the module docstring).
PARTS = ("goodput", "step_deviation", "rolling")


_CLOSE_RESERVE_S = 1.0  # at most this much of stop()'s time is kept for close()


class Monitor:
    """Periodically computes a run's goodput and hands it to exporters.

    Args:
      run: the run (job) name.
      store: a store URL, path or open Store (None: the default store).
        Ignored when ``calculator`` is given.
      exporters: objects with ``export(snapshot)`` and ``close()``
        (:class:`~goodput_core.exporters.base.Exporter`).
      interval_s: seconds between cycles of the goodput and rolling parts.
      rolling_windows: rolling window sizes in seconds (the "rolling" part).
      include_goodput: compute the cumulative result (the "goodput" part).
      include_step_deviation: compute step statistics (the "step_deviation" part).
      step_deviation_interval_s: seconds between step-deviation cycles
        (default ``interval_s``).
      configured_ideal_step_time: the ideal step time in seconds (default:
        computed from the step times).
      clock: returns the current POSIX time (query time and schedule).
      wait: ``wait(seconds)`` blocks the loop between cycles; a truthy return
        stops the loop. Default: an event wait that ``stop()`` interrupts.
      deadlines: the clock and wait of the export and stop deadlines (real time).
      export_timeout_s: how long a cycle waits for its exporters.
      final_flush_timeout_s: ``stop()``'s default deadline for the final cycle
        and closing the exporters (None: unbounded; default: the exit budget,
        ``GOODPUT_EXIT_TIMEOUT_S``, 5 s: ``with Monitor(...)`` around training
        adds at most that to the job's end, whatever a collector does).
      skip_final_flush: ``stop()`` skips the final cycle by default.
      recorder: a local Recorder whose dropped-event count is reported.
      calculator: an existing Calculator to read through (shared, warm).
      include_slice_efficiency: add stepping/available slice efficiency
        (cumulative and per rolling window) for runs with slice counts.
      include_program_goodput: add program goodput (MFU) when the run
        metadata allows it.
      include_metrics: add the model-metric points new since the last cycle.
      include_insights: add hangs, checkpoint-interval advice and the
        per-host breakdown (docs/insights.md).
      process: run the cycles in a separate process (True), on a thread of
        this process (False), or decide (None: a process unless
        ``GOODPUT_MONITOR_PROCESS=0``, or unless the monitor can only run
        here: a memory store, an injected clock, wait or calculator, an
        exporter without ``process_spec()``). See :mod:`goodput_core.monitor.process`.
      liveness: False keeps rule 1 (an open attempt runs to the query time) in the
        calculator the monitor opens, as the reference-compatible monitor does.

    Raises:
      ValueError: a bad interval, timeout, window size or ideal step time.
      StoreError: the store cannot be opened.
    """

    def __init__(self, run: str, store: Any = None, exporters: Iterable[Exporter] = (), *,
                 interval_s: float = 30.0, rolling_windows: Iterable[float] = (),
                 include_goodput: bool = True, include_step_deviation: bool = True,
                 step_deviation_interval_s: Optional[float] = None,
                 configured_ideal_step_time: Optional[float] = None,
                 clock: Callable[[], float] = time.time,
                 wait: Optional[Callable[[float], Any]] = None,
                 deadlines: Optional[Deadlines] = None,
                 export_timeout_s: float = 10.0,
                 final_flush_timeout_s: Any = _DEFAULT,
                 skip_final_flush: bool = False,
                 recorder: Any = None, calculator: Any = None,
                 include_slice_efficiency: bool = True, include_program_goodput: bool = True,
                 include_metrics: bool = True, include_insights: bool = True,
                 process: Optional[bool] = None, liveness: bool = True):
        intervals = {"goodput": _positive(interval_s, "interval_s"),
                     "rolling": float(interval_s)}
        intervals["step_deviation"] = _positive(
            interval_s if step_deviation_interval_s is None else step_deviation_interval_s,
            "step_deviation_interval_s")
        self._schedule = Schedule(intervals)
        self._export_timeout = _positive(export_timeout_s, "export_timeout_s")
        if final_flush_timeout_s is _DEFAULT:
            final_flush_timeout_s = exit_timeout_s()
        if final_flush_timeout_s is not None:
            final_flush_timeout_s = max(0.0, float(final_flush_timeout_s))
        self._final_timeout = final_flush_timeout_s
        self._ideal = (None if configured_ideal_step_time is None
                       else _positive(configured_ideal_step_time, "configured_ideal_step_time"))
        self.run = run
        self._store = store
        exporters = list(exporters)
        self._child_spec = child_spec(
            process, run, store, exporters, custom=(calculator is not None or wait is not None
                                                    or clock is not time.time),
            options=dict(interval_s=float(interval_s),
                         step_deviation_interval_s=intervals["step_deviation"],
                         configured_ideal_step_time=self._ideal,
                         export_timeout_s=self._export_timeout,
                         final_flush_timeout_s=self._final_timeout,
                         skip_final_flush=bool(skip_final_flush),
                         include_slice_efficiency=include_slice_efficiency,
                         include_program_goodput=include_program_goodput,
                         include_metrics=include_metrics, include_insights=include_insights,
                         liveness=bool(liveness)))
        self._child: Any = None
        #: Called after each cycle (the monitor process reports its counters).
        self.on_cycle: Optional[Callable[[], Any]] = None
        self._calc = calculator
        self._liveness = bool(liveness)
        if calculator is None and self._child_spec is None:
            self._calc = self._new_calculator(clock)
        self._clock = clock
        self._skip_final = bool(skip_final_flush)
        self._recorder = recorder
        self._runners = [Runner(e, self._report) for e in exporters]
        self._snapshots = SnapshotBuilder(
            run, Extras(slice_efficiency=include_slice_efficiency,
                        program_goodput=include_program_goodput, metrics=include_metrics,
                        insights=include_insights, on_error=self._report,
                        trace=any(getattr(e, "wants_trace", False) for e in exporters)),
            self._ideal, recorder, self._report)
        self._cycle_lock = threading.Lock()
        self._state_lock = threading.RLock()  # start() -> _start_thread()
        self._stats_lock = threading.Lock()
        self._stop_evt = threading.Event()
        self._wake = threading.Event()
        self._wait = wait if wait is not None else self._default_wait
        self._time = deadlines if deadlines is not None else Deadlines()
        self._thread: Optional[threading.Thread] = None
        self._stopped = False
        self._errors: Dict[str, int] = {}
        self._cycles = 0
        self.configure(goodput=include_goodput, step_deviation=include_step_deviation,
                       rolling_windows=rolling_windows)

    # ------------------------------------------------------------ settings
    @property
    def calculator(self) -> Any:
        """The Calculator the cycles read through (a monitor that runs in a
        process opens one here only when asked)."""
        if self._calc is None:
            self._calc = self._new_calculator(self._clock)
        return self._calc

    def _new_calculator(self, clock: Callable[[], float]) -> Any:
        # lazy: the calculator's modules: a monitor in a process opens it there
        from goodput_core.queries.calculator import Calculator

        return Calculator(self.run, open_store(self._store), clock=clock,
                          liveness=self._liveness)

    @property
    def in_process(self) -> bool:
        """True when the cycles run in a separate process (once started)."""
        return self._child_spec is not None

    @property
    def process_id(self) -> Optional[int]:
        """The monitor process's id once it runs (None: a thread, or not yet)."""
        return None if self._child is None else self._child.pid

    @property
    def exporters(self) -> List[Any]:
        """The exporters, in call order."""
        return [r.exporter for r in self._runners]

    @property
    def parts(self) -> frozenset:
        """The parts a cycle computes now."""
        return self._schedule.parts

    @property
    def rolling_windows(self) -> Tuple[Any, ...]:
        """The rolling window sizes in seconds."""
        return self._schedule.windows

    @property
    def stop_requested(self) -> threading.Event:
        """Set by ``stop()``; a custom ``wait`` may block on it."""
        return self._stop_evt

    def configure(self, *, goodput: Optional[bool] = None, step_deviation: Optional[bool] = None,
                  rolling_windows: Optional[Iterable[float]] = None) -> None:
        """Switches parts on or off at run time (None: unchanged).

        Every enabled part is first computed when the loop starts; a part
        switched on while it runs is first computed one interval later.
        Rolling windows are on when the list is not empty.

        Raises:
          ValueError: a window size that is not a positive number.
        """
        windows = None if rolling_windows is None else _windows(rolling_windows)
        self._schedule.configure(self._clock(), goodput, step_deviation, windows)
        self._wake.set()  # the loop re-plans its wait
        if self._child is not None:
            self._child.command({"configure": {
                "goodput": goodput, "step_deviation": step_deviation,
                "rolling_windows": None if windows is None else list(windows)}})

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Waits until no exporter call is running (e.g. a slow one has returned).

        Returns:
          False when ``timeout`` seconds passed first.
        """
        deadline = self._time.after(timeout)
        return all(r.wait_idle(self._time.remaining(deadline)) for r in self._runners)

    def stats(self) -> Dict[str, Any]:
        """Counters: cycles run and errors by ``"<source>: <kind>"`` (of the
        monitor process, as it last reported them, when it runs in one)."""
        if self._child is not None and self._child.error is None:
            return self._child.stats()
        with self._stats_lock:
            return {"cycles": self._cycles, "errors": dict(self._errors)}

    # ------------------------------------------------------------- cycles
    def run_once(self, final: bool = False) -> Optional[MonitorSnapshot]:
        """Runs one cycle of every enabled part now, on the caller's thread.

        Returns:
          The snapshot handed to the exporters, or None when the store or the
          calculator failed (logged), the monitor was stopped, or its cycles
          run in a monitor process (started: the exporters live there).
        """
        if self._stopped or self._handed_over():
            return None
        with self._cycle_lock:
            return self._cycle(self.parts, final, math.inf)[0]

    def flush(self, timeout: Any = _DEFAULT, parts: Optional[Collection[str]] = None) -> bool:
        """Runs one cycle within ``timeout`` seconds, whatever the exporters do.

        Args:
          timeout: the deadline (default ``final_flush_timeout_s``; None: none).
          parts: the parts to compute (default the enabled ones); a part that
            is not enabled is computed once (e.g. the compat one-off flush).

        Returns:
          True when the cycle and every exporter finished in time (in the
          monitor process once it runs in one).
        """
        chosen = self.parts if parts is None else frozenset(parts)
        if not chosen <= set(PARTS):
            raise ValueError(f"unknown parts {sorted(chosen - set(PARTS))}; choose from {PARTS}")
        timeout = self._final_timeout if timeout is _DEFAULT else timeout
        if self._handed_over():
            return self._child.flush(timeout, None if parts is None else chosen)
        return self._bounded_cycle(chosen, True, self._time.after(timeout))

    def _bounded_cycle(self, parts: frozenset, final: bool, deadline: float) -> bool:
        if not parts:
            return True
        outcome: Dict[str, bool] = {}
        finished = threading.Event()

        def body() -> None:
            left = self._time.remaining(deadline)
            # a loop cycle stuck in a store read holds the lock: give up at the deadline
            try:
                if self._cycle_lock.acquire(timeout=-1 if left is None else left):
                    try:
                        if self._time.remaining(deadline) != 0.0:  # else too late: abandoned
                            snap, complete = self._cycle(parts, final, deadline)
                            outcome["ok"] = snap is not None and complete
                    finally:
                        self._cycle_lock.release()
            finally:
                finished.set()

        worker = threading.Thread(target=body, name=f"goodput-flush-{self.run}", daemon=True)
        worker.start()
        if not self._time.wait_until(finished, deadline):
            logger.warning("goodput monitor %s: the final cycle did not finish in time; "
                           "abandoned so that shutdown is not blocked", self.run)
        return outcome.get("ok", False)

    def _cycle(self, parts: Collection[str], final: bool, deadline: float
               ) -> Tuple[Optional[MonitorSnapshot], bool]:
        """One cycle (the caller holds ``_cycle_lock``).

        Returns:
          (the snapshot or None, whether every exporter finished in time).
        """
        snapshot = self._snapshots.compute(self.calculator, self._clock, parts,
                                           self.rolling_windows, final)
        if snapshot is None:
            return None, False
        export_deadline = min(deadline, self._time.after(self._export_timeout))
        left = self._time.remaining(export_deadline)
        if left is not None:  # for exporters with timeouts of their own (real time)
            snapshot = dataclasses.replace(snapshot, deadline=time.monotonic() + left)
        complete = dispatch(self._runners, snapshot, export_deadline, self._report,
                            self._time.wait_until)
        with self._stats_lock:
            self._cycles += 1
        if self.on_cycle is not None:
            try:
                self.on_cycle()
            except Exception:  # noqa: BLE001 - a report must not fail the cycle
                logger.debug("on_cycle failed", exc_info=True)
        return snapshot, complete

    # --------------------------------------------------------- the thread
    def start(self) -> "Monitor":
        """Starts the background loop (idempotent; a stopped monitor stays stopped)."""
        with self._state_lock:
            if self._stopped:
                logger.warning("goodput monitor %s was stopped; build a new one to restart",
                               self.run)
            elif self._child_spec is not None:
                if self._child is None:  # spawned from a thread: returns at once (P9)
                    self._child = ProcessMonitor(
                        self.run, self._child_spec, self.exporters,
                        interval_s=self._schedule.idle, recorder=self._recorder,
                        deadlines=self._time, on_failure=self._start_thread)
                    self._child.command({"configure": {
                        "goodput": "goodput" in self.parts,
                        "step_deviation": "step_deviation" in self.parts,
                        "rolling_windows": list(self.rolling_windows)}})
                    self._child.start()
            else:
                self._start_thread()
        return self

    def _start_thread(self) -> None:
        # also where a monitor process could not be spawned: monitor from here
        with self._state_lock:
            if self._thread is None and not self._stopped:
                # the first cycle runs at start: a Prometheus endpoint or a dashboard
                # is never empty for the first interval (the 30 s default)
                self._schedule.due_now(self._clock())
                self._thread = threading.Thread(
                    target=self._loop, name=f"goodput-monitor-{self.run}", daemon=True)
                self._thread.start()

    def _default_wait(self, seconds: float) -> bool:
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stop_evt.is_set()

    def _loop(self) -> None:
        while not self._stop_evt.is_set():
            delay = self._schedule.delay(self._clock)
            try:
                if self._wait(delay) or self._stop_evt.is_set():
                    break
                due = self._schedule.take_due(self._clock())
                if due:
                    with self._cycle_lock:
                        if not self._stop_evt.is_set():
                            self._cycle(due, False, math.inf)
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything
                self._report("monitor loop", exc)

    def stop(self, timeout: Any = _DEFAULT, *, skip_final_flush: Optional[bool] = None) -> bool:
        """Stops the loop, runs a final cycle and closes the exporters, all
        within ``timeout`` seconds (idempotent).

        Args:
          timeout: the deadline (default ``final_flush_timeout_s``; None: none).
          skip_final_flush: overrides the constructor's choice.

        Returns:
          True when everything finished in time (False: something was abandoned).
        """
        with self._state_lock:
            if self._stopped:
                return True
            self._stopped = True
        timeout = self._final_timeout if timeout is _DEFAULT else timeout
        skip = self._skip_final if skip_final_flush is None else skip_final_flush
        if self._child is not None:
            ok = self._child.stop(timeout, skip)
            if ok is not None:  # else it never ran: a thread may monitor instead
                return ok
        deadline = self._time.after(timeout)
        # keep a share of the time for close(): flushing files matters even
        # when the final cycle is abandoned
        reserve = 0.0 if timeout is None else min(_CLOSE_RESERVE_S, 0.2 * max(0.0, timeout))
        self._stop_evt.set()
        self._wake.set()
        ok = True
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._time.remaining(deadline))
            if thread.is_alive():
                ok = False
                logger.warning("goodput monitor %s: the loop did not stop in time", self.run)
        if not skip:
            ok = self._bounded_cycle(self.parts, True, deadline - reserve) and ok
        return close_all(self._runners, deadline, self.run, self._time.wait_until) and ok

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _handed_over(self) -> bool:
        """True once the exporters belong to a monitor process (or its spawn is under way)."""
        child = self._child
        if child is None or child.error is not None:
            return False
        logger.debug("goodput monitor %s: cycles run in the monitor process", self.run)
        return True

    # ------------------------------------------------------------- errors
    def _report(self, source: str, error: Any) -> None:
        """Logs the first error of each kind per source; counts the rest."""
        if isinstance(error, str):
            kind, text = error, {"busy": "still busy with an earlier cycle; skipped",
                                 "timeout": "did not finish in time; skipped until it returns"
                                 }.get(error, error)
        else:
            kind, text = type(error).__name__, f"{type(error).__name__}: {error}"
        key = f"{source}: {kind}"
        with self._stats_lock:
            self._errors[key] = n = self._errors.get(key, 0) + 1
        if n == 1:
            logger.warning("goodput monitor %s: %s: %s (further %r errors are only counted; "
                           "see Monitor.stats())", self.run, source, text, kind)
