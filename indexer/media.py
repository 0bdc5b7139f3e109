"""What a media file is: a photo, a video, or nothing wherein indexes. The one place that says.

The walk, the watcher, `wherein embed`'s sources and the index run's loader all ask here.
A name says photo or video by its extension (imaging.IMAGE_EXTENSIONS,
video.VIDEO_EXTENSIONS); the content has the last word for videos (indexer/video/detect.py
sniffs the container from the first bytes), so a clip saved as ``IMG_0001.JPG`` or with no
extension at all is still a video, and a HEIC photo (ISO BMFF too) stays a photo.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from wherein.indexer.imaging import IMAGE_EXTENSIONS, is_image_name
from wherein.indexer.video.detect import HEAD_BYTES, VIDEO_EXTENSIONS, is_video_name, sniff

MediaKind = Literal["photo", "video"]
PHOTO: MediaKind = "photo"
VIDEO: MediaKind = "video"
KINDS: tuple[MediaKind, ...] = (PHOTO, VIDEO)

# Files beside photos that are never media: not worth opening to sniff on every walk.
_SIDECARS = frozenset(
    [".xmp", ".json", ".aae", ".txt", ".md", ".xml", ".html", ".pdf", ".db", ".ini", ".csv"]
)

READS = (
    ", ".join(sorted(e.lstrip(".") for e in IMAGE_EXTENSIONS))
    + "; videos: "
    + ", ".join(sorted(e.lstrip(".") for e in VIDEO_EXTENSIONS))
)


def kind_by_name(path: str | Path) -> MediaKind | None:
    """photo or video by the extension alone (None: neither)."""
    if is_image_name(path):
        return PHOTO
    return VIDEO if is_video_name(path) else None


def kind_by_content(path: str | Path, head: bytes | None = None) -> MediaKind | None:
    """What the file is: a video when its first bytes are a video container, else what its
    name says (a damaged .mp4 is still a video: its probe records why it is skipped).
    head: the file's first bytes, when the caller has them already."""
    if head is None:
        head = read_head(path)
    if head and sniff(head[:HEAD_BYTES]) is not None:
        return VIDEO
    return kind_by_name(path)


def read_head(path: str | Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD_BYTES)
    except OSError:
        return b""


def found_kind(path: str | Path, kinds: tuple[MediaKind, ...] = KINDS) -> MediaKind | None:
    """The walk's test of one regular file: by name for photo and video names, by content
    (one small read) for a name that is neither and not a known sidecar. Only `kinds` count."""
    kind = kind_by_name(path)
    if kind is None and VIDEO in kinds and Path(path).suffix.lower() not in _SIDECARS:
        kind = VIDEO if sniff(read_head(path)) is not None else None
    return kind if kind in kinds else None


def is_media_path(path: str | Path) -> bool:
    """A path worth a look when an event names it: a media name, or an existing file whose
    content is a video."""
    return kind_by_name(path) is not None or (os.path.isfile(path) and found_kind(path) is not None)
