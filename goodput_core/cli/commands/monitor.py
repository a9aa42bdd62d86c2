"""``goodput monitor RUN``: the monitor as a process of its own.

Reads the run from a store (e.g. on another machine, against Cloud Logging)
and exports every ``--interval`` seconds to the console and, when asked, to
TensorBoard, Prometheus, OpenTelemetry (``--otel``) and Google Cloud Monitoring, until interrupted
(Ctrl-C or SIGTERM runs a final cycle). ``--once`` runs one cycle and exits.
Each exporter's flags are its own (:mod:`goodput_core.exporters.registry`).
"""

from __future__ import annotations

import signal
import sys
import threading

from goodput_core.cli import CliError, CliIOError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.exporters.registry import EXPORTERS
from goodput_core.monitor.loop import Monitor, parse_windows
from goodput_core.stores import open_store, StoreError

_FINAL_TIMEOUT_S = 30.0
_SIGNAL_CHECK_S = 0.25  # how late a signal may be handled at most


def add_arguments(parser) -> None:
    parser.add_argument("run", metavar="RUN", help="the run (job) name")
    add_store_argument(parser)
    parser.add_argument("--interval", metavar="S", type=float, default=30.0,
                        help="seconds between cycles (default 30)")
    parser.add_argument("--rolling", metavar="S[,S...]", default="",
                        help="rolling windows in seconds, e.g. 60,3600")
    parser.add_argument("--ideal-step-time", metavar="S", type=float, default=None,
                        help="the ideal step time in seconds (default: computed)")
    parser.add_argument("--once", action="store_true", help="run one cycle and exit")
    parser.add_argument("--quiet", action="store_true", help="no console line per cycle")
    for kind in EXPORTERS.values():  # each kind's own flags (exporters/registry.py)
        if kind.cli:
            kind.flags().cli_arguments(parser)


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
    """The console line (unless --quiet), then each kind's exporters its flags ask for."""
    out = [] if args.quiet else [EXPORTERS["console"].build(stdout)]
    for kind in EXPORTERS.values():
        if not kind.cli:
            continue
        try:
            out.extend(kind.flags().from_cli(args))
        except ImportError as exc:
            raise CliError(f"--{kind.name} needs {kind.needs} ({exc})")
        except ValueError as exc:
            raise CliError(str(exc))
        except OSError as exc:
            raise CliIOError(str(exc)) from None
    return out


def run(args) -> int:
    windows = parse_windows(args.rolling) if args.rolling else ()
    done = threading.Event()
    stdout = _Stdout(done.set)
    exporters = _exporters(args, stdout)
    try:
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
