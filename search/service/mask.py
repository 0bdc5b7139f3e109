"""The `wherein mask` workflow: where in one image, or one moment of a video, each prompt matches.

``mask_image`` resolves what to mask (a file, or ``id:N`` for a catalog id), checks that a
video comes with a time and a photo without one, loads CLIPSeg and runs one vision pass for
all prompts (kept in the index's vision store for later prompts on the same image or frame).
It returns a ``MaskRun`` whose ``to_dict()`` follows ``schemas/mask.schema.json``; the CLI
only renders it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wherein.schemas.errors import IndexError_, UsageError

_CATALOG_ID = re.compile(r"^id:(\d+)$")


@dataclass(frozen=True)
class PromptMask:
    """One prompt's mask: its size, area, score and boxes, and the files written (None with
    no files)."""

    prompt: str
    width: int
    height: int
    mask_area: float
    mask_score: float
    bbox: dict[str, list[int]] | None
    regions: int
    mask_path: str | None = None
    overlay_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MaskRun:
    """What `wherein mask` found: the file masked, the moment (None for a photo), whether the
    stand-in models answered, and one PromptMask per prompt in the order given."""

    image: str
    time: float | None
    standin: bool
    masks: list[PromptMask] = field(default_factory=list)

    @property
    def size(self) -> tuple[int, int]:
        """(W, H) of the image or frame as a viewer shows it."""
        return (self.masks[0].width, self.masks[0].height) if self.masks else (0, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "time": self.time,
            "standin": self.standin,
            "masks": [m.to_dict() for m in self.masks],
        }


def mask_image(
    image: str,
    prompts: Sequence[str],
    out_dir: Path | None = None,
    *,
    time: float | None = None,
    full_size_overlays: bool = False,
    index_dir: Path | None = None,
    models_dir: Path | None = None,
    on_models: Callable[[Any], None] | None = None,
) -> MaskRun:
    """Mask each prompt on IMAGE (a path or id:N), on its frame at `time` seconds when it is a
    video; with out_dir, writes <stem>.<prompt>.mask.png and .overlay.jpg there
    (<name>@<time>s.<prompt>... for a frame).

    A video without a time, or a time for a photo, is a UsageError; a time outside the
    video a WhereinError that gives the video's range. on_models is told the ModelDir before
    the model loads (the CLI's stand-in banner).
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import load_segmenter
    from wherein.search.cache.vision_store import VisionStore
    from wherein.search.localize.masking import mask_file

    path = resolve_image(image, index_dir)
    check_time(path, time)
    models = ModelDir(P.models_dir(models_dir))
    if on_models is not None:
        on_models(models)
    model = load_segmenter(models)
    results = mask_file(
        model,
        path,
        list(prompts),
        out_dir,
        full_size_overlays=full_size_overlays,
        store=VisionStore.in_index(P.index_dir(index_dir)),
        time=time,
    )
    masks = []
    for res, files in results:
        s = res.summary()
        masks.append(
            PromptMask(
                s["prompt"],
                s["width"],
                s["height"],
                s["mask_area"],
                s["mask_score"],
                s["bbox"],
                s["regions"],
                files.get("mask"),
                files.get("overlay"),
            )
        )
    return MaskRun(str(path), time, models.is_standin, masks)


def check_time(path: Path, time: float | None) -> None:
    """A file of a timed kind (a video, by content) needs the moment to mask; a photo has
    none."""
    from wherein.indexer.kinds.registry import kind_of

    kind = kind_of(path)
    if kind.timed and time is None:
        raise UsageError(
            f"{path} is a {kind.name}: give --time SECONDS for the moment to mask "
            "(e.g. --time 12.5)"
        )
    if not kind.timed and time is not None:
        raise UsageError(f"--time applies to a video, and {path} is not one")
    if time is not None and not math.isfinite(time):
        raise UsageError(f"--time {time}: not a number of seconds")


def resolve_image(image: str, index_dir: Path | None) -> Path:
    """IMAGE as given: an existing file, else id:N looked up in the index's catalog."""
    path = Path(image).expanduser()
    if path.is_file():
        return path
    found = _CATALOG_ID.match(image)
    if found is None:
        if path.exists():
            raise UsageError(f"{image}: not a file")
        raise UsageError(f"{image}: no such file (or give id:N, a catalog id in --index)")
    from wherein.indexer import paths as P
    from wherein.indexer.store.index_store import IndexStore

    image_id = int(found.group(1))
    with IndexStore.open(P.index_dir(index_dir), load_vectors=False) as store:
        # Catalog ids are SQLite integers: a larger N is no image, not an overflow.
        row = store.catalog.rows_by_ids([image_id]).get(image_id) if image_id < 2**63 else None
        where = store.dir
    if row is None:
        raise IndexError_(f"{where}: no image with id {image_id}")
    if not Path(row["path"]).is_file():
        raise IndexError_(
            f"{row['path']} (id {image_id}) is gone; run `wherein index` on its folder"
        )
    return Path(row["path"])
