"""The ``goodput`` command.

Each subcommand lives in its own module under ``goodput_core.cli.commands`` and
is imported only when used, so ``goodput --help`` stays fast. A module
exposes ``add_arguments(parser)`` and ``run(args) -> int``.

No command shows a traceback: every failure is one line on stderr,
``goodput COMMAND: error: ...``, and a non-zero exit code: 2 for bad
arguments and problems the user can fix (:class:`CliError`, unusable
stores), 1 for I/O errors (:class:`CliIOError`: an unwritable output, an
unreadable input) and anything unexpected
(``GOODPUT_DEBUG=1`` adds the traceback), 141 when the reader of the output
went away (``goodput events RUN | head -1``; 128 + SIGPIPE, as a shell shows
a process killed by SIGPIPE).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import List, NoReturn, Optional

from goodput_core import __version__
from goodput_core.record.adopt import deliver_left_events
from goodput_core.redact import redact
from goodput_core.stores import StoreError, default_store_url
from goodput_core.text import printable

__all__ = ["main", "CliError"]

# name -> (module under goodput_core.cli.commands, one-line help)
COMMANDS = {
    "demo": ("demo", "train a small Flax model with a crash and a restart, then report "
                      "(--synthetic: no jax needed)"),
    "runs": ("runs", "list the runs in a store; runs delete RUN, runs rename OLD NEW"),
    "events": ("events", "print the recorded events of a run as JSON lines"),
    "monitor": ("monitor", "export a run's goodput periodically (TensorBoard, Prometheus, GCM)"),
    "report": ("report", "goodput, every badput bucket, steps and step times of a run"),
    "compare": ("compare", "runs side by side, bucket by bucket (a run group or named runs)"),
    "timeline": ("timeline", "draw a run's attributed spans over time (PNG or HTML)"),
    "export": ("export", "write a run's events to a JSONL file, one reference payload per line"),
    "import": ("import_", "copy a run between stores and JSONL files, skipping what is there"),
    "backup": ("backup", "a consistent copy of an embedded store, while writers run"),
    "compact": ("compact", "pack runs into chunks (and rebuild an embedded store)"),
    "incidents": ("incidents", "every disruption: cause, time to detect and restart, "
                               "progress lost; MTBF, MTTR"),
    "project": ("project", "what-if: expected ETTR at another scale or checkpoint interval"),
    "import-scheduler": ("import_scheduler", "add scheduling times from Slurm (sacct --json) "
                                             "or Kubernetes events to a run"),
    "serve": ("serve", "a live web dashboard over a store: runs, run pages, groups side by side"),
}


#: Commands that read a store: they first deliver what dead writers left in it
#: (:mod:`goodput_core.record.adopt`), so a report after a crash shows it all.
#: Not ``serve``: nothing a dashboard does writes to a store.
_READERS = frozenset({"runs", "events", "monitor", "report", "compare", "timeline", "export",
                      "incidents", "project"})


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""

    exit_code = 2


class CliIOError(CliError):
    """A file the command could not read or write; one line, exit code 1."""

    exit_code = 1


EXIT_BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        _error_line(f"{self.prog}: error: {message} (see: {self.prog} --help)")
        sys.exit(2)


def _error_line(text: str) -> None:
    """Prints one line on stderr, secrets hidden (each message already hides
    those it names: this is the last guard); a closed stderr is not worth a
    traceback either."""
    try:
        print(printable(redact(" ".join(text.split("\n")))), file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _silence_stdout() -> None:
    """Points stdout at /dev/null: Python's flush at exit must not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of every command; ``only``: a command name, whose module
    alone is imported to declare its arguments (the others' modules are not
    imported: ``goodput report`` pays for no other command's imports)."""
    parser = _Parser(
        prog="goodput", description="Measure the goodput of ML training jobs.")
    parser.add_argument("--version", action="version", version=f"goodput {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if only is None or only == name:
            _load(module).add_arguments(p)
    return parser


def _command_of(argv: List[str]) -> str:
    """The command named by ``argv``: its first word that is not an option
    (the top-level options take no value), or '' for none."""
    return next((a for a in argv if not a.startswith("-")), "")


def _load(module: str):
    return importlib.import_module(f"goodput_core.cli.commands.{module}")


def _deliver_left_events(store) -> None:
    """Delivers what dead writers of the store left (never fails the command)."""
    try:
        deliver_left_events(store or default_store_url())
    except Exception:  # noqa: BLE001 - the read goes on with what is stored
        pass


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command line; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    prefix = f"goodput {args.command}: error:"
    try:
        if args.command in _READERS and hasattr(args, "store"):
            _deliver_left_events(getattr(args, "store", None))
        code = int(_load(args._module).run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here for output still buffered
        return code
    except (CliError, StoreError, ValueError) as exc:
        _error_line(f"{prefix} {exc}")
        return getattr(exc, "exit_code", 2)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        _error_line(f"{prefix} the output was closed before everything was written")
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # an unwritable output, a full disk
        where = f": {exc.filename}" if exc.filename else ""
        _error_line(f"{prefix} {exc.strerror or exc}{where}")
        return 1
    except Exception as exc:  # a bug: still one line (the traceback on request)
        if os.environ.get("GOODPUT_DEBUG"):
            raise
        _error_line(f"{prefix} unexpected {type(exc).__name__}: {exc} "
                    "(set GOODPUT_DEBUG=1 for a traceback)")
        return 1

