"""PNG masks with a JSON manifest: one class-index PNG per image.

    DEST/masks/<stem>-<id>.png   palette PNG at the image's viewing size:
                                 0 = background, n = category n (manifest ids)
    DEST/frames/<name>.jpg       a video's frame (clip.mp4@12.50s.jpg): its image
    DEST/manifest.json           categories, and per image: id, path, size,
                                 mask file, region (the hit's best region,
                                 or null), one entry per labelled mask (a
                                 frame: its video's path, time and frame file)

Read a mask back with ``numpy.asarray(PIL.Image.open(file))``: the palette
indices are the category ids. Where two masks of one image overlap, the later
one wins the pixel (each keeps its own area and box in the manifest). Boxes are
[x0, y0, x1, y1] in pixels, x1/y1 exclusive, as in wherein's hits.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from wherein.search.export.pieces import (
    FRAMES,
    Categories,
    LabelledImage,
    Piece,
    base_name,
    region_of,
)

# Distinct, saturated colours for viewing; the pixel values are what count.
_COLOURS = [
    (0, 0, 0),
    (255, 0, 110),
    (58, 134, 255),
    (255, 190, 11),
    (131, 56, 236),
    (6, 214, 160),
    (251, 86, 7),
    (17, 138, 178),
]


def _palette(n: int) -> list[int]:
    colours = [_COLOURS[i] if i < len(_COLOURS) else _spread(i) for i in range(n)]
    return [c for rgb in colours for c in rgb]


def _spread(i: int) -> tuple[int, int, int]:
    return ((i * 97) % 256, (i * 57) % 256, (i * 151) % 256)


def encode(item: LabelledImage, categories: Categories) -> Piece:
    index = np.zeros((item.height, item.width), dtype=np.uint8)
    entries = []
    for inst in item.instances:
        value = categories.index(inst.category) + 1
        index[inst.mask] = value
        ys, xs = np.nonzero(inst.mask)
        entries.append(
            {
                "category_id": value,
                "category": inst.category,
                "score": None if inst.score is None else round(float(inst.score), 6),
                "area": int(len(xs)),
                "bbox": None
                if not len(xs)
                else [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1],
            }
        )
    png = Image.frombytes("P", (item.width, item.height), index.tobytes())
    png.putpalette(_palette(len(categories) + 1))
    buf = io.BytesIO()
    png.save(buf, format="PNG", optimize=False)
    rel = f"masks/{base_name(item)}.png"
    record = {
        "id": item.id,
        "path": item.path,
        "width": item.width,
        "height": item.height,
        "mask": rel,
        "region": region_of(item),
        "annotations": entries,
    }
    files = {rel: buf.getvalue()}
    if item.frame is not None:
        frame = f"{FRAMES}/{base_name(item)}.jpg"
        files[frame] = item.frame
        record.update(time=item.time, frame=frame)
    return Piece(item.id, record, files=files)


def finish(records: list[dict[str, Any]], categories: Categories, dest: Path) -> dict[str, bytes]:
    doc = {
        "format": "wherein-masks/1",
        "background": 0,
        "categories": [{"id": i + 1, "name": n} for i, n in enumerate(categories.names)],
        "images": records,
    }
    return {"manifest.json": json.dumps(doc, indent=1, ensure_ascii=False).encode()}
