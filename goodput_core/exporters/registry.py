"""Every kind of exporter, by name: the one place that knows them all.

A kind names where its exporter is built (``target``), how a monitor process
rebuilds it from the plain values of its ``process_spec()`` (``rebuild``), what
to install when its client library is missing (``needs``), the module that
declares its ``goodput monitor`` flags (``cli``) and the OpenTelemetry signal
it sends (``signal``: what ``GOODPUT_OTEL`` and ``--otel`` select it by).
Users of the registry: the ``goodput monitor`` command (its flags and
exporters), the compatible ``GoodputMonitor`` (``GOODPUT_OTEL``, its lazy
Cloud Monitoring), and the monitor process (:func:`from_spec`).

Targets are ``"module:name"`` under ``goodput_core.exporters``, imported when
a kind is used: importing the registry loads no exporter module, no client
library and no numpy (the compatible monitor and the shims import it early).

A new exporter is its module in ``goodput_core/exporters/`` plus one line in
:data:`EXPORTERS` (``tests/core/exporters/test_registry.py`` checks that every
exporter module is registered and every target resolves).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from goodput_core.settings import parse_otel_signals
from goodput_core.exporters.lazy import LazyExporter

__all__ = ["EXPORTERS", "ENV", "ExporterKind", "from_spec", "kind_of_signal", "lazy",
           "otel_from_env", "spec"]

#: The variable that turns the OpenTelemetry exporters on in monitors built by the
#: compatible GoodputMonitor (MaxText, AXLearn): ``metrics``, ``traces`` or both.
ENV = "GOODPUT_OTEL"

_PACKAGE = "goodput_core.exporters"


@dataclass(frozen=True)
class ExporterKind:
    """One kind of exporter.

    Attributes:
      name: the kind's name (its exporter's ``name``; the ``"exporter"`` of a spec).
      target: ``"module:callable"`` under ``goodput_core.exporters`` that builds it.
      title: how messages name it ("Cloud Monitoring").
      rebuild: the callable a monitor process builds it with from its spec's
        ``kwargs`` (empty: ``target``).
      needs: what to install when its client library is missing.
      cli: the module (under ``goodput_core.exporters``) declaring its
        ``goodput monitor`` flags: ``cli_arguments(parser)`` and
        ``from_cli(args) -> [exporters]`` (empty: no flag of its own).
      signal: the OpenTelemetry signal it sends ("metrics", "traces"; empty: none).
    """

    name: str
    target: str
    title: str
    rebuild: str = ""
    needs: str = ""
    cli: str = ""
    signal: str = ""

    def factory(self, rebuild: bool = False) -> Callable[..., Any]:
        """The callable that builds it (imports its module)."""
        module, _, attr = ((self.rebuild or self.target) if rebuild else self.target).partition(":")
        return getattr(importlib.import_module(f"{_PACKAGE}.{module}"), attr)

    def flags(self) -> Any:
        """The module declaring its ``goodput monitor`` flags (``cli_arguments``,
        ``from_cli``); only for a kind with ``cli``."""
        return importlib.import_module(f"{_PACKAGE}.{self.cli}")

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """A new exporter of this kind (``args``: its target's)."""
        return self.factory()(*args, **kwargs)

    @property
    def wants_trace(self) -> bool:
        """True for a kind that sends the run as a trace."""
        return self.signal == "traces"


_OTEL = "the 'otel' extra: pip install 'goodput-core[otel]'"

#: name -> kind, in the order ``goodput monitor`` builds them.
EXPORTERS: Dict[str, ExporterKind] = {k.name: k for k in (
    ExporterKind("console", "console:ConsoleExporter", "console",
                 rebuild="console:to_standard_stream"),
    ExporterKind("tensorboard", "tensorboard:TensorBoardExporter", "TensorBoard",
                 needs="tensorboardX: pip install tensorboardX", cli="tensorboard"),
    ExporterKind("prometheus", "prometheus:PrometheusExporter", "Prometheus",
                 needs="prometheus-client: pip install prometheus-client", cli="prometheus"),
    ExporterKind("otel", "otel:OtelExporter", "OpenTelemetry metrics", needs=_OTEL,
                 cli="otlp", signal="metrics"),
    ExporterKind("otel-trace", "otel_trace:OtelTraceExporter", "OpenTelemetry traces",
                 needs=_OTEL, signal="traces"),
    ExporterKind("gcm", "cloud_monitoring:CloudMonitoringExporter", "Cloud Monitoring",
                 rebuild="cloud_monitoring:from_settings",
                 needs="the 'gcp' extra: pip install 'goodput-core[gcp]'", cli="cloud_monitoring"),
)}


def spec(kind: str, /, lazy: bool = False, **kwargs: Any) -> Dict[str, Any]:
    """A ``process_spec()``: the kind named ``kind`` rebuilt from ``kwargs``
    (plain JSON values); ``lazy``: built on its first export there (:func:`lazy`)."""
    if kind not in EXPORTERS:
        raise KeyError(f"no exporter kind {kind!r}")
    out: Dict[str, Any] = {"exporter": kind, "kwargs": kwargs}
    if lazy:
        out["lazy"] = True
    return out


def from_spec(process_spec: Mapping[str, Any]) -> Any:
    """The exporter a ``process_spec()`` describes (in the monitor process).

    Raises:
      ValueError: the spec names no registered kind.
    """
    kind = EXPORTERS.get(process_spec.get("exporter"))  # type: ignore[arg-type]
    if kind is None:
        raise ValueError(f"refusing to build an exporter from {process_spec.get('exporter')!r}")
    kwargs = dict(process_spec.get("kwargs", {}))
    if process_spec.get("lazy"):
        return lazy(kind.name, **kwargs)
    return kind.factory(rebuild=True)(**kwargs)


def lazy(name: str, /, factory: Optional[Callable[[], Any]] = None,
         on_failure: Optional[Callable[[], None]] = None, **kwargs: Any) -> Any:
    """The kind named ``name`` built on its first export (a failure is logged once,
    the others go on); its ``process_spec()`` rebuilds the same lazy exporter
    from ``kwargs``. ``factory``: builds it here instead (default: the kind's
    rebuild from ``kwargs``)."""
    kind = EXPORTERS[name]
    if factory is None:
        def factory() -> Any:
            return kind.factory(rebuild=True)(**kwargs)
    return LazyExporter(kind.title, factory, on_failure=on_failure,
                        wants_trace=kind.wants_trace, spec=spec(name, lazy=True, **kwargs))


def kind_of_signal(signal: str) -> ExporterKind:
    """The kind that sends the OpenTelemetry ``signal`` ("metrics" or "traces")."""
    return next(k for k in EXPORTERS.values() if k.signal == signal)


def otel_from_env(environ: Optional[Mapping[str, str]] = None) -> List[ExporterKind]:
    """The kinds ``GOODPUT_OTEL`` asks for (each configured, when built, from
    the standard ``OTEL_*`` variables); nothing is imported.

    Raises:
      ValueError: ``GOODPUT_OTEL`` is not ``metrics``, ``traces``, both or a boolean.
    """
    env = os.environ if environ is None else environ
    return [kind_of_signal(s) for s in parse_otel_signals(env.get(ENV), ENV)]
