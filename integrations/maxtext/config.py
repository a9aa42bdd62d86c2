"""Reads MaxText's goodput flags (and ours) from a MaxText config object.

MaxText's config (``pyconfig.HyperParameters``) exposes flags as attributes;
tests and scripts often pass a plain object or a dict. :func:`read_settings`
accepts any of them, applies MaxText's defaults (``configs/base.yml``) to
missing flags, parses values given as strings (command-line overrides), and
raises one clear ``ValueError`` per bad value, so a misconfigured job fails
at start-up instead of silently measuring nothing.

MaxText's flags (defaults as in ``base.yml``)::

    enable_goodput_recording          false
    monitor_goodput                   false
    goodput_upload_interval_seconds   30
    enable_pathways_goodput           false
    monitor_step_time_deviation       true
    step_deviation_interval_seconds   30
    enable_gcp_goodput_metrics        true
    enable_gcp_step_deviation_metrics true
    enable_checkpoint_cloud_logger    false
    elastic_enabled                   false
    report_performance_metric_for_gcp_monitoring  false
    report_heartbeat_metric_for_gcp_monitoring    false
    heartbeat_reporting_interval_in_seconds       5
    run_name, base_output_directory, tensorboard_dir

    goodput_job_name (MaxText >= 0.2.5; the job name when set, else run_name)

    newer MaxText (its tests/unit/goodput_utils_test.py after 0.2.5):
    enable_rolling_window_goodput     false
    rolling_windows_seconds           [3600, 86400] (our default: the
                                      newer base.yml was not available; an
                                      empty list is rejected, as MaxText's
                                      config validation does)

    managed ML diagnostics (MaxText 0.2.4-0.2.5, read by the launcher's
    google_cloud_mldiagnostics alias and the fork's mldiagnostics_modules):
    managed_mldiagnostics false, managed_mldiagnostics_on_demand_profiling
    true, managed_mldiagnostics_run_group "", managed_mldiagnostics_region "",
    managed_mldiagnostics_storage_path ""

Ours. MaxText's ``pyconfig`` rejects keys it does not know (in the YAML and
on the command line), so each of ours has one name in three forms: the
environment variable ``GOODPUT_X`` (always read), the launcher flag
``--goodput-x``, and the config key ``goodput_x`` (read only from a config
object that has it, e.g. a fork's own config class or a dict). A config key
or launcher flag wins over the environment::

    GOODPUT_STORE             store URL (default: the embedded sqlite file)
    GOODPUT_ROLLING_WINDOWS   rolling window sizes in seconds, "3600,86400"
    GOODPUT_PROMETHEUS_PORT   serve Prometheus metrics on 127.0.0.1:<port>
                              (unset or negative: off; 0: a free port)
    GOODPUT_IDEAL_STEP_TIME   configured ideal step time in seconds
    GOODPUT_CHECKPOINT_STATS  record Orbax save/restore statistics (true)
    GOODPUT_RUN_GROUP         the run's group (``goodput runs --group G``)
    GOODPUT_SYSTEM_METRICS    sample host/GPU/TPU utilisation every 10 s into
                              the run (false; the ML-diagnostics SDK's metric
                              names: goodput_core.compat.mldiagnostics.system_metrics)

Test hooks (attributes, not flags): ``_goodput_clock`` (a ``() -> float``
time source) and ``_goodput_process_index`` (an int, or a callable).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Callable, Mapping, Optional, Tuple

from goodput_core import settings
from goodput_core.queries.run_groups import check_run_group

__all__ = ["MaxTextGoodputSettings", "OUR_SETTINGS", "env_name", "flag_name", "read_ours",
           "read_settings", "parse_bool"]

logger = logging.getLogger("goodput")

_MISSING = object()

#: MaxText's goodput flags and their defaults (configs/base.yml).
MAXTEXT_DEFAULTS = {
    "enable_goodput_recording": False,
    "monitor_goodput": False,
    "goodput_upload_interval_seconds": 30,
    "enable_pathways_goodput": False,
    "monitor_step_time_deviation": True,
    "step_deviation_interval_seconds": 30,
    "enable_gcp_goodput_metrics": True,
    "enable_gcp_step_deviation_metrics": True,
    "enable_checkpoint_cloud_logger": False,
    "elastic_enabled": False,
    "report_performance_metric_for_gcp_monitoring": False,
    "report_heartbeat_metric_for_gcp_monitoring": False,
    "heartbeat_reporting_interval_in_seconds": 5,
    "enable_rolling_window_goodput": False,
    "managed_mldiagnostics": False,
}
#: MaxText's default rolling windows (see the module docstring).
DEFAULT_ROLLING_WINDOWS = (3600, 86400)



def _flag(name: str) -> str:
    return f"goodput flag {name}"


def parse_bool(value: Any, name: str) -> bool:
    """A boolean flag (an empty value is false, as in MaxText's YAML)."""
    return settings.parse_bool(value, _flag(name), blank=False)


def _positive_int(value: Any, name: str) -> int:
    return settings.parse_positive_int(value, _flag(name))


#: Our settings (config-key form); see the module docstring for the others.
OUR_SETTINGS = ("goodput_store", "goodput_rolling_windows", "goodput_prometheus_port",
                "goodput_ideal_step_time", "goodput_checkpoint_stats", "goodput_run_group",
                "goodput_system_metrics")
_OURS = OUR_SETTINGS


def env_name(key: str) -> str:
    """``goodput_store`` -> ``GOODPUT_STORE``."""
    return key.upper()


def flag_name(key: str) -> str:
    """``goodput_store`` -> ``--goodput-store``."""
    return "--" + key.replace("_", "-")


def _parse_store(value: Any, name: str) -> Optional[str]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name}={value!r}: expected a store URL")
    return os.fspath(value)


def read_ours(lookup: Callable[[str], Any], source: Callable[[str], str] = _flag
              ) -> dict:
    """Parses our settings, each from ``lookup(key)`` or else its variable.

    Args:
      lookup: returns the value given for a config-form key, or None.
      source: the display name of a key for error messages.

    Returns:
      ``{"store", "rolling_windows", "prometheus_port", "ideal_step_time",
      "checkpoint_stats", "run_group", "system_metrics"}``, parsed.

    Raises:
      ValueError: a bad value, naming the flag or variable it came from.
    """
    raw = {}
    for key in OUR_SETTINGS:
        value, name = lookup(key), source(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            value, name = os.environ.get(env_name(key)), f"${env_name(key)}"
        raw[key] = (value, name)
    return {
        "store": _parse_store(*raw["goodput_store"]),
        "rolling_windows": settings.parse_window_sizes(*raw["goodput_rolling_windows"]),
        "prometheus_port": settings.parse_port(*raw["goodput_prometheus_port"]),
        "ideal_step_time": settings.parse_seconds(*raw["goodput_ideal_step_time"],
                                                  zero_is_unset=True),
        "checkpoint_stats": settings.parse_bool(*raw["goodput_checkpoint_stats"], blank=True),
        "run_group": check_run_group(*raw["goodput_run_group"]),
        "system_metrics": settings.parse_bool(*raw["goodput_system_metrics"], blank=False),
    }
_warned_keys: set = set()


def _warn_unknown(config: Any) -> None:
    """Warns (once per name) about ``goodput_*`` keys we do not know: a typo
    in one of our flags would otherwise silently change nothing."""
    if isinstance(config, Mapping):
        names = list(config)
    else:
        try:
            names = list(vars(config))
        except TypeError:
            return
    known = set(MAXTEXT_DEFAULTS) | set(_OURS) | {"goodput_job_name"}
    for name in names:
        if (isinstance(name, str) and name.startswith("goodput_") and name not in known
                and name not in _warned_keys):
            _warned_keys.add(name)
            logger.warning("goodput: unknown config key %s ignored (known goodput keys: %s)",
                           name, ", ".join(sorted(k for k in known if "goodput" in k)))


def _get(config: Any, name: str, default: Any = _MISSING) -> Any:
    """A flag from a mapping or an object; ``default`` when it is absent."""
    if isinstance(config, Mapping):
        value = config.get(name, _MISSING)
    else:
        try:
            value = getattr(config, name)
        except (AttributeError, KeyError):  # HyperParameters raise either
            value = _MISSING
    return default if value is _MISSING else value


@dataclasses.dataclass(frozen=True)
class MaxTextGoodputSettings:
    """The goodput settings of one MaxText job, validated.

    Attributes are the flags (MaxText's names, parsed), ``job_name``
    (``goodput_job_name`` or else ``run_name``, as MaxText), plus ``store``,
    ``rolling_windows``, ``prometheus_port``, ``ideal_step_time`` and
    ``checkpoint_stats`` (ours) and the two test hooks ``clock`` and
    ``process_index``.
    """

    run_name: str
    base_output_directory: str
    tensorboard_dir: str
    enable_goodput_recording: bool
    monitor_goodput: bool
    goodput_upload_interval_seconds: int
    enable_pathways_goodput: bool
    monitor_step_time_deviation: bool
    step_deviation_interval_seconds: int
    enable_gcp_goodput_metrics: bool
    enable_gcp_step_deviation_metrics: bool
    enable_checkpoint_cloud_logger: bool
    elastic_enabled: bool
    report_performance_metric_for_gcp_monitoring: bool
    report_heartbeat_metric_for_gcp_monitoring: bool = False
    heartbeat_reporting_interval_in_seconds: int = 5
    enable_rolling_window_goodput: bool = False
    rolling_windows_seconds: Tuple[int, ...] = DEFAULT_ROLLING_WINDOWS
    managed_mldiagnostics: bool = False
    store: Optional[str] = None
    rolling_windows: Tuple[int, ...] = ()
    prometheus_port: Optional[int] = None
    ideal_step_time: Optional[float] = None
    checkpoint_stats: bool = True
    job_name: str = ""
    run_group: str = ""
    system_metrics: bool = False
    clock: Optional[Callable[[], float]] = None
    process_index: Any = None

    def __post_init__(self) -> None:
        if not self.job_name:
            object.__setattr__(self, "job_name", self.run_name)

    @property
    def monitor_rolling_windows(self) -> Tuple[int, ...]:
        """The windows the monitor uploads: MaxText's ``rolling_windows_seconds``
        when ``enable_rolling_window_goodput``, then ours (``GOODPUT_ROLLING_WINDOWS``)."""
        theirs = self.rolling_windows_seconds if self.enable_rolling_window_goodput else ()
        return merge_windows(theirs, self.rolling_windows)

    @property
    def logger_name(self) -> str:
        """MaxText's log name for the job: ``goodput_{job_name}``."""
        return f"goodput_{self.job_name}"

    @property
    def gcp_step_deviation_metrics(self) -> bool:
        """Step deviation to Cloud Monitoring: MaxText turns it off when its
        workload monitor publishes the same ``performance`` metric."""
        return (self.enable_gcp_step_deviation_metrics
                and not self.report_performance_metric_for_gcp_monitoring)


def merge_windows(*lists: Any) -> Tuple[int, ...]:
    """The window sizes of every list, each once, in order of appearance."""
    out: list = []
    for sizes in lists:
        out.extend(s for s in sizes if s not in out)
    return tuple(out)


def parse_rolling_windows_seconds(value: Any) -> Tuple[int, ...]:
    """MaxText's ``rolling_windows_seconds``: a list of positive seconds (or
    ``"3600,86400"``, ``"[3600, 86400]"`` from a command line).

    Raises:
      ValueError: an empty list (it would start an uploader with nothing to
        upload: MaxText's config validation rejects it too) or a bad size.
    """
    name = _flag("rolling_windows_seconds")
    if isinstance(value, str):
        value = value.strip().strip("[]()")
    sizes = settings.parse_window_sizes(value, name)
    if not sizes:
        raise ValueError(f"{name}={value!r}: the list of rolling windows must not be empty")
    return sizes


def read_settings(config: Any) -> MaxTextGoodputSettings:
    """Reads and validates the goodput flags of a MaxText config.

    Args:
      config: MaxText's config, any object with the flags as attributes, or a
        mapping. Missing flags take MaxText's defaults.

    Returns:
      The parsed settings.

    Raises:
      ValueError: a flag with a bad value, or recording/monitoring switched
        on without a ``run_name`` (or, to monitor, without an output directory).
    """
    _warn_unknown(config)
    flags = {}
    for name, default in MAXTEXT_DEFAULTS.items():
        value = _get(config, name, default)
        flags[name] = (parse_bool(value, name) if isinstance(default, bool)
                       else _positive_int(value, name))
    run_name = _get(config, "run_name", "") or ""
    if not isinstance(run_name, str):
        raise ValueError(f"goodput flag run_name={run_name!r}: expected a string")
    base = _get(config, "base_output_directory", "") or ""
    base = os.fspath(base)
    tensorboard_dir = _get(config, "tensorboard_dir", "") or ""
    if not tensorboard_dir and base and run_name:
        # MaxText's own derivation (pyconfig): {base}/{run_name}/tensorboard/
        tensorboard_dir = os.path.join(base, run_name, "tensorboard", "")
    tensorboard_dir = os.fspath(tensorboard_dir)
    if (flags["enable_goodput_recording"] or flags["monitor_goodput"]) and not run_name:
        raise ValueError("goodput recording and monitoring need run_name (the job name)")
    if flags["monitor_goodput"] and not tensorboard_dir:
        raise ValueError("monitor_goodput needs base_output_directory (or tensorboard_dir): "
                         "goodput is written to {base_output_directory}/{run_name}/"
                         "tensorboard/goodput")
    job_name = _get(config, "goodput_job_name", "") or run_name
    if not isinstance(job_name, str):
        raise ValueError(f"goodput flag goodput_job_name={job_name!r}: expected a string")
    ours = read_ours(lambda key: _get(config, key, None))
    windows = parse_rolling_windows_seconds(
        _get(config, "rolling_windows_seconds", DEFAULT_ROLLING_WINDOWS))
    clock = _get(config, "_goodput_clock", None)
    if clock is not None and not callable(clock):
        raise ValueError("_goodput_clock must be a callable returning POSIX seconds")
    return MaxTextGoodputSettings(
        run_name=run_name,
        base_output_directory=base,
        tensorboard_dir=tensorboard_dir,
        job_name=job_name,
        clock=clock,
        **ours,
        process_index=_get(config, "_goodput_process_index", None),
        rolling_windows_seconds=windows,
        **flags,
    )
