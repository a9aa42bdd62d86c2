"""Run diagnostics: configs and metadata recorded with the run, metric queries.

Recording side::

    from goodput_core.queries.diagnostics import RunContext, record_config

    record_config(recorder, "configs/base.yml")      # or a dict, or a .json file
    with RunContext(recorder, configs=cfg, providers=[gjax.run_metadata],
                    record_job=True):
        train()                                      # metadata recorded on enter

    recorder.record_metric("loss", 2.31, step=100)   # model metrics (exists already)

Query side (:class:`~goodput_core.queries.calculator.Calculator`): ``calc.metadata()``
(latest value per key), ``calc.metrics("loss")`` (steps, times, values).

Configs are recorded as the ``configs`` key of a run-metadata event, made
JSON-safe first (numpy scalars become numbers, paths and unknown objects
their ``str``, non-finite floats their ``repr``), so every store can hold
them. No ML framework is imported here; PyYAML only when a YAML file is read.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import logging
import math
import os
import threading
from typing import Any, Callable, Dict, Iterable, Mapping, NamedTuple, Tuple

import numpy as np

from goodput_core.queries.run_groups import check_run_group

__all__ = [
    "MetricPoint",
    "MetricSeries",
    "RunContext",
    "jsonable",
    "load_config",
    "merged_metadata",
    "metric_series",
    "metrics_since",
    "record_config",
    "record_run_metadata",
]

logger = logging.getLogger("goodput")
_MAX_DEPTH = 32  # deeper nesting is almost surely a cycle: stored as text
_logged: set = set()
_logged_lock = threading.Lock()


def _log_once(key: str, msg: str, *args: Any) -> None:
    """Warns the first time ``key`` is seen (hooks must not flood the logs)."""
    with _logged_lock:
        if key in _logged:
            return
        _logged.add(key)
    logger.warning(msg, *args, exc_info=True)


# ---------------------------------------------------------------- configs
def jsonable(value: Any, _depth: int = 0) -> Any:
    """A JSON-safe copy of ``value`` (see the module docstring).

    Args:
      value: any object (configs are usually nested dicts and lists).

    Returns:
      Dicts with string keys, lists, strings, finite numbers, bools and None.
    """
    if _depth > _MAX_DEPTH:
        return str(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value, _depth + 1)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else repr(f)
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist(), _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value), _depth + 1)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v, _depth + 1) for v in items]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def load_config(path: Any) -> Dict[str, Any]:
    """Reads a config file: ``.json``, or ``.yaml``/``.yml`` when PyYAML is installed.

    Args:
      path: a path (str or PathLike).

    Returns:
      The top-level mapping.

    Raises:
      RuntimeError: a YAML file without PyYAML installed.
      ValueError: another suffix, a syntax error, or a top level that is not a mapping.
      OSError: the file cannot be read.
    """
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise RuntimeError(
                f"reading {path} needs PyYAML (pip install pyyaml); "
                "or pass the config as a dict or a .json file") from None
        with open(path, encoding="utf-8") as f:
            try:
                data = yaml.safe_load(f)
            except yaml.YAMLError as exc:
                raise ValueError(f"{path} is not valid YAML: {exc}") from None
    elif suffix == ".json":
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} is not valid JSON: {exc}") from None
    else:
        raise ValueError(f"config files must be .json, .yaml or .yml, got {path!r}")
    if not isinstance(data, Mapping):
        raise ValueError(f"the top level of {path} must be a mapping, got {type(data).__name__}")
    return dict(data)


def record_config(recorder: Any, configs: Any) -> Dict[str, Any]:
    """Records a run's configuration as run metadata (``configs=...``).

    Call it at set-up: bad input raises here, before training starts.

    Args:
      recorder: a :class:`~goodput_core.record.recorder.Recorder` (anything with
        ``record_metadata(**fields)``).
      configs: a mapping, or a path to a JSON or YAML file (the path is
        recorded too, as ``config_path``).

    Returns:
      The fields recorded.

    Raises:
      TypeError: ``configs`` is neither a mapping nor a path.
      RuntimeError, ValueError, OSError: as :func:`load_config`.
    """
    fields: Dict[str, Any] = {}
    if isinstance(configs, Mapping):
        data = configs
    elif isinstance(configs, (str, os.PathLike)):
        data = load_config(configs)
        fields["config_path"] = os.fspath(configs)
    else:
        raise TypeError(f"configs must be a mapping or a file path, got {type(configs).__name__}")
    fields["configs"] = jsonable(data)
    recorder.record_metadata(**fields)
    return fields


# --------------------------------------------------------------- metadata
def record_run_metadata(recorder: Any, providers: Iterable[Callable[[], Mapping[str, Any]]],
                        **fields: Any) -> Dict[str, Any]:
    """Calls metadata providers and records what they return as one event.

    A provider that raises is skipped (logged once): metadata must never
    stop a job.

    Args:
      recorder: anything with ``record_metadata(**fields)``.
      providers: functions returning a dict (e.g. the JAX adapter's
        ``run_metadata``); later providers win on equal keys.
      **fields: more fields (win over the providers').

    Returns:
      The fields recorded (nothing is recorded when there are none).
    """
    merged: Dict[str, Any] = {}
    for provider in providers:
        try:
            got = provider()
            if got:
                merged.update(got)
        except Exception:
            _log_once(f"provider:{getattr(provider, '__qualname__', provider)!r}",
                      "goodput: metadata provider %r failed; its fields are left out", provider)
    merged.update(fields)
    merged = jsonable(merged)
    if merged:
        try:
            recorder.record_metadata(**merged)
        except Exception:
            _log_once("record_metadata", "goodput: recording run metadata failed")
    return merged


class RunContext:
    """A context manager that records the run's metadata when the run starts.

    Args:
      recorder: the run's recorder.
      configs: optional configs (a mapping or a JSON/YAML path), recorded
        with :func:`record_config` (bad input raises on enter).
      providers: functions returning metadata dicts, called on enter (JAX:
        ``goodput_integrations.jax.run_metadata``; it initialises the
        backends, so enter after ``jax.distributed.initialize()``).
      record_job: also record job start on enter and job end on a clean exit
        (an exception records a disruption, as ``recorder.job()``).
      **fields: extra metadata fields (e.g. ``experiment="lr-sweep-3"``);
        ``run_group="G"`` puts the run in group G (:mod:`goodput_core.queries.run_groups`:
        ``goodput runs --group G``, ``goodput compare --group G``); a bad
        group name raises ``ValueError`` here.

    Example::

        with RunContext(rec, configs="cfg.yaml", providers=[gjax.run_metadata]):
            train()
    """

    def __init__(self, recorder: Any, *, configs: Any = None,
                 providers: Iterable[Callable[[], Mapping[str, Any]]] = (),
                 record_job: bool = False, **fields: Any):
        self.recorder = recorder
        self.configs = configs
        self.providers = list(providers)
        if "run_group" in fields:
            group = check_run_group(fields.pop("run_group"))
            if group:
                fields["run_group"] = group
        self.fields = fields
        self._job = recorder.job() if record_job else None
        self.recorded: Dict[str, Any] = {}

    def __enter__(self) -> "RunContext":
        if self._job is not None:
            self._job.__enter__()
        if self.configs is not None:
            self.recorded.update(record_config(self.recorder, self.configs))
        self.recorded.update(record_run_metadata(self.recorder, self.providers, **self.fields))
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._job is not None:
            return bool(self._job.__exit__(exc_type, exc, tb))
        return False


# ---------------------------------------------------------------- queries
class MetricSeries(NamedTuple):
    """One metric's values in time order (numpy arrays of equal length).

    Attributes:
      steps: step numbers (int64; -1 where none was recorded).
      times: POSIX seconds.
      values: the values (float64).
    """

    steps: np.ndarray
    times: np.ndarray
    values: np.ndarray


def metric_series(tables, name: str) -> MetricSeries:
    """The series of metric ``name`` from an :class:`~goodput_core.timeline.ingest.EventTables`.

    Args:
      tables: the event tables (their ``metric`` side table).
      name: the metric name as recorded.

    Returns:
      Copies of the matching rows (empty arrays for an unknown name).
    """
    tab = tables["metric"]
    try:
        code = tables.names["metric"].index(name)
    except ValueError:
        return MetricSeries(np.empty(0, np.int64), np.empty(0), np.empty(0))
    sel = tab["key"] == code
    return MetricSeries(tab["step"][sel], tab["t"][sel], tab["val"][sel])


class MetricPoint(NamedTuple):
    """One recorded value of a metric.

    Attributes:
      step: the step number (-1 where none was recorded).
      time: POSIX seconds.
      value: the value.
    """

    step: int
    time: float
    value: float


def metrics_since(tables, cursor: int = -1) -> Tuple[Dict[str, MetricSeries], int]:
    """The metric points that arrived after ``cursor``, by metric name.

    Arrival order (not time order) decides what is new, so a point recorded
    late by another host (earlier in time than points already seen) is still
    handed out once, and an exact duplicate (dropped at ingestion) never is.

    Args:
      tables: the event tables (their ``metric`` side table).
      cursor: the cursor returned by the previous call (-1: from the start).

    Returns:
      ``({name: MetricSeries in time order}, new cursor)``; the cursor is
      unchanged when nothing arrived.
    """
    tab = tables["metric"]
    order = tab["o"]
    if not len(order):
        return {}, cursor
    sel = np.flatnonzero(order > cursor)
    if not len(sel):
        return {}, cursor
    keys = tab["key"][sel]
    steps, times, values = tab["step"][sel], tab["t"][sel], tab["val"][sel]
    names = tables.names["metric"]
    out: Dict[str, MetricSeries] = {}
    for code in np.unique(keys).tolist():
        m = keys == code
        out[names[code]] = MetricSeries(steps[m], times[m], values[m])
    return out, max(cursor, int(order[sel].max()))


def merged_metadata(tables, deep_copy: bool = True) -> Dict[str, Any]:
    """Run metadata of an EventTables: the latest value of each key.

    Args:
      tables: the event tables.
      deep_copy: copy the values (callers may mutate them); internal readers
        that only look pass False (configs can be large).
    """
    if not deep_copy:
        return {k: v[2] for k, v in tables.metadata.items()}
    return {k: copy.deepcopy(v[2]) for k, v in tables.metadata.items()}
