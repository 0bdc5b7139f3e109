"""The bytes of a catalog path, whether it is a file or a member of a tar shard.

A member is read from its archive as a file is (indexer/regular.py): the archive is opened
only when it is a regular file, and no more than the member holds is read. Finding a member
reads the archive's headers once (a shard of 10,000 photos: 10,000 headers of 512 bytes);
the table of its members is kept for a few archives, keyed by the archive's identity, so a
page of hits from one shard reads them once.
"""

from __future__ import annotations

import errno
import os
import tarfile
import threading
from collections import OrderedDict

from wherein.indexer.regular import (
    MAX_PHOTO_BYTES,
    open_regular,
    read_fd,
    read_regular,
    too_large,
)
from wherein.schemas.locations import tar_member

KEPT_ARCHIVES = 16
# (archive, dev, ino, size, mtime_ns) -> {member name: (data offset, size)}
_tables: OrderedDict[tuple, dict[str, tuple[int, int]]] = OrderedDict()
_tables_lock = threading.Lock()


def read_located(path: str, limit: int = MAX_PHOTO_BYTES) -> bytes:
    """The bytes a catalog path names (its file's, or its tar member's), at most `limit`; an
    OSError says why not (NotRegular, TooLarge, a member not in its archive)."""
    if tar_member(path) is None:
        return read_regular(path, limit)
    return read_member(path, limit)[0]


def stat_located(path: str) -> os.stat_result:
    """os.stat of the file a catalog path names, or of the tar archive of its member (which
    changes whenever a member does); OSError as os.stat."""
    member = tar_member(path)
    return os.stat(member[0] if member else path)


def read_member(path: str, limit: int = MAX_PHOTO_BYTES) -> tuple[bytes, os.stat_result]:
    """(bytes of the tar member path names, fstat of its archive); OSError otherwise."""
    found = tar_member(path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "not a member of a tar shard", path)
    archive, name = found
    with open_regular(archive) as (fd, st):
        entry = _table(archive, fd, st).get(name)
        if entry is None:
            raise FileNotFoundError(errno.ENOENT, "no such member in its tar archive", path)
        offset, size = entry
        if size > limit:
            raise too_large(path, size, limit)
        os.lseek(fd, offset, os.SEEK_SET)
        # A member cut short since the headers were read gives fewer bytes (a hash mismatch).
        return read_fd(fd, size)[:size], st


def _table(archive: str, fd: int, st: os.stat_result) -> dict[str, tuple[int, int]]:
    key = (os.path.realpath(archive), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _tables_lock:
        table = _tables.get(key)
        if table is not None:
            _tables.move_to_end(key)
            return table
    try:
        with os.fdopen(os.dup(fd), "rb") as f, tarfile.open(fileobj=f, mode="r:") as tf:
            table = {m.name: (m.offset_data, m.size) for m in tf if m.isfile()}
    except tarfile.TarError as exc:
        raise OSError(errno.EINVAL, f"not a readable tar archive ({exc})", archive) from None
    with _tables_lock:
        _tables[key] = table
        while len(_tables) > KEPT_ARCHIVES:
            _tables.popitem(last=False)
    return table
