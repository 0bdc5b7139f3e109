"""YOLO segmentation dataset: images/ (symlinks), labels/*.txt polygons, images.txt, data.yaml.

Layout (what Ultralytics expects: a label's path is its image's path with
/images/ -> /labels/ and the extension -> .txt)::

    DEST/images/<stem>-<id>.<ext>   symlink to the original file
    DEST/labels/<stem>-<id>.txt     one line per outline: class x1 y1 x2 y2 ... in [0, 1]
    DEST/images.txt                 ./images/<stem>-<id>.<ext>, one per line
    DEST/images.jsonl               per image, in images.txt's order: image, id, path (the
                                    original; a frame's video, with time) and region
    DEST/data.yaml                  path, train/val = images.txt, names

Polygons are the outer outlines of each mask (pixel-corner coordinates,
simplified by 1 px; holes cannot be expressed in YOLO's format and are
filled), normalised by the image's viewing size. An empty mask gives an empty
label file: a background image. A video's frame is written as a JPEG file
(``images/clip.mp4@12.50s.jpg``), not linked: there is no image file to link to.
YOLO's own files have no place for where an image came from: images.jsonl says it, with
the hit's best region ([x0, y0, x1, y1] in the image's pixels; null when the whole photo
matched best, for a frame, or from an index without regions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wherein.search.export.pieces import Categories, LabelledImage, Piece, base_name, region_of
from wherein.search.localize.contours import polygons

TOLERANCE_PX = 1.0


def label_lines(item: LabelledImage, categories: Categories) -> list[str]:
    lines = []
    for inst in item.instances:
        cls = categories.index(inst.category)
        for poly in polygons(inst.mask, TOLERANCE_PX):
            xy = poly / [item.width, item.height]
            coords = " ".join(f"{v:.6f}" for v in xy.clip(0, 1).ravel())
            lines.append(f"{cls} {coords}")
    return lines


def encode(item: LabelledImage, categories: Categories) -> Piece:
    name = base_name(item)
    lines = label_lines(item, categories)
    files = {f"labels/{name}.txt": "".join(f"{line}\n" for line in lines).encode()}
    if item.frame is not None:
        image = f"images/{name}.jpg"
        files[image] = item.frame
        record = {"id": item.id, "image": image, "path": item.path, "time": item.time,
                  "region": region_of(item)}  # fmt: skip
        return Piece(item.id, record, files=files)
    image = f"images/{name}{Path(item.path).suffix}"
    return Piece(
        item.id,
        {"id": item.id, "image": image, "path": item.path, "region": region_of(item)},
        files=files,
        links={image: str(Path(item.path).absolute())},
    )


def finish(records: list[dict[str, Any]], categories: Categories, dest: Path) -> dict[str, bytes]:
    listing = "".join(f"./{r['image']}\n" for r in records)
    sources = "".join(
        json.dumps({**r, "image": f"./{r['image']}"}, ensure_ascii=False) + "\n" for r in records
    )
    names = "".join(
        f"  {i}: {json.dumps(n, ensure_ascii=False)}\n" for i, n in enumerate(categories.names)
    )
    yaml = (
        "# YOLO segmentation labels exported by wherein (masks are CLIPSeg pseudo-labels).\n"
        f"path: {json.dumps(str(dest), ensure_ascii=False)}\n"
        "train: images.txt\n"
        "val: images.txt\n"
        f"nc: {len(categories)}\n"
        f"names:\n{names}"
    )
    return {
        "images.txt": listing.encode(),
        "images.jsonl": sources.encode(),
        "data.yaml": yaml.encode(),
    }
