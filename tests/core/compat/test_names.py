"""Every public name a user reaches through the reference's modules exists in ours.

Code written for ``ml_goodput_measurement`` reaches classes through the module
that imported them (``goodput.BadputType``, ``monitoring.MetricType``); after
changing the import line those names must still be there. Internals that our
engine replaces are listed in docs/differences.md and here.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

# The reference's internals, replaced by our engine (docs/differences.md).
NOT_PROVIDED = {"CheckpointBadputCalculator", "CheckpointLoggerOptions", "GoodputCache",
                "GCPMetrics", "ValueType"}
MODULES = ["goodput", "goodput_elastic", "monitoring", "monitoring_elastic", "goodput_utils"]


@pytest.mark.parametrize("module", MODULES)
def test_the_references_public_classes_and_functions_are_reachable(module):
    ref = importlib.import_module(f"ml_goodput_measurement.src.{module}")
    ours = importlib.import_module(f"goodput_core.compat.{module}")
    wanted = {
        name for name, value in vars(ref).items()
        if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").startswith("ml_goodput_measurement")
    }
    assert wanted, "the reference module exports nothing?"
    assert sorted(wanted - NOT_PROVIDED - set(vars(ours))) == []


def test_reexported_names_are_the_same_objects():
    from goodput_core.compat import goodput, goodput_utils, monitoring

    for name in ("BadputType", "MetricType", "IntervalMetricType"):
        assert getattr(goodput, name) is getattr(goodput_utils, name)
        assert getattr(monitoring, name) is getattr(goodput_utils, name)
    assert goodput.GoodputType is goodput_utils.GoodputType
    assert monitoring.GoodputCalculator is goodput.GoodputCalculator
