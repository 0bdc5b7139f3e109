"""Read one local file so that its bytes, size, mtime and hash belong together.

The walk's stat is only a hint: a file can grow, shrink, be replaced or vanish
between the walk and the read, or while it is read. Size and mtime come from
fstat on the very descriptor the bytes are read from, before and after the
read. When the two disagree, the byte count is not the size, or the file lost
its last name meanwhile, it changed while being read: the result is Unsettled,
nothing about the file is recorded this run, and the next run (seeing a new
stat, or no file) deals with it. So a stored row never pairs one version's stat
with another version's hash.

Only a regular file is read, and no further than fstat's size and one byte
(indexer/regular.py): a FIFO, a device or a socket under a media name, or swapped
in mid-run, is a recorded skip with its reason, never a hang or unbounded memory.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from wherein.indexer.imaging import JPEG_DRAFT, Prepared, read_error
from wherein.indexer.ingest.walk import FoundFile
from wherein.indexer.kinds.base import HEAD_BYTES, MediaKind, Source
from wherein.indexer.kinds.registry import kind_by_name, kind_of
from wherein.indexer.photometa import PhotoMeta
from wherein.indexer.regions import Tiling
from wherein.indexer.regular import MAX_PHOTO_BYTES, open_regular, read_fd, too_large
from wherein.indexer.video.frames import VideoError
from wherein.schemas.models import ImageInput

_BLOCK = 1 << 20  # a video is hashed in blocks: never whole in memory


@dataclass(frozen=True)
class Unsettled:
    """The file vanished or changed while being read: no verdict on it this run."""

    reason: str


class _Changed(Exception):
    pass


def _read_all(path: str, fd: int, size: int) -> bytes:
    """The file's bytes, one more than `size` at most (a seam: tests change the file here)."""
    return read_fd(fd, size)


def read_whole(path: str) -> tuple[bytes, int, tuple[int, int]]:
    """(bytes, mtime_ns, (ctime_ns, inode)) of one consistent version of the file; size is
    len(bytes).

    Raises OSError when it cannot be read (NotRegular: a FIFO, a device; TooLarge), _Changed
    when it changed during the read.
    """
    with open_regular(path) as (fd, before):
        if before.st_size > MAX_PHOTO_BYTES:
            raise too_large(path, before.st_size, MAX_PHOTO_BYTES)
        data = _read_all(path, fd, before.st_size)
        after = os.fstat(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        raise _Changed("changed while being read")
    if len(data) != after.st_size:
        raise _Changed("size changed while being read")
    if after.st_nlink == 0:
        raise _Changed("deleted while being read")
    return data, after.st_mtime_ns, (after.st_ctime_ns, after.st_ino)


def hash_whole(path: str) -> tuple[str, int, int, tuple[int, int]]:
    """(sha256, size, mtime_ns, (ctime_ns, inode)) of one consistent version of a file too big
    to hold (a video), read in blocks; raises as read_whole does."""
    digest = hashlib.sha256()
    with open_regular(path) as (fd, before):
        n = 0
        # One block past the size fstat gave at most: a file that keeps growing is seen to
        # have changed, never hashed on and on.
        while n <= before.st_size and (block := os.read(fd, _BLOCK)):
            digest.update(block)
            n += len(block)
        after = os.fstat(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        raise _Changed("changed while being read")
    if n != after.st_size:
        raise _Changed("size changed while being read")
    if after.st_nlink == 0:
        raise _Changed("deleted while being read")
    return digest.hexdigest(), n, after.st_mtime_ns, (after.st_ctime_ns, after.st_ino)


def _not_read(found: FoundFile, exc: OSError | _Changed) -> Prepared | Unsettled:
    """What a failed read of a photo or a video becomes: gone or changed mid-read, the next
    run looks again; unopenable, a skip with the walk's stat (what the next run compares)."""
    if isinstance(exc, FileNotFoundError):
        return Unsettled("vanished before it was read")
    if isinstance(exc, _Changed):
        return Unsettled(str(exc))
    return Prepared(size=found.size, mtime_ns=found.mtime_ns, error=read_error(exc))


def load_timed(found: FoundFile, kind: MediaKind) -> Prepared | Unsettled:
    """Hash and probe one file of a timed kind (a video; runs in a decode thread). Its frames
    are not decoded here: they are sampled in chunks once its row is committed
    (ingest/videos.py)."""
    try:
        sha256, size, mtime_ns, identity = hash_whole(found.path)
    except (OSError, _Changed) as exc:
        return _not_read(found, exc)
    res = Prepared(size=size, mtime_ns=mtime_ns, sha256=sha256, kind=kind.name)
    res.ctime_ns, res.inode = identity
    return probed(res, kind, found.path)


def probed(res: Prepared, kind: MediaKind, source: Source) -> Prepared:
    """res (a timed file, hashed) with its timeline as its kind probes it from source (its
    path, or its bytes for an in_memory kind), or the error that makes it a skip."""
    try:
        info = kind.probe(source)
    except VideoError as exc:
        res.error = str(exc)
        return res
    res.width, res.height, res.video = info.width, info.height, info
    res.format = info.container
    res.photo = PhotoMeta(
        taken=info.taken, taken_offset=info.taken_offset, lat=info.lat, lon=info.lon
    )
    return res


def load_file(
    found: FoundFile, spec: ImageInput, draft: bool = JPEG_DRAFT, tiling: Tiling | None = None
) -> Prepared | Unsettled:
    """Read, hash, decode and preprocess one walked file (runs in a decode thread). Its kind
    is its content's (indexer/kinds): a file of a timed kind (a video) is hashed and probed
    only, and is never read whole. tiling: a large photo is also cut into regions
    (indexer/regions.py), by its kind."""
    hint = kind_by_name(found.path)
    if hint is None or hint.timed:
        kind = kind_of(found.path)
        if kind.timed:
            return load_timed(found, kind)
    try:
        data, mtime_ns, identity = read_whole(found.path)
    except (OSError, _Changed) as exc:
        return _not_read(found, exc)
    kind = kind_of(found.path, data[:HEAD_BYTES])
    if kind.timed:  # a clip or an animation under a photo's name
        del data
        return load_timed(found, kind)
    prepared = kind.prepare(data, spec, draft, mtime_ns, tiling)
    prepared.ctime_ns, prepared.inode = identity
    return prepared
