"""Catalog rows from an EmbedSet, one transaction per shard; a path in several shards keeps the newest.

Shards come oldest first, so "newest wins" is decided row by row as they are
written: a row whose path already has one replaces it if its shard is newer than
the existing row's ``indexed_at`` (build-index stores the shard's completion time
there, to the millisecond), and is dropped otherwise (an equal time keeps what is
there: appending the same directory twice changes nothing). A newer shard that
failed to decode the path removes the older row and records the failure.

Lookups by path cost something only once rows of two sources can meet: a single
embed directory written into a new index never looks anything up.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from wherein.indexer.scale import shards as S
from wherein.indexer.scale.embed_set import EmbedSet, ShardRef
from wherein.indexer.store.catalog import Catalog
from wherein.schemas.locations import TAR_SEP

EXAMPLES = 5


@dataclass
class Duplicates:
    """Paths found in more than one place, and which copy was kept."""

    count: int = 0
    examples: list[dict] = field(default_factory=list)  # path, kept, dropped
    pairs: dict[tuple[str, str], int] = field(default_factory=dict)  # (kept, dropped) -> paths

    def add(self, path: str, kept: str, dropped: str) -> None:
        self.count += 1
        self.pairs[kept, dropped] = self.pairs.get((kept, dropped), 0) + 1
        if len(self.examples) < EXAMPLES:
            self.examples.append({"path": path, "kept": kept, "dropped": dropped})

    def by_source(self) -> list[dict]:
        """How many paths each (kept, dropped) pair of sources accounts for, most first: a
        resumed run meets a whole shard again, which is one line, not one per path."""
        ranked = sorted(self.pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        return [{"kept": k, "dropped": d, "paths": n} for (k, d), n in ranked]


@dataclass
class Filled:
    excluded: list[int] = field(default_factory=list)  # ids of the set that have no row
    replaced: list[int] = field(default_factory=list)  # ids of earlier rows a newer shard replaced
    duplicates: Duplicates = field(default_factory=Duplicates)


def shard_time(ref: ShardRef) -> str:
    when = datetime.fromtimestamp(ref.written_at, UTC) if ref.written_at else datetime.now(UTC)
    return when.isoformat(timespec="milliseconds")


def _when(iso: str | None) -> datetime:
    try:
        when = datetime.fromisoformat(iso) if iso else datetime.min
    except ValueError:
        when = datetime.min
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _format(cols: dict, j: int) -> str:
    """Row j's format by its content as embed read it; from a shard written before that was
    carried (or a file whose format was not known), its name's extension."""
    known = cols.get("format")
    if known and known[j]:
        return known[j]
    name = cols["uri"][j].rsplit(TAR_SEP, 1)[-1]
    return os.path.splitext(name)[1].lower().lstrip(".")


def fill_catalog(
    cat: Catalog, es: EmbedSet, first_new_id: int, say: Callable[[str], object]
) -> Filled:
    """Write every shard of ``es``; ids below ``first_new_id`` are rows of an earlier build."""
    return _Filler(cat, es, first_new_id).run(say)


class _Filler:
    def __init__(self, cat: Catalog, es: EmbedSet, first_new_id: int) -> None:
        self.cat, self.es, self.first_new_id = cat, es, first_new_id
        self.out = Filled()
        # file id -> its rows are written, for the file whose rows a batch ended on (a video's
        # frames or a photo's regions can go on in the next batch; a file's rows are in a row)
        self.decided: dict[int, bool] = {}

    def run(self, say: Callable[[str], object]) -> Filled:
        cat, es = self.cat, self.es
        had_rows = cat.count_images() > 0
        had_skips = bool(cat.skipped())
        sources: set[int] = set()  # directories that have written rows so far
        skip_sources: set[int] = set()
        for k, ref in enumerate(es.shards):
            when = shard_time(ref)
            meet = had_rows or bool(sources - {ref.source})
            meet_skips = had_skips or bool(skip_sources - {ref.source})
            with cat.transaction():
                for t in ref.batches():
                    vecs = S.embeddings(t, es.dim)
                    cols = t.drop(["embedding"]).to_pydict()
                    cols["uri"] = [S.uri_of_cell(u) for u in cols["uri"]]
                    paths = self._write_batch(cols, vecs, ref, when, meet, meet_skips)
                    if paths:
                        sources.add(ref.source)
                errors = ref.errors()
                if errors["uri"]:
                    keep = np.ones(len(errors["uri"]), bool)
                    if meet:
                        keep = self._resolve(errors["uri"], errors["id"], ref, when)
                    cat.record_skips(
                        (
                            errors["uri"][j],
                            errors["reason"][j],
                            errors["size"][j],
                            errors["mtime_ns"][j],
                            when,
                        )
                        for j in np.flatnonzero(keep)
                    )
                    skip_sources.add(ref.source)
            say(f"catalog: shard {k + 1}/{len(es.shards)}")
        return self.out

    def _write_batch(
        self, cols: dict, vecs: np.ndarray, ref: ShardRef, when: str, meet: bool, meet_skips: bool
    ) -> list[str]:
        """One batch of a shard's rows: photos in bulk, videos' frames after their file row,
        photos' regions after their whole view's (a file's rows can span two batches: it is
        decided, and written, once). Returns the paths of the files written."""
        cat, n = self.cat, len(cols["id"])
        kinds = cols.get("kind") or ["image"] * n
        file_ids = cols["file_id"]
        first = [j for j in range(n) if j == 0 or file_ids[j] != file_ids[j - 1]]
        new = [j for j in first if file_ids[j] not in self.decided]
        keep = np.ones(len(new), bool)
        if meet and new:
            keep = self._resolve([cols["uri"][j] for j in new], [file_ids[j] for j in new],
                                 ref, when)  # fmt: skip
        for j, k in zip(new, keep, strict=True):
            self.decided[file_ids[j]] = bool(k)
        written = [j for j, k in zip(new, keep, strict=True) if k]
        photos = [j for j in written if kinds[j] != "frame"]
        videos = [j for j in written if kinds[j] == "frame"]
        if photos:
            cat.insert_images([self._record(cols, j, when) for j in photos], vecs[photos])
        if videos:
            media = cols.get("media") or [None] * n  # shards from before: videos
            cat.insert_videos(
                [{**self._record(cols, j, when), "kind": media[j] or "video"} for j in videos],
                [{k: cols[k][j] for k in S.VIDEO_FIELDS if k in cols} for j in videos],
            )
        extra = [j for j in range(n) if kinds[j] in ("frame", "region")]
        kept = [j for j in extra if self.decided[file_ids[j]]]
        if kept:
            cat.insert_items(
                [(cols["id"][j], file_ids[j], kinds[j], cols["t"][j]) for j in kept],
                vecs[kept],
                [_box(cols, j) for j in kept],
            )
        # The photos cut (their regions follow, or they needed none): cut once, not again
        # by a later `wherein index` of an index with regions.
        counts = cols.get("regions") or [None] * n
        tiling = self.es.tilings[ref.source]
        if tiling is not None:
            cat.mark_tiled_many(
                (file_ids[j], tiling, counts[j]) for j in photos if counts[j] is not None
            )
        if n:  # only the batch's last file can go on in the next batch
            self.decided = {file_ids[-1]: self.decided[file_ids[-1]]}
        dropped = set(extra) - set(kept)  # items of a file an as new or newer row has
        self.out.excluded.extend(int(cols["id"][j]) for j in sorted(dropped))
        if written and "taken" in cols:  # shards written since EXIF is carried
            cat.store_photos(_photo_rows(cols, np.array(written, np.int64)))
        paths = [cols["uri"][j] for j in written]
        if paths and meet_skips:
            cat.forget_skips(paths)
        return paths

    def _record(self, cols: dict, j: int, when: str) -> dict:
        return {
            "id": cols["file_id"][j],
            "path": cols["uri"][j],
            "size": cols["size"][j],
            "mtime_ns": cols["mtime_ns"][j],
            "sha256": cols["sha256"][j],
            "width": cols["width"][j],
            "height": cols["height"][j],
            "format": _format(cols, j),
            "indexed_at": when,
            "model_id": self.es.model_id,
        }

    def _describe(self, item_id: int, indexed_at: str | None) -> str:
        if item_id >= self.first_new_id:
            return self.es.describe(item_id)
        return f"the index (indexed {indexed_at})"

    def _resolve(self, paths: list[str], ids: list[int], ref: ShardRef, when: str) -> np.ndarray:
        """Which of these rows to write: not those whose path has a row as new or newer.
        Older rows of the paths are deleted here (and remembered for FAISS)."""
        keep = np.ones(len(paths), bool)
        existing = self.cat.ids_for_paths(paths)
        if not existing:
            return keep
        rows = self.cat.rows_by_ids(existing.values())
        new_when = _when(when)
        position = {p: j for j, p in enumerate(paths)}
        older: list[int] = []
        for path, old_id in existing.items():
            j = position[path]
            old_at = rows[old_id]["indexed_at"] if old_id in rows else None
            if _when(old_at) >= new_when:
                keep[j] = False
                self.out.excluded.append(int(ids[j]))
                self.out.duplicates.add(path, self._describe(old_id, old_at), ref.name)
            else:
                older.append(old_id)
                self.out.duplicates.add(path, ref.name, self._describe(old_id, old_at))
        # FAISS holds items: a photo's id is its file's (with its regions' ids, if cut), a
        # video's are its frames'.
        frames = self.cat.embedded_frames(older)
        regions = self.cat.photo_regions(older)
        for old_id in older:
            gone = self.out.replaced if old_id < self.first_new_id else self.out.excluded
            items = frames.get(old_id) or regions.get(old_id) or [(old_id, None)]
            gone.extend(i for i, _ in items)
        self.cat.delete_images(older)
        return keep


def _box(cols: dict, j: int) -> tuple[float, float, float, float] | None:
    """A region row's box; None for a frame (and in shards from before regions)."""
    if cols.get("x0") is None or cols["x0"][j] is None:
        return None
    return (cols["x0"][j], cols["y0"][j], cols["x1"][j], cols["y1"][j])


def _photo_rows(cols: dict, rows: np.ndarray) -> list[dict]:
    """The photos table's rows for these shard rows: their EXIF as `wherein embed` read it (a
    video's taken/GPS), for the same bytes (size, mtime_ns) the images row describes."""
    return [
        {
            "image_id": cols["file_id"][j],
            "size": cols["size"][j],
            "mtime_ns": cols["mtime_ns"][j],
            **{k: cols[k][j] for k in S.PHOTO_FIELDS},
        }
        for j in rows
    ]
