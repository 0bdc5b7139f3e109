"""COCO instances JSON: one annotation per mask, segmentation as compressed RLE (pycocotools).

Image ids are catalog ids; ``file_name`` is the image's absolute path (tools
join it to their image root, and joining onto an absolute path keeps it).
Annotation ids count from 1 in the order images were merged. Each mask is one
annotation with ``iscrowd`` 0 even when it has several separate regions (CLIPSeg
masks are per prompt, not per object); ``score`` is the mask's mean probability.
An image whose mask is empty is listed without annotations.

A video's frame is an image too: its JPEG is written into a folder beside the export
(``dogs.coco.json`` -> ``dogs.coco.frames/clip.mp4@12.50s.jpg``), ``file_name`` is that
file's absolute path, ``id`` the frame's item id, and ``video``/``time`` say where it
comes from.

Every image entry also has ``region`` (an extra key, which COCO readers ignore): the hit's best
region, [x0, y0, x1, y1] in the image's pixels (x1/y1 exclusive), from an index with regions;
null when the whole photo matched best, for a frame, or without regions. It is where the
match is before any mask; the annotations stay the masks alone.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from wherein.search.export.ours import COCO_INFO
from wherein.search.export.pieces import (
    FRAMES,
    Categories,
    LabelledImage,
    Piece,
    base_name,
    frames_folder,
    region_of,
)


def rle(mask: np.ndarray) -> dict[str, Any]:
    """Compressed RLE of a bool [H, W] mask, JSON-ready (counts as text)."""
    from pycocotools import mask as mask_utils

    enc = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(enc["size"][0]), int(enc["size"][1])], "counts": enc["counts"].decode()}


def encode(item: LabelledImage, categories: Categories) -> Piece:
    from pycocotools import mask as mask_utils

    annotations = []
    for inst in item.instances:
        if not inst.mask.any():
            continue
        seg = rle(inst.mask)
        coded = {"size": seg["size"], "counts": seg["counts"].encode()}
        ann: dict[str, Any] = {
            "image_id": item.id,
            "category_id": categories.index(inst.category) + 1,
            "segmentation": seg,
            "area": int(mask_utils.area(coded)),
            "bbox": [float(v) for v in mask_utils.toBbox(coded)],
            "iscrowd": 0,
        }
        if inst.score is not None:
            ann["score"] = round(float(inst.score), 6)
        annotations.append(ann)
    image: dict[str, Any] = {
        "id": item.id,
        "file_name": item.path,
        "width": item.width,
        "height": item.height,
        "region": region_of(item),
    }
    files: dict[str, bytes] = {}
    if item.frame is not None:
        rel = f"{FRAMES}/{base_name(item)}.jpg"
        files[rel] = item.frame
        image.update(file_name=rel, video=item.path, time=item.time)  # absolute in finish
    return Piece(item.id, {"image": image, "annotations": annotations}, files=files)


def finish(records: list[dict[str, Any]], categories: Categories, dest: Path) -> dict[str, bytes]:
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    frames = frames_folder(dest)
    for rec in records:
        image = rec["image"]
        if "video" in image:
            image = {**image, "file_name": str(frames / Path(image["file_name"]).name)}
        images.append(image)
        for ann in rec["annotations"]:
            annotations.append({"id": len(annotations) + 1, **ann})
    doc = {
        "info": {
            "description": COCO_INFO,
            "date_created": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": [
            {"id": i + 1, "name": name, "supercategory": ""}
            for i, name in enumerate(categories.names)
        ],
    }
    return {dest.name: json.dumps(doc, ensure_ascii=False).encode()}
