"""The compiled loop calls: a training loop's per-step recording with no Python frame.

``_native`` (``_native.c``, built by ``setup.py`` where a C compiler is
present) holds three types:

- ``Loop``: one process's per-step journal writes for a loop, made when an
  adapter knows each step's return is its end (PyTorch on the CPU): a step's
  start (with the load before it: one write of three slots), its end, a
  load kept for the next step. The same bytes in the same slots as
  :mod:`goodput_core.record.hot_calls`; every other case (the recorder
  closed, a clock that is not a float, a step that is not a 64-bit int, the
  ring full or its end between the slots) goes to the recorder's Python call.
- ``Steps``: the step wrapper (``integrations/base/steps.py``): with the
  active adapter's ``native_loop``, each call records through it; without,
  it calls the Python wrapper. Its ``Counter`` is read without a lookup.
  A wrapper keeps the loop it found until :func:`adapters_changed`.
- ``Loads``: the loader's iterator (``integrations/base/data.py``) likewise.

Why C: a PyTorch step on the CPU leaves the caches cold, and the Python
frames of a wrapper and its recording calls cost tens of microseconds there
(quality P15; benchmarks/README.md, "One journal write a step").

``GOODPUT_NATIVE=0`` turns it off (the Python paths, as where it was not
built); :func:`module` says which is in use.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

from goodput_core.events import Kind
from goodput_core.record.hot_calls import HOT_EMIT, spill

try:
    from goodput_core.record import _native as _built
except ImportError:  # not built here (no compiler at install): the Python paths
    _built = None

__all__ = ["NATIVE_ENV", "adapters_changed", "module", "native_loop"]

#: ``0`` turns the compiled loop calls off (read when a wrapper or an adapter's loop is made).
NATIVE_ENV = "GOODPUT_NATIVE"


def module() -> Optional[Any]:
    """The compiled module, or None: not built, or turned off by ``GOODPUT_NATIVE=0``."""
    if _built is None or os.environ.get(NATIVE_ENV, "1").strip() == "0":
        return None
    return _built


def adapters_changed() -> None:
    """An adapter turned on or off, or got its ``Loop``: the compiled wrappers
    look up their adapter's loop again (they keep the one they found until then)."""
    if _built is not None:
        _built.changed()


def native_loop(rec: Any, *, every: int, lazy: Callable[[], None],
                compile_spans: Any, start_cb: Any, record_stall: Callable[[float, float], None],
                on_error: Callable[[str, str, BaseException], None]) -> Optional[Any]:
    """A ``Loop`` writing ``rec``'s journal for an adapter's wrappers, or None
    where it does not apply (not built or off; a memory-only recorder; a
    recorder closed, or whose class overrides a call the loop stands for).

    ``every``: the step end's default period (0: never); ``lazy``: the
    adapter's late hooks, called when a module was imported since the last
    step or ``start_cb`` is no longer the last of ``compile_spans._registered_in``;
    ``record_stall(t0, t1)``: a load no step followed; ``on_error(what,
    message, exception)``: a recording that failed, to log once.
    """
    native = module()
    emit = getattr(rec, HOT_EMIT, None)
    if native is None or emit is None or rec._emit is not emit:
        return None
    ring = rec._ring
    if ring.journal is None:
        return None
    return native.Loop(
        rec=rec, emit=emit, ring=ring, mm=ring.journal.mm,
        tickets=ring.tickets, wake=ring.wake, clock=rec._clock,
        record_start=rec.record_step_start_time, record_end=rec.record_step_end_time,
        stall_then_start=rec._record_stall_then_step, record_stall=record_stall, spill=spill,
        lazy=lazy, compile_spans=compile_spans, start_cb=start_cb, modules=sys.modules,
        on_error=on_error, slots=ring.slots, half=ring.half, every=int(every or 0),
        codes=(int(Kind.STEP_START), int(Kind.STEP_END), int(Kind.INPUT_STALL_START),
               int(Kind.INPUT_STALL_END)))
