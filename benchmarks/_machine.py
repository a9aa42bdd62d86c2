"""Shared helpers for the benchmark scripts: machine description and medians."""

from __future__ import annotations

import os
import platform
import statistics
import sys


def machine() -> str:
    """One line naming the machine a benchmark ran on."""
    return (f"{platform.machine()} {os.cpu_count()} cores, {platform.system()} "
            f"{platform.release()}, Python {sys.version.split()[0]}")


def median(values) -> float:
    return statistics.median(values)
