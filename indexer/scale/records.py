"""Read, hash, decode and preprocess one item exactly as `wherein index` does (run._load)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from wherein.indexer.imaging import DecodeError, decode, siglip_input
from wherein.indexer.run import JPEG_DRAFT
from wherein.indexer.scale.sources import read_item
from wherein.schemas.models import SIGLIP_IMAGE_SIZE


@dataclass
class Loaded:
    size: int = 0
    mtime_ns: int = 0
    sha256: str = ""
    width: int = 0
    height: int = 0
    pixels: np.ndarray | None = None  # [3,224,224] float32, None on error
    error: str = ""


def load(uri: str, offset: int = -1, length: int = -1, draft: bool = JPEG_DRAFT) -> Loaded:
    res = Loaded()
    try:
        data, res.mtime_ns = read_item(uri, offset, length)
    except OSError as exc:
        res.error = f"cannot read: {exc.strerror.lower() if exc.strerror else exc}"
        return res
    except Exception as exc:  # remote filesystems raise their own types
        res.error = f"cannot read: {type(exc).__name__}: {exc}"
        return res
    res.size = len(data)
    res.sha256 = hashlib.sha256(data).hexdigest()
    if not data:
        res.error = "empty file"
        return res
    try:
        img, (res.width, res.height) = decode(data, draft_size=SIGLIP_IMAGE_SIZE if draft else None)
        res.pixels = siglip_input(img)
    except DecodeError as exc:
        res.error = str(exc)
    return res
