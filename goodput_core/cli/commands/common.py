"""Arguments shared by several subcommands."""

from __future__ import annotations

import argparse


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default=None, metavar="URL",
        help="store URL or sqlite path (default: $GOODPUT_STORE or the user data dir)")
