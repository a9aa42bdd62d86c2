"""What both MaxText paths (launcher and fork helpers) add around MaxText's
own goodput calls: Orbax checkpoint statistics and disruption events.

MaxText records job start, TPU init, preparation, data loading and steps
itself; it records job end only when the run completed gracefully, and
nothing at all when it crashes or is preempted. So, per process:

* **The current recorder.** The last enabled recorder built (by the alias or
  by :func:`~goodput_integrations.maxtext.helpers.create_goodput_recorder`)
  receives checkpoint statistics and disruptions. Held weakly.
* **Orbax statistics.** :func:`watch_orbax` arms a post-import hook: when
  MaxText imports ``orbax.checkpoint``, every ``CheckpointManager`` built
  afterwards gets our logger (:mod:`~goodput_integrations.maxtext.orbax_patch`).
  Orbax is never imported by us: importing it costs seconds that would land
  before the job's first event.
* **Compilation.** MaxText compiles its train step in no goodput block;
  :func:`watch_compiles` turns JAX's compile events into ``program_startup``
  spans (the JAX adapter's listeners, on the thread that built the recorder)
  instead of leaving that time in ``OTHER``. Only when JAX is imported
  already: we never import it.
* **Disruptions.** :func:`install_disruption_hooks` installs the JAX
  adapter's SIGTERM handler and excepthook
  (:class:`goodput_integrations.jax.signals.DisruptionHooks`): a SIGTERM
  records ``disruption_cause: sigterm``, an uncaught exception
  ``exception:<Type>``; both chain to what was installed before.
  :func:`record_crash` is for an exception caught while it propagates (the
  launcher wraps MaxText's main in ``try/except``; nothing here looks at
  ``sys.exc_info()``, which an unrelated outer ``except`` block also sets).

:func:`release` undoes everything (the launcher calls it at the end; tests).
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from typing import Any, Callable, List, Optional

from goodput_integrations.maxtext.orbax_patch import OrbaxPatch
from goodput_integrations.maxtext.post_import import PostImportHook, when_imported

# goodput_integrations.jax (its package imports numpy) is imported on first use only:
# importing the MaxText shim stays cheap.

__all__ = [
    "crash_cause",
    "current_recorder",
    "install_disruption_hooks",
    "record_crash",
    "release",
    "set_recorder",
    "track",
    "watch_compiles",
    "watch_orbax",
]

logger = logging.getLogger("goodput")

ORBAX_MODULE = "orbax.checkpoint"
_FLUSH_TIMEOUT_S = 2.0

_lock = threading.RLock()
_recorder: Optional[weakref.ReferenceType] = None
# undone by release(): patches armed by the modules above this one (workload_monitor)
_on_release: List[Callable[[], None]] = []
_orbax_hook: Optional[PostImportHook] = None
_orbax_patch: Any = None
_hooks: Any = None  # the JAX adapter's DisruptionHooks
_compiles: Any = None  # a JaxAdapter with only its compile listeners on
_system_metrics: Any = None  # the SystemMetrics sampler of GOODPUT_SYSTEM_METRICS


class _CurrentRecorderAdapter:
    """What :class:`DisruptionHooks` needs: ``active``, ``recorder``, ``emit``."""

    @property
    def active(self) -> bool:
        return current_recorder() is not None

    @property
    def recorder(self) -> Any:
        return current_recorder()

    @staticmethod
    def emit(fn: Any, *args: Any) -> None:
        fn(*args)


def set_recorder(recorder: Any) -> None:
    """Makes ``recorder`` the current one (a disabled recorder is ignored:
    only process 0 writes, and the others must not take its place)."""
    global _recorder
    if recorder is None or not getattr(recorder, "enabled", True):
        return
    with _lock:
        _recorder = weakref.ref(recorder)


def current_recorder() -> Optional[Any]:
    """The current recorder, or None (none built, or it was collected)."""
    ref = _recorder
    return None if ref is None else ref()


def watch_orbax() -> None:
    """Arms the Orbax patch for when ``orbax.checkpoint`` is imported
    (idempotent; at once if it already is). Never imports Orbax."""
    global _orbax_hook, _orbax_patch
    with _lock:
        if _orbax_hook is not None:
            return

        _orbax_patch = OrbaxPatch(current_recorder)
        _orbax_hook = when_imported(ORBAX_MODULE, _on_orbax_imported)


def _on_orbax_imported(module: Any) -> None:
    patch = _orbax_patch
    if patch is None:
        return
    try:
        patch.install()
    except Exception:  # noqa: BLE001 - statistics are optional: go on without
        logger.warning("goodput: Orbax checkpoint statistics unavailable", exc_info=True)


def orbax_patch() -> Any:
    """The Orbax patch armed by :func:`watch_orbax` (None if not armed)."""
    return _orbax_patch


def watch_compiles(recorder: Any) -> bool:
    """Records JAX compilations as ``recorder``'s program-startup spans
    (replacing an earlier recorder's). Returns False when JAX is not
    imported yet, ``recorder`` is a disabled one, or a JAX adapter the user
    instrumented is active (it records compilations itself)."""
    global _compiles
    if recorder is None or not getattr(recorder, "enabled", True):
        return False
    if "jax" not in sys.modules:
        return False
    with _lock:
        if _compiles is not None and _compiles.recorder is recorder:
            return True
        _stop_compiles()
        try:
            # lazy: the JAX adapter (numpy): only once JAX runs
            from goodput_integrations.jax._active import ACTIVE
            from goodput_integrations.jax.adapter import JaxAdapter

            if ACTIVE.get() is not None:
                return False  # the user's own JAX adapter records compilations already
            before = ACTIVE.current
            _compiles = JaxAdapter(recorder, accelerator_init=False, sigterm=False,
                                   excepthook=False, metadata=False).instrument()
            # ours only listens: module-level wrappers (instrument_iterator,
            # train_step) must not pick it up as "the" adapter
            ACTIVE.current = before
        except Exception:  # noqa: BLE001 - optional: MaxText runs on without it
            logger.warning("goodput: compile spans unavailable", exc_info=True)
            _compiles = None
            return False
        return True


def _stop_compiles() -> None:
    global _compiles
    if _compiles is not None:
        try:
            _compiles.uninstrument()
        except Exception:  # noqa: BLE001
            logger.warning("goodput: removing the compile listeners failed", exc_info=True)
        _compiles = None


def install_disruption_hooks() -> None:
    """Installs the SIGTERM handler (main thread only) and the excepthook
    (idempotent). They record to the current recorder, if any."""
    global _hooks
    # lazy: the JAX adapter (numpy): only once JAX runs
    from goodput_integrations.jax.signals import DisruptionHooks

    with _lock:
        if _hooks is None:
            _hooks = DisruptionHooks(_CurrentRecorderAdapter(), flush_timeout_s=_FLUSH_TIMEOUT_S)
        _hooks.install()


def track(recorder: Any, *, checkpoint_stats: bool = True, compile_spans: bool = True,
          disruptions: bool = True) -> None:
    """:func:`set_recorder`, then :func:`watch_orbax`, :func:`watch_compiles`
    and :func:`install_disruption_hooks` as asked (the fork helpers' call)."""
    set_recorder(recorder)
    if checkpoint_stats:
        watch_orbax()
    if compile_spans:
        watch_compiles(recorder)
    if disruptions:
        install_disruption_hooks()


def crash_cause(exc: BaseException) -> Optional[str]:
    """The disruption cause of an exception that ends a run, or None when it
    is a normal end (``SystemExit`` with status 0/None, ``GeneratorExit``)."""
    if isinstance(exc, GeneratorExit):
        return None
    if isinstance(exc, SystemExit):
        code = exc.code
        return None if code in (None, 0) else f"exit:{code}"
    return f"exception:{type(exc).__name__}"


def record_crash(exc: BaseException, recorder: Any = None) -> bool:
    """Records a disruption for ``exc``, an exception known to be propagating
    out of the training call, once per exception object (never raises).

    Args:
      exc: the exception.
      recorder: where to record (default: the current recorder).

    Returns:
      True if a disruption was recorded now.
    """
    # lazy: the JAX adapter (numpy): only once JAX runs
    from goodput_integrations.jax.signals import DISRUPTION_RECORDED_ATTR

    cause = crash_cause(exc)
    rec = current_recorder() if recorder is None else recorder
    if cause is None or rec is None or getattr(exc, DISRUPTION_RECORDED_ATTR, False):
        return False
    try:
        rec.record_disruption(cause)
        rec.flush(_FLUSH_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - never turn a crash into another one
        logger.warning("goodput: recording the crash failed", exc_info=True)
        return False
    try:
        setattr(exc, DISRUPTION_RECORDED_ATTR, True)
    except Exception:  # some exception types refuse attributes
        pass
    return True


def sample_system_metrics(recorder: Any, clock: Any = None) -> None:
    """``GOODPUT_SYSTEM_METRICS``: host, GPU and TPU utilisation every 10 s
    into ``recorder``'s run, on a thread of its own (one sampler per
    process: a new recorder takes the place of the previous one)."""
    global _system_metrics
    # lazy: the diagnostics SDK: only when diagnostics are on
    from goodput_core.compat.mldiagnostics.system_metrics import SystemMetrics

    with _lock:
        if _system_metrics is not None:
            if _system_metrics.recorder is recorder:
                return
            _system_metrics.stop(0.0)
        kwargs = {} if clock is None else {"clock": clock}
        _system_metrics = SystemMetrics(recorder, **kwargs).start()


def on_release(undo: Callable[[], None]) -> None:
    """Has :func:`release` call ``undo`` (once registered, at every release)."""
    with _lock:
        if undo not in _on_release:
            _on_release.append(undo)


def release() -> None:
    """Removes the hooks, listeners, Orbax patch and the patch of MaxText's
    workload monitor; forgets the recorder."""
    global _recorder, _orbax_hook, _orbax_patch, _hooks, _system_metrics
    with _lock:
        _stop_compiles()
        if _system_metrics is not None:
            _system_metrics.stop(_FLUSH_TIMEOUT_S)
            _system_metrics = None
        if _orbax_hook is not None:
            _orbax_hook.cancel()
        if _orbax_patch is not None:
            _orbax_patch.uninstall()
        if _hooks is not None:
            _hooks.uninstall()
        _recorder = _orbax_hook = _orbax_patch = _hooks = None
        undos = list(_on_release)
    for undo in undos:
        undo()
