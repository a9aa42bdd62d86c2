"""CI builds the compiled loop calls and tests them: with ``REQUIRE_NATIVE=1``
(make test's and make test-torch's default) a missing extension fails here
instead of letting test_native.py skip."""

from __future__ import annotations

import os

import pytest

from goodput_core.record import native


def test_the_extension_is_built_where_it_is_required():
    if os.environ.get("REQUIRE_NATIVE") != "1":
        pytest.skip("REQUIRE_NATIVE is not 1")
    assert native.module() is not None, (
        "goodput_core.record._native was not built (a C compiler and Python's headers: "
        "make build-tools; or make test REQUIRE_NATIVE=0)")
