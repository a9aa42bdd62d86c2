"""Checkpoints: ``torch.distributed.checkpoint`` saves and loads, ``torch.save``/``load``.

DCP logs every ``save``, ``async_save`` and ``load`` call to its own logger
(``torch.distributed.checkpoint.logger._dcp_logger``, torch 2.13): a record
whose message is a dict with ``func_name``, ``event`` (``start``, ``end``,
``exception``) and a ``uuid`` per call, emitted synchronously on the calling
thread at the call's start and end. The logger is set to DEBUG, does not
propagate and carries a ``NullHandler``, so an extra handler on it sees every
call however the user imported the functions, at the cost of one dict
lookup per record. This module adds such a handler:

* ``save`` on the training thread: a ``checkpoint_save`` span, the loop was
  blocked for all of it;
* ``async_save``: the call itself is the blocking part (staging the state
  into host memory and planning) and becomes the ``checkpoint_save`` span;
  the writes that follow run on DCP's background thread (whose own ``save``
  record is on another thread and ignored) or process. Waiting on the
  returned future is the user's code: wrap it in ``rec.checkpoint_save()``
  if the loop waits for the previous save before the next one;
* ``load``: a ``checkpoint_restore`` span.

The handler is attached once the program imported DCP (at ``instrument()``,
else at the next tracked step or load: a membership test of ``sys.modules``
each time until then); this module never imports it.

Calls on other threads than the training thread do not block the loop and
are not recorded (``any_thread=True`` records them too). A call that raised
records nothing. The step is the last step the adapter started.

``save``/``load`` of this module wrap ``torch.save``/``torch.load`` the same way
for checkpoints written with them.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Dict, Optional

from goodput_integrations.base.spans import record_restore, record_save
from goodput_integrations.torch import _probe
from goodput_integrations.torch._active import ACTIVE

__all__ = ["DcpListener", "save", "load"]

_SAVES = frozenset(("save", "async_save"))
_LOADS = frozenset(("load",))


#: the module of DCP's logger: in ``sys.modules`` once the program imported DCP
DCP_LOGGER_MODULE = "torch.distributed.checkpoint.logger"


def _dcp_logger() -> Optional[logging.Logger]:
    """DCP's logger, only once the program imported DCP (importing it costs
    a fraction of a second we would add to the job)."""
    module = sys.modules.get(DCP_LOGGER_MODULE)
    found = getattr(module, "_dcp_logger", None)
    return found if isinstance(found, logging.Logger) else None


class DcpListener(logging.Handler):
    """A handler on DCP's logger that turns its call records into spans.

    Args:
      adapter: has ``active``, ``now()``, ``emit``, ``recorder``,
        ``train_thread`` and ``last_step``.
      any_thread: record calls on every thread, not only the training thread.
    """

    def __init__(self, adapter: Any, *, any_thread: bool = False):
        super().__init__(level=logging.DEBUG)
        self._adapter = adapter
        self._any_thread = any_thread
        self._open: Dict[str, float] = {}
        self._logger: Optional[logging.Logger] = None
        self._wanted = False
        #: wanted and not attached yet (DCP not imported so far)
        self.pending = False
        self.saves = 0
        self.loads = 0

    def install(self) -> None:
        """Attaches to DCP's logger now if DCP is imported, else at the next
        :meth:`ensure` that finds it imported (idempotent)."""
        self._wanted = True
        self.ensure()

    def ensure(self) -> None:
        """Attaches to DCP's logger if wanted, not attached yet and DCP is imported."""
        if self._logger is not None or not self._wanted:
            return
        found = _dcp_logger()
        if found is not None:
            found.addHandler(self)
            self._logger = found
        self.pending = found is None

    def uninstall(self) -> None:
        """Detaches from DCP's logger (idempotent)."""
        self._wanted = self.pending = False
        found, self._logger = self._logger, None
        if found is not None:
            found.removeHandler(self)
        self._open.clear()

    # logging calls handle() for every record; skip the handler lock and
    # formatting: this runs inside the user's checkpoint call.
    def handle(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
        try:
            self._on_record(record.msg)
        except Exception:
            _probe.log_once("dcp-record", "goodput: recording a DCP call failed")
        return True

    def emit(self, record: logging.LogRecord) -> None:  # not reached: handle() is overridden
        pass

    def _on_record(self, msg: Any) -> None:
        if not isinstance(msg, dict):
            return
        func = msg.get("func_name")
        if func not in _SAVES and func not in _LOADS:
            return
        adapter = self._adapter
        if not adapter.active:
            return
        if not self._any_thread and threading.get_ident() != adapter.train_thread:
            return
        key = str(msg.get("uuid"))
        event = msg.get("event")
        if event == "start":
            t0 = adapter.now()
            if t0 is not None:
                self._open[key] = t0
            return
        t0 = self._open.pop(key, None)
        if event != "end" or t0 is None:
            return  # an exception: nothing was saved or loaded
        t1 = adapter.now()
        if t1 is None:
            return
        step = adapter.last_step
        if func in _SAVES:
            self.saves += 1
            adapter.emit(record_save, adapter.recorder, step, t0, t1)
        else:
            self.loads += 1
            adapter.emit(record_restore, adapter.recorder, step, t0, t1)


def _timed(kind: str, fn: Any, step: Optional[int], args: Any, kwargs: Any) -> Any:
    adapter = ACTIVE.get()
    if adapter is None:
        return fn(*args, **kwargs)
    t0 = adapter.now()
    result = fn(*args, **kwargs)  # a raising call records nothing
    try:
        t1 = adapter.now()
        if t0 is not None and t1 is not None:
            record = record_save if kind == "save" else record_restore
            adapter.emit(record, adapter.recorder,
                         adapter.last_step if step is None else step, t0, t1)
    except Exception:
        _probe.log_once(f"torch-{kind}", "goodput: recording a torch.%s failed", kind)
    return result


def save(obj: Any, f: Any, *args: Any, step: Optional[int] = None, **kwargs: Any) -> None:
    """``torch.save(obj, f, ...)``, recorded as a checkpoint save while instrumented.

    Args:
      obj, f, *args, **kwargs: as for ``torch.save``.
      step: the step the checkpoint holds (default: the last step started).
    """
    import torch

    return _timed("save", torch.save, step, (obj, f, *args), kwargs)


def load(f: Any, *args: Any, step: Optional[int] = None, **kwargs: Any) -> Any:
    """``torch.load(f, ...)``, recorded as a checkpoint restore while instrumented.

    Returns:
      What ``torch.load`` returns.
    """
    import torch

    return _timed("load", torch.load, step, (f, *args), kwargs)
