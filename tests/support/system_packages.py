"""The Debian packages some tests run for real: postgresql, pgbouncer, chromium
with chromium-driver, prometheus with promtool.

``make test`` installs the missing ones as root (Makefile, ``system-packages``);
``make test SYSTEM_PACKAGES=0`` installs none and sets ``SYSTEM_PACKAGES=0`` for
pytest, and every test that needs one of them skips with :data:`OFF_REASON`,
installed or not, so that run does the same on every machine. Under CI
(``.ci/run`` installs them all) a missing package is an error where ``required_in_ci``.
"""

from __future__ import annotations

import os

import pytest

__all__ = ["OFF_REASON", "off", "require"]

OFF_REASON = ("SYSTEM_PACKAGES=0: needs Debian's {what}, left out on request "
              "(make test installs it as root)")


def off() -> bool:
    """True when the caller asked for no system packages (``SYSTEM_PACKAGES=0``)."""
    return os.environ.get("SYSTEM_PACKAGES", "").strip() == "0"


def require(what: str, found: bool, install: str, required_in_ci: bool = False) -> None:
    """Skips the calling test (or test module, at its top level) unless the
    package ``what`` is wanted and ``found``; ``install`` says how to get it."""
    if off():
        pytest.skip(OFF_REASON.format(what=what), allow_module_level=True)
    if not found:
        if required_in_ci and os.environ.get("CI"):
            raise RuntimeError(f"{what} missing: {install}")
        pytest.skip(f"{what} is not installed ({install})", allow_module_level=True)
