"""Markers of the demo tests: ``-m demo`` selects the end-to-end demo runs,
``-m reliability`` the R1 SIGKILL test (both also run in the whole suite)."""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "demo: runs the real `goodput demo` job end to end (child processes)")
    config.addinivalue_line(
        "markers", "reliability: docs/quality.md R1-R7 scenarios with real processes")
