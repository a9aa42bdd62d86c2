"""The opt-in alias: ``ml_goodput_measurement`` resolves to our compat modules.

Unmodified MaxText (or any code written against ``ml-goodput-measurement``)
does ``from ml_goodput_measurement import goodput, monitoring``. After
:func:`enable_reference_alias`, *in this process only*, those imports give
modules built from :mod:`goodput_core.compat`: the same public names, with
the recorder, calculator and monitor classes subclassed so that the
alias's settings (store, clock, Prometheus port, rolling windows) are their
defaults. Nothing is installed on disk; no package named
``ml_goodput_measurement`` is created outside ``sys.modules``.

Names served::

    ml_goodput_measurement[.src]                       (packages)
    ml_goodput_measurement[.src].goodput               goodput_core.compat.goodput
    ml_goodput_measurement[.src].goodput_utils         goodput_core.compat.goodput_utils
    ml_goodput_measurement[.src].goodput_elastic       goodput_core.compat.goodput_elastic
    ml_goodput_measurement[.src].monitoring            goodput_core.compat.monitoring
    ml_goodput_measurement[.src].monitoring_elastic    goodput_core.compat.monitoring_elastic

Any other ``ml_goodput_measurement.*`` name fails with a clear ImportError
instead of silently mixing in the real package. The alias refuses to start
when the real package is already imported (the process would hold two
incompatible recorders), and :func:`disable_reference_alias` undoes it all.

With ``mldiagnostics=True`` (the launcher's default) it also serves
``google_cloud_mldiagnostics`` (the ML-diagnostics SDK MaxText's
``managed_mldiagnostics`` flags use) from :mod:`goodput_core.compat.mldiagnostics`,
its ``machinelearning_run`` joined to MaxText's goodput run
(:mod:`~goodput_integrations.maxtext.mldiagnostics`); its ``custom_types`` and
``core`` subpackages are ours too, any other submodule fails clearly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from goodput_core.record.hooks import flush_all
from goodput_integrations.errors import AdapterUnavailable
from goodput_integrations.maxtext import mldiagnostics as _mld
from goodput_integrations.maxtext import runtime, whole_process

__all__ = [
    "AliasConflict",
    "AliasSettings",
    "active_session",
    "disable_reference_alias",
    "enable_reference_alias",
    "reference_alias",
]

logger = logging.getLogger("goodput")

ROOT = "ml_goodput_measurement"
SRC = f"{ROOT}.src"
MARKER = "__goodput_alias__"

# submodule -> (our module, {class name: kind of defaults it takes})
_SUBMODULES: Dict[str, Tuple[str, Dict[str, str]]] = {
    "goodput": ("goodput_core.compat.goodput",
                {"GoodputRecorder": "recorder", "GoodputCalculator": "calculator"}),
    "goodput_utils": ("goodput_core.compat.goodput_utils", {}),
    "goodput_elastic": ("goodput_core.compat.goodput_elastic",
                        {"GoodputRecorder": "recorder", "GoodputCalculator": "calculator",
                         "ElasticGoodputRecorder": "recorder",
                         "ElasticGoodputCalculator": "calculator"}),
    "monitoring": ("goodput_core.compat.monitoring", {"GoodputMonitor": "monitor"}),
    "monitoring_elastic": ("goodput_core.compat.monitoring_elastic",
                           {"ElasticGoodputMonitor": "monitor"}),
}

_LOCK = threading.RLock()
_session: Optional["_Session"] = None


class AliasConflict(RuntimeError):
    """The real ``ml_goodput_measurement`` is already imported in this process,
    or the alias is already on with other settings."""


@dataclasses.dataclass(frozen=True)
class AliasSettings:
    """Defaults the aliased classes use when their caller does not say.

    Attributes:
      store: store URL for recorders, calculators and monitors (None: the
        default store, ``$GOODPUT_STORE`` or the embedded sqlite file).
      clock: time source (tests inject a fake; None: ``time.time``).
      prometheus_port: monitors also serve Prometheus on 127.0.0.1:<port>.
      rolling_windows: a monitor's goodput uploader also uploads these
        rolling windows (seconds).
      checkpoint_stats: Orbax ``CheckpointManager`` objects created while the
        alias is on record their save/restore statistics, to the recorder
        the alias last built (needs orbax; the patch is installed when
        something imports ``orbax.checkpoint``, or at once if it is imported:
        the alias never imports Orbax itself).
      ideal_step_time: monitors' configured ideal step time (seconds).
      compile_spans: JAX compilations on the thread that built a recorder
        become its program-startup spans (when JAX is imported by then).
      run_group: each recorder built records this run group (metadata).
      disruptions: once a recorder is built, SIGTERM and an uncaught
        exception record a disruption (the JAX adapter's handlers, installed
        then: after whatever the job installed while importing, which they
        chain to).
      process_start: the POSIX time the process started: the recorders
        account for the whole process from then to its exit
        (:mod:`~goodput_integrations.maxtext.whole_process`); None: off.
      mldiagnostics: also serve ``google_cloud_mldiagnostics`` from our
        compat (module docstring).
      system_metrics: the recorder built last also gets system metrics
        (host, GPU, TPU utilisation every 10 s, off its thread:
        :mod:`goodput_core.compat.mldiagnostics.system_metrics`).
    """

    store: Optional[str] = None
    clock: Optional[Callable[[], float]] = None
    prometheus_port: Optional[int] = None
    rolling_windows: Tuple[int, ...] = ()
    checkpoint_stats: bool = False
    ideal_step_time: Optional[float] = None
    compile_spans: bool = False
    disruptions: bool = False
    run_group: str = ""
    process_start: Optional[float] = None
    mldiagnostics: bool = False
    system_metrics: bool = False


class _Session:
    """One enabled alias: its settings, finder, built modules and patches."""

    def __init__(self, settings: AliasSettings):
        self.settings = settings
        self.finder = _Finder(self)
        self.wrapped: Dict[type, type] = {}
        self.served: set = set()  # SDK names served by our own modules (removed at the end)
        self.active = True

    # --- the recorder that Orbax statistics and disruptions go to
    def note_recorder(self, recorder: Any) -> None:
        if self.active:
            runtime.set_recorder(recorder)
            if self.settings.compile_spans:
                runtime.watch_compiles(recorder)
            if self.settings.disruptions:
                runtime.install_disruption_hooks()
            if self.settings.run_group and getattr(recorder, "enabled", True):
                recorder.record_metadata(run_group=self.settings.run_group)
            if self.settings.system_metrics and getattr(recorder, "enabled", True):
                runtime.sample_system_metrics(recorder, self.settings.clock)
            whole_process.track(recorder, self.settings.process_start)

    # --- defaults
    def defaults(self, kind: str) -> Dict[str, Any]:
        s = self.settings
        out: Dict[str, Any] = {}
        if s.store is not None:
            out["store"] = s.store
        if s.clock is not None:
            out["clock"] = s.clock
        if kind == "monitor" and s.prometheus_port is not None:
            out["prometheus_port"] = s.prometheus_port
        if kind == "monitor" and s.ideal_step_time is not None:
            out["configured_ideal_step_time"] = s.ideal_step_time
        return out

    # --- module building
    def build(self, fullname: str) -> types.ModuleType:
        if fullname == _mld.ROOT:
            module = _mld.sdk_module(self.settings.store, self.settings.clock)
            module.__path__ = []  # a package: its submodules come from our finder
            module.__dict__[MARKER] = True
            return module
        if fullname in (ROOT, SRC):
            return _package(fullname, self)
        sub = fullname.rpartition(".")[2]
        source_name, classes = _SUBMODULES[sub]
        source = importlib.import_module(source_name)
        module = types.ModuleType(fullname, source.__doc__)
        for key, value in vars(source).items():
            if not (key.startswith("__") and key.endswith("__")):
                module.__dict__[key] = value
        if hasattr(source, "__all__"):
            module.__all__ = list(source.__all__)
        for cls_name, kind in classes.items():
            original = getattr(source, cls_name, None)
            if isinstance(original, type):
                module.__dict__[cls_name] = self.wrap(original, kind)
        module.__dict__[MARKER] = True
        return module

    def wrap(self, cls: type, kind: str) -> type:
        """``cls`` with the alias defaults (one subclass per class and session)."""
        with _LOCK:
            sub = self.wrapped.get(cls)
            if sub is None:
                sub = self.wrapped[cls] = _subclass(cls, kind, self)
            return sub


def _subclass(cls: type, kind: str, session: _Session) -> type:
    class Aliased(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            for key, value in session.defaults(kind).items():
                kwargs.setdefault(key, value)
            super().__init__(*args, **kwargs)
            if kind == "recorder":
                session.note_recorder(self)

    if kind == "monitor":
        _add_rolling_windows(Aliased, session)
    Aliased.__name__ = cls.__name__
    Aliased.__qualname__ = cls.__qualname__
    Aliased.__doc__ = cls.__doc__
    Aliased.__module__ = cls.__module__
    return Aliased


def _add_rolling_windows(klass: type, session: _Session) -> None:
    """The goodput uploader also drives the alias's rolling windows (joined by
    the windows newer MaxText asks for itself), and the final upload waits for
    this process's pending events."""

    def start_goodput_uploader(self, *args: Any, **kwargs: Any):
        super(klass, self).start_goodput_uploader(*args, **kwargs)
        windows = session.settings.rolling_windows
        if windows:  # a no-op on a monitor built with monitoring_enabled=False
            super(klass, self).start_rolling_window_goodput_uploader(list(windows))
            self._goodput_alias_rolling = True

    def start_rolling_window_goodput_uploader(self, rolling_windows_seconds: Any):
        # newer MaxText starts its own (enable_rolling_window_goodput) right after
        # the cumulative uploader: its windows join ours, and it stops them
        windows = [int(w) for w in rolling_windows_seconds]
        windows += [w for w in session.settings.rolling_windows if w not in windows]
        if getattr(self, "_goodput_alias_rolling", False) and self._set_rolling_windows(windows):
            self._goodput_alias_rolling = False
            return None
        return super(klass, self).start_rolling_window_goodput_uploader(windows)

    def stop_goodput_uploader(self, skip_final_flush: Optional[bool] = None):
        flush_all(5.0)
        if getattr(self, "_goodput_alias_rolling", False):
            self._goodput_alias_rolling = False
            self.stop_rolling_window_goodput_uploader(skip_final_flush)
        return super(klass, self).stop_goodput_uploader(skip_final_flush)

    klass.start_goodput_uploader = start_goodput_uploader  # type: ignore[attr-defined]
    klass.start_rolling_window_goodput_uploader = (  # type: ignore[attr-defined]
        start_rolling_window_goodput_uploader)
    klass.stop_goodput_uploader = stop_goodput_uploader  # type: ignore[attr-defined]


def _package(fullname: str, session: _Session) -> types.ModuleType:
    module = types.ModuleType(fullname, f"goodput's alias of {fullname} (see "
                              "goodput_integrations.maxtext.alias)")
    module.__path__ = []  # a package: submodules come from our finder only
    module.__dict__[MARKER] = True

    def __getattr__(name: str) -> Any:
        # the real package imports its submodules eagerly; ours on first use
        if name in _SUBMODULES or (fullname == ROOT and name == "src"):
            return importlib.import_module(f"{fullname}.{name}")
        raise AttributeError(f"module {fullname!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return module


class _Loader(importlib.abc.Loader):
    def __init__(self, session: _Session, canonical: str):
        self._session = session
        self._canonical = canonical
        self._own_spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name == self._canonical:
            return self._session.build(spec.name)
        if _under(spec.name, _mld.ROOT):
            self._session.served.add(spec.name)
        # ml_goodput_measurement.X is the very module ml_goodput_measurement.src.X
        module = importlib.import_module(self._canonical)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if self._own_spec is not None:
            # the import system stamped the second name's spec on it: undo
            module.__spec__ = self._own_spec


class _Finder(importlib.abc.MetaPathFinder):
    """Serves the aliased names; refuses other ``ml_goodput_measurement.*`` names."""

    def __init__(self, session: _Session):
        self._session = session

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if not self._session.active:
            return None
        if self._session.settings.mldiagnostics and _under(fullname, _mld.ROOT):
            return self._mldiagnostics_spec(fullname)
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        if fullname in (ROOT, SRC):
            return importlib.machinery.ModuleSpec(
                fullname, _Loader(self._session, fullname), is_package=True)
        parent, _, sub = fullname.rpartition(".")
        if parent in (ROOT, SRC) and sub in _SUBMODULES:
            return importlib.machinery.ModuleSpec(
                fullname, _Loader(self._session, f"{SRC}.{sub}"))
        raise ModuleNotFoundError(
            f"{fullname} is not provided by goodput's alias of {ROOT} (it serves "
            f"{', '.join(sorted(_SUBMODULES))}); disable the alias to use the reference",
            name=fullname)


    def _mldiagnostics_spec(self, fullname: str) -> importlib.machinery.ModuleSpec:
        if fullname == _mld.ROOT:
            return importlib.machinery.ModuleSpec(
                fullname, _Loader(self._session, fullname), is_package=True)
        sub = fullname[len(_mld.ROOT) + 1:]
        if sub in _mld.SUBMODULES:
            return importlib.machinery.ModuleSpec(
                fullname, _Loader(self._session, _mld.SUBMODULES[sub]),
                is_package="." not in sub)
        raise ModuleNotFoundError(
            f"{fullname} is not provided by goodput's alias of {_mld.ROOT} (it serves the "
            f"top-level names and {', '.join(sorted(_mld.SUBMODULES))}); disable the alias "
            "to use Google's SDK", name=fullname)


def _under(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def _alias_names(roots: Tuple[str, ...] = (ROOT,)) -> list:
    return [n for n in sys.modules if any(_under(n, r) for r in roots)]


def enable_reference_alias(*, store: Optional[str] = None,
                           clock: Optional[Callable[[], float]] = None,
                           prometheus_port: Optional[int] = None,
                           rolling_windows: Tuple[int, ...] = (),
                           checkpoint_stats: bool = False,
                           ideal_step_time: Optional[float] = None,
                           compile_spans: bool = False,
                           disruptions: bool = False,
                           run_group: str = "",
                           process_start: Optional[float] = None,
                           mldiagnostics: bool = False,
                           system_metrics: bool = False) -> AliasSettings:
    """Makes ``ml_goodput_measurement`` imports resolve to our compat modules,
    in this process only, until :func:`disable_reference_alias`.

    Idempotent for the same settings.

    Args:
      store, clock, prometheus_port, rolling_windows, checkpoint_stats,
        ideal_step_time, compile_spans, disruptions, run_group, process_start,
        mldiagnostics, system_metrics: see :class:`AliasSettings`.

    Returns:
      The settings in force.

    Raises:
      AliasConflict: the real package (or, with ``mldiagnostics``, Google's
        ``google_cloud_mldiagnostics``) is already imported, or the alias is
        on with different settings.
      AdapterUnavailable: ``checkpoint_stats`` without orbax-checkpoint.
    """
    settings = AliasSettings(store=store, clock=clock, prometheus_port=prometheus_port,
                             rolling_windows=tuple(rolling_windows),
                             checkpoint_stats=bool(checkpoint_stats),
                             ideal_step_time=ideal_step_time,
                             compile_spans=bool(compile_spans),
                             disruptions=bool(disruptions), run_group=run_group or "",
                             process_start=process_start, mldiagnostics=bool(mldiagnostics),
                             system_metrics=bool(system_metrics))
    global _session
    with _LOCK:
        if _session is not None:
            if _session.settings == settings:
                return settings
            raise AliasConflict("the ml_goodput_measurement alias is already on with other "
                                "settings; call disable_reference_alias() first")
        real = [n for n in _alias_names() if not getattr(sys.modules[n], MARKER, False)]
        if real:
            raise AliasConflict(
                f"the real {ROOT} is already imported in this process ({real[0]}); enable "
                "the alias before anything imports it, e.g. run the job under "
                "`python -m goodput_integrations.maxtext.launch ...`")
        sdk = [n for n in _alias_names((_mld.ROOT,)) if mldiagnostics]
        if sdk:
            raise AliasConflict(
                f"Google's {_mld.ROOT} is already imported in this process ({sdk[0]}); "
                "enable the alias before anything imports it")
        session = _Session(settings)
        if checkpoint_stats:
            if importlib.util.find_spec("orbax") is None:
                raise AdapterUnavailable("checkpoint statistics need orbax-checkpoint: pip "
                                         "install 'goodput-core[jax]', or turn them off")
            runtime.watch_orbax()  # patches when MaxText imports Orbax; never imports it
        sys.meta_path.insert(0, session.finder)
        _session = session
        return settings


def disable_reference_alias() -> bool:
    """Undoes :func:`enable_reference_alias`: removes the finder, the aliased
    modules from ``sys.modules`` and the Orbax patch.

    Objects already built (recorders, monitors) keep working.

    Returns:
      True if the alias was on.
    """
    global _session
    with _LOCK:
        session = _session
        if session is None:
            return False
        session.active = False
        try:
            sys.meta_path.remove(session.finder)
        except ValueError:
            pass
        for name in _alias_names((ROOT, _mld.ROOT)):
            if getattr(sys.modules[name], MARKER, False) or name in session.served:
                del sys.modules[name]
        runtime.release()
        _session = None
        return True


def active_session() -> Optional[AliasSettings]:
    """The settings of the alias now on, or None."""
    session = _session
    return None if session is None else session.settings


@contextlib.contextmanager
def reference_alias(**settings: Any) -> Iterator[AliasSettings]:
    """The alias on inside the block (see :func:`enable_reference_alias`)."""
    was_on = _session is not None
    result = enable_reference_alias(**settings)
    try:
        yield result
    finally:
        if not was_on:
            disable_reference_alias()
