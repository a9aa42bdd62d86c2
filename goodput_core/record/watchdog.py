"""The hang watchdog: notices a training loop that stopped making progress.

Nothing runs on the training thread. The recorder's writer thread shows the
watchdog every batch of events it drains (:meth:`HangWatchdog.observe`); the
watchdog's own daemon thread checks every few seconds whether the job is
open, outside any known non-step phase (accelerator init, preparation, a
checkpoint save or restore, a compile, a custom badput event, an elastic
wait or re-initialisation) and without progress for longer than
``max(factor x expected step time, min_seconds)``. Progress is a step or a
phase starting or ending: the silence after a long save is timed from the
save's end. Expected step time: the ideal step time (step_stats' rule) once
10 steps were timed, else the longest step so far; no hang is declared
before two steps started. Steps are timed from completion where step ends
are recorded at sync points (the steps since the last sync point share the
time since it: under asynchronous dispatch a step start is a dispatch), else
from step starts.

Staleness is measured on a monotonic clock from when the progress was
*observed*, so a test's fake clock never fakes a hang. If the writer itself
is held up (a slow store), the last event still queued is looked at too, so
a blocked store does not look like a hung loop. Checks run every
``min(10 s, threshold / 4)``; the writer observes an event at most one
flush interval after it was recorded, so a hang is declared between
``threshold`` and ``threshold + flush interval + check interval`` after the
last progress.

On detection the watchdog records a ``hang`` event (detection time, last
progress time, step, expected step time, and the threads' stacks: the thread
that recorded the last step first, goodput's own threads only by name,
:mod:`goodput_core.record.stacks`),
logs one warning and calls the optional ``on_hang`` callback (for example to
end the process so that the scheduler restarts it). When a step starts or
ends, or a phase starts or ends, it records ``hang_end`` at that event's time.

Settings: ``Recorder(..., hang_detection=...)`` takes ``True`` (defaults),
``False``, or a :class:`HangSettings`; the environment variables
``GOODPUT_HANG_DETECTION`` (``0`` turns it off), ``GOODPUT_HANG_FACTOR`` and
``GOODPUT_HANG_MIN_SECONDS`` override the defaults (factor 10, 120 s).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, NamedTuple, Optional

from goodput_core.events import HANG_EXPECTED_STEP, HANG_LAST_PROGRESS, HANG_STACK, Kind
from goodput_core.record.stacks import hung_thread, stack_summary
from goodput_core.record.step_series import StepSeries
from goodput_core.settings import parse_bool, parse_seconds
from goodput_core.stores.event_batch import EventBatch

__all__ = ["HangSettings", "HangWatchdog", "watchdog_for", "ENV_ENABLED", "ENV_FACTOR",
           "ENV_MIN_SECONDS"]

logger = logging.getLogger("goodput")

ENV_ENABLED = "GOODPUT_HANG_DETECTION"
ENV_FACTOR = "GOODPUT_HANG_FACTOR"
ENV_MIN_SECONDS = "GOODPUT_HANG_MIN_SECONDS"

# Phases during which a long silence is expected (data loading is not one:
# a deadlocked input pipeline is a hang).
_PHASES = {
    int(Kind.TPU_INIT_START): ("tpu", 1), int(Kind.TPU_INIT_END): ("tpu", -1),
    int(Kind.TRAINING_PREP_START): ("prep", 1), int(Kind.TRAINING_PREP_END): ("prep", -1),
    int(Kind.CHECKPOINT_SAVE_START): ("save", 1), int(Kind.CHECKPOINT_SAVE_END): ("save", -1),
    int(Kind.CHECKPOINT_RESTORE_START): ("restore", 1),
    int(Kind.CHECKPOINT_RESTORE_END): ("restore", -1),
    int(Kind.PROGRAM_STARTUP_START): ("compile", 1),
    int(Kind.PROGRAM_STARTUP_END): ("compile", -1),
    int(Kind.CUSTOM_BADPUT_START): ("custom", 1), int(Kind.CUSTOM_BADPUT_END): ("custom", -1),
    int(Kind.ELASTIC_WAIT_START): ("wait", 1), int(Kind.ELASTIC_WAIT_END): ("wait", -1),
    int(Kind.ELASTIC_REINIT_START): ("reinit", 1), int(Kind.ELASTIC_REINIT_END): ("reinit", -1),
}
_STEP_START, _STEP_END = int(Kind.STEP_START), int(Kind.STEP_END)
_JOB_START, _JOB_END = int(Kind.JOB_START), int(Kind.JOB_END)
_STEPS = {_STEP_START, _STEP_END}
# Progress: a step or a phase starting or ending. A phase's end counts like a
# step's, so the silence after a long save or evaluation is timed from its end
# (timed from the last step, every save longer than the threshold would look
# like a hang the moment it ended).
_PROGRESS = _STEPS | set(_PHASES)
_MIN_FOR_IDEAL = 10
_WATCHED: Any = None  # kind code -> watched (a numpy table, made on the first batch of columns)


class HangSettings(NamedTuple):
    """How the watchdog decides (see the module docstring).

    Attributes:
      enabled: False switches the watchdog off.
      factor: a hang is ``factor`` x the expected step time without progress...
      min_seconds: ...and never less than this.
      on_hang: called with the hang's fields (a dict) once per hang, on the
        watchdog's thread; exceptions are logged and ignored.
      check_interval_s: how often to look (default: min(10 s, threshold / 4)).
    """

    enabled: bool = True
    factor: float = 10.0
    min_seconds: float = 120.0
    on_hang: Optional[Callable[[Dict[str, Any]], Any]] = None
    check_interval_s: Optional[float] = None


def settings_from_env(base: HangSettings = HangSettings()) -> HangSettings:
    """``base`` with the ``GOODPUT_HANG_*`` environment variables applied.

    Raises:
      ValueError: a variable that does not parse (a clear message names it).
    """
    out = base
    if os.environ.get(ENV_ENABLED, "").strip():
        out = out._replace(enabled=parse_bool(os.environ[ENV_ENABLED], ENV_ENABLED))
    if os.environ.get(ENV_FACTOR, "").strip():
        out = out._replace(factor=parse_seconds(os.environ[ENV_FACTOR], ENV_FACTOR))
    if os.environ.get(ENV_MIN_SECONDS, "").strip():
        out = out._replace(min_seconds=parse_seconds(os.environ[ENV_MIN_SECONDS],
                                                     ENV_MIN_SECONDS))
    return out


def watchdog_for(recorder: Any, setting: Any) -> Optional["HangWatchdog"]:
    """The watchdog a recorder gets for its ``hang_detection`` argument.

    Raises:
      ValueError: a setting of the wrong type or a bad environment variable.
    """
    if setting is False:
        return None
    if setting is None or setting is True:
        settings = settings_from_env()
    elif isinstance(setting, HangSettings):
        settings = setting
    else:
        raise ValueError(f"hang_detection must be True, False or a HangSettings, got {setting!r}")
    if not settings.enabled:
        return None
    if not (settings.factor > 0 and settings.min_seconds >= 0):
        raise ValueError(f"hang factor must be > 0 and min_seconds >= 0, got {settings}")
    return HangWatchdog(recorder, settings)


class HangWatchdog:
    """Watches one recorder's events for a loop that stopped making progress.

    Args:
      recorder: the Recorder (kept by weak reference).
      settings: a :class:`HangSettings`.
      monotonic: the staleness clock (inject in tests).
      wait: ``wait(seconds) -> bool`` between checks; True stops the thread
        (inject in tests; default: an Event that :meth:`stop` sets).
    """

    def __init__(self, recorder: Any, settings: HangSettings = HangSettings(), *,
                 monotonic: Callable[[], float] = time.monotonic,
                 wait: Optional[Callable[[float], bool]] = None):
        self._rec = weakref.ref(recorder)
        self.settings = settings
        self._mono = monotonic
        self._stop = threading.Event()
        self._user_wait = wait
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._pid = os.getpid()
        self.hangs = 0
        self._reset()

    def _reset(self) -> None:
        self._job_open = False
        self._phases: Dict[str, int] = collections.Counter()
        self._progress_t: Optional[float] = None  # event time of the last progress
        self._progress_mono = 0.0
        self._steps = StepSeries()
        self._open_hang: Optional[Dict[str, Any]] = None

    # ------------------------------------------------------------ writer side
    def observe(self, batch: Any) -> None:
        """Takes note of a batch of events (on the recorder's writer thread):
        an EventBatch (columns), or EventRecords."""
        started = False
        with self._lock:
            if isinstance(batch, EventBatch):
                started = self._observe_columns(batch)
            else:
                for ev in batch:
                    started = self._observe(ev[1], ev[2], ev[3]) or started
        if started:
            self._ensure_thread()

    def _observe(self, kind: int, t: float, step: Any) -> bool:
        """One event; True for a job start."""
        if kind in _STEPS:
            self._progress(kind, t, step)
        elif kind in _PHASES:
            name, delta = _PHASES[kind]
            self._phases[name] = max(self._phases[name] + delta, 0)
            self._progress(kind, t, step)
        elif kind == Kind.JOB_START:
            self._reset()
            self._job_open = True
            self._progress_mono = self._mono()
            return True
        elif kind == Kind.JOB_END:
            self._job_open = False
        return False

    def _observe_columns(self, batch: Any) -> bool:
        """An EventBatch: the events the watchdog looks at, found at once; runs
        of step starts and ends taken as columns, the others one by one."""
        # lazy: numpy, here only for a journal's batches (import goodput_core stays light)
        import numpy as np

        global _WATCHED
        if _WATCHED is None:
            _WATCHED = np.zeros(256, bool)
            _WATCHED[sorted(_STEPS | set(_PHASES) | {_JOB_START, _JOB_END})] = True
        kind = batch.kind
        at = _WATCHED[kind & 0xFF].nonzero()[0]
        if not len(at):
            return False
        kinds = kind[at]
        is_step = (kinds == _STEP_START) | (kinds == _STEP_END)
        started = False
        done = 0
        for i in (~is_step).nonzero()[0].tolist() + [len(at)]:
            if i > done:
                self._step_run(batch, at[done:i])
            if i < len(at):
                j = int(at[i])
                started = self._observe(int(kind[j]), float(batch.time[j]),
                                        int(batch.step[j]) if batch.has_step[j] else None
                                        ) or started
            done = i + 1
        return started

    def _step_run(self, batch: Any, at: Any) -> None:
        """Consecutive step starts and ends of a batch (rows ``at``)."""
        t = batch.time[at]
        at = at[t == t]  # a NaN time is no progress
        if not len(at):
            return
        if self._open_hang is not None:  # the first one ends it
            j = int(at[0])
            self._progress(int(batch.kind[j]), float(batch.time[j]),
                           int(batch.step[j]) if batch.has_step[j] else None)
            at = at[1:]
            if not len(at):
                return
        t = batch.time[at]
        if batch.has_step[at].all() and self._steps.add_columns(
                batch.kind[at] == _STEP_START, t, batch.step[at]):
            top = float(t.max())
            if self._progress_t is None or top >= self._progress_t:
                self._progress_t = top
            self._progress_mono = self._mono()
            return
        for j in at.tolist():
            self._progress(int(batch.kind[j]), float(batch.time[j]),
                           int(batch.step[j]) if batch.has_step[j] else None)

    def _progress(self, kind: int, t: float, step: Any) -> None:
        if not isinstance(t, float) or t != t:
            return
        if kind == Kind.STEP_START:
            self._steps.start(t, step)
        elif kind == Kind.STEP_END:
            self._steps.end(t, step)
        if self._progress_t is None or t >= self._progress_t:
            self._progress_t = t
        self._progress_mono = self._mono()
        if self._open_hang is not None:
            self._end_hang(t)

    # ------------------------------------------------------------ checks
    def expected_step_seconds(self) -> Optional[float]:
        """The step time a hang is measured against (None: not known yet):
        from completion once step ends were seen at sync points, else from
        the step starts."""
        steps = self._steps
        if len(steps.completed) >= _MIN_FOR_IDEAL:
            # lazy: numpy; the declared arrow up to queries/ (layer rule 1)
            from goodput_core.queries.step_stats import ideal_step_time

            ideal = ideal_step_time(list(steps.completed))
            if ideal:
                return float(ideal)
        if len(steps.starts) < 2:
            return None
        if len(steps.starts) > _MIN_FOR_IDEAL:
            import numpy as np  # not at import time: `import goodput_core` stays light

            # lazy: numpy; the declared arrow up to queries/ (layer rule 1)
            from goodput_core.queries.step_stats import ideal_step_time

            d = np.diff(np.fromiter(steps.starts, float))
            d = d[d > 0]
            ideal = ideal_step_time(d) if len(d) >= _MIN_FOR_IDEAL else None
            if ideal:
                return float(ideal)
        return steps.longest or None

    def threshold(self) -> Optional[float]:
        expected = self.expected_step_seconds()
        if expected is None:
            return None
        return max(self.settings.factor * expected, self.settings.min_seconds)

    def check(self) -> Optional[Dict[str, Any]]:
        """Looks once; records and returns the hang when one is detected."""
        rec = self._rec()
        if rec is None:
            return None
        with self._lock:
            if not self._job_open or self._open_hang is not None or any(self._phases.values()):
                return None
            threshold = self.threshold()
            if threshold is None or self._mono() - self._progress_mono < threshold:
                return None
            if self._queued_progress(rec):
                return None
            hang = {"step": self._steps.step, "last_progress_time": self._progress_t,
                    "expected_step_seconds": self.expected_step_seconds(),
                    "threshold_seconds": threshold}
            self._open_hang = hang
            self.hangs += 1
        try:
            now = rec.clock()
            hang["detected_time"] = now
            hang["stack"] = stack_summary(progress_thread=getattr(rec, "progress_thread", None))
            rec.record(Kind.HANG, now, hang["step"], **{
                HANG_LAST_PROGRESS: hang["last_progress_time"],
                HANG_EXPECTED_STEP: hang["expected_step_seconds"],
                HANG_STACK: hang["stack"]})
            where = hung_thread(hang["stack"])
            logger.warning("goodput: run %r looks hung: no step or phase started or ended for %.0f s "
                           "(step %s; threshold %.0f s)%s. Stacks:\n%s", rec.run,
                           now - hang["last_progress_time"], hang["step"], threshold,
                           f"; thread {where[0]} is in {where[1][0]}" if where[1] else "",
                           hang["stack"])
        except Exception:
            logger.exception("goodput: recording a hang failed")
        if self.settings.on_hang is not None:
            try:
                self.settings.on_hang(dict(hang))
            except Exception:
                logger.exception("goodput: the on_hang callback failed")
        return hang

    def _queued_progress(self, rec: Any) -> bool:
        """True when the newest event still queued is progress (the writer is
        behind, not the loop)."""
        try:
            newest = rec._ring.newest()
        except (IndexError, TypeError, AttributeError, ValueError):
            return False
        if newest is None:
            return False
        kind, t = newest
        return kind in _PROGRESS and self._progress_t is not None and t > self._progress_t

    def _end_hang(self, t: float) -> None:
        # Never before the detection: a span recorded when it ends (the JAX
        # adapter's compiles) brings a start time from before the hang was
        # declared, and an end before the detection would match no hang.
        t = max(t, self._open_hang.get("detected_time", t))
        self._open_hang = None
        rec = self._rec()
        if rec is not None:
            try:
                rec.record(Kind.HANG_END, t)
                logger.warning("goodput: run %r made progress again", rec.run)
            except Exception:
                logger.exception("goodput: recording the end of a hang failed")

    # ------------------------------------------------------------ thread
    def _interval(self) -> float:
        if self.settings.check_interval_s:
            return float(self.settings.check_interval_s)
        threshold = self.threshold() or self.settings.min_seconds or 10.0
        return max(0.05, min(10.0, threshold / 4))

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        if self._pid != os.getpid():  # a forked child not reset yet
            self.after_fork_in_child()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="goodput-hang-watchdog")
        self._thread.start()

    def _loop(self) -> None:
        while True:
            wait = self._user_wait or self._stop.wait
            if wait(self._interval()):
                return
            rec = self._rec()
            if rec is None or getattr(rec, "_closed", False):
                return
            try:
                self.check()
            except Exception:  # the watchdog must outlive its own bugs
                logger.exception("goodput: hang watchdog error")

    def stop(self) -> None:
        """Stops the thread (it exits at its next wake-up)."""
        self._stop.set()

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent's writer thread may have held the lock
        at the fork (the child's writer would wait on it forever), and no
        thread survived. The child watches again from its next job start only:
        a forked worker that records no steps must not look hung."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._pid = os.getpid()
