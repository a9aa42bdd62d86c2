"""Where a monitor's cycles run: a monitor process, or a thread of this one.

:func:`child_spec` decides (and describes the monitor process's settings);
:mod:`goodput_core.monitor.process` runs it. A monitor runs in a process
unless asked not to (``Monitor(process=False)``, ``GOODPUT_MONITOR_PROCESS=0``)
or unless only this process can run it: a memory store, an injected clock,
wait or calculator, or an exporter without ``process_spec()``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from goodput_core.stores import check_store_url, schemes

__all__ = ["ENV", "child_spec", "exporter_specs", "process_wanted"]

#: ``0`` (or ``false``/``no``/``off``/``thread``): monitors run on a thread of the training process.
ENV = "GOODPUT_MONITOR_PROCESS"
_OFF = ("0", "false", "no", "off", "thread")


def process_wanted(process: Optional[bool]) -> bool:
    """Whether a monitor should run in a process: the argument, else the
    environment variable (default: yes)."""
    if process is not None:
        return bool(process)
    return os.environ.get(ENV, "1").strip().lower() not in _OFF


def exporter_specs(exporters: Sequence[Any]) -> Optional[List[Dict[str, Any]]]:
    """How the child rebuilds each exporter, or None when one can only run here
    (it has no ``process_spec()``, or that returned None)."""
    specs = []
    for exporter in exporters:
        make = getattr(exporter, "process_spec", None)
        spec = make() if callable(make) else None
        if spec is None:
            return None
        specs.append(spec)
    return specs


def child_spec(process: Optional[bool], run: str, store: Any, exporters: Sequence[Any], *,
               custom: bool, options: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The monitor process's settings, or None when the monitor runs on a thread here.

    Args:
      process: the Monitor's ``process`` argument (None: decide).
      run: the run name.
      store: the Monitor's store argument (a URL, a path, an open Store or None).
      exporters: the exporters.
      custom: an injected clock, wait or calculator (they live in this process).
      options: the Monitor's keyword arguments the child takes over.

    Raises:
      ValueError: ``process=True`` for a monitor that can only run here.
    """
    if not process_wanted(process):
        return None
    reason, url, specs = None, None, None
    if custom:
        reason = "an injected clock, wait or calculator lives in this process"
    else:
        url = _store_url(store)
        specs = exporter_specs(exporters)
        if url is None:
            reason = "a memory store (or an open store without a URL) cannot be read elsewhere"
        elif specs is None:
            reason = "an exporter has no process_spec() (it can only run in this process)"
    if reason is not None:
        if process:
            raise ValueError(f"Monitor(process=True): {reason}; use process=False")
        return None
    return {"run": run, "store": url, "monitor": dict(options), "exporters": specs}


def _store_url(store: Any) -> Optional[str]:
    if store is not None and not isinstance(store, (str, os.PathLike)):
        store = getattr(store, "url", None)  # an open Store
        if store is None:
            return None

    url, _, _ = check_store_url(store)
    # sqlite: the path made absolute (the same file whatever the child's directory)
    return schemes.scheme_of(url)[0].url_elsewhere(url)
