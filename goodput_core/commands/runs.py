"""``goodput runs``: list the runs in a store."""

from __future__ import annotations

from goodput_core.commands.common import add_store_argument
from goodput_core.stores import open_store
from goodput_core.text import printable


def add_arguments(parser) -> None:
    add_store_argument(parser)


def run(args) -> int:
    store = open_store(args.store, create=False)
    for name in store.runs():
        print(printable(name))  # a name is user data: no raw terminal escapes
    return 0
