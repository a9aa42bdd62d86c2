"""The mergeable quantile sketch behind the monitor's step-time quantiles."""

import math

import numpy as np
import pytest

from goodput_core.queries.quantile_sketch import QuantileSketch

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


def _lower(values, q):
    # the order statistic of rank floor(q * (n - 1)), by sorting: the definition
    return float(np.sort(values)[math.floor(q * (len(values) - 1))])


@pytest.mark.parametrize("accuracy", [0.005, 0.02])
def test_every_quantile_is_within_the_relative_accuracy(accuracy):
    rng = np.random.default_rng(7)
    # step times over six decades, with a long tail (stalls)
    values = np.concatenate((rng.lognormal(-3, 0.2, 50_000), rng.uniform(1e-4, 300, 500)))
    sketch = QuantileSketch(accuracy)
    for chunk in np.array_split(values, 37):  # fed in pieces, as cycles do
        sketch.add(chunk)
    assert sketch.count == len(values)
    for q, got in zip(QS, sketch.quantiles(QS)):
        want = _lower(values, q)
        assert abs(got - want) <= accuracy * want * (1 + 1e-12), (q, got, want)


def test_merged_sketches_answer_as_one_sketch_of_both_streams():
    rng = np.random.default_rng(3)
    a, b = rng.exponential(0.1, 10_000), rng.exponential(5.0, 3_000)
    left, right, both = QuantileSketch(), QuantileSketch(), QuantileSketch()
    left.add(a)
    right.add(b)
    both.add(np.concatenate((a, b)))
    left.merge(right)
    assert left.quantiles(QS) == both.quantiles(QS)
    assert left.count == both.count == 13_000
    with pytest.raises(ValueError, match="same accuracy"):
        left.merge(QuantileSketch(0.01))


def test_zeros_nan_and_an_empty_sketch():
    sketch = QuantileSketch()
    assert math.isnan(sketch.quantile(0.5))
    sketch.add([0.0, -1.0, float("nan"), 2.0])  # NaN ignored; <= 0 answered as 0
    assert sketch.count == 3
    assert sketch.quantiles([0.0, 0.5]) == [0.0, 0.0]  # ranks 0 and 1 are the two <= 0
    assert sketch.quantile(1.0) == pytest.approx(2.0, rel=0.005)
    copy = sketch.copy()
    copy.add([5.0])
    assert sketch.count == 3 and copy.count == 4  # independent
    with pytest.raises(ValueError):
        sketch.quantile(1.5)
    with pytest.raises(ValueError):
        QuantileSketch(0.0)


def test_memory_does_not_grow_with_the_number_of_values():
    sketch = QuantileSketch()
    rng = np.random.default_rng(1)
    sketch.add([0.001, 1000.0])  # the range's two ends
    buckets = len(sketch._counts)
    for _ in range(20):
        sketch.add(rng.uniform(0.001, 1000.0, 50_000))
    # values from 1 ms to 1,000 s: ln(1e6) / ln(1.01005) buckets at most, fixed
    limit = math.ceil(math.log(1e6) / math.log(1.005 / 0.995)) + 1
    assert len(sketch._counts) == buckets <= limit
