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
from wherein.indexer.scale.sources import TAR_SEP
from wherein.indexer.store.catalog import Catalog

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


def _fmt(uri: str) -> str:
    name = uri.rsplit(TAR_SEP, 1)[-1]
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
                    keep = np.ones(len(cols["id"]), bool)
                    if meet:
                        keep = self._resolve(cols["uri"], cols["id"], ref, when)
                    records = [
                        {
                            "id": cols["id"][j],
                            "path": cols["uri"][j],
                            "size": cols["size"][j],
                            "mtime_ns": cols["mtime_ns"][j],
                            "sha256": cols["sha256"][j],
                            "width": cols["width"][j],
                            "height": cols["height"][j],
                            "format": _fmt(cols["uri"][j]),
                            "indexed_at": when,
                            "model_id": es.model_id,
                        }
                        for j in np.flatnonzero(keep)
                    ]
                    if records:
                        cat.insert_images(records, vecs[keep])
                        if "taken" in cols:  # shards written since EXIF is carried
                            cat.store_photos(_photo_rows(cols, np.flatnonzero(keep)))
                        sources.add(ref.source)
                        if meet_skips:
                            cat.forget_skips([r["path"] for r in records])
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
        older = []
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
                gone = self.out.replaced if old_id < self.first_new_id else self.out.excluded
                gone.append(old_id)
        self.cat.delete_images(older)
        return keep


def _photo_rows(cols: dict, rows: np.ndarray) -> list[dict]:
    """The photos table's rows for these shard rows: their EXIF as `wherein embed` read it,
    for the same bytes (size, mtime_ns) the images row describes."""
    return [
        {
            "image_id": cols["id"][j],
            "size": cols["size"][j],
            "mtime_ns": cols["mtime_ns"][j],
            **{k: cols[k][j] for k in S.PHOTO_FIELDS},
        }
        for j in rows
    ]
