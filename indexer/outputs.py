"""Write an output file (a mask, an overlay) only where nothing stands, or over what wherein wrote.

An output folder may be shared, or hold a link someone planted under a name wherein will
use (``out/1-p1_0015.red.mask.png -> LIB/d0/p1_0000.jpg``). So a file is never opened at
its final name: its bytes go to a new temporary file beside it (O_EXCL | O_NOFOLLOW), which
is then hard-linked to the name (atomic, and it fails if anything is there) or, where a file
stands, renamed over it only when that file is wherein's own: a regular file, not a link,
whose first bytes carry MARK (every mask PNG and overlay JPEG wherein writes does). A
rename replaces the name, never the content of what a link pointed at. Anything else there
is a one-line error naming it.

``inside`` compares folders by device and inode, so a bind mount, a symlink or ``..``
spelling of a folder is the folder.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from wherein.indexer.regular import read_head
from wherein.schemas.errors import WhereinError

MARK = b"written by wherein"  # in a mask PNG's tEXt chunk and an overlay JPEG's comment
_HEAD = 4096  # where the mark is: right after the PNG header, or the JPEG's first segments


class NotOurs(WhereinError):
    """A file wherein did not write stands where an output would go."""


def write_output(path: str | os.PathLike, data: bytes) -> Path:
    """Write data at path (see the module docstring); NotOurs when something else is there."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            if not is_ours(path):
                raise NotOurs(
                    f"{path}: exists and wherein did not write it; an output never replaces "
                    "it: move it or choose another output folder"
                ) from None
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def is_ours(path: Path) -> bool:
    """A regular file (not a link, not one of several hard links) that carries MARK."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not os.path.isfile(path) or os.path.islink(path) or st.st_nlink != 1:
        return False
    return MARK in read_head(path, _HEAD)


def inside(target: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether target (existing or not) is folder or below it, by device and inode."""
    try:
        kept = os.stat(folder)
    except OSError:
        return False
    key = (kept.st_dev, kept.st_ino)
    real = Path(os.path.realpath(os.path.abspath(target)))
    for p in (real, *real.parents):
        try:
            st = os.stat(p)
        except OSError:  # not there yet (or not reachable): its parents decide
            continue
        if (st.st_dev, st.st_ino) == key:
            return True
    return False


def refuse_in_index(folder: str | os.PathLike, index_folder: str | os.PathLike) -> None:
    """A one-line error when an output folder (--out) is the index folder or inside it."""
    if inside(folder, index_folder):
        raise WhereinError(
            f"{folder}: is inside the index folder {index_folder}; mask files never go "
            "there: choose another --out folder"
        )
