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

A PyTorch loop on the CPU also records each load as an input stall: with
the next step's start (``Recorder._record_stall_then_step``), or alone
(``Recorder._record_since``: a start given, an end now). With a journal,
:func:`bind_hot_calls` binds those too: the events in the journal's
consecutive slots by one ``pack_into`` (in a loop's cold caches one such
call costs a few microseconds, about as much as all of the events' other work).
"""

from __future__ import annotations

import types
from threading import get_ident
from typing import Any, Callable

from goodput_core.events import Kind
from goodput_core.record import journal as jr
from goodput_core.record.phases import PhaseMixin

__all__ = ["HOT_EMIT", "bind_hot_calls", "spill"]

_HAS_STEP = 256  # the slot's code: the kind, and the flag that a step follows
#: The recorder's attribute naming the producer its journal calls were bound
#: for, set once all of them are (record/native.py checks it is still ``_emit``).
HOT_EMIT = "_hot_emit"


def spill(ring: Any, emit: Callable[..., None], tickets: Any, events: Any) -> None:
    """Events whose slots could not be written where their tickets point (the
    ring's end between them, or past its room): the tickets passed over as
    the producer does on an error, each event ``(code, time, step, extra,
    write time)`` written by the producer under a new one."""
    for n in tickets:
        ring._abandon(n)
    for event in events:
        emit(*event)


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


def _hot_since(rec: Any, emit: Callable[..., None],
               generic: Callable[..., None]) -> Callable[..., None]:
    """The one-frame ``_record_since(first, second, start)`` for a journal: both
    events in consecutive slots by one pack; any other case (a start that is
    not a finite float, a raising clock, the recorder closed, the two tickets
    not consecutive (another thread took one between) or the pair across the
    ring's end or past its room) goes the generic way (the last three
    through the producer at this clock read, the tickets taken here passed
    over as the producer does on an error)."""
    clock, ring = rec._clock, rec._ring
    mm, slots, half, wake, tickets = ring.journal.mm, ring.slots, ring.half, ring.wake, ring.tickets
    pack = jr.PLAIN_PAIR.pack_into

    def since(first, second, start):
        if type(start) is float and start - start == 0.0 and rec._emit is emit:
            try:
                t = clock()
            except Exception:  # the generic path counts and says it
                return generic(rec, first, second, start)
            n = next(tickets)
            m = next(tickets)
            try:
                room = m - ring.freed
                if m == n + 1 and m % slots and room <= slots:  # m % slots: not across the end
                    pidx = rec.process_index
                    pack(mm, (n % slots) << 7, n, first, start, 0, t, pidx, n,
                         m, second, t, 0, t, pidx, m)
                    if room >= half:
                        wake()
                    return None
            except BaseException:  # an async exception (Ctrl-C) between ticket and slot
                ring._abandon(n)
                ring._abandon(m)
                raise
            # the producer writes them under new tickets, at this clock read
            spill(ring, emit, (n, m), ((int(first), start, None, None, t),
                                       (int(second), t, None, None, t)))
            return None
        return generic(rec, first, second, start)
    return since


def _hot_stall_then_start(rec: Any, emit: Callable[..., None],
                          generic: Callable[..., None]) -> Callable[..., None]:
    """The one-frame ``_record_stall_then_step(start, end, step)`` for a journal:
    the stall's two events and the step start (now) in three consecutive
    slots by one pack; the cases :func:`_hot_since` hands on go the generic
    way likewise (a step that is not a plain 64-bit int too)."""
    clock, ring = rec._clock, rec._ring
    mm, slots, half, wake, tickets = ring.journal.mm, ring.slots, ring.half, ring.wake, ring.tickets
    pack = jr.PLAIN_TRIPLE.pack_into
    stall_start, stall_end = int(Kind.INPUT_STALL_START), int(Kind.INPUT_STALL_END)
    step_start, slot_start = int(Kind.STEP_START), int(Kind.STEP_START) | _HAS_STEP

    def stall_then_start(start, end, step):
        if type(start) is float and type(end) is float and start - start == 0.0 \
                and end - end == 0.0 and type(step) is int and rec._emit is emit \
                and -0x8000000000000000 <= step <= 0x7FFFFFFFFFFFFFFF:
            try:
                t = clock()
            except Exception:  # the generic path counts and says it
                return generic(rec, start, end, step)
            rec.progress_thread = get_ident()
            n = next(tickets)
            m = next(tickets)
            o = next(tickets)
            try:
                room = o - ring.freed
                if o == n + 2 and (n % slots) + 2 < slots and room <= slots:
                    pidx = rec.process_index
                    pack(mm, (n % slots) << 7, n, stall_start, start, 0, t, pidx, n,
                         m, stall_end, end, 0, t, pidx, m, o, slot_start, t, step, t, pidx, o)
                    if room >= half:
                        wake()
                    return None
            except BaseException:  # an async exception (Ctrl-C) between ticket and slot
                for k in (n, m, o):
                    ring._abandon(k)
                raise
            # the producer writes them under new tickets, at this clock read
            spill(ring, emit, (n, m, o), ((stall_start, start, None, None, t),
                                          (stall_end, end, None, None, t),
                                          (step_start, t, step, None, t)))
            return None
        return generic(rec, start, end, step)
    return stall_then_start


def bind_hot_calls(rec: Any, emit: Callable[..., None], recorder_cls: Any) -> None:
    """Installs the one-frame calls on ``rec`` for the producer ``emit``, each
    unless its class overrides the generic method (of ``PhaseMixin``, or of
    ``recorder_cls``, the class that defines the private ones): a subclass's
    override keeps its say."""
    cls = type(rec)
    bound = 0
    if rec._ring.journal is not None:
        for name, hot in (("_record_since", _hot_since),
                          ("_record_stall_then_step", _hot_stall_then_start)):
            generic = getattr(cls, name)
            if generic is getattr(recorder_cls, name):
                setattr(rec, name, hot(rec, emit, generic))
                bound += 1
    for name, kind, parameter in (("record_step_start_time", Kind.STEP_START, "start_time"),
                                  ("record_step_end_time", Kind.STEP_END, "end_time")):
        generic = getattr(cls, name)
        if generic is getattr(PhaseMixin, name):
            setattr(rec, name, _named(_hot(rec, emit, kind, generic), generic, parameter))
            bound += 1
    if bound == 4:  # a journal, no override: the compiled loop calls may stand for them
        setattr(rec, HOT_EMIT, emit)

