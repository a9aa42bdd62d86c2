"""The hang watchdog's stack summary: how it is written and read back.

Written at detection (:func:`stack_summary`, on the watchdog's thread), one
thread per paragraph, innermost frame first::

    thread MainThread (recorded the last step):
      train.py:41 stuck_in_training_step
      train.py:60 main
    thread loader-1:
      queue.py:171 get
    goodput's own threads (stacks left out): goodput-hang-watchdog, goodput-writer-run

The thread that recorded the last step start or end (``Recorder.progress_thread``;
the main thread when none is known) comes first, then the other threads;
goodput's own threads (the writer, the watchdog, the monitor, exporters) are
only named: their waits are never the hang. :func:`ordered_threads` reads a
summary back in that order, also one written by an earlier version (every
thread's stack in any order), so reports of old runs name the training
thread too.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import traceback
from typing import List, Optional, Tuple

__all__ = ["PROGRESS_MARK", "OWN_THREADS", "stack_summary", "ordered_threads", "hung_thread"]

#: How a stack summary marks the thread that recorded the last step.
PROGRESS_MARK = " (recorded the last step)"
#: The line that names goodput's own threads.
OWN_THREADS = "goodput's own threads (stacks left out): "
MAX_STACK_CHARS = 4000
_HUNG_FRAMES, _OTHER_FRAMES = 8, 4
_THREADING = os.path.abspath(threading.__file__)


def _own_dirs() -> Tuple[str, ...]:
    """The folders of goodput's packages (goodput_core, goodput_integrations)."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    try:
        spec = importlib.util.find_spec("goodput_integrations")
    except (ImportError, ValueError):  # not installed: only the engine's own
        spec = None
    if spec is not None and spec.submodule_search_locations:
        dirs.extend(os.path.abspath(d) for d in spec.submodule_search_locations)
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


def _is_own(name: str, frames: traceback.StackSummary, own_dirs: Tuple[str, ...]) -> bool:
    """One of goodput's threads: named ``goodput-...``, or running a function
    of goodput's packages (the first frame after threading's own)."""
    if name.startswith("goodput"):
        return True
    for f in frames:  # outermost first
        path = os.path.abspath(f.filename)
        if path != _THREADING:
            return path.startswith(own_dirs)
    return False


def stack_summary(limit: int = MAX_STACK_CHARS, progress_thread: Optional[int] = None) -> str:
    """Every other thread's innermost frames, in the module docstring's order
    and format (the calling thread, the watchdog's, is left out).

    Args:
      limit: at most this many characters (the first thread is never cut
        short by the others: it comes first).
      progress_thread: the ident of the thread that recorded the last step
        (None: the main thread).
    """
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    first = progress_thread if progress_thread is not None else threading.main_thread().ident
    own_dirs = _own_dirs()
    lead: List[str] = []
    others: List[str] = []
    own: List[str] = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        name = str(names.get(ident, ident))
        frames = traceback.extract_stack(frame)
        if ident != first and _is_own(name, frames, own_dirs):
            own.append(name)
            continue
        keep = _HUNG_FRAMES if ident == first else _OTHER_FRAMES
        lines = [f"  {os.path.basename(f.filename)}:{f.lineno} {f.name}"
                 for f in reversed(frames[-keep:])]
        head = f"thread {name}{PROGRESS_MARK if ident == first else ''}:"
        (lead if ident == first else others).append("\n".join([head] + lines))
    parts = lead + others
    if own:
        parts.append(OWN_THREADS + ", ".join(sorted(own)))
    return "\n".join(parts)[:limit]


def ordered_threads(stack: str) -> List[Tuple[str, List[str]]]:
    """``[(thread name, [frame, ...]), ...]`` of a summary, the thread that
    recorded the last step first, then other threads, goodput's own last
    (in a summary of an earlier version they were listed with stacks)."""
    threads: List[Tuple[str, List[str]]] = []
    for line in (stack or "").splitlines():
        if line.startswith("thread ") and line.rstrip().endswith(":"):
            threads.append((line[len("thread "):].rstrip()[:-1], []))
        elif line.startswith(" ") and line.strip() and threads:
            threads[-1][1].append(line.strip())

    def rank(item: Tuple[str, List[str]]) -> int:
        name = item[0]
        if name.endswith(PROGRESS_MARK):
            return 0
        return 2 if name.startswith("goodput") else 1

    ordered = sorted(threads, key=rank)  # (stable: the recorded order within a rank)
    return [(name[:-len(PROGRESS_MARK)] if name.endswith(PROGRESS_MARK) else name, frames)
            for name, frames in ordered]


def hung_thread(stack: str) -> Tuple[Optional[str], List[str]]:
    """``(name, frames)`` of the thread a summary lists first (the one that
    recorded the last step), or ``(None, [])`` when it lists none."""
    threads = ordered_threads(stack)
    return threads[0] if threads else (None, [])
