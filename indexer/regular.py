"""Open a user's file only when it is a regular file, and read no more than it holds.

A path that names a FIFO, a device or a socket (``ln -s /dev/zero z.jpg``, ``mkfifo f.jpg``,
or a photo swapped for such a link mid-run) must never be read: a FIFO's open or read
blocks forever, /dev/zero and /dev/urandom never end. So every reader of a user's file
opens it with O_NONBLOCK (a FIFO's open returns at once), checks ``fstat`` on that very
descriptor (no window between check and read), and reads at most the size fstat gave
plus one byte (a file that grew meanwhile is seen to have changed, not read on and on).

``NotRegular`` and ``TooLarge`` are OSErrors with a ``strerror``: every ``except OSError``
that turns a failed read into a recorded skip or a one-line error names the reason.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BLOCK = 1 << 20
# The most bytes read whole as a photo: far above any photo wherein decodes (179 MP as
# 16-bit RGB TIFF is about 1 GiB), far below what would exhaust a machine's memory.
MAX_PHOTO_BYTES = 2 << 30


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a folder: never read."""


class TooLarge(OSError):
    """A regular file too large to be read whole."""


def special_kind(mode: int) -> str:
    """What a non-regular file is, in words (for skip reasons and errors)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def not_regular(path: str | os.PathLike, mode: int) -> NotRegular:
    return NotRegular(
        errno.EINVAL, f"not a regular file ({special_kind(mode)}); never read", os.fspath(path)
    )


def open_regular_file(path: str | os.PathLike) -> io.FileIO:
    """path opened for reading as an unbuffered file object when it is a regular file (the
    descriptor fstat checked is the one read: no window to swap the file), NotRegular
    otherwise; for a library that reads through a file object (PyAV, Pillow). The caller
    closes it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        return io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def open_regular(path: str | os.PathLike) -> Iterator[tuple[int, os.stat_result]]:
    """(descriptor, fstat) of path, opened for reading only when it is a regular file; an
    OSError (NotRegular for a special file) otherwise. Never blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        yield fd, st
    finally:
        os.close(fd)


def read_fd(fd: int, size: int) -> bytes:
    """Up to size + 1 bytes from fd: one byte more than the file held when it was stat'ed
    tells that it grew, and nothing more is ever read."""
    chunks = []
    left = size + 1
    while left > 0:
        chunk = os.read(fd, min(left, BLOCK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def too_large(path: str | os.PathLike, size: int, limit: int) -> TooLarge:
    return TooLarge(
        errno.EFBIG,
        f"too large to read whole ({size:,} bytes; at most {limit:,})",
        os.fspath(path),
    )


def read_regular(path: str | os.PathLike, limit: int = MAX_PHOTO_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (an OSError otherwise: NotRegular,
    TooLarge, or why it cannot be opened); what it held when opened, never more."""
    with open_regular(path) as (fd, st):
        if st.st_size > limit:
            raise too_large(path, st.st_size, limit)
        return read_fd(fd, st.st_size)[: st.st_size]


def read_head(path: str | os.PathLike | Path, n: int) -> bytes:
    """The first n bytes of a regular file; b"" for anything else or an unreadable one."""
    try:
        with open_regular(path) as (fd, _):
            return os.read(fd, n)
    except OSError:
        return b""
