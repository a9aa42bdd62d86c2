"""Freed large arrays go back to the operating system (glibc).

glibc serves an allocation from ``mmap`` (returned to the system when freed)
only above a threshold that starts at 128 KiB and, by default, rises to the
size of the largest block freed so far, up to 32 MiB. After the first large
numpy temporary is freed, arrays of a few MiB to 32 MiB come from the heap,
and the space they leave when freed stays in the process's resident memory
unless later allocations happen to fit in it. A command that computes over
a long run (millions of events: temporaries of tens of MiB, freed in turn)
then peaks well above what it ever holds at once: ``goodput report`` over
10 M events, about 50 MiB.

:func:`release_large_frees` fixes the threshold (which also turns the rising
off): blocks from 4 MiB up are mapped, and unmapped when freed. Below it
(SQLite pages, decoded chunks, small arrays) the heap serves as before, so
the many small allocations cost no system calls. Elsewhere than glibc (macOS,
musl) it does nothing. `goodput report` calls it first; the library never does (a
training process keeps its allocator as it is).
"""

from __future__ import annotations

import os

__all__ = ["release_large_frees", "THRESHOLD"]

THRESHOLD = 4 << 20  # bytes: a page-sized read or a small array stays on the heap
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)


def release_large_frees() -> bool:
    """Sets glibc's mmap threshold to :data:`THRESHOLD`; True when it did."""
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return False
    except (ValueError, OSError, AttributeError):  # not glibc (or no confstr)
        return False
    import ctypes  # (only here: a few ms the other commands do not pay)

    try:
        # the process's own symbols: the C library it runs on (no library search)
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, THRESHOLD))
    except (OSError, AttributeError):
        return False
