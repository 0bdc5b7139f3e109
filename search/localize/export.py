"""Masks as dataset labels: COCO instances, YOLO segmentation, or PNG masks with a manifest.

The writer is built to be sharded. Work happens in two steps:

1. ``encode_piece(item, fmt, categories)`` turns one image's masks into a
   ``Piece``: its index record (JSON-able) and the files it contributes
   (bytes, symlinks), named from the catalog id so that no two images need to
   agree on anything. It is a pure function of the image: a Ray worker can run
   it next to the mask model and ship the small piece back.
2. ``LabelWriter`` (the merge) takes pieces in any order, writes their files
   into a temporary sibling of the destination, and on ``close()`` writes the
   index (COCO json, images.txt + data.yaml, manifest.json) and renames the
   result into place. A failed or interrupted export leaves nothing behind.

``write_labels`` runs both steps for images held in memory; ``images_from_hits``
makes those images from hits that went through ``add_masks`` (it reads each
hit's mask PNG, so the labels are exactly the masks wherein wrote).

Category ids: COCO counts from 1, YOLO classes from 0, PNG masks use
1..n with 0 as background; all follow the order of ``categories``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wherein.schemas.errors import WhereinError
from wherein.search.curate.export import LABEL_FORMATS

# Formats that are a folder rather than one file.
FOLDER_FORMATS = ("yolo", "masks")


class LabelExportError(WhereinError):
    """The labels cannot be exported (destination, categories, masks)."""


@dataclass
class Instance:
    """One labelled mask on an image."""

    category: str
    mask: np.ndarray  # bool [H, W] at the image's viewing size
    score: float | None = None


@dataclass
class LabelledImage:
    id: int  # catalog id: unique, so pieces from different shards never clash
    path: str
    width: int
    height: int
    instances: list[Instance] = field(default_factory=list)


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


def _format_module(fmt: str):
    if fmt == "coco":
        from wherein.search.localize import coco

        return coco
    if fmt == "yolo":
        from wherein.search.localize import yolo

        return yolo
    if fmt == "masks":
        from wherein.search.localize import pngmasks

        return pngmasks
    raise LabelExportError(f"unknown label format {fmt!r} (choose from {', '.join(LABEL_FORMATS)})")


def base_name(item: LabelledImage) -> str:
    """<stem>-<catalog id>: unique per image without looking at the other images."""
    return f"{Path(item.path).stem}-{item.id}"


def encode_piece(item: LabelledImage, fmt: str, categories: Categories | Sequence[str]) -> Piece:
    """One image's labels in a format (step 1; runs anywhere, needs nothing but the image)."""
    cats = categories if isinstance(categories, Categories) else Categories(categories)
    for inst in item.instances:
        if inst.mask.shape != (item.height, item.width):
            raise LabelExportError(
                f"{item.path}: mask is {inst.mask.shape[1]}x{inst.mask.shape[0]}, "
                f"image {item.width}x{item.height}"
            )
    return _format_module(fmt).encode(item, cats)


def check_destination(dest: str | Path, fmt: str) -> Path:
    """Fail before any work: the parent folder must exist; a folder export needs a new or empty folder."""
    dest = Path(dest).expanduser().absolute()
    _format_module(fmt)
    if not dest.parent.is_dir():
        raise LabelExportError(f"{dest}: folder {dest.parent} does not exist")
    if fmt in FOLDER_FORMATS:
        if dest.exists() and not dest.is_dir():
            raise LabelExportError(f"{dest}: exists and is not a folder")
        if dest.is_dir() and any(dest.iterdir()):
            raise LabelExportError(
                f"{dest}: folder is not empty (a {fmt} export writes a new folder)"
            )
    elif dest.is_dir():
        raise LabelExportError(f"{dest}: is a folder (a COCO export is one .json file)")
    return dest


class LabelWriter:
    """Merges pieces into one export (step 2). Use as a context manager: an error aborts."""

    def __init__(self, dest: str | Path, fmt: str, categories: Categories | Sequence[str]) -> None:
        self.dest = check_destination(dest, fmt)
        self.fmt = fmt
        self.categories = (
            categories if isinstance(categories, Categories) else Categories(categories)
        )
        self._module = _format_module(fmt)
        self._tmp = self.dest.with_name(f".{self.dest.name}.{os.getpid()}.tmp")
        self._records: list[dict[str, Any]] = []
        self._ids: set[int] = set()
        self._closed = False
        if fmt in FOLDER_FORMATS:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp.mkdir()

    def encode(self, item: LabelledImage) -> Piece:
        return encode_piece(item, self.fmt, self.categories)

    def add(self, piece: Piece) -> None:
        if piece.id in self._ids:
            raise LabelExportError(f"image {piece.id} was added twice")
        self._ids.add(piece.id)
        for rel, data in piece.files.items():
            target = self._tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        for rel, source in piece.links.items():
            target = self._tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(source, target)
        self._records.append(piece.record)

    def close(self) -> Path:
        """Write the index and move the export into place; returns its path."""
        if self._closed:
            return self.dest
        index = self._module.finish(self._records, self.categories, self.dest)
        if self.fmt in FOLDER_FORMATS:
            for rel, data in index.items():
                (self._tmp / rel).write_bytes(data)
            if self.dest.is_dir():
                self.dest.rmdir()  # empty (checked): rename cannot replace a folder
            os.replace(self._tmp, self.dest)
        else:
            (data,) = index.values()
            self._tmp.write_bytes(data)
            os.replace(self._tmp, self.dest)
        self._closed = True
        return self.dest

    def abort(self) -> None:
        if self._tmp.is_dir() and not self._tmp.is_symlink():
            shutil.rmtree(self._tmp, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                self._tmp.unlink()
        self._closed = True

    def __len__(self) -> int:
        return len(self._records)

    def __enter__(self) -> LabelWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


def write_labels(
    items: Iterable[LabelledImage],
    dest: str | Path,
    fmt: str,
    categories: Categories | Sequence[str],
) -> Path:
    """Encode and merge in one process; returns the export's path."""
    with LabelWriter(dest, fmt, categories) as writer:
        for item in items:
            writer.add(writer.encode(item))
    return writer.dest


# -- from hits --------------------------------------------------------------------------
def read_mask(path: str | Path) -> np.ndarray:
    """A mask PNG as wherein wrote it, back to bool [H, W]."""
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("1") if im.mode != "1" else im, dtype=bool)


def images_from_hits(
    hits: Iterable[Any], category: str | Callable[[Any], str]
) -> Iterable[LabelledImage]:
    """One LabelledImage per hit that has a mask (hits went through add_masks); others are skipped.

    category: the category name for every hit, or a function of the hit.
    """
    for h in hits:
        mask_path = getattr(h, "mask_path", None)
        if not mask_path:
            continue
        mask = read_mask(mask_path)
        name = category(h) if callable(category) else category
        yield LabelledImage(
            id=int(h.id),
            path=h.path,
            width=mask.shape[1],
            height=mask.shape[0],
            instances=[Instance(name, mask, h.mask_score)],
        )


@dataclass
class StoredLabels:
    """Labels from `wherein label` for naming masks.

    best: catalog id -> the image's most probable label; names: every label
    stored for the index's model, sorted, so class ids stay the same from one
    export to the next.
    """

    best: dict[int, str]
    names: list[str]


def export_hits(
    hits: Sequence[Any],
    dest: str | Path,
    fmt: str,
    prompt: str,
    labels: StoredLabels | None = None,
) -> tuple[Path, int]:
    """Export masked hits; the category is the prompt, or the image's best stored label.

    Returns (path, images written). Images without a stored label keep the prompt.
    """
    masked = [h for h in hits if getattr(h, "mask_path", None)]
    cats, category = categories_for(masked, prompt, labels)
    path = write_labels(images_from_hits(masked, category), dest, fmt, cats)
    return path, len(masked)


def categories_for(
    hits: Sequence[Any], prompt: str, labels: StoredLabels | None = None
) -> tuple[Categories, Callable[[Any], str]]:
    """The export's categories for these hits and each hit's category: the prompt, or the
    hit's best stored label (every stored label is a category, so ids stay put from one
    export to the next; the prompt comes last, for hits without a label)."""
    best = labels.best if labels else {}
    names = list(labels.names) if labels else []
    if not labels or any(h.id not in best for h in hits):
        names.append(prompt)
    return Categories(names), lambda h: best.get(h.id, prompt)


def best_labels(catalog, ids: Iterable[int]) -> StoredLabels:
    """Each image's most probable stored label (from `wherein label`) for the index's model."""
    model_id = str(catalog.get_meta("model_id") or "")
    names = catalog.label_names(model_id)
    if not names:
        raise LabelExportError(
            "no labels stored in the catalog for the index's model: "
            "run `wherein label --labels 'a,b,c'` first"
        )
    return StoredLabels(catalog.best_labels(ids, model_id), names)
