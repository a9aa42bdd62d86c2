"""``goodput monitor RUN``: the monitor as a process of its own.

Reads the run from a store (e.g. on another machine, against Cloud Logging)
and exports every ``--interval`` seconds to the console and, when asked, to
TensorBoard, Prometheus, OpenTelemetry (``--otel``) and Google Cloud Monitoring, until interrupted
(Ctrl-C or SIGTERM runs a final cycle). ``--once`` runs one cycle and exits.
"""

from __future__ import annotations

import signal
import sys
import threading

from goodput_core.cli.commands.common import add_store_argument
from goodput_core.monitor.loop import Monitor, parse_windows

_FINAL_TIMEOUT_S = 30.0
_SIGNAL_CHECK_S = 0.25  # how late a signal may be handled at most


def add_arguments(parser) -> None:
    parser.add_argument("run", metavar="RUN", help="the run (job) name")
    add_store_argument(parser)
    parser.add_argument("--tensorboard", metavar="DIR",
                        help="write TensorBoard scalars into DIR/goodput")
    parser.add_argument("--prometheus", metavar="PORT", type=int,
                        help="serve Prometheus metrics on 127.0.0.1:PORT (0: a free port)")
    parser.add_argument("--prometheus-addr", metavar="ADDR", default="127.0.0.1",
                        help="address the Prometheus endpoint binds (default 127.0.0.1)")
    parser.add_argument("--interval", metavar="S", type=float, default=30.0,
                        help="seconds between cycles (default 30)")
    parser.add_argument("--rolling", metavar="S[,S...]", default="",
                        help="rolling windows in seconds, e.g. 60,3600")
    parser.add_argument("--ideal-step-time", metavar="S", type=float, default=None,
                        help="the ideal step time in seconds (default: computed)")
    parser.add_argument("--once", action="store_true", help="run one cycle and exit")
    parser.add_argument("--quiet", action="store_true", help="no console line per cycle")
    otel = parser.add_argument_group("OpenTelemetry (the OTEL_* variables configure the rest)")
    otel.add_argument("--otel", metavar="SIGNALS", nargs="?", const="metrics",
                      help="send over OTLP: metrics (the default), traces (each phase "
                           "as a span once it ends) or metrics,traces")
    otel.add_argument("--otel-endpoint", metavar="URL",
                      help="the collector's base URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT)")
    otel.add_argument("--otel-protocol", choices=("http/protobuf", "grpc"),
                      help="default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf")
    gcm = parser.add_argument_group("Google Cloud Monitoring")
    gcm.add_argument("--gcm", action="store_true", help="also write to Cloud Monitoring")
    gcm.add_argument("--project", help="project id (default: from the metadata server)")
    gcm.add_argument("--location", help="zone or region (default: from the metadata server)")
    gcm.add_argument("--accelerator-type", help="accelerator type label (default: detected)")


class _Stdout:
    """The console line per cycle on stdout; a closed pipe ends the command.

    ``goodput monitor RUN | head -3``: once the reader is gone, the console
    exporter goes quiet (instead of failing every cycle) and ``on_broken`` runs.
    """

    def __init__(self, on_broken):
        self.broken = False
        self._on_broken = on_broken

    def write(self, text: str) -> None:
        if not self.broken:
            self._guard(sys.stdout.write, text)

    def flush(self) -> None:
        if not self.broken:
            self._guard(sys.stdout.flush)

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except BrokenPipeError:
            self.broken = True
            self._on_broken()


def _exporters(args, stdout: "_Stdout") -> list:
    from goodput_core.cli import CliError, CliIOError

    out = []
    if not args.quiet:
        from goodput_core.exporters.console import ConsoleExporter

        out.append(ConsoleExporter(stdout))
    if args.tensorboard:
        try:
            from goodput_core.exporters.tensorboard import TensorBoardExporter
        except ImportError as exc:
            raise CliError(f"--tensorboard needs tensorboardX: pip install tensorboardX ({exc})")
        try:
            out.append(TensorBoardExporter(args.tensorboard))
        except OSError as exc:
            raise CliIOError(f"cannot write TensorBoard files to {args.tensorboard}: "
                           f"{exc.strerror or exc}") from None
    if args.prometheus is not None:
        try:
            from goodput_core.exporters.prometheus import PrometheusExporter
        except ImportError as exc:
            raise CliError(f"--prometheus needs prometheus-client: "
                           f"pip install prometheus-client ({exc})")
        try:
            exporter = PrometheusExporter(args.prometheus, args.prometheus_addr)
        except OSError as exc:
            raise CliError(f"cannot serve Prometheus metrics on port {args.prometheus}: {exc}")
        print(f"Serving Prometheus metrics on {exporter.url}", flush=True)
        out.append(exporter)
    out.extend(_otel_exporters(args))
    if args.gcm:
        try:
            from goodput_core.gcp import GCPOptions
            from goodput_core.exporters.cloud_monitoring import CloudMonitoringExporter
        except ImportError as exc:
            raise CliError(f"--gcm needs the 'gcp' extra: pip install 'goodput-core[gcp]' ({exc})")
        options = GCPOptions(project_id=args.project, location=args.location,
                             acc_type=args.accelerator_type)
        out.append(CloudMonitoringExporter(args.run, options))
    elif args.project or args.location or args.accelerator_type:
        raise CliError("--project, --location and --accelerator-type go with --gcm")
    return out


def _otel_exporters(args) -> list:
    from goodput_core.cli import CliError
    from goodput_core.settings import parse_otel_signals

    try:
        signals = parse_otel_signals(args.otel, "--otel")
    except ValueError as exc:
        raise CliError(str(exc))
    if not signals:
        if args.otel_endpoint or args.otel_protocol:
            raise CliError("--otel-endpoint and --otel-protocol go with --otel")
        return []
    try:
        from goodput_core.exporters.otel import OtelExporter
        from goodput_core.exporters.otel_trace import OtelTraceExporter
        kinds = {"metrics": OtelExporter, "traces": OtelTraceExporter}
        return [kinds[s](args.otel_endpoint, protocol=args.otel_protocol) for s in signals]
    except ImportError as exc:
        raise CliError(f"--otel needs the 'otel' extra: pip install 'goodput-core[otel]' ({exc})")
    except ValueError as exc:
        raise CliError(str(exc))


def run(args) -> int:
    from goodput_core.cli import CliError

    windows = parse_windows(args.rolling) if args.rolling else ()
    done = threading.Event()
    stdout = _Stdout(done.set)
    exporters = _exporters(args, stdout)
    try:
        from goodput_core.stores import StoreError, open_store

        try:
            store = open_store(args.store, create=False)  # read-only: it only reads
        except StoreError:
            store = open_store(args.store)  # no store yet: the run may start later
        monitor = Monitor(args.run, store, exporters, interval_s=args.interval,
                          rolling_windows=windows,
                          configured_ideal_step_time=args.ideal_step_time,
                          final_flush_timeout_s=_FINAL_TIMEOUT_S,
                          process=False)  # this command is the monitor's process
    except BaseException:
        for e in exporters:  # e.g. free the Prometheus port
            e.close()
        raise
    if args.once:
        snapshot = monitor.run_once(final=True)
        monitor.stop(skip_final_flush=True)
        if stdout.broken:
            raise BrokenPipeError()  # reported by goodput_core.cli
        if snapshot is None:
            raise CliError(f"could not read run {args.run!r}; see the messages above")
        if monitor.calculator.lifetime(snapshot.query_time) is None:
            raise CliError(f"run {args.run!r} has no job start in the store "
                           "(list the runs with: goodput runs)")
        return 0
    previous = _on_sigterm(done.set)
    monitor.start()
    try:
        # Until Ctrl-C (KeyboardInterrupt) or SIGTERM, in short waits: a signal
        # the kernel delivers to another thread (exporters, gRPC) runs its
        # Python handler only when the main thread wakes up, so one long wait
        # would hold SIGTERM back until it ends.
        while not done.wait(_SIGNAL_CHECK_S):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        monitor.stop()  # the final cycle, bounded
        _restore_sigterm(previous)
    if stdout.broken:
        raise BrokenPipeError()
    return 0


def _on_sigterm(callback):
    """Makes SIGTERM (e.g. from a process manager) stop the monitor cleanly."""
    if threading.current_thread() is not threading.main_thread():
        return None  # signal handlers can only be set from the main thread
    return signal.signal(signal.SIGTERM, lambda signum, frame: callback())


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
