"""Videos: frames at times, sampled with PyAV (indexer/video), one hit per video with its
moments.

By content: the container's first bytes (ISO BMFF, QuickTime, Matroska/WebM, AVI;
indexer/video/detect.py), so a clip saved as ``IMG_0001.JPG`` or with no extension is a
video, and a HEIC photo (ISO BMFF with an image brand) is not. PyAV is imported only when
a video is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from wherein.indexer.kinds.base import FrameSource, MediaKind, Source
from wherein.indexer.video.detect import VIDEO_EXTENSIONS, sniff

if TYPE_CHECKING:
    from PIL import Image

    from wherein.indexer.imaging import Locator
    from wherein.indexer.video.frames import VideoInfo


class Video(MediaKind):
    name = "video"
    item = "frame"
    timed = True
    plays = True
    extensions = VIDEO_EXTENSIONS

    def sniff(self, head: bytes, path: Source | None) -> bool:
        return sniff(head) is not None

    def probe(self, path: Source) -> VideoInfo:
        from wherein.indexer.video.probe import probe

        return probe(_file(path))

    def sample(self, path: Source, every: float, max_frames: int) -> FrameSource:
        from wherein.indexer.video.sample import Sampling

        return Sampling(_file(path), every=every, max_frames=max_frames)

    def image_at(self, path: Source, at: Locator) -> Image.Image:
        from wherein.indexer.video.sample import frame_at

        return frame_at(_file(path), at.t or 0.0).image()


def _file(path: Source) -> str | Path:
    """A video is read from a local file (in_memory is False: no caller hands it bytes)."""
    if not isinstance(path, str | Path):
        from wherein.indexer.video.frames import VideoError

        raise VideoError("a video is read from a file, not from bytes in memory")
    return path


KIND = Video()
