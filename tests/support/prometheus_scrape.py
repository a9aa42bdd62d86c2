"""Scrapes a Prometheus exporter over loopback HTTP (no proxy) into a dict (tests only)."""

from __future__ import annotations

import urllib.request
from typing import Dict, FrozenSet, Tuple

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def scrape(url: str, timeout: float = 10.0) -> Dict[Tuple[str, FrozenSet], float]:
    """``{(sample name, frozenset(labels.items())): value}`` of one scrape of ``url``."""
    from prometheus_client.parser import text_string_to_metric_families

    with _OPENER.open(url, timeout=timeout) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}
