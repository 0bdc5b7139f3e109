"""An indexed video for the page: its bytes by range (to play it), one frame of it (a
thumbnail, the paused frame under a mask).

Like a photo, a video is addressed by catalog id and served only while its file is the
indexed content (files.py); the check reads the file's descriptor, and what is served is
read from that same descriptor, so a file swapped after the check never goes out. Only a
catalog row whose kind plays (a video, by content) serves here: a photo's id (whatever its
extension), or an id not in the index, is a 404. A frame is of any timed kind, loaded by
the kind (wherein.indexer.kinds).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from contextlib import ExitStack
from dataclasses import dataclass

from PIL import Image

from wherein.search.web.files import BadRequest, IndexedFile, NotFound, opened_verified
from wherein.search.web.ranges import byte_range, content_range

# Container format (the catalog's `format`: the file's extension) -> what a browser is told.
MEDIA_TYPES = {
    "mp4": "video/mp4",
    "m4v": "video/mp4",  # browsers play "video/x-m4v" less readily; it is MP4
    "mov": "video/quicktime",
    "qt": "video/quicktime",
    "3gp": "video/3gpp",
    "3g2": "video/3gpp2",
    "mkv": "video/x-matroska",
    "webm": "video/webm",
    "avi": "video/x-msvideo",
}
CHUNK = 1 << 18  # bytes per read while streaming a range


def is_video_format(fmt: str | None) -> bool:
    """Whether the catalog's `format` of a file (its extension for a video) is a video's."""
    return (fmt or "").lower().lstrip(".") in MEDIA_TYPES


def _kind(f: IndexedFile):
    from wherein.indexer.kinds.registry import named

    return named(f.kind)


def is_timed(f: IndexedFile) -> bool:
    """Whether the file's items are frames at times (a video, an animation)."""
    return _kind(f).timed


def plays(kind: str | None) -> bool:
    """Whether a browser plays a file of this kind itself (the kind says so, not the
    file's extension)."""
    from wherein.indexer.kinds.registry import named, names

    return kind in names() and named(kind).plays


def is_video(f: IndexedFile) -> bool:
    return plays(f.kind)


def media_type(f: IndexedFile) -> str:
    return MEDIA_TYPES.get((f.format or "").lower().lstrip("."), "application/octet-stream")


def require_video(f: IndexedFile) -> IndexedFile:
    if not is_video(f):
        raise NotFound(f"image {f.id}: not a video in this index")
    return f


@dataclass
class Body:
    """What to send of a video: status 200 (all) or 206 (first..last), its headers, and the
    bytes, read from the verified descriptor as they are sent. ``close`` (once the response
    is over, whole or cut short by the client) closes the descriptor."""

    status: int
    headers: dict[str, str]
    chunks: Generator[bytes, None, None]
    _stack: ExitStack

    def close(self) -> None:
        self.chunks.close()  # a generator stopped mid-way leaves its `with` now, not at GC
        self._stack.close()  # and one never started: the descriptor is the stack's


def body(f: IndexedFile, range_header: str | None) -> Body:
    """The response to a GET of the video with this Range header (None: none). NotFound /
    FileChanged before any byte, as for a photo; ranges.Unsatisfiable for a range past the
    end."""
    stack = ExitStack()
    try:
        fd = stack.enter_context(opened_verified(f))
        rng = byte_range(range_header, f.size)
    except BaseException:
        stack.close()
        raise
    first, last = rng if rng is not None else (0, f.size - 1)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(last - first + 1),
        "Content-Type": media_type(f),
        "Cache-Control": "private, max-age=86400",
    }
    if rng is not None:
        headers["Content-Range"] = content_range(first, last, f.size)
    return Body(206 if rng is not None else 200, headers, _read(stack, fd, first, last), stack)


def _read(stack: ExitStack, fd: int, first: int, last: int) -> Generator[bytes, None, None]:
    with stack:  # closes the descriptor when the last byte is out
        at = first
        while at <= last:
            chunk = os.pread(fd, min(CHUNK, last - at + 1), at)
            if not chunk:
                return  # cut short since the check: the client sees a short body
            yield chunk
            at += len(chunk)


def frame_image(f: IndexedFile) -> Image.Image:
    """The frame shown at f.time seconds, full size, read from the verified file by its kind."""
    from wherein.indexer.imaging import DecodeError, Locator
    from wherein.indexer.video import VideoError  # PyAV: only when a frame is asked

    t = f.time or 0.0
    if not is_timed(f):
        raise NotFound(f"image {f.id}: not a video in this index")
    with opened_verified(f) as fd:
        # The descriptor's own path (Linux, and /dev/fd elsewhere) opens the very file checked.
        via = next(
            (p for p in (f"/proc/self/fd/{fd}", f"/dev/fd/{fd}") if os.path.exists(p)), f.path
        )
        try:
            return _kind(f).image_at(via, Locator("frame", t=t))
        except (
            VideoError,
            DecodeError,
        ) as exc:  # the content is the indexed one: it is the time that is off
            raise BadRequest(f"t: image {f.id} has no frame at {t:g} s ({exc})") from None
