"""``--recorder_spec=key=value`` for our AXLearn recorder: keys, types, checks.

AXLearn's own goodput recorder reads ``name``, ``upload_dir``,
``upload_interval``, ``rolling_window_size``, ``jax_backend`` and
``enable_monitoring``, and silently drops any other key. We accept the
same keys with the same meaning, add ours, **warn about unknown keys**
(listing the known ones), and raise one clear ``ValueError`` for a bad value,
when the recorder is built (``from_flags``), before training starts.

=================================  ========  ==========================================
key                                default   meaning
=================================  ========  ==========================================
name                               required  run name (``goodput_logger_{name}`` stream)
upload_dir                         --        TensorBoard dir; needed when monitoring
upload_interval                    30        seconds between uploads (0, accepted as
                                             AXLearn does: every second)
rolling_window_size                --        rolling windows, seconds: ``3600,86400``
jax_backend                        --        ``proxy`` means Pathways
enable_monitoring                  true      monitor inside ``maybe_monitor_all``
                                             (``true``/``false`` only, as AXLearn)
store                              default   store URL (``sqlite:///...``, ``memory://``,
                                             ``cloud-logging://PROJECT/LOG``)
prometheus_port                    off       serve Prometheus on 127.0.0.1:<port>
include_step_deviation             false     also upload step deviation
step_deviation_interval            30        seconds between step-deviation uploads
ideal_step_time                    computed  configured ideal step time, seconds
enable_gcp_goodput_metrics         true      goodput to Cloud Monitoring
enable_gcp_step_deviation_metrics  true      step deviation to Cloud Monitoring
end_job_on_crash                   false     record END_JOB even when sent while an
                                             exception propagates (AXLearn's ``finally``)
per_host                           false     every process records (process 0 monitors)
eager_monitoring                   false     ``start_monitoring()`` starts the monitors
                                             (AXLearn versions without maybe_monitor_all)
run_group                          --        the run's group (``goodput runs --group G``)
=================================  ========  ==========================================
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from goodput_core import settings
from goodput_core.queries.run_groups import check_run_group
from goodput_core.redact import redact
from goodput_integrations.axlearn._base import parse_flags

__all__ = ["AXLEARN_KEYS", "OUR_KEYS", "RecorderSpec", "config_items", "parse_spec",
           "spec_items"]

logger = logging.getLogger("goodput")

#: The keys of AXLearn's own goodput recorder.
AXLEARN_KEYS = ("name", "upload_dir", "upload_interval", "rolling_window_size",
                "jax_backend", "enable_monitoring")
#: Our keys.
OUR_KEYS = ("store", "prometheus_port", "include_step_deviation", "step_deviation_interval",
            "ideal_step_time", "enable_gcp_goodput_metrics",
            "enable_gcp_step_deviation_metrics", "end_job_on_crash", "per_host",
            "eager_monitoring", "run_group")

_STORE_SCHEMES = ("sqlite", "memory", "cloud-logging")


@dataclasses.dataclass(frozen=True)
class RecorderSpec:
    """The parsed ``--recorder_spec`` of one run (see the module docstring)."""

    name: str
    upload_dir: Optional[str] = None
    upload_interval: int = 30
    rolling_window_size: Tuple[int, ...] = ()
    jax_backend: Optional[str] = None
    enable_monitoring: bool = True
    store: Optional[str] = None
    prometheus_port: Optional[int] = None
    include_step_deviation: bool = False
    step_deviation_interval: int = 30
    ideal_step_time: Optional[float] = None
    enable_gcp_goodput_metrics: bool = True
    enable_gcp_step_deviation_metrics: bool = True
    end_job_on_crash: bool = False
    per_host: bool = False
    eager_monitoring: bool = False
    run_group: str = ""
    unknown: Tuple[Tuple[str, str], ...] = ()

    @property
    def logger_name(self) -> str:
        """AXLearn's stream name for the run."""
        return f"goodput_logger_{self.name}"

    @property
    def pathways(self) -> bool:
        """``jax_backend=proxy`` is Pathways."""
        return self.jax_backend == "proxy"

    @property
    def rolling_window_dir(self) -> Optional[str]:
        """Where AXLearn writes rolling windows: ``{upload_dir}/rolling_window_{name}``."""
        if not self.upload_dir:
            return None
        return os.path.join(self.upload_dir, f"rolling_window_{self.name}")


def _bad(key: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"--recorder_spec={key}={value}: expected {expected}")


def _name(key: str) -> str:
    return f"--recorder_spec={key}"


def _bool(key: str, value: Any) -> bool:
    return settings.parse_bool(value, _name(key))


def _int(key: str, value: Any) -> int:
    return settings.parse_positive_int(value, _name(key))


def _interval(key: str, value: Any) -> int:
    # AXLearn takes int(value): 0 is accepted there (its monitor then uploads
    # back to back); here 0 is accepted and the monitors upload every second
    return settings.parse_positive_int(value, _name(key), minimum=0)


def _axlearn_bool(key: str, value: Any) -> bool:
    # AXLearn's to_bool: a bool, or "true"/"false" in any case; "1" or "yes" raise
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise _bad(key, value, "true or false (as AXLearn)")
    return text == "true"


def _windows(key: str, value: Any) -> Tuple[int, ...]:
    return settings.parse_window_sizes(value, _name(key))


def _port(key: str, value: Any) -> Optional[int]:
    return settings.parse_port(value, _name(key))


def _seconds(key: str, value: Any) -> Optional[float]:
    return settings.parse_seconds(value, _name(key))


def _store(key: str, value: Any) -> str:
    url = str(value).strip()
    scheme, sep, rest = url.partition("://")
    if not url or (sep and (scheme not in _STORE_SCHEMES or not rest)):
        raise _bad(key, redact(url), "a store URL: sqlite:///PATH, memory://NAME or "
                   "cloud-logging://PROJECT/LOG (or a file path)")
    return url


def _text(key: str, value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise _bad(key, value, "a non-empty value")
    return text


_PARSERS = {
    "name": _text,
    "upload_dir": _text,
    "upload_interval": _interval,
    "rolling_window_size": _windows,
    "jax_backend": _text,
    "enable_monitoring": _axlearn_bool,
    "store": _store,
    "prometheus_port": _port,
    "include_step_deviation": _bool,
    "step_deviation_interval": _int,
    "ideal_step_time": _seconds,
    "enable_gcp_goodput_metrics": _bool,
    "enable_gcp_step_deviation_metrics": _bool,
    "end_job_on_crash": _bool,
    "per_host": _bool,
    "eager_monitoring": _bool,
    "run_group": lambda key, value: check_run_group(value, _name(key)),
}


def config_items(cfg: Any, keys: Iterable[str]) -> Sequence[str]:
    """The ``key=value`` strings of the fields ``keys`` of an AXLearn config
    (``default_config().set(upload_dir=..., ...)``) that are set (not None),
    written as on the command line: a list as ``a,b``, a bool as ``true``."""
    items = []
    for key in keys:
        value = getattr(cfg, key, None)
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        items.append(f"{key}={value}")
    return items


def spec_items(fv: Any) -> Sequence[str]:
    """The ``key=value`` strings of ``fv``: AXLearn's FlagValues (its
    ``recorder_spec``), a command line (``--recorder_spec=...`` flags), a
    list of ``key=value`` strings, or a dict (turned into items)."""
    if isinstance(fv, dict):
        return [f"{k}={v}" for k, v in fv.items()]
    if isinstance(fv, (list, tuple)):
        if any(str(item).startswith("-") for item in fv):
            return parse_flags(fv).recorder_spec
        return list(fv)
    items = getattr(fv, "recorder_spec", None)
    return list(items or ())


def parse_spec(items: Iterable[str]) -> RecorderSpec:
    """Parses ``key=value`` strings (a later key overrides an earlier one, as AXLearn).

    Unknown keys are kept in ``RecorderSpec.unknown`` and logged as a warning.

    Raises:
      ValueError: an item without ``=``, a bad value, no ``name``, or
        monitoring enabled without ``upload_dir``.
    """
    raw: Dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--recorder_spec={item}: expected key=value")
        raw[key.strip()] = value
    unknown = tuple((k, v) for k, v in raw.items() if k not in _PARSERS)
    if unknown:
        logger.warning("goodput: ignoring unknown --recorder_spec keys %s (known: %s)",
                       ", ".join(k for k, _ in unknown), ", ".join(AXLEARN_KEYS + OUR_KEYS))
    values = {k: _PARSERS[k](k, v) for k, v in raw.items() if k in _PARSERS}
    if "name" not in values:
        raise ValueError("--recorder_spec=name=<run name> is required")
    spec = RecorderSpec(unknown=unknown, **values)
    if spec.enable_monitoring and not spec.upload_dir:
        raise ValueError("--recorder_spec=upload_dir=<dir> is required while monitoring is "
                         "enabled (or set --recorder_spec=enable_monitoring=false)")
    return spec
