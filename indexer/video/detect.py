"""Is this file a video? By its first bytes, not only by its name.

Phones and cameras write ISO BMFF (mp4, mov, m4v, 3gp: an ``ftyp`` box, or a bare
QuickTime atom for old .mov files), Matroska/WebM (an EBML header whose DocType names
it) and AVI (RIFF with the AVI form type). HEIC/AVIF photos are ISO BMFF too: their
``ftyp`` brands say image, and they stay photos.
"""

from __future__ import annotations

from pathlib import Path

from wherein.indexer.regular import read_head

VIDEO_EXTENSIONS = frozenset(
    [".mp4", ".m4v", ".mov", ".qt", ".3gp", ".3g2", ".mkv", ".webm", ".avi"]
)
HEAD_BYTES = 64  # enough for every signature below

# ftyp major brands that are still images (HEIF/AVIF, Canon raw) or audio only.
_NOT_VIDEO_BRANDS = frozenset(
    b.encode()
    for b in (
        "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1", "avif", "avis",
        "crx ", "jp2 ", "jpx ", "M4A ", "M4B ", "M4P ", "F4A ", "F4B ",
    )
)  # fmt: skip
_QUICKTIME_ATOMS = frozenset([b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"])
_EBML_MAGIC = b"\x1a\x45\xdf\xa3"
_DOCTYPE_ID = b"\x42\x82"


def sniff(head: bytes) -> str | None:
    """The container a file's first bytes announce ("mp4", "mov", "3gp", "mkv", "webm",
    "avi"), or None when they are not a video container."""
    if len(head) >= 12 and head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in _NOT_VIDEO_BRANDS:
            return None
        if brand == b"qt  ":
            return "mov"
        return "3gp" if brand.startswith((b"3gp", b"3g2")) else "mp4"
    if len(head) >= 8 and head[4:8] in _QUICKTIME_ATOMS:
        return "mov"
    if head.startswith(_EBML_MAGIC):
        at = head.find(_DOCTYPE_ID, 4)
        if at < 0 or at + 3 > len(head):
            return None
        size = head[at + 2] & 0x7F  # a one-byte EBML size (0x8N) is what muxers write
        doctype = head[at + 3 : at + 3 + size]
        if doctype == b"webm":
            return "webm"
        return "mkv" if doctype == b"matroska" else None
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"AVI ":
        return "avi"
    return None


def is_video_name(path: str | Path) -> bool:
    return Path(path).suffix.lower() in VIDEO_EXTENSIONS


def is_video_file(path: str | Path) -> bool:
    """True when the file's content is a video container, whatever its name says."""
    return sniff(read_head(path, HEAD_BYTES)) is not None
