"""Files the tool writes: private (0600) and replaced atomically.

Every output (an exported run, a timeline page or picture, a store backup)
is written to a fresh temporary file in the target's own directory, created
with ``O_EXCL`` under a random name (:func:`tempfile.mkstemp`: ``0600``, no
symlink followed), then renamed over the target. So an interrupted write
never leaves half a file under the requested name, a reader never sees one,
and a symlink planted at the output path is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Iterator

__all__ = ["PRIVATE_MODE", "replaced_atomically", "temporary_beside", "private_file"]

#: The mode of every file the tool creates unless asked otherwise.
PRIVATE_MODE = 0o600


@contextlib.contextmanager
def temporary_beside(path: str) -> Iterator[str]:
    """A fresh private temporary path in ``path``'s directory, renamed over
    ``path`` when the block ends without an exception (deleted otherwise).

    For writers that need a file name (SQLite's backup): the file exists,
    empty, when the block starts.
    """
    target = os.path.abspath(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                               dir=os.path.dirname(target))
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, target)
        tmp = None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@contextlib.contextmanager
def replaced_atomically(path: str, binary: bool = False) -> Iterator[IO]:
    """An open file whose content replaces ``path`` when the block ends.

    Args:
      path: the output path (a symlink there is replaced, not followed).
      binary: a binary file object instead of UTF-8 text.
    """
    with temporary_beside(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW)
        mode = "wb" if binary else "w"
        kwargs = {} if binary else {"encoding": "utf-8", "newline": "\n"}
        with open(fd, mode, **kwargs) as out:
            yield out


def private_file(path: str) -> None:
    """Makes a file the tool just created (by a library that used the umask) 0600."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # gone, or a symlink: not ours to change
        return
    try:
        os.fchmod(fd, PRIVATE_MODE)
    finally:
        os.close(fd)
