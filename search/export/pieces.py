"""What a label export is made of: images with masks, categories, and one image's Piece.

The codecs (coco.py, yolo.py, pngmasks.py) turn a LabelledImage into a Piece;
labels.py merges pieces into the export. Category ids: COCO counts from 1, YOLO
classes from 0, PNG masks use 1..n with 0 as background; all follow the order of
``Categories``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wherein.search.export.errors import LabelExportError


@dataclass
class Instance:
    """One labelled mask on an image."""

    category: str
    mask: np.ndarray  # bool [H, W] at the image's viewing size
    score: float | None = None


@dataclass
class LabelledImage:
    """A photo, or a video's frame, with its masks.

    A frame has no image file of its own: ``frame`` holds it as JPEG and the export writes
    it (FRAMES/<name>.jpg in the piece's files), ``path`` is the video and ``time`` the
    moment. Its id is the frame's item id (files and items share one id counter, so it
    never equals a photo's).
    """

    id: int  # catalog id: unique, so pieces from different shards never clash
    path: str
    width: int
    height: int
    instances: list[Instance] = field(default_factory=list)
    time: float | None = None  # a video's frame: seconds into the video
    frame: bytes | None = None  # that frame, JPEG, at width x height
    name: str | None = None  # the name its files get in the export; default base_name's
    # A photo hit's best region ([x0, y0, x1, y1] in its pixels as a viewer shows it, the
    # masks' frame of reference), from an index with regions; None: the whole photo, a frame.
    region: list[float] | None = None


@dataclass
class Piece:
    """One image's share of an export: small and picklable."""

    id: int
    record: dict[str, Any]  # the image's entry in the index file
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content
    links: dict[str, str] = field(default_factory=dict)  # relative path -> absolute target


class Categories:
    """Category names in a fixed order; ids depend on the format (see the module docstring)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names: list[str] = []
        for n in names:
            if n not in self.names:
                self.names.append(n)
        if not self.names:
            raise LabelExportError("no categories to export")
        if len(self.names) > 255:
            raise LabelExportError(f"{len(self.names)} categories: at most 255 fit a PNG mask")
        self._index = {n: i for i, n in enumerate(self.names)}

    def index(self, name: str) -> int:
        """0-based position of a category."""
        try:
            return self._index[name]
        except KeyError:
            raise LabelExportError(f"category {name!r} is not one of {self.names}") from None

    def __len__(self) -> int:
        return len(self.names)


def base_name(item: LabelledImage) -> str:
    """<stem>-<catalog id>: unique per image without looking at the other images; a frame's
    given name, else <video name>@<time>s-<item id>."""
    if item.name is not None:
        return item.name
    if item.time is not None:
        return f"{frame_name(item.path, item.time)}-{item.id}"
    return f"{Path(item.path).stem}-{item.id}"


def region_of(item: LabelledImage) -> list[float] | None:
    """The image's region as every export writes it: four numbers, or None."""
    return None if item.region is None else [float(v) for v in item.region]


# A frame's JPEG inside a piece's files; a one-file export (COCO) keeps them in a folder
# beside it (frames_folder), a folder export in its own folder.
FRAMES = "frames"


def frame_name(video: str | Path, time: float) -> str:
    """clip.mp4@12.50s: a frame's name, after its video and moment."""
    return f"{Path(video).name}@{time:.2f}s"


class FrameNames:
    """The names of one export's frames: <video name>@<time>s, with -<id> added to a name
    already given (same-named videos in two folders). Both engines name frames with it, in
    hit order, so they write the same export."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def __call__(self, video: str | Path, time: float, id: int) -> str:
        name = frame_name(video, time)
        if name in self._used:
            name = f"{name}-{id}"
        self._used.add(name)
        return name


def frames_folder(dest: Path) -> Path:
    """Where a one-file export's frames go: beside it, named after it (dogs.coco.json ->
    dogs.coco.frames)."""
    name = dest.name[: -len(".json")] if dest.name.lower().endswith(".json") else dest.name
    return dest.with_name(f"{name}.{FRAMES}")
