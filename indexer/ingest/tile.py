"""Cut the photos already in the catalog into regions (an index that gains ``--regions``).

A run with regions on cuts each photo it embeds as it reads it (read.load_file). The photos
embedded before regions were on, or copied from another row, are cut here after the run's
files are in: each is read again, only its regions go through the tower, and they are added
beside its whole item, which keeps its vector (nothing is re-embedded). The same pipeline as
the run's (prefetch, batched tower, one transaction per commit), so a run stopped midway
keeps what it committed and the next one cuts the rest (the ``tiled`` table says which).

A photo whose file changed since its row was written is left alone: the next run reads it
as changed and cuts it with its new bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from wherein.indexer.imaging import Prepared
from wherein.indexer.ingest.pipeline import CommitPolicy, Step, Tower, run_pipeline
from wherein.indexer.ingest.read import _Changed, read_whole
from wherein.indexer.kinds.registry import kinds, named
from wherein.indexer.regions import Tiling
from wherein.indexer.store.catalog import Catalog
from wherein.schemas.models import ImageInput


@dataclass(frozen=True)
class Uncut:
    """A photo in the catalog not cut yet, as its row recorded it."""

    id: int
    path: str
    size: int
    mtime_ns: int
    kind: str  # its media kind's name: the kind prepares it (indexer/kinds)


@dataclass
class Cut:
    photo: Uncut
    read: Prepared | None  # None: unreadable or changed now: left for a later run


def cut_photos(
    cat: Catalog,
    tower: Tower,
    spec: ImageInput,
    tiling: Tiling,
    workers: int,
    under: Sequence[str] | None = None,
    draft: bool = True,
    policy: CommitPolicy = CommitPolicy(),  # noqa: B008 - frozen, shared safely
    pool: ThreadPoolExecutor | None = None,
    progress: Callable[[int], object] | None = None,
) -> int:
    """Cut the photos under these folders (all: None) that are not cut yet; returns how
    many were cut (with regions or found to need none)."""
    untimed = [k.name for k in kinds() if not k.timed]  # a timed kind's items are frames
    todo = [Uncut(*row) for row in cat.files_to_tile(untimed, under)]
    done = 0

    def load(photo: Uncut) -> Cut:
        try:
            data, mtime_ns, _ = read_whole(photo.path)
        except (OSError, _Changed):
            return Cut(photo, None)
        if (len(data), mtime_ns) != (photo.size, photo.mtime_ns):
            return Cut(photo, None)
        return Cut(photo, named(photo.kind).prepare(data, spec, draft, mtime_ns, tiling))

    def route(photo: Uncut, cut: Cut) -> Step[Cut]:
        regions = cut.read.items[1:] if cut.read is not None else []
        return Step(cut, [px for _, px in regions] or None)

    def commit(steps: list[Step[Cut]]) -> None:
        nonlocal done
        added = False
        with cat.transaction():
            for s in steps:
                read = s.item.read
                if read is None:
                    continue
                if read.error or s.vector is None:  # no regions (small, flat, or broken now)
                    cat.mark_tiled(s.item.photo.id, tiling.name, 0)
                else:
                    boxes = [loc.box for loc, _ in read.items[1:]]
                    regions = [(b, v) for b, v in zip(boxes, s.vector, strict=True) if b]
                    cat.add_regions(s.item.photo.id, tiling.name, regions)
                    added = True
                done += 1
            if added:
                cat.bump_generation()
        if progress:
            progress(len(steps))

    run_pipeline(todo, load, route, commit, tower, workers, policy, pool=pool)
    return done
