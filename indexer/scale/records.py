"""Read one shard item and prepare it exactly as `wherein index` does (imaging.prepare).

A local video (by name or by content, indexer/media.py) is hashed and probed as the index
run's loader does (ingest/read.load_video); its frames are sampled afterwards, by the engine.
"""

from __future__ import annotations

import os

from wherein.indexer.imaging import JPEG_DRAFT, Prepared, prepare, read_error
from wherein.indexer.ingest.read import Unsettled, load_video
from wherein.indexer.ingest.walk import FoundFile
from wherein.indexer.media import PHOTO, VIDEO, kind_by_content, kind_by_name
from wherein.indexer.photometa import photo_meta_from_bytes
from wherein.indexer.scale.sources import local_path, read_item
from wherein.schemas.models import ImageInput


def _video(path: str) -> Prepared:
    try:
        st = os.stat(path)
    except OSError as exc:
        return Prepared(error=read_error(exc))
    res = load_video(FoundFile(path, st.st_size, st.st_mtime_ns))
    if isinstance(res, Unsettled):  # no later run sees it again: the item fails, with why
        return Prepared(size=st.st_size, mtime_ns=st.st_mtime_ns, error=res.reason)
    return res


def load(
    uri: str, spec: ImageInput, offset: int = -1, length: int = -1, draft: bool = JPEG_DRAFT
) -> Prepared:
    """A photo decoded and preprocessed; a video probed (res.video set, its frames not read)."""
    path = local_path(uri) if offset < 0 else None
    if path is not None and kind_by_name(path) not in (PHOTO, None):
        return _video(path)
    try:
        data, mtime_ns = read_item(uri, offset, length)
    except OSError as exc:
        return Prepared(error=read_error(exc))
    except Exception as exc:  # remote filesystems raise their own types
        return Prepared(error=f"cannot read: {type(exc).__name__}: {exc}")
    if path is not None and kind_by_content(path, data[:64]) is VIDEO:  # a clip named as a photo
        return _video(path)
    res = prepare(data, spec, draft, mtime_ns)
    if not res.error:  # the photos table's EXIF, from the bytes already read (as `wherein index`)
        res.photo = photo_meta_from_bytes(data)
    return res
