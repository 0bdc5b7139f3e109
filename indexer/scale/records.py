"""Read one shard item and prepare it exactly as `wherein index` does (imaging.prepare)."""

from __future__ import annotations

from wherein.indexer.imaging import JPEG_DRAFT, Prepared, prepare, read_error
from wherein.indexer.photometa import photo_meta_from_bytes
from wherein.indexer.scale.sources import read_item
from wherein.schemas.models import ImageInput


def load(
    uri: str, spec: ImageInput, offset: int = -1, length: int = -1, draft: bool = JPEG_DRAFT
) -> Prepared:
    try:
        data, mtime_ns = read_item(uri, offset, length)
    except OSError as exc:
        return Prepared(error=read_error(exc))
    except Exception as exc:  # remote filesystems raise their own types
        return Prepared(error=f"cannot read: {type(exc).__name__}: {exc}")
    res = prepare(data, spec, draft, mtime_ns)
    if not res.error:  # the photos table's EXIF, from the bytes already read (as `wherein index`)
        res.photo = photo_meta_from_bytes(data)
    return res
