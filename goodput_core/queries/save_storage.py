"""Checkpoint save time by storage: local vs persistent saves.

ml-goodput-measurement 0.2.4 splits checkpoint save time into local and
persistent (``gs://``) saves. Here it is a breakdown of the
``UNPRODUCTIVE_CHECKPOINT_SAVE_TIME`` bucket, never a new bucket: the two
parts add up to the bucket over the same window and exclusions. An Orbax
save entry whose ``directory`` is a URL (``gs://``, ``s3://``...) is a
persistent save (:func:`goodput_core.events.persistent_directory`); every
other save time (an Orbax save to a local path, a save recorded with the
native ``rec.checkpoint_save()``) is local. Where a persistent and a local
save overlap, the instant is persistent time.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np

from goodput_core.timeline.buckets import BadputType
from goodput_core.timeline.ingest import ORBAX_PERSISTENT_SAVE
from goodput_core.timeline.intervals import complement, split_by_regions, union

__all__ = ["save_seconds_by_storage"]

_SAVE = BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME


def save_seconds_by_storage(tl, a: float, b: float,
                            exclude: Sequence[Tuple[float, float]] = ()) -> Dict[str, float]:
    """``{"local": s, "persistent": s}`` of the save bucket inside ``[a, b]``
    (already clipped to the lifetime) minus ``exclude``, with the timeline's
    overlays applied as the bucket has them (wasted progress outranks a save)."""
    if not b > a:
        return {"local": 0.0, "persistent": 0.0}
    xs = np.array([x for x, _ in exclude], np.float64)
    xe = np.array([y for _, y in exclude], np.float64)
    pa, pb = complement(a, b, xs, xe)  # the window's pieces left after exclusions
    total = tl.measure(pa, pb).get(_SAVE, 0.0) if len(pa) else 0.0
    ob = tl.tables["orbax"]
    sel = ob["key"] == ORBAX_PERSISTENT_SAVE
    s, e = union(ob["t"][sel], ob["end"][sel])
    s, e = split_by_regions(s, e, pa, pb)[:2]  # the parts inside those pieces
    persistent = tl.measure(s, e).get(_SAVE, 0.0) if len(s) else 0.0
    persistent = min(max(persistent, 0.0), total)
    return {"local": max(total - persistent, 0.0), "persistent": persistent}
