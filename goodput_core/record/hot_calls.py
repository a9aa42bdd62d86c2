"""The two calls a training loop makes every step, in one Python frame.

``record_step_start_time(k)`` and ``record_step_end_time(k)`` run on the
training thread once per step each. The generic path is three frames (the
typed method in :mod:`goodput_core.record.phases`, ``Recorder._record``'s
checks, then the ring's producer); each frame costs a tenth of a microsecond
or more in the cold caches a training step leaves behind, and the durable
record call is bounded at 1 µs median (quality P14).

:func:`bind_step_calls` gives a recorder, per process, instance attributes
that do the common call (an ``int`` step in 64 bits, no time given: the
recorder's own clock) with the generic path's effect (the same event in the
same ring slot, the same ``progress_thread``) and hand every other call to
the generic method unchanged: a time given, a step that is not a plain int,
a clock that raises, and every call once the recorder's ``_emit`` is no
longer this ring's producer (the recorder closed).
"""

from __future__ import annotations

import types
from threading import get_ident
from typing import Any, Callable

from goodput_core.events import Kind
from goodput_core.record import journal as jr
from goodput_core.record.phases import PhaseMixin

__all__ = ["bind_step_calls"]

_HAS_STEP = 256  # the slot's code: the kind, and the flag that a step follows


def _hot(rec: Any, emit: Callable[..., None], kind: Kind,
         generic: Callable[..., None]) -> Callable[..., None]:
    """The one-frame call for ``kind`` (its time parameter is named ``when``
    here; :func:`_named` gives it the public name)."""
    clock, ring, code = rec._clock, rec._ring, int(kind)
    if ring.journal is None:  # memory only: the producer's append is the whole cost
        def call(step, when=None):
            if type(step) is int and when is None and rec._emit is emit \
                    and -0x8000000000000000 <= step <= 0x7FFFFFFFFFFFFFFF:
                try:
                    t = clock()
                except Exception:  # the generic path counts and says it
                    return generic(rec, step)
                rec.progress_thread = get_ident()
                emit(code, t, step, None, t)
                return None
            return generic(rec, step, when)
        return call

    # The journal's slot written here as the ring's producer (Ring.emitter)
    # writes a plain event with a step: that closure's frame saved too.
    mm, slots, half, wake, tickets = ring.journal.mm, ring.slots, ring.half, ring.wake, ring.tickets
    pack, slot_code = jr.PLAIN.pack_into, code | _HAS_STEP

    def call(step, when=None):
        if type(step) is int and when is None and rec._emit is emit \
                and -0x8000000000000000 <= step <= 0x7FFFFFFFFFFFFFFF:
            try:
                t = clock()
            except Exception:  # the generic path counts and says it
                return generic(rec, step)
            rec.progress_thread = get_ident()
            n = next(tickets)
            try:
                room = n - ring.freed
                if room <= slots:
                    pack(mm, (n % slots) << 7, n, slot_code, t, step, t, rec.process_index, n)
                    if room >= half:
                        wake()
                else:  # the ring is full: the producer's overflow path
                    ring._slow(n, code, t, step, None, t, rec.process_index)
            except BaseException:  # an async exception (Ctrl-C) between ticket and slot
                ring._abandon(n)
                raise
            return None
        return generic(rec, step, when)
    return call


def _named(call: Callable[..., None], generic: Callable[..., None],
           time_parameter: str) -> Callable[..., None]:
    """``call`` with its second parameter renamed ``time_parameter`` (users pass
    ``start_time=`` or ``end_time=`` by name), under ``generic``'s name and
    docstring: the same code object, so no wrapper frame."""
    code = call.__code__
    names = (code.co_varnames[0], time_parameter) + code.co_varnames[2:]
    named = types.FunctionType(code.replace(co_varnames=names), call.__globals__,
                               generic.__name__, call.__defaults__, call.__closure__)
    named.__qualname__, named.__doc__ = generic.__qualname__, generic.__doc__
    return named


def bind_step_calls(rec: Any, emit: Callable[..., None]) -> None:
    """Installs the one-frame step calls on ``rec`` for the producer ``emit``,
    unless its class defines its own (a subclass's override keeps its say)."""
    cls = type(rec)
    for name, kind, parameter in (("record_step_start_time", Kind.STEP_START, "start_time"),
                                  ("record_step_end_time", Kind.STEP_END, "end_time")):
        generic = getattr(cls, name)
        if generic is getattr(PhaseMixin, name):
            setattr(rec, name, _named(_hot(rec, emit, kind, generic), generic, parameter))
