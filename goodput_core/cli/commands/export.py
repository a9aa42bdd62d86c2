"""``goodput export RUN [--store URL] [-o FILE.jsonl] [--meta]``: a run as JSON lines;
``goodput export RUN --format otlp [--endpoint URL] [--protocol P]``: a run as a trace.

One reference-format payload per line (ml-goodput-measurement reads them as
they are); ``--meta`` adds the writer metadata under ``_writer``, which
``goodput import`` restores. A file is written under a temporary name and
renamed when complete, so an interrupted export never leaves half a file
under the requested name. The temporary file is created in the target's
directory with ``O_EXCL`` and a random name (:func:`tempfile.mkstemp`, mode
0600), so a file or symlink planted at a predictable name is never followed
or overwritten. ``-o -`` (the default) writes to stdout. The format:
:mod:`goodput_core.cli.commands.transfer`.

``--format otlp`` sends the run's timeline as one OpenTelemetry trace to an
OTLP collector (:mod:`goodput_core.exporters.otel_trace`), configured by
OpenTelemetry's standard variables unless ``--endpoint``/``--protocol`` say
otherwise; sending a run again repeats the same trace and span ids. It exits
1 when the collector did not take every span.
"""

from __future__ import annotations

import itertools
import sys
import time

from goodput_core.cli import CliError, CliIOError
from goodput_core.cli.commands.common import add_store_argument
from goodput_core.redact import redact
from goodput_core.cli.commands.transfer import (
    add_common_arguments, page_size, progress_bar, read_store, write_batches)
from goodput_core.stores import open_store
from goodput_core.files import replaced_atomically

__all__ = ["add_arguments", "run"]


def add_arguments(parser) -> None:
    add_common_arguments(parser)
    add_store_argument(parser)
    parser.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="the JSONL file to write (replaced when complete); '-': stdout")
    parser.add_argument("--meta", action="store_true",
                        help="include writer metadata under a '_writer' key")
    parser.add_argument("--format", choices=("jsonl", "otlp"), default="jsonl",
                        help="jsonl: the events (default); otlp: the run's timeline as an "
                             "OpenTelemetry trace sent to a collector")
    parser.add_argument("--endpoint", metavar="URL",
                        help="otlp: the collector's base URL (default: "
                             "$OTEL_EXPORTER_OTLP_ENDPOINT, else OpenTelemetry's default)")
    parser.add_argument("--protocol", choices=("http/protobuf", "grpc"),
                        help="otlp: the transport (default: $OTEL_EXPORTER_OTLP_PROTOCOL, "
                             "else http/protobuf)")


def run(args) -> int:
    if args.format == "otlp":
        return _run_otlp(args)
    page = page_size(args)
    store = open_store(args.store, create=False)
    try:
        batches = read_store(store, args.run, page)
        first = next(batches, None)
        # Checked before any file is created: a typo must not leave an empty export.
        if first is None and args.run not in store.runs():
            raise CliError(f"no run named {args.run!r} in {store.url} (see: goodput runs)")
        pages = itertools.chain([first] if first else [], batches)
        progress = progress_bar(args, f"export {args.run}")
        if args.output == "-":  # a closed pipe (`| head`): goodput_core.cli reports it
            write_batches(pages, sys.stdout, args.meta, progress)
            return 0
        n = _write_file(args.output, pages, args.meta, progress)
    finally:
        store.close()
    print(f"exported {n} events of {args.run!r} from {store.url} to {args.output}",
          file=sys.stderr)
    return 0


def _write_file(path: str, pages, meta: bool, progress) -> int:
    """Writes the pages to a fresh temporary file beside ``path``, then renames it."""
    try:
        with replaced_atomically(path) as out:
            return write_batches(pages, out, meta, progress)
    except OSError as exc:
        raise CliIOError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _run_otlp(args) -> int:
    """Sends the run's timeline as a trace; exit 1 when spans were refused."""
    # lazy: the calculator's modules: only --format otlp reads through one
    from goodput_core.queries.calculator import Calculator

    try:
        # lazy: OpenTelemetry is optional (missing: said as a usage error)
        from goodput_core.exporters.otel_trace import export_run
    except ImportError as exc:
        raise CliError(f"--format otlp needs OpenTelemetry: pip install "
                       f"'goodput-core[otel]' ({exc})")
    store = open_store(args.store, create=False)
    try:
        if store.read(args.run, limit=1)[0] == [] and args.run not in store.runs():
            raise CliError(f"no run named {args.run!r} in {store.url} (see: goodput runs)")
        calc = Calculator(args.run, store)
        calc.refresh()
        try:
            sent = export_run(calc, time.time(), endpoint=args.endpoint,
                              protocol=args.protocol)
        except ValueError as exc:
            raise CliError(redact(exc)) from None
    finally:
        store.close()
    where = redact(args.endpoint) if args.endpoint else \
        "the collector of $OTEL_EXPORTER_OTLP_ENDPOINT"
    if sent["failed"]:
        print(f"goodput: {where} did not take {sent['failed']} of {sent['spans']} spans "
              f"of {args.run!r}", file=sys.stderr)
        return 1
    print(f"sent {args.run!r} as a trace of {sent['spans']} spans ({sent['attempts']} "
          f"attempts, {sent['phases']} phases) to {where}", file=sys.stderr)
    return 0
