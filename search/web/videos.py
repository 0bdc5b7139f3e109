"""An indexed video for the page's <video>: its bytes by HTTP range, with validators.

Like a photo, a video is addressed by catalog id and served only while its file is the
indexed content (the service checks the file's descriptor, and what is served is read
from that same descriptor, so a file swapped after the check never goes out). Only a file
the catalog holds as a video serves here, whatever its name: a photo's id, or an id not
in the index, is a 404. Its type comes from the container its first bytes announce.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass

from wherein.search.service.serve import VideoFile
from wherein.search.web.ranges import byte_range, content_range
from wherein.search.web.validators import etag, http_date, range_applies

# Container (what the file's first bytes announce) -> what a browser is told.
MEDIA_TYPES = {
    "mp4": "video/mp4",
    "mov": "video/quicktime",
    "3gp": "video/3gpp",
    "mkv": "video/x-matroska",
    "webm": "video/webm",
    "avi": "video/x-msvideo",
}
CHUNK = 1 << 18  # bytes per read while streaming a range


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


def validators(video: VideoFile) -> dict[str, str]:
    """ETag (the indexed content's SHA-256) and Last-Modified of a video."""
    return {"ETag": etag(video.file.sha256[:32]), "Last-Modified": http_date(video.file.mtime_ns)}


def body(
    opened: AbstractContextManager[VideoFile],
    range_header: str | None,
    if_range: str | None = None,
    head: bool = False,
) -> Body:
    """The response to a GET (or HEAD: no bytes read) of the video `opened` opens, with this
    Range and If-Range (None: none). NotFound / FileChanged before any byte, as for a
    photo; ranges.Unsatisfiable for a range past the end."""
    stack = ExitStack()
    try:
        video = stack.enter_context(opened)
        size = video.file.size
        tags = validators(video)
        asked = (
            range_header if range_applies(if_range, tags["ETag"], tags["Last-Modified"]) else None
        )
        rng = byte_range(asked, size)
    except BaseException:
        stack.close()
        raise
    first, last = rng if rng is not None else (0, size - 1)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(last - first + 1),
        "Content-Type": MEDIA_TYPES.get(video.container or "", "application/octet-stream"),
        "Cache-Control": "private, max-age=86400",
        **tags,
    }
    if rng is not None:
        headers["Content-Range"] = content_range(first, last, size)
    chunks = _read(stack, video.fd, first, last if not head else first - 1)
    return Body(206 if rng is not None else 200, headers, chunks, stack)


def _read(stack: ExitStack, fd: int, first: int, last: int) -> Generator[bytes, None, None]:
    with stack:  # closes the descriptor when the last byte is out
        at = first
        while at <= last:
            chunk = os.pread(fd, min(CHUNK, last - at + 1), at)
            if not chunk:
                return  # cut short since the check: the client sees a short body
            yield chunk
            at += len(chunk)
