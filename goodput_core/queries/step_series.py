"""Step numbers and step times kept in chunks, so a run going on appends.

A monitor keeps every measured step's time between cycles. Held as two
arrays, each cycle's new steps would cost a copy of the whole history (12 ms
per cycle at 10 M steps). :class:`StepColumns` keeps them in chunks instead:
new steps after the last one go into the spare room of the last chunk
(allocated :data:`CHUNK` steps at a time), and a step run again (a restart
from a checkpoint) or added before others (late events) replaces only the
chunks it falls in, with new arrays.

:class:`StepSeries` is what a cycle hands out: the chunks as they were then
(views: no chunk array is ever written where a series can see it), with
the steps still provisional laid over them. It answers what a monitor cycle
needs (its length, the steps after a given one, a range) without joining the
chunks; :meth:`StepSeries.arrays` joins them once, for API users.

A chunk of consecutive step numbers (most of a run that logs every step)
holds its first step and its length instead of an array: 8 bytes a step less.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["CHUNK", "Consecutive", "StepColumns", "StepSeries", "override"]

#: Steps per chunk allocated for appends (16 bytes a step: 1 MiB of spare room at most).
CHUNK = 65_536
#: Consecutive steps held as two numbers from this many on (an array's own cost below).
MIN_CONSECUTIVE = 64

_Chunk = Tuple[Any, np.ndarray]  # (steps, times), steps sorted and unique


class Consecutive:
    """The steps ``first, first + 1, ..., first + n - 1``, held as two numbers.

    Reads like the int64 array it stands for where the chunks are read:
    ``len``, an index (or an array of them), a slice (a new array),
    ``searchsorted`` and ``numpy.asarray``.
    """

    __slots__ = ("first", "n")

    def __init__(self, first: int, n: int):
        self.first, self.n = int(first), int(n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            a, b, stride = k.indices(self.n)
            return np.arange(self.first + a, self.first + b, stride, dtype=np.int64)
        if isinstance(k, np.ndarray):
            if len(k) and ((k >= self.n) | (k < -self.n)).any():
                raise IndexError("index out of range")
            return self.first + np.where(k < 0, k + self.n, k).astype(np.int64)
        k = int(k)
        if not -self.n <= k < self.n:
            raise IndexError("index out of range")
        return self.first + (k + self.n if k < 0 else k)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.arange(self.first, self.first + self.n, dtype=dtype or np.int64)

    def searchsorted(self, v: Any, side: str = "left") -> Any:
        """As ``numpy.searchsorted`` on the array (integer ``v``)."""
        pos = np.asarray(v) - self.first + (1 if side == "right" else 0)
        return np.clip(pos, 0, self.n).astype(np.int64) if pos.ndim else int(
            min(max(int(pos), 0), self.n))


def _compact(steps: np.ndarray) -> Any:
    """``steps`` (sorted, unique), or a :class:`Consecutive` when they are (no copy
    kept: an array that is a view of a larger one keeps that one alive)."""
    n = len(steps)
    if n >= MIN_CONSECUTIVE and int(steps[-1]) - int(steps[0]) == n - 1:
        return Consecutive(int(steps[0]), n)
    return steps


def override(steps: np.ndarray, times: np.ndarray, new_steps: np.ndarray,
             new_times: np.ndarray) -> tuple:
    """``(steps, times)`` (unique, sorted) with the later runs ``new_*`` (unique,
    sorted) replacing or added. Never writes into its arguments; may return them."""
    if not len(new_steps):
        return steps, times
    if not len(steps):
        return new_steps, new_times
    if new_steps[0] > steps[-1]:
        return np.concatenate((steps, new_steps)), np.concatenate((times, new_times))
    if len(new_steps) >= len(steps) and np.array_equal(new_steps[:len(steps)], steps):
        return new_steps, new_times  # every step replaced, later ones added
    pos = np.searchsorted(steps, new_steps)
    hit = pos < len(steps)
    hit[hit] = steps[pos[hit]] == new_steps[hit]
    times = times.copy()
    times[pos[hit]] = new_times[hit]
    if hit.all():
        return steps, times
    add = ~hit
    return (np.insert(steps, pos[add], new_steps[add]),
            np.insert(times, pos[add], new_times[add]))


def _overlaid(chunks: Sequence[_Chunk], firsts: np.ndarray, steps: np.ndarray,
              times: np.ndarray) -> Tuple[List[_Chunk], List[int]]:
    """``chunks`` with ``(steps, times)`` (sorted, unique, none after the last
    chunk's last step) laid over them: the chunks they fall in are replaced
    by new arrays (copy on write), the others are shared. Also returns the
    indexes of the chunks replaced."""
    out = list(chunks)
    which = np.maximum(np.searchsorted(firsts, steps, side="right") - 1, 0)
    cuts = np.flatnonzero(np.diff(which)) + 1
    changed = []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(steps)]):
        c = int(which[lo])
        new_steps, new_times = override(np.asarray(out[c][0]), out[c][1], steps[lo:hi],
                                        times[lo:hi])
        out[c] = (_compact(new_steps), new_times)
        changed.append(c)
    return out, changed


def _bounds(chunk: _Chunk) -> Tuple[int, int, int]:
    """``(length, first step, last step)`` of a chunk that is not empty."""
    return len(chunk[0]), int(chunk[0][0]), int(chunk[0][-1])


class StepSeries:
    """An immutable ``(steps, times)`` series held in chunks (see module doc).

    Args:
      chunks: ``(steps, times)`` pieces in step order (steps sorted, unique,
        each piece's steps after the previous piece's); never written later.
      bounds: :func:`_bounds` of each chunk, when the caller keeps them (then
        no chunk is empty).
    """

    def __init__(self, chunks: Sequence[_Chunk], bounds: Optional[Sequence[tuple]] = None):
        if bounds is None:
            chunks = [c for c in chunks if len(c[0])]
            bounds = [_bounds(c) for c in chunks]
        self._chunks = list(chunks)
        self._ends = np.cumsum([b[0] for b in bounds], dtype=np.int64)
        self._lasts = np.array([b[2] for b in bounds], np.int64)
        self._joined: Optional[tuple] = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # (copies and pickles: the lock is not data)
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, steps: np.ndarray, times: Optional[np.ndarray] = None) -> "StepSeries":
        """A series of plain arrays (``times`` None: zeros, for a set of steps)."""
        steps = np.asarray(steps, np.int64)
        return cls([(steps, np.zeros(len(steps)) if times is None
                     else np.asarray(times, np.float64))])

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def last_step(self) -> Optional[int]:
        """The largest step (None when empty)."""
        return int(self._lasts[-1]) if len(self._lasts) else None

    def rank(self, step: int) -> int:
        """How many steps are ``<= step`` (O(log n))."""
        c = int(np.searchsorted(self._lasts, step, side="left"))
        if c == len(self._chunks):
            return len(self)
        before = int(self._ends[c - 1]) if c else 0
        return before + int(self._chunks[c][0].searchsorted(step, side="right"))

    def step_at(self, i: int) -> int:
        """The ``i``-th step (0-based, ``0 <= i < len``)."""
        c = int(np.searchsorted(self._ends, i, side="right"))
        return int(self._chunks[c][0][i - (int(self._ends[c - 1]) if c else 0)])

    def slice(self, i: int, j: int) -> tuple:
        """``(steps, times)`` of positions ``[i, j)``: O(j - i + chunks touched)."""
        n = len(self)
        i, j = max(0, min(i, n)), max(0, min(j, n))
        if j <= i:
            return np.empty(0, np.int64), np.empty(0)
        c0 = int(np.searchsorted(self._ends, i, side="right"))
        c1 = int(np.searchsorted(self._ends, j - 1, side="right"))
        parts_s, parts_t = [], []
        for c in range(c0, c1 + 1):
            start = int(self._ends[c - 1]) if c else 0
            a, b = max(i - start, 0), min(j - start, len(self._chunks[c][0]))
            parts_s.append(self._chunks[c][0][a:b])
            parts_t.append(self._chunks[c][1][a:b])
        if len(parts_s) == 1:
            return parts_s[0], parts_t[0]
        return np.concatenate(parts_s), np.concatenate(parts_t)

    def arrays(self) -> tuple:
        """``(steps, times)`` as two arrays: joined once (O(n)), then kept."""
        with self._lock:  # exporters may ask from their own threads
            if self._joined is None:
                self._joined = self.slice(0, len(self))
            return self._joined


class StepColumns:
    """The final ``(steps, times)`` of a run, in chunks that new steps append to.

    Chunk arrays a :class:`StepSeries` may see are never written: appends
    go to the spare room after the last chunk's end, and replacements give
    the chunks concerned new arrays.
    """

    def __init__(self) -> None:
        self._chunks: List[_Chunk] = []
        self._bounds: List[Tuple[int, int, int]] = []  # _bounds of each chunk
        self._firsts = np.empty(0, np.int64)
        self._spare: Optional[_Chunk] = None  # the buffers the last chunk is a view of
        self._used = 0  # how much of them it holds
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def last_step(self) -> Optional[int]:
        return self._bounds[-1][2] if self._bounds else None

    def lookup(self, steps: np.ndarray) -> tuple:
        """``(found, times)`` of sorted ``steps`` (times of the ones not found: NaN)."""
        found = np.zeros(len(steps), bool)
        times = np.full(len(steps), np.nan)
        if not self._chunks or not len(steps):
            return found, times
        which = np.maximum(np.searchsorted(self._firsts, steps, side="right") - 1, 0)
        cuts = np.flatnonzero(np.diff(which)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(steps)]):
            cs, ct = self._chunks[int(which[lo])]
            pos = np.minimum(cs.searchsorted(steps[lo:hi]), len(cs) - 1)
            hit = cs[pos] == steps[lo:hi]
            found[lo:hi], times[lo:hi] = hit, np.where(hit, ct[pos], np.nan)
        return found, times

    def set(self, steps: np.ndarray, times: np.ndarray) -> None:
        """Lays ``(steps, times)`` (sorted, unique; temporaries of the caller,
        which may be kept) over the columns: the later runs replace earlier ones."""
        if not len(steps):
            return
        last = self.last_step
        k = 0 if last is None else int(np.searchsorted(steps, last, side="right"))
        if k:
            tip = self._chunks[-1]
            self._chunks, changed = _overlaid(self._chunks, self._firsts, steps[:k], times[:k])
            for c in changed:
                self._n += len(self._chunks[c][0]) - self._bounds[c][0]
                self._bounds[c] = _bounds(self._chunks[c])
            if self._chunks[-1] is not tip:
                self._spare = None  # the last chunk has new arrays: no room after it
        if k < len(steps):
            self._append(steps[k:], times[k:])
        self._firsts = np.array([b[1] for b in self._bounds], np.int64)

    def _append(self, steps: np.ndarray, times: np.ndarray) -> None:
        self._n += len(steps)
        if not self._chunks and len(steps) >= CHUNK:
            # a first update (a run's history): its own arrays, cut in views of
            # CHUNK steps, so that a step run again copies one chunk, not all
            # (the steps: consecutive ones as two numbers, the others copied,
            # so that the history's step array is freed)
            for i in range(0, len(steps), CHUNK):
                part = _compact(steps[i:i + CHUNK])
                self._chunks.append((part if isinstance(part, Consecutive) else part.copy(),
                                     times[i:i + CHUNK]))
                self._bounds.append(_bounds(self._chunks[-1]))
            return
        while len(steps):
            if self._spare is None or self._used == len(self._spare[0]):
                self._spare = (np.empty(CHUNK, np.int64), np.empty(CHUNK))
                self._used = 0
                self._chunks.append((self._spare[0][:0], self._spare[1][:0]))
                self._bounds.append((0, int(steps[0]), int(steps[0])))
            room = len(self._spare[0]) - self._used
            take = min(room, len(steps))
            u = self._used
            self._spare[0][u:u + take] = steps[:take]
            self._spare[1][u:u + take] = times[:take]
            self._used = u + take
            chunk_steps = self._spare[0][:self._used]
            if self._used == len(self._spare[0]):  # full: its steps as two numbers if it can
                chunk_steps = _compact(chunk_steps)
            self._chunks[-1] = (chunk_steps, self._spare[1][:self._used])
            self._bounds[-1] = (self._used, self._bounds[-1][1], int(steps[take - 1]))
            steps, times = steps[take:], times[take:]

    def series(self, tail_steps: np.ndarray, tail_times: np.ndarray) -> StepSeries:
        """The columns with the provisional ``tail_*`` (sorted, unique) laid over them."""
        last = self.last_step
        if not len(tail_steps) or last is None or tail_steps[0] > last:
            if not len(tail_steps):
                return StepSeries(self._chunks, self._bounds)
            tail = (tail_steps, tail_times)
            return StepSeries(self._chunks + [tail], self._bounds + [_bounds(tail)])
        k = int(np.searchsorted(tail_steps, last, side="right"))
        chunks = _overlaid(self._chunks, self._firsts, tail_steps[:k], tail_times[:k])[0]
        return StepSeries(chunks + [(tail_steps[k:], tail_times[k:])])
