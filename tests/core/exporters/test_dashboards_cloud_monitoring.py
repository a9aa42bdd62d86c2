"""The Cloud Monitoring dashboard shipped for our exporter: every widget's
filter selects series the exporter really sends (to the loopback fake of
Cloud Monitoring), every label it groups by is on them, and every metric
type the exporter sends has a widget."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

pytest.importorskip("google.cloud.monitoring_v3")

from tests.core.exporters.test_cloud_monitoring import (  # noqa: E402,F401 (fixtures)
    RUN, _exporter, _job, _snapshot, gcm, metadata)

DASHBOARD = resources.files("goodput_core.exporters").joinpath(
    "dashboards", "cloud-monitoring-goodput.json")
_TERM = re.compile(r'\s*([a-z_.]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')


def _queries(dash):
    """(widget title, timeSeriesFilter) of every widget."""
    for tile in dash["mosaicLayout"]["tiles"]:
        w = tile["widget"]
        if "xyChart" in w:
            for ds in w["xyChart"]["dataSets"]:
                yield w["title"], ds["timeSeriesQuery"]["timeSeriesFilter"]
        elif "scorecard" in w:
            yield w["title"], w["scorecard"]["timeSeriesQuery"]["timeSeriesFilter"]
        else:
            raise AssertionError(f"unknown widget {sorted(w)}")


def _terms(text):
    """``{field: value}`` of a filter made of ANDed ``field="value"`` terms."""
    terms, pos = {}, 0
    while pos < len(text):
        m = _TERM.match(text, pos)
        assert m, f"unsupported filter syntax at {text[pos:]!r}"
        terms[m.group(1)] = m.group(2)
        pos = m.end()
    return terms


def _field(ts, name):
    if name == "metric.type":
        return ts.metric.type
    if name == "resource.type":
        return ts.resource.type
    kind, _, key = name.partition(".label.")
    labels = ts.metric.labels if kind == "metric" else ts.resource.labels
    return labels.get(key)


def test_every_widget_selects_series_the_exporter_sends(gcm):
    calc, qt = _job()
    _exporter(gcm, clock=lambda: qt).export(_snapshot(calc, qt))
    sent = gcm.series()
    assert sent and gcm.violations == []
    dash = json.loads(DASHBOARD.read_text())
    filters = dash["dashboardFilters"]
    assert [(f["labelKey"], f["filterType"]) for f in filters] == [("workload_id", "RESOURCE_LABEL")]
    assert all(ts.resource.labels["workload_id"] == RUN for ts in sent)  # the run filter works
    covered = set()
    for title, query in _queries(dash):
        terms = _terms(query["filter"])
        matched = [ts for ts in sent if all(_field(ts, k) == v for k, v in terms.items())]
        assert matched, f"{title}: {query['filter']} selects nothing the exporter sends"
        for key in query["aggregation"]["groupByFields"]:
            assert all(_field(ts, key) is not None for ts in matched), (title, key)
        covered |= {ts.metric.type for ts in matched}
    assert covered == {ts.metric.type for ts in sent}, "metric types without a widget"
