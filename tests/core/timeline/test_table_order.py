"""Event tables keep rows in (time, arrival) order without storing the
arrival order (``timeline.table``): a late batch merges in after the rows of
the same time that arrived before it, and a batch's own ties go by arrival.
"""

import numpy as np

from goodput_core.timeline.table import Table


def _batch(t, o, step):
    return {"t": np.array(t, np.float64), "o": np.array(o, np.int32),
            "step": np.array(step, np.int64)}


def test_a_late_batch_merges_in_time_then_arrival_order():
    table = Table(("step",))
    table.insert(_batch([1.0, 2.0, 3.0], [0, 1, 2], [10, 20, 30]))
    # late rows: two at time 2.0 (they arrived after the 2.0 kept), one before all
    table.insert(_batch([2.0, 2.0, 0.5], [3, 4, 5], [21, 22, 5]))
    # out of arrival order inside the batch, and tied in time: arrival decides
    table.insert(_batch([2.0, 2.0], [7, 6], [24, 23]))
    assert table["t"].tolist() == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0]
    assert table["step"].tolist() == [5, 10, 20, 21, 22, 23, 24, 30]
    assert "o" not in table.names and "o" in table.batch_names


def test_a_table_that_keeps_the_arrival_order_merges_the_same_way():
    table = Table(("step",), keep_order=True)
    table.insert(_batch([1.0, 2.0, 3.0], [0, 1, 2], [10, 20, 30]))
    table.insert(_batch([2.0, 0.5], [3, 4], [21, 5]))
    assert table["step"].tolist() == [5, 10, 20, 21, 30]
    assert table["o"].tolist() == [4, 0, 1, 3, 2]
