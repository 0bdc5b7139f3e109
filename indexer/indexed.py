"""An indexed file, read only while it is still the content that was indexed.

The web app never takes a path from a request: files are addressed by catalog
id, and the bytes served come from the catalog row's path after these checks,
all on one open file descriptor (no window between check and read):

- the path opens without blocking (O_NONBLOCK: a FIFO put in its place cannot hang a worker)
  and is a regular file (not a device, FIFO or folder);
- its size and mtime are the catalog's;
- the SHA-256 of the bytes read is the catalog's.

A cached derivative (thumbnail, preview, mask, vision pass) is served only after
``check_current``: one stat of the path, compared with the catalog's size and mtime
and with the file's identity (device, inode, size, mtime, ctime) when its bytes last
hashed to the catalog's SHA-256. The bytes are hashed again only when that identity
changed; ctime cannot be set back by a program, so a same-size, same-mtime rewrite is
caught too. A deleted file is NotFound, a replaced one FileChanged, as for a fresh read.

So a file replaced since indexing (by other content, or by a symlink to
/etc/passwd) is refused, while an image that was indexed through a symlink
still serves, because it is still that content.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from wherein.indexer.members import read_member, stat_located
from wherein.schemas.errors import BadRequest, FileChanged, NotFound
from wherein.schemas.locations import tar_member

if TYPE_CHECKING:
    from PIL import Image

    from wherein.indexer.kinds.base import MediaKind

__all__ = [
    "IndexedFile",
    "check_current",
    "frame_image",
    "opened_verified",
    "read_verified",
]

_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_VERIFIED = 100_000  # identities remembered (~200 B each); a forgotten one costs one hash


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
    time: float | None = None  # a video's frame, in seconds (whole milliseconds); None: a photo
    kind: str = "photo"  # the file's media kind (the catalog's; wherein.indexer.kinds)

    @property
    def key(self) -> str:
        """'<id>-<sha256[:16]>': names cache entries so a re-indexed, changed file gets new ones;
        a video's frame adds '-t<ms>', so each moment has its own thumbnail and mask."""
        frame = f"-t{round(self.time * 1000)}" if self.time is not None else ""
        return f"{self.id}-{self.sha256[:16]}{frame}"

    def at(self, time: float) -> IndexedFile:
        """This video's frame at `time` seconds, rounded to the millisecond (as it is keyed)."""
        return replace(self, time=round(float(time), 3))

    @property
    def timed(self) -> bool:
        """Whether its items are frames at times (a video, an animation): its kind says."""
        return _kind(self.kind).timed

    @property
    def plays(self) -> bool:
        """Whether a browser plays the file itself (a video): its kind says, not its name."""
        return _kind(self.kind).plays

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
            kind=row.get("file_kind") or "photo",
        )


# (path, sha256) -> (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) of the file when its
# bytes last hashed to sha256 in this process.
_verified: OrderedDict[tuple[str, str], tuple[int, ...]] = OrderedDict()
_verified_lock = threading.Lock()


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _remember(f: IndexedFile, st: os.stat_result) -> None:
    with _verified_lock:
        _verified[(f.path, f.sha256)] = _identity(st)
        _verified.move_to_end((f.path, f.sha256))
        while len(_verified) > MAX_VERIFIED:
            _verified.popitem(last=False)


def _check_stat(f: IndexedFile, st: os.stat_result, member: bool = False) -> None:
    """member: st is the tar archive of the file's bytes, whose mtime the catalog holds (its
    size is the member's)."""
    if not stat.S_ISREG(st.st_mode):
        raise FileChanged(f"image {f.id}: the indexed path is no longer a regular file; refused")
    if (st.st_size != f.size and not member) or st.st_mtime_ns != f.mtime_ns:
        raise FileChanged(
            f"image {f.id}: the file changed since it was indexed (size or time differ); "
            "re-run wherein index to pick up the change"
        )


def _gone(f: IndexedFile, exc: OSError) -> NotFound:
    if isinstance(exc, FileNotFoundError):
        return NotFound(f"image {f.id}: its file is gone since it was indexed")
    return NotFound(f"image {f.id}: cannot open its file ({exc.strerror or exc})")


def check_current(f: IndexedFile) -> None:
    """NotFound / FileChanged unless the file is still the indexed content, before a cached
    derivative of it is served: one stat, and a hash only when the file's identity differs
    from the one its bytes last hashed under (or none is known: a restarted server)."""
    member = tar_member(f.path)
    try:
        st = stat_located(f.path)
    except OSError as exc:
        raise _gone(f, exc) from None
    _check_stat(f, st, member is not None)
    with _verified_lock:
        known = _verified.get((f.path, f.sha256))
    if known != _identity(st):
        if member:
            read_verified(f)  # a photo: held whole anyway
            return
        with opened_verified(f):  # hashed in chunks: a video is never held whole
            pass


@contextmanager
def opened_verified(f: IndexedFile) -> Iterator[int]:
    """An open descriptor of the file, once its content is known to be the indexed one (by its
    identity, else by hashing it in chunks); what is served is read from this descriptor,
    so a file swapped after the check is never what goes out. For files too large to hold
    (a video's byte ranges); NotFound / FileChanged as read_verified. A member of a tar
    shard has no descriptor of its own: NotFound."""
    if tar_member(f.path):
        raise NotFound(f"image {f.id}: a member of a tar shard, not a file that can be streamed")
    fd = _open(f)
    try:
        st = os.fstat(fd)
        _check_stat(f, st)
        with _verified_lock:
            known = _verified.get((f.path, f.sha256))
        if known != _identity(st):
            digest, n = hashlib.sha256(), 0
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
                n += len(chunk)
            if n != f.size or digest.hexdigest() != f.sha256:
                raise _differs(f)
            _remember(f, st)
        yield fd
    finally:
        os.close(fd)


def _open(f: IndexedFile) -> int:
    try:
        return os.open(f.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _gone(f, exc) from None


def _differs(f: IndexedFile) -> FileChanged:
    # Size and mtime as indexed, other bytes: a rewrite that kept both. `wherein index`
    # reads it again by its ctime and inode; --verify re-reads every file regardless.
    return FileChanged(
        f"image {f.id}: the file's content differs from what was indexed (same size and "
        "time); re-run wherein index on its folder to pick up the change "
        "(with --verify if it still is not)"
    )


def read_verified(f: IndexedFile) -> bytes:
    """The file's bytes when they are still the indexed content; NotFound / FileChanged otherwise."""
    if tar_member(f.path):
        return _read_verified_member(f)
    fd = _open(f)
    try:
        st = os.fstat(fd)
        _check_stat(f, st)
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
        raise _differs(f)
    _remember(f, st)
    return data


def _read_verified_member(f: IndexedFile) -> bytes:
    try:
        data, st = read_member(f.path)
    except FileNotFoundError:
        raise NotFound(f"image {f.id}: its tar archive, or its member there, is gone") from None
    except OSError as exc:
        raise NotFound(
            f"image {f.id}: cannot read it from its tar archive ({exc.strerror or exc})"
        ) from None
    _check_stat(f, st, member=True)
    if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
        raise _differs(f)
    _remember(f, st)
    return data


def frame_image(f: IndexedFile) -> Image.Image:
    """The frame shown at f.time seconds of an indexed file of a timed kind, full size, read
    from the verified file by its kind; NotFound for a file whose kind has no frames."""
    from wherein.indexer.imaging import DecodeError, Locator
    from wherein.indexer.video.frames import VideoError

    if not f.timed:
        raise NotFound(f"image {f.id}: not a video in this index")
    t = f.time or 0.0
    if tar_member(f.path):  # an animation in a tar shard: its verified bytes, in memory
        try:
            return _kind(f.kind).image_at(io.BytesIO(read_verified(f)), Locator("frame", t=t))
        except (VideoError, DecodeError) as exc:
            raise BadRequest(f"t: image {f.id} has no frame at {t:g} s ({exc})") from None
    with opened_verified(f) as fd:
        # The descriptor's own path (Linux, and /dev/fd elsewhere) opens the very file checked.
        via = next(
            (p for p in (f"/proc/self/fd/{fd}", f"/dev/fd/{fd}") if os.path.exists(p)), f.path
        )
        try:
            return _kind(f.kind).image_at(via, Locator("frame", t=t))
        except (VideoError, DecodeError) as exc:  # the content is as indexed: the time is off
            raise BadRequest(f"t: image {f.id} has no frame at {t:g} s ({exc})") from None


def _kind(name: str) -> MediaKind:
    from wherein.indexer.kinds.registry import named, names

    return named(name if name in names() else "photo")
