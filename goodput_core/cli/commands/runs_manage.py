"""``goodput runs delete RUN`` and ``goodput runs rename OLD NEW`` (embedded store).

Both ask for confirmation on the terminal; ``--yes`` skips the question, and
without a terminal (a script, a pipe) they refuse unless ``--yes`` is given.
``delete`` refuses a run that a live process on this host still records (its
journal is held): its later events would be kept under the deleted run's id.
"""

from __future__ import annotations

import sys

from goodput_core.cli import CliError
from goodput_core.cli.commands.backup import sqlite_path
from goodput_core.record.journal import default_spill_dir, live_journals, tag_of
from goodput_core.stores import default_store_url
from goodput_core.text import printable

__all__ = ["manage"]


def _confirm(question: str, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        raise CliError("no terminal to confirm on: pass --yes to go ahead")
    sys.stderr.write(question + " [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _refuse_live_writer(path: str, run: str) -> None:
    """CliError when a live process of this host records ``run`` into ``path``."""
    for ident in live_journals(default_spill_dir(), tag_of("sqlite:///" + path.lstrip("/"))):
        if ident.get("run") == run:
            raise CliError(f"run {printable(run)!r} is being recorded by process "
                           f"{ident.get('pid')} on this host: stop it first (its later "
                           f"events would be kept under the deleted run, out of sight)")


def manage(args) -> int:
    """Runs ``delete`` or ``rename``; returns the exit code (1: not confirmed)."""
    # lazy: only delete and rename need it (every goodput runs imports this module)
    from goodput_core.stores.sqlite import admin

    want = {"delete": 1, "rename": 2}[args.action]
    if len(args.names) != want:
        raise CliError(f"runs {args.action} takes {'RUN' if want == 1 else 'OLD NEW'}")
    path = sqlite_path(args.store or default_store_url(), "runs delete and rename work on "
                       "embedded stores; in PostgreSQL use its own tools", writer=True)
    run = args.names[0]
    count = admin.count_events(path, run)  # no such run: an error before any question
    if args.action == "delete":
        _refuse_live_writer(path, run)
        if not _confirm(f"delete run {printable(run)!r} and its {count} events from {path}?",
                        args.yes):
            print("nothing deleted", file=sys.stderr)
            return 1
        n = admin.delete_run(path, run)
        print(f"deleted run {printable(run)!r}: {n} events", file=sys.stderr)
        return 0
    new = args.names[1]
    if not new or "\x00" in new:
        raise CliError(f"{new!r} is not a run name")
    if not _confirm(f"rename run {printable(run)!r} ({count} events) to {printable(new)!r} "
                    f"in {path}?", args.yes):
        print("nothing renamed", file=sys.stderr)
        return 1
    admin.rename_run(path, run, new)
    print(f"renamed run {printable(run)!r} to {printable(new)!r}", file=sys.stderr)
    return 0
