"""The ``goodput`` command.

Each subcommand lives in its own module under ``goodput_core.commands`` and
is imported only when used, so ``goodput --help`` stays fast. A module
exposes ``add_arguments(parser)`` and ``run(args) -> int``. Errors a user can
fix are one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

__all__ = ["main", "CliError"]

# name -> (module under goodput_core.commands, one-line help)
COMMANDS = {
    "demo": ("demo", "train a small Flax model with a crash and a restart, then report "
                      "(--synthetic: no jax needed)"),
    "runs": ("runs", "list the runs in a store"),
    "events": ("events", "print the recorded events of a run as JSON lines"),
    "monitor": ("monitor", "export a run's goodput periodically (TensorBoard, Prometheus, GCM)"),
    "report": ("report", "goodput, every badput bucket, steps and step times of a run"),
    "compare": ("compare", "runs side by side, bucket by bucket (a run group or named runs)"),
    "timeline": ("timeline", "draw a run's attributed spans over time (PNG or HTML)"),
    "export": ("export", "write a run's events to a JSONL file, one reference payload per line"),
    "import": ("import_", "copy a run between stores and JSONL files, skipping what is there"),
}


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="goodput", description="Measure the goodput of ML training jobs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        _load(module).add_arguments(p)
    return parser


def _load(module: str):
    return importlib.import_module(f"goodput_core.commands.{module}")


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from goodput_core.stores import StoreError

    try:
        return int(_load(args._module).run(args) or 0)
    except (CliError, StoreError, ValueError) as exc:
        print(f"goodput {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    # Run the package's copy of main: as __main__ this module's CliError would
    # be a different class from the one the subcommands raise.
    from goodput_core.cli import main as _package_main

    sys.exit(_package_main())
