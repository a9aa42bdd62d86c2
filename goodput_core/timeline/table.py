"""A compact columnar table: numpy columns kept sorted by (time, arrival order).

The event tables of :mod:`goodput_core.timeline.ingest` are made of these: inserting
a batch merges it in order and drops exact duplicates when asked, so no
Python object per event survives ingestion.
"""

from __future__ import annotations

import math
from typing import Dict, Tuple

import numpy as np

from goodput_core.timeline.intervals import Growable

__all__ = ["Table", "DTYPES"]

_INF = math.inf

DTYPES = {"t": np.float64, "o": np.int32, "step": np.int64, "key": np.int32,
           "end": np.float64, "e": np.int8, "active": np.float64, "avail": np.float64,
           "total": np.float64, "val": np.float64}


class Table:
    """Columns of one family, sorted by (time ``t``, arrival order ``o``).

    A batch carries ``o`` (the arrival order); the table keeps it only with
    ``keep_order`` (where a reader asks what arrived after what): elsewhere
    the order is all it is for, and rows stored earlier arrived earlier, so
    a late batch merges in without it (4 bytes per event: 40 MB at 10 M).
    """

    def __init__(self, extra: Tuple[str, ...], dedup: bool = True, keep_order: bool = False):
        #: The columns of a batch to :meth:`insert`.
        self.batch_names = ("t", "o") + tuple(extra)
        #: The columns kept (``table[name]``).
        self.names = self.batch_names if keep_order else ("t",) + tuple(extra)
        self.dedup = dedup
        self.cols = {name: Growable(DTYPES[name]) for name in self.names}

    def __len__(self) -> int:
        return self.cols["t"].n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name].a

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.cols.values())

    def insert(self, batch: Dict[str, np.ndarray]) -> Tuple[float, int]:
        """Inserts a batch (any order); drops exact duplicates.

        Returns:
          (earliest inserted time or +inf, number of duplicates dropped).
        """
        t = batch["t"]
        if not len(t):
            return _INF, 0
        if not _sorted(t, batch["o"]):  # batches mostly arrive in order: no copy then
            order = np.lexsort((batch["o"], t))
            batch = {k: v[order] for k, v in batch.items()}
        keep = self._novel(batch) if self.dedup else np.ones(len(t), bool)
        dups = int(len(keep) - keep.sum())
        if dups:
            batch = {k: v[keep] for k, v in batch.items()}
        t = batch["t"]
        if not len(t):
            return _INF, dups
        n = len(self)
        if not n or t[0] >= self["t"][-1]:
            for name in self.names:
                self.cols[name].extend(batch[name])
        else:  # out of order: merge (rare; the timeline recomputes from scratch)
            merged = {k: np.concatenate((self[k], batch[k])) for k in self.names}
            # (time, arrival): the rows kept arrived before the batch's, whose
            # own order is (time, arrival) already: a stable sort by time
            order = np.argsort(merged["t"], kind="stable")
            for name in self.names:
                self.cols[name].replace(merged[name][order])
        return float(t[0]), dups

    def _novel(self, batch: Dict[str, np.ndarray]) -> np.ndarray:
        """Mask of batch rows that are not exact copies of an earlier row."""
        t = batch["t"]
        aux = [k for k in self.batch_names if k not in ("t", "o")]
        if (t[1:] > t[:-1]).all():  # (sorted) no two rows at one time: no copies among them
            keep = np.ones(len(t), bool)
        else:  # copies are adjacent in (time, aux..., arrival) order; keep the first
            order = np.lexsort([batch["o"]] + [batch[k] for k in reversed(aux)] + [t])
            same = np.zeros(len(t), bool)
            same[1:] = t[order][1:] == t[order][:-1]
            for k in aux:
                col = batch[k][order]
                same[1:] &= col[1:] == col[:-1]
            keep = np.empty(len(t), bool)
            keep[order] = ~same
        n = len(self)
        if n:
            old_t = self["t"]
            lo = np.searchsorted(old_t, t, side="left")
            hi = np.searchsorted(old_t, t, side="right")
            for i in np.flatnonzero(hi > lo).tolist():  # equal times: rare
                for j in range(lo[i], hi[i]):
                    if all(self[k][j] == batch[k][i] for k in aux):
                        keep[i] = False
                        break
        # a later copy of a dropped row is a copy of a kept one: already False
        return keep


def _sorted(t: np.ndarray, o: np.ndarray) -> bool:
    """True when rows are in (time, arrival) order already (NaN-free times)."""
    dt = np.diff(t)
    return bool(((dt > 0) | ((dt == 0) & (np.diff(o) > 0))).all())
