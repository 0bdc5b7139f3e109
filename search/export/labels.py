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
   result into place (a one-file COCO export goes through destination.py: a
   stream or standard output too). A failed or interrupted export leaves nothing
   behind.

``write_labels`` runs both steps for images held in memory; ``images_from_hits``
makes those images from hits that went through ``MaskSession.add_masks`` (it reads each
hit's mask PNG, so the labels are exactly the masks wherein wrote).

The data types (Piece, Categories, ...) are in pieces.py, the codecs in coco.py,
yolo.py and pngmasks.py, reached through the format registry (formats.py).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wherein.search.export.destination import (
    Destination,
    Guard,
    folder_is_ours,
    frames_destination,
    resolve,
    write_export_manifest,
    write_frames_manifest,
)
from wherein.search.export.errors import ExportError, LabelExportError
from wherein.search.export.formats import FORMATS, LABEL_FORMATS, Format
from wherein.search.export.pieces import (  # re-exported: the label export's vocabulary
    FRAMES,
    Categories,
    FrameNames,
    Instance,
    LabelledImage,
    Piece,
    base_name,
    frames_folder,
)

__all__ = [
    "Categories",
    "FrameNames",
    "Instance",
    "LabelExportError",
    "LabelWriter",
    "LabelledImage",
    "Piece",
    "StoredLabels",
    "base_name",
    "best_labels",
    "categories_for",
    "check_destination",
    "encode_piece",
    "export_hits",
    "frame_jpeg",
    "images_from_hits",
    "read_mask",
    "write_labels",
]


def label_format(fmt: str) -> Format:
    if fmt not in LABEL_FORMATS:
        raise LabelExportError(
            f"unknown label format {fmt!r} (choose from {', '.join(LABEL_FORMATS)})"
        )
    return FORMATS[fmt]


def encode_piece(item: LabelledImage, fmt: str, categories: Categories | Sequence[str]) -> Piece:
    """One image's labels in a format (step 1; runs anywhere, needs nothing but the image)."""
    cats = categories if isinstance(categories, Categories) else Categories(categories)
    for inst in item.instances:
        if inst.mask.shape != (item.height, item.width):
            raise LabelExportError(
                f"{item.path}: mask is {inst.mask.shape[1]}x{inst.mask.shape[0]}, "
                f"image {item.width}x{item.height}"
            )
    return label_format(fmt).encode(item, cats)


def check_destination(
    dest: str | Path, fmt: str, keep: Sequence[Guard] = (), reads: Iterable[str] = ()
) -> Destination:
    """Fail before any work: see destination.resolve (a folder export needs a new or empty
    folder, or its own earlier one; nothing inside a kept folder, over a kept file or an
    image read)."""
    f = label_format(fmt)
    try:
        return resolve(dest, f, keep, reads)
    except LabelExportError:
        raise
    except ExportError as exc:
        raise LabelExportError(str(exc)) from None


class LabelWriter:
    """Merges pieces into one export (step 2). Use as a context manager: an error aborts.

    dest: a path, a symlink (written through), a FIFO or character device (a file
    format, streamed), or - (standard output, a file format); keep/reads as in
    check_destination, checked again here.
    """

    def __init__(
        self,
        dest: str | Path,
        fmt: str,
        categories: Categories | Sequence[str],
        keep: Sequence[Guard] = (),
        reads: Iterable[str] = (),
    ) -> None:
        reads = list(reads)  # checked now, and again when the first frame comes
        self.destination = check_destination(dest, fmt, keep, reads)
        self.dest = Path(dest) if str(dest) == "-" else Path(dest).expanduser().absolute()
        self.fmt = fmt
        self.categories = (
            categories if isinstance(categories, Categories) else Categories(categories)
        )
        self._format = label_format(fmt)
        self._records: list[dict[str, Any]] = []
        self._ids: set[int] = set()
        self._closed = False
        self._keep = keep
        self._reads = reads
        self._tmp: Path | None = None
        self._frames: Path | None = None  # a one-file export's frames, before the rename
        self._frames_target: Path | None = None
        if self.destination.kind == "folder":
            target = self.destination.path
            assert target is not None
            # Beside the target (a symlink's too), so that the rename stays on one file system.
            self._tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
            self._tmp.mkdir()

    def encode(self, item: LabelledImage) -> Piece:
        return encode_piece(item, self.fmt, self.categories)

    def add(self, piece: Piece) -> None:
        if piece.id in self._ids:
            raise LabelExportError(f"image {piece.id} was added twice")
        self._ids.add(piece.id)
        if (piece.files or piece.links) and self._tmp is None and not self._frames_only(piece):
            raise LabelExportError(f"a {self.fmt} export is one file: a piece cannot add files")
        for rel, data in piece.files.items():
            target = self._inside(rel) if self._tmp is not None else self._frame_file(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        for rel, source in piece.links.items():
            target = self._inside(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(source, target)
        self._records.append(piece.record)

    def _inside(self, rel: str) -> Path:
        """A piece's file, which stays inside the export folder (no absolute or .. names)."""
        assert self._tmp is not None
        target = self._tmp / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise LabelExportError(f"{rel}: a file of an export stays inside its folder")
        return target

    def _frames_only(self, piece: Piece) -> bool:
        return not piece.links and all(Path(rel).parts[0] == FRAMES for rel in piece.files)

    def _frame_file(self, rel: str) -> Path:
        """Where a one-file export's frame goes until close(): a folder beside the frames
        folder, checked (destination.frames_destination) when the first frame comes."""
        if self._frames is None:
            try:
                target = frames_destination(
                    self.destination.given, frames_folder(self.dest), self._keep, self._reads
                )
            except LabelExportError:
                raise
            except ExportError as exc:
                raise LabelExportError(str(exc)) from None
            self._frames_target = target
            self._frames = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
            self._frames.mkdir()
        name = Path(rel).relative_to(FRAMES)
        if len(name.parts) != 1 or name.name in ("", ".", ".."):
            raise LabelExportError(f"{rel}: a frame of an export stays inside its folder")
        return self._frames / name

    def _place_frames(self) -> None:
        """The new frames folder in place of the old one (an earlier export's frames, checked
        when the first frame came): renamed aside, the new one renamed in, the old removed."""
        if self._frames is None:
            return
        target = self._frames_target
        assert target is not None
        write_frames_manifest(self._frames)
        old = None
        if target.is_dir():
            old = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.old")
            os.replace(target, old)
        os.replace(self._frames, target)
        self._frames = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def close(self) -> Path:
        """Write the index and move the export into place; returns its path."""
        if self._closed:
            return self.dest
        index = self._format.finish(self._records, self.categories, self.dest)
        self._place_frames()  # before the file that names them
        if self._tmp is not None:
            target = self.destination.path
            assert target is not None
            for rel, data in index.items():
                self._inside(rel).write_bytes(data)
            write_export_manifest(self._tmp, self.fmt)
            old = None
            if target.is_dir() and any(target.iterdir()):
                # Checked again now: an earlier export's folder, unchanged since the start.
                if not folder_is_ours(target, self.fmt):
                    self.abort()
                    raise LabelExportError(
                        f"{self.destination.given}: folder changed during the export "
                        "(not an earlier export any more); nothing was replaced"
                    )
                old = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.old")
                os.replace(target, old)
            elif target.is_dir():
                target.rmdir()  # empty (rmdir refuses otherwise): rename cannot replace a folder
            os.replace(self._tmp, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        else:
            (data,) = index.values()
            self.destination.write(data)
        self._closed = True
        return self.dest

    def abort(self) -> None:
        for tmp in (self._tmp, self._frames):
            if tmp is not None and tmp.is_dir() and not tmp.is_symlink():
                shutil.rmtree(tmp, ignore_errors=True)
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
    keep: Sequence[Guard] = (),
    reads: Iterable[str] = (),
) -> Path:
    """Encode and merge in one process; returns the export's path."""
    with LabelWriter(dest, fmt, categories, keep, reads) as writer:
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
    """One LabelledImage per hit that has a mask (hits went through MaskSession.add_masks); others are skipped.

    category: the category name for every hit, or a function of the hit. A video hit's
    mask is of its best frame: that frame comes with it, as JPEG, named after the video
    and the time (clip.mp4@12.50s; -<item id> added when two frames would share a name).
    A photo hit's best region (masking.hit_region) goes with it into the export.
    """
    from wherein.search.localize.masking import hit_region, hit_time

    names = FrameNames()
    for h in hits:
        mask_path = getattr(h, "mask_path", None)
        if not mask_path:
            continue
        mask = read_mask(mask_path)
        name = category(h) if callable(category) else category
        item = LabelledImage(
            id=int(h.id),
            path=h.path,
            width=mask.shape[1],
            height=mask.shape[0],
            instances=[Instance(name, mask, h.mask_score)],
            region=hit_region(h),
        )
        time = hit_time(h)
        if time is not None:
            item = _with_frame(item, h, time, names)
        yield item


FRAME_QUALITY = 92  # a training image: close to the decoded frame, a fraction of a PNG's size


def frame_jpeg(image: Any) -> bytes:
    """A video's frame (a PIL image) as the JPEG a frame dataset holds."""
    import io

    buf = io.BytesIO()
    image.convert("RGB").save(buf, "JPEG", quality=FRAME_QUALITY)
    return buf.getvalue()


def _with_frame(item: LabelledImage, hit: Any, time: float, names: FrameNames) -> LabelledImage:
    """The frame a video hit's mask was made on (frame_at: the same frame, the same size)."""
    from wherein.indexer.imaging import DecodeError
    from wherein.search.localize.masking import frame_image

    try:
        image = frame_image(hit.path, time)
    except DecodeError as exc:  # the video changed or went since its mask was made
        raise LabelExportError(f"{hit.path}: the frame at {time:g} s: {exc}") from None
    if image.size != (item.width, item.height):
        raise LabelExportError(
            f"{hit.path}: the frame at {time:g} s is {image.width}x{image.height}, its mask "
            f"{item.width}x{item.height} (the video changed since its mask was made?)"
        )
    item_id = getattr(hit, "item_id", None)
    frame_id = int(item_id) if item_id is not None else item.id
    return dataclasses.replace(
        item,
        id=frame_id,
        time=time,
        frame=frame_jpeg(image),
        name=names(hit.path, time, frame_id),
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
    keep: Sequence[Guard] = (),
) -> tuple[Path, int]:
    """Export masked hits; the category is the prompt, or the image's best stored label.

    Returns (path, images written). Images without a stored label keep the prompt.
    """
    masked = [h for h in hits if getattr(h, "mask_path", None)]
    cats, category = categories_for(masked, prompt, labels)
    reads = [h.path for h in hits]
    path = write_labels(images_from_hits(masked, category), dest, fmt, cats, keep, reads)
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
