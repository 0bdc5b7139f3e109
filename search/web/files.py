"""Read an indexed image by catalog id, and only if it is still the content that was indexed.

The web app never takes a path from a request: images are addressed by catalog
id, and the bytes served come from the catalog row's path after these checks,
all on one open file descriptor (no window between check and read):

- the path opens without blocking (O_NONBLOCK: a FIFO put in its place cannot hang a worker)
  and is a regular file (not a device, FIFO or folder);
- its size and mtime are the catalog's;
- the SHA-256 of the bytes read is the catalog's.

So a file replaced since indexing (by other content, or by a symlink to
/etc/passwd) is refused, while an image that was indexed through a symlink
still serves, because it is still that content.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass

from wherein.schemas.errors import WhereinError

_HEX = re.compile(r"^[0-9a-f]{64}$")


class NotFound(WhereinError):
    """No such image in the index, or its file is gone (HTTP 404)."""


class FileChanged(WhereinError):
    """The file at the indexed path is no longer the indexed content (HTTP 409)."""


@dataclass(frozen=True)
class IndexedFile:
    id: int
    path: str
    size: int
    mtime_ns: int
    sha256: str
    width: int | None
    height: int | None
    format: str | None
    indexed_at: str | None

    @property
    def key(self) -> str:
        """'<id>-<sha256[:16]>': names cache entries so a re-indexed, changed file gets new ones."""
        return f"{self.id}-{self.sha256[:16]}"

    @classmethod
    def from_row(cls, row: dict) -> IndexedFile:
        sha = str(row["sha256"] or "")
        if not _HEX.match(sha):  # cache file names are built from it: only ever hex
            raise FileChanged(
                f"image {row['id']}: the catalog has no valid SHA-256 for it; re-run wherein index"
            )
        return cls(
            id=int(row["id"]),
            path=str(row["path"]),
            size=int(row["size"]),
            mtime_ns=int(row["mtime_ns"]),
            sha256=sha,
            width=row.get("width"),
            height=row.get("height"),
            format=row.get("format"),
            indexed_at=row.get("indexed_at"),
        )


def read_verified(f: IndexedFile) -> bytes:
    """The file's bytes when they are still the indexed content; NotFound / FileChanged otherwise."""
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise NotFound(f"image {f.id}: its file is gone since it was indexed") from None
    except OSError as exc:
        raise NotFound(f"image {f.id}: cannot open its file ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileChanged(
                f"image {f.id}: the indexed path is no longer a regular file; refused"
            )
        if st.st_size != f.size or st.st_mtime_ns != f.mtime_ns:
            raise FileChanged(
                f"image {f.id}: the file changed since it was indexed (size or time differ); "
                "re-run wherein index to pick up the change"
            )
        chunks = []
        remaining = f.size
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
        # Size and mtime as indexed, other bytes: a rewrite that kept both. `wherein index`
        # reads it again by its ctime and inode; --verify re-reads every file regardless.
        raise FileChanged(
            f"image {f.id}: the file's content differs from what was indexed (same size and "
            "time); re-run wherein index on its folder to pick up the change "
            "(with --verify if it still is not)"
        )
    return data
