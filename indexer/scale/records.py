"""Read, hash, decode and preprocess one item exactly as `wherein index` does (imaging.prepare_for_siglip)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wherein.indexer.imaging import prepare_for_siglip, read_error
from wherein.indexer.ingest.run import JPEG_DRAFT
from wherein.indexer.scale.sources import read_item


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
        res.error = read_error(exc)
        return res
    except Exception as exc:  # remote filesystems raise their own types
        res.error = f"cannot read: {type(exc).__name__}: {exc}"
        return res
    res.size = len(data)
    p = prepare_for_siglip(data, draft)
    res.sha256, res.width, res.height, res.pixels, res.error = (
        p.sha256,
        p.width,
        p.height,
        p.pixels,
        p.error,
    )
    return res
