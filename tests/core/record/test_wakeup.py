"""The writer's wake-up survives an exception from a signal handler landing
anywhere inside it (a Ctrl-C during a recording call must not hang the job)."""

import sys
import threading

from goodput_core.record.wakeup import Wakeup


class Interrupt(BaseException):
    """What a signal handler raises (as Ctrl-C's KeyboardInterrupt)."""


def _interrupted_at(k, call, codes):
    """Runs ``call`` with an Interrupt raised before its ``k``-th bytecode
    instruction inside ``codes`` (as a signal handler's exception is raised
    between instructions); True when the Interrupt was raised."""
    seen = [0]
    raised = [False]

    def local(frame, event, arg):
        if event == "opcode":
            seen[0] += 1
            if seen[0] == k:
                raised[0] = True
                raise Interrupt()
        return local

    def global_trace(frame, event, arg):
        if frame.f_code in codes:
            frame.f_trace_opcodes = True
            return local
        return None

    sys.settrace(global_trace)
    try:
        call()
    except Interrupt:
        pass
    finally:
        sys.settrace(None)
    return raised[0]


def _still_wakes(wake, timeout=2.0):
    """From another thread, clear() then set() return, and a wait sees it."""
    t = threading.Thread(target=lambda: (wake.clear(), wake.set()), daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():  # wedged: free the thread (an Event's leaked lock)
        wake._cond._lock.release()
        t.join(timeout)
        return False
    return wake.wait(timeout)


def _wedged_instants(make, codes, stop_at_first=False):
    wedged, k = [], 1
    while True:
        wake = make()
        if not _interrupted_at(k, wake.set, codes):
            return wedged, k  # past the last instruction
        if not _still_wakes(wake):
            wedged.append(k)
            if stop_at_first:
                return wedged, k
        k += 1


def test_an_interrupt_anywhere_in_set_never_wedges_the_wakeup():
    codes = {Wakeup.set.__code__}
    wedged, n = _wedged_instants(Wakeup, codes)
    assert n > 3 and wedged == []


def test_the_same_interrupt_wedges_threading_event():
    # why Wakeup exists: Event.set() takes its Condition's lock in Python code,
    # and an exception between the lock's acquire and its with block keeps it
    codes = {threading.Event.set.__code__, threading.Condition.__enter__.__code__,
             threading.Condition.__exit__.__code__, threading.Condition.notify_all.__code__,
             threading.Condition.notify.__code__}
    wedged, _ = _wedged_instants(threading.Event, codes, stop_at_first=True)
    assert wedged


def test_wait_clear_and_set_behave_as_an_event():
    w = Wakeup()
    assert not w.is_set() and w.wait(0) is False and w.wait(0.001) is False
    w.set()
    w.set()  # twice: still one pending wake-up, no error
    assert w.is_set() and w.wait(0) and w.wait(None)
    w.clear()
    assert not w.is_set() and w.wait(0.001) is False
    w.set()
    w.clear()  # a set then cleared wake-up does not wake a later wait
    assert w.wait(0.001) is False
