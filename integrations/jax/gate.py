"""Which process writes: decided lazily, at the first event that can know.

By default only ``jax.process_index() == 0`` writes (the reference's rule);
``per_host=True`` lets every process write and stamps the recorder with its
process index (per-host step times, straggler detection). The index is read
only once asking is safe (see :func:`_probe.current_process_index`); events
emitted before that are buffered, then replayed or dropped.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Optional

from goodput_integrations.jax import _probe

__all__ = ["ProcessGate"]

_MAX_PENDING = 10_000


class ProcessGate:
    """Runs record calls on the writing process only.

    Args:
      recorder: the recorder whose ``process_index`` is set in per-host mode.
      per_host: every process writes (True) or only process 0 (False).
      on_decided: called once (outside the lock) after the decision, with it.
      process_index: returns this process's index or None while unknown
        (injectable for tests; default: :func:`_probe.current_process_index`).
    """

    def __init__(self, recorder: Any, *, per_host: bool = False,
                 on_decided: Optional[Callable[[bool], None]] = None,
                 process_index: Optional[Callable[[], Optional[int]]] = None):
        self._recorder = recorder
        self._per_host = bool(per_host)
        self._on_decided = on_decided
        self._index_fn = process_index or _probe.current_process_index
        self._lock = threading.Lock()
        self._pending: collections.deque = collections.deque()
        self.decision: Optional[bool] = None
        self.process_index: Optional[int] = None
        self.dropped_pending = 0

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Calls ``fn(*args)`` now if this process writes, later if unknown yet.

        Raises whatever ``fn`` raises: callers (hooks) guard it.
        """
        decision = self.decision
        if decision:
            fn(*args)
        elif decision is None:
            self._submit_slow(fn, args)

    def decide(self) -> Optional[bool]:
        """Tries to decide now; returns the decision (None: still unknown)."""
        if self.decision is None:
            self._submit_slow(None, ())
        return self.decision

    def _submit_slow(self, fn, args) -> None:
        try:
            index = self._index_fn()
        except Exception:
            _probe.log_once("gate-index", "goodput: could not read the JAX process index")
            index = None
        with self._lock:
            if self.decision is None:
                if index is None:
                    if fn is not None:
                        if len(self._pending) < _MAX_PENDING:
                            self._pending.append((fn, args))
                        else:
                            self.dropped_pending += 1
                    return
                self.process_index = index
                if self._per_host:
                    try:
                        self._recorder.process_index = index
                    except Exception:
                        _probe.log_once("gate-pidx", "goodput: cannot set recorder.process_index")
                replay, self._pending = self._pending, collections.deque()
                # Replay before publishing the decision: buffered events stay
                # ahead of the ones that follow.
                if self._per_host or index == 0:
                    for pfn, pargs in replay:
                        try:
                            pfn(*pargs)
                        except Exception:
                            _probe.log_once("gate-replay", "goodput: a buffered event failed")
                self.decision = self._per_host or index == 0
            elif fn is not None and self.decision:
                fn(*args)
                return
            else:
                return
        try:
            if fn is not None and self.decision:
                fn(*args)
        finally:
            if self._on_decided is not None:
                try:
                    self._on_decided(self.decision)
                except Exception:
                    _probe.log_once("gate-cb", "goodput: a process-gate callback failed")
