"""AXLearn's measurement contract, from AXLearn when importable, else local.

When ``axlearn.common.measurement`` imports, its ``Event``, ``EventType``,
``Recorder`` base and ``register_recorder`` are used, so our recorder is a
real AXLearn recorder in AXLearn's registry. Otherwise this module defines
stand-ins with the same names and values, a local registry, and the two
things AXLearn's launcher does with them: a tiny parser for
``--recorder_type`` / ``--recorder_spec`` flag lists and :func:`initialize`.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import logging
import types
from typing import Any, Dict, Iterator, List, Optional, Sequence

__all__ = [
    "AXLEARN_AVAILABLE",
    "Event",
    "EventType",
    "RecorderBase",
    "initialize",
    "parse_flags",
    "recorder_config",
    "register",
]

logger = logging.getLogger("goodput")

try:
    from axlearn.common import measurement as _axm
except ImportError:
    _axm = None
except Exception:  # a broken AXLearn install must not break plain use
    logger.warning("goodput: axlearn.common.measurement failed to import; using the "
                   "recorder without AXLearn's registry", exc_info=True)
    _axm = None

#: True when AXLearn's registry is used.
AXLEARN_AVAILABLE = _axm is not None


class _Event(enum.Enum):
    """AXLearn's legacy events (values equal names)."""

    START_JOB = "START_JOB"
    END_JOB = "END_JOB"
    START_STEP = "START_STEP"
    START_ACCELERATOR_INIT = "START_ACCELERATOR_INIT"
    END_ACCELERATOR_INIT = "END_ACCELERATOR_INIT"
    START_TRAINING_PREPARATION = "START_TRAINING_PREPARATION"
    END_TRAINING_PREPARATION = "END_TRAINING_PREPARATION"
    START_DATA_LOADING = "START_DATA_LOADING"
    END_DATA_LOADING = "END_DATA_LOADING"
    START_CUSTOM_BADPUT_EVENT = "START_CUSTOM_BADPUT_EVENT"
    END_CUSTOM_BADPUT_EVENT = "END_CUSTOM_BADPUT_EVENT"


class _EventType(enum.Enum):
    """AXLearn's context-manager events."""

    JOB = "job"
    STEP = "step"
    ACCELERATOR_INIT = "tpu_init"
    TRAINING_PREPARATION = "training_preparation"
    DATA_LOADING = "data_loading"
    CUSTOM_BADPUT_EVENT = "custom_badput_event"


class _PlainRecorder:
    """Stand-in for AXLearn's ``Recorder`` base when AXLearn is absent."""

    def record(self, event: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(type(self))

    def start_monitoring(self, **kwargs: Any) -> None:
        raise NotImplementedError(type(self))

    @contextlib.contextmanager
    def record_event(self, event: Any, *args: Any, **kwargs: Any) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def maybe_monitor_all(self) -> Iterator[None]:
        yield


_LOCAL_REGISTRY: Dict[str, type] = {}

if _axm is not None:
    Event = _axm.Event
    EventType = getattr(_axm, "EventType", _EventType)  # older AXLearn has none
    RecorderBase = _axm.Recorder
else:
    Event = _Event
    EventType = _EventType
    RecorderBase = _PlainRecorder


def recorder_config(fields: Sequence[str]) -> Optional[type]:
    """AXLearn's ``Config`` of our recorder: its base's (``name``) plus
    ``fields``, each defaulting to None (unset); None without AXLearn.

    With AXLearn's config system (``axlearn.common.config``) the class is a
    ``config_class``, so ``default_config().set(upload_dir=...)`` checks the
    field names as AXLearn does; with a registry that has no config system,
    a plain subclass of its ``Config``.
    """
    base = getattr(RecorderBase, "Config", None)
    if _axm is None or base is None:
        return None
    namespace: Dict[str, Any] = dict.fromkeys(fields)
    try:
        from axlearn.common.config import config_class
    except ImportError:
        return type("Config", (base,), namespace)
    namespace["__annotations__"] = dict.fromkeys(fields, Optional[Any])
    namespace["__module__"] = __name__
    namespace["__qualname__"] = "GoodputSuiteRecorder.Config"
    return config_class(type("Config", (base,), namespace))


def register(name: str, cls: type) -> type:
    """Registers ``cls`` under ``name`` locally and, when present, with AXLearn.

    A second registration of the same class (a re-import of our module)
    replaces the first instead of raising, as AXLearn's registry would.
    """
    _LOCAL_REGISTRY[name] = cls
    if _axm is None:
        return cls
    try:
        _axm.register_recorder(name)(cls)
    except ValueError:
        registry = getattr(_axm, "_recorders", None)
        previous = registry.get(name) if isinstance(registry, dict) else None
        if previous is not None and (previous.__module__, previous.__qualname__) == (
                cls.__module__, cls.__qualname__):
            registry[name] = cls  # our own earlier definition: replace it
        else:
            raise
    return cls


def lookup(name: str) -> Optional[type]:
    """A registered recorder class (ours first, then AXLearn's registry)."""
    cls = _LOCAL_REGISTRY.get(name)
    if cls is None and _axm is not None:
        registry = getattr(_axm, "_recorders", None)
        if isinstance(registry, dict):
            cls = registry.get(name)
    return cls


def parse_flags(argv: Sequence[str]) -> types.SimpleNamespace:
    """Reads ``--recorder_type`` and (repeatable) ``--recorder_spec`` from a flag list.

    Both ``--flag=value`` and ``--flag value`` forms; other flags are ignored.

    Returns:
      An object with ``recorder_type`` (str or None) and ``recorder_spec``
      (list of ``key=value`` strings), like AXLearn's ``FlagValues``.

    Raises:
      ValueError: a flag without a value.
    """
    recorder_type: Optional[str] = None
    spec: List[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name in ("recorder_type", "recorder_spec"):
            if not eq:
                if i + 1 >= len(args):
                    raise ValueError(f"--{name} needs a value")
                i += 1
                value = args[i]
            if name == "recorder_type":
                recorder_type = value
            else:
                spec.append(value)
        i += 1
    return types.SimpleNamespace(recorder_type=recorder_type, recorder_spec=spec)


def initialize(flags: Any, **hooks: Any) -> Optional[Any]:
    """What AXLearn's ``measurement.initialize(fv)`` does, for plain use.

    Args:
      flags: a flag list (``["--recorder_type=...", "--recorder_spec=..."]``)
        or an object with ``recorder_type`` and ``recorder_spec``.
      **hooks: passed to ``from_flags`` (tests: ``clock``, ``process_index``).

    Returns:
      The recorder, or None when no ``recorder_type`` is given.

    Raises:
      NotImplementedError: an unknown recorder type (AXLearn's error).
      ValueError: bad ``--recorder_spec`` values.
    """
    fv = parse_flags(flags) if isinstance(flags, (list, tuple)) else flags
    recorder_type = getattr(fv, "recorder_type", None)
    if not recorder_type:
        return None
    module, sep, name = recorder_type.rpartition(":")
    if sep:
        importlib.import_module(module)
    cls = lookup(name)
    if cls is None:
        raise NotImplementedError(
            f"Unknown recorder type: {recorder_type}. Supported types are: "
            f"{sorted(_LOCAL_REGISTRY)}")
    return cls.from_flags(fv=fv, **hooks) if hooks else cls.from_flags(fv=fv)
