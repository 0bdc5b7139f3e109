"""Where the bytes of a catalog path are: a file of its own, or a member of a tar shard.

`wherein embed` reads uncompressed (webdataset-style) tar shards member by member and
records each photo as ``ARCHIVE.tar#member`` (TAR_SEP): the catalog's path for bytes that
have no file of their own. A path that names an existing file is that file, even when its
name holds ``.tar#``.
"""

from __future__ import annotations

import os

TAR_SEP = "#"  # "/data/shard-0001.tar#000123.jpg"
_ARCHIVE_END = ".tar" + TAR_SEP


def tar_member(path: str) -> tuple[str, str] | None:
    """(archive, member name) when path names a member of a tar shard, else None.

    The archive is the first prefix ending in ``.tar`` that is a file (a member's name may
    hold ``.tar#`` too); where none is, the last such prefix (a member whose archive is gone).
    """
    if _ARCHIVE_END not in path or os.path.lexists(path):
        return None
    found: tuple[str, str] | None = None
    at = path.find(_ARCHIVE_END)
    while at >= 0:
        archive, name = path[: at + 4], path[at + len(_ARCHIVE_END) :]
        if name:
            found = (archive, name)
            if os.path.isfile(archive):
                return found
        at = path.find(_ARCHIVE_END, at + 1)
    return found


def exists(path: str) -> bool:
    """Whether what a catalog path names is there: its file, or the archive of its member
    (the member itself is looked up when it is read)."""
    member = tar_member(path)
    return os.path.isfile(member[0]) if member else os.path.exists(path)
