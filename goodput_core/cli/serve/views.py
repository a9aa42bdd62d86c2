"""What the dashboard's charts draw, computed from a run's calculator.

- :func:`series`: goodput and every badput bucket over time, each point one
  window of the calculator (cumulative, or rolling with a given length), so a
  point is exactly what ``goodput report --window`` says for that window.
- :class:`SpanIndex` / :func:`timeline_bins`: the attributed spans merged to a
  pixel width. The index (per label: sorted starts, ends and the running sum
  of lengths) is built once per new events; a request then costs
  O(width · labels · log spans) -- binary searches at the bin edges -- not
  O(events), however far the user zooms.
- :func:`step_series`: step time by step, reduced to at most ``points``
  (mean and max of each chunk of steps).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

__all__ = ["series", "SpanIndex", "timeline_bins", "step_series", "MAX_WIDTH", "MAX_POINTS"]

MAX_WIDTH = 4096    # pixels a timeline request may ask for
MAX_POINTS = 1000   # points of a series
_NOT_IN_TOTAL = "DATA_LOADING_ASYNC"


def series(calc: Any, now: float, *, points: int = 120,
           window: Optional[float] = None) -> Dict[str, Any]:
    """Goodput and badput (percent of each window's total) at ``points`` times
    evenly spread over the lifetime.

    Args:
      window: the rolling window's length in seconds; None: cumulative (from
        the first job start to each point).

    Returns:
      ``{times, window, goodput_percent: [...], badput_percent: {BUCKET: [...]}}``;
      a point whose window holds no measured time is None.
    """
    points = max(2, min(int(points), MAX_POINTS))
    life = calc.lifetime(now)
    out: Dict[str, Any] = {"times": [], "window": window, "goodput_percent": [],
                           "badput_percent": {}}
    if life is None or not life[1] > life[0]:
        return out
    times = np.linspace(life[0], life[1], points + 1)[1:].tolist()
    bad: Dict[str, List[Optional[float]]] = {}
    for i, t in enumerate(times):
        a = life[0] if window is None else t - window
        r = calc.window(a, t, now=now)
        measured = r.total_seconds > 0
        out["goodput_percent"].append(r.goodput if measured else None)
        for bucket, pct in r.badput_percent.items():
            name = bucket.name
            if name == _NOT_IN_TOTAL:
                continue
            column = bad.setdefault(name, [None] * len(times))
            column[i] = pct if measured else None
    out["times"] = times
    # buckets that never held time are left out: the chart's legend stays short
    out["badput_percent"] = {k: v for k, v in bad.items() if any(x for x in v)}
    return out


class SpanIndex:
    """Per label, the disjoint sorted spans and the cumulative time they cover."""

    def __init__(self, arrays: Dict[str, Any], lifetime: Optional[tuple]):
        self.lifetime = lifetime
        self.labels = sorted(arrays)
        self._starts, self._ends, self._cum = [], [], []
        for label in self.labels:
            s, e = (np.asarray(x, np.float64) for x in arrays[label])
            self._starts.append(s)
            self._ends.append(e)
            self._cum.append(np.concatenate(([0.0], np.cumsum(e - s))))

    @classmethod
    def of(cls, calc: Any, now: float) -> "SpanIndex":
        return cls(calc.span_arrays(now=now), calc.lifetime(now))

    def covered(self, k: int, t: np.ndarray) -> np.ndarray:
        """Seconds of label ``k`` before each time in ``t``."""
        s, e, cum = self._starts[k], self._ends[k], self._cum[k]
        i = np.searchsorted(s, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(t - s[j], 0.0, e[j] - s[j]) if len(s) else np.zeros(len(t))
        return np.where(i >= 0, cum[j] + inside, 0.0)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for arrs in (self._starts, self._ends, self._cum) for a in arrs)


def timeline_bins(index: SpanIndex, start: Optional[float], end: Optional[float],
                  width: int, markers: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """The spans of ``[start, end]`` (default: the lifetime) merged to ``width``
    pixels: each pixel takes the label holding most of its time, and runs of
    pixels with one label become one span.

    Returns:
      ``{start, end, width, labels, spans: [[start, end, label index, share]],
      markers: {name: [times]}}``: ``share`` is the fraction of the span's time
      its label holds (1.0 where nothing was merged away); at most ``width``
      spans and ``width`` markers of each kind.
    """
    width = max(1, min(int(width), MAX_WIDTH))
    life = index.lifetime
    out: Dict[str, Any] = {"start": None, "end": None, "width": width, "labels": index.labels,
                           "spans": [], "markers": {}}
    if life is None or not index.labels:
        return out
    a = life[0] if start is None else max(float(start), life[0])
    b = life[1] if end is None else min(float(end), life[1])
    out["start"], out["end"] = a, b
    if not b > a:
        return out
    edges = np.linspace(a, b, width + 1)
    per_label = np.stack([np.diff(index.covered(k, edges)) for k in range(len(index.labels))])
    dominant = per_label.argmax(axis=0)
    change = np.flatnonzero(np.diff(dominant)) + 1
    first = np.concatenate(([0], change))
    last = np.concatenate((change, [width]))
    spans = []
    for i0, i1 in zip(first.tolist(), last.tolist()):
        k = int(dominant[i0])
        held = float(per_label[k, i0:i1].sum())
        total = float(per_label[:, i0:i1].sum())
        if total <= 0:
            continue  # outside every span (cannot happen inside the lifetime)
        spans.append([float(edges[i0]), float(edges[i1]), k, held / total])
    out["spans"] = spans
    for name, times in markers.items():
        t = np.asarray(times, np.float64)
        t = t[(t >= a) & (t <= b)]
        if len(t) > width:  # one marker per pixel at most
            px = np.floor((t - a) / (b - a) * width)
            t = t[np.concatenate(([True], np.diff(px) > 0))]
        out["markers"][name] = t.tolist()
    return out


def step_series(stats: Any, points: int = 400) -> Dict[str, Any]:
    """Step time by step: ``{steps, mean_seconds, max_seconds, ideal_seconds}``,
    each of at most ``points`` chunks of consecutive measured steps."""
    steps, times = stats.steps, stats.step_times
    points = max(1, min(int(points), MAX_POINTS))
    out = {"steps": [], "mean_seconds": [], "max_seconds": [],
           "ideal_seconds": stats.ideal_step_time}
    n = len(times)
    if not n:
        return out
    starts = np.unique(np.linspace(0, n, min(points, n), endpoint=False).astype(np.int64))
    counts = np.diff(np.append(starts, n))
    out["steps"] = steps[starts].tolist()
    out["mean_seconds"] = (np.add.reduceat(times, starts) / counts).tolist()
    out["max_seconds"] = np.maximum.reduceat(times, starts).tolist()
    return out

