"""Photos: still images, one whole-image item each; with regions on, a large photo also yields
a few region items, boxes of it (indexer/regions.py), and image_at crops a box.

By content: the signatures of the formats imaging.py decodes (JPEG, PNG, GIF, WebP, TIFF,
BMP, HEIF/AVIF brands, JPEG 2000, PNM). Photo is the registry's last kind, so a GIF, WebP
or PNG that another kind claimed (an animation) is not one; TGA has no signature and is a
photo by its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from wherein.indexer.imaging import (
    IMAGE_EXTENSIONS,
    DecodeError,
    Locator,
    Prepared,
    decode,
    prepare,
)
from wherein.indexer.kinds.base import MediaKind, Source
from wherein.indexer.members import read_located
from wherein.indexer.photometa import photo_meta_from_bytes

if TYPE_CHECKING:
    from PIL import Image

    from wherein.indexer.regions import Tiling
    from wherein.schemas.models import ImageInput

_MAGIC = (
    b"\xff\xd8\xff",  # JPEG
    b"\x89PNG\r\n\x1a\n",
    b"GIF87a",
    b"GIF89a",
    b"II*\x00",  # TIFF, little-endian (and raw formats built on it)
    b"MM\x00*",
    b"II+\x00",  # BigTIFF
    b"MM\x00+",
    b"BM",  # BMP / DIB
    b"\x00\x00\x00\x0cjP  \r\n\x87\n",  # JPEG 2000 (jp2)
    b"\xff\x4f\xff\x51",  # JPEG 2000 codestream (j2k)
)
# ftyp major brands of still images in ISO BMFF (indexer/video/detect.py leaves them to us).
_IMAGE_BRANDS = frozenset(
    b.encode() for b in ("heic", "heix", "heim", "heis", "mif1", "msf1", "avif", "avis")
)


def image_signature(head: bytes) -> bool:
    """Whether the first bytes are a still-image format wherein decodes."""
    if head.startswith(_MAGIC):
        return True
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return True
    if len(head) >= 12 and head[4:8] == b"ftyp" and head[8:12] in _IMAGE_BRANDS:
        return True
    # Netpbm: P1..P7 then whitespace.
    return len(head) >= 3 and head[0:1] == b"P" and head[1:2] in b"1234567" and head[2:3].isspace()


class Photo(MediaKind):
    name = "photo"
    item = "image"
    timed = False
    extensions = IMAGE_EXTENSIONS

    def sniff(self, head: bytes, path: Source | None) -> bool:
        return image_signature(head)

    def prepare(
        self,
        data: bytes,
        spec: ImageInput,
        draft: bool,
        mtime_ns: int,
        tiling: Tiling | None = None,
    ) -> Prepared:
        # Regions: its whole item first (the same input as without them), then a large
        # photo's tiles, boxes of it (indexer/regions.py).
        prepared = prepare(data, spec, draft, mtime_ns, tiling)
        if not prepared.error:
            # From the bytes in hand: the metadata pass after the run never reopens this file.
            prepared.photo = photo_meta_from_bytes(data)
        prepared.kind = self.name
        return prepared

    def image_at(self, path: Source, at: Locator) -> Image.Image:
        try:
            # A FIFO or a device there is refused, never read; a tar member read from its archive.
            data = read_located(str(path)) if isinstance(path, str | Path) else path.read()
        except OSError as exc:
            raise DecodeError(f"cannot read: {exc.strerror or exc}") from None
        image, _ = decode(data)
        if at.box is not None:
            x0, y0, x1, y1 = (round(v) for v in at.box)
            return image.crop((x0, y0, x1, y1))
        return image


KIND = Photo()
