"""What `wherein status` (and the web app's /api/status) reports about an index.

``IndexStatus.to_dict()`` is the JSON both print; ``schemas/status.schema.json``
describes it, and /api/status adds the web app's caches to the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wherein.indexer.store.index_store import IndexStore, kind_counts


@dataclass
class IndexStatus:
    index: str
    images: int  # items with a vector: what search can find
    files: int  # indexed files (catalog rows)
    items: int  # what the files yield (a photo: one)
    catalog_rows: int
    skipped: list[dict[str, str]]  # {"path", "reason"}
    model_id: str | None
    model_file: str | None
    space: str | None
    dim: int | None
    generation: int
    schema_version: int
    vector_index: dict | None  # the FAISS index's kind and factory (IndexChoice.as_dict())
    vectors_in_faiss: int
    vectors_current: bool
    disk_bytes: dict[str, int]
    vector_file: dict | None  # vectors.f16: apparent vs allocated size, dead bytes
    # Per media kind (every registered one, then any other the catalog names): files, and for
    # a timed kind its frames and the files a stopped run left incomplete (the next index
    # run finishes them). videos/frames/videos_incomplete are the video kind's (kept keys).
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    video_damage: list[dict[str, str]] = field(default_factory=list)  # {"path", "damage"}
    regions: str | None = None  # the tiling later runs cut photos by (index --regions)
    photos_cut: int = 0  # photos cut into regions (or found to need none)
    region_items: int = 0  # their region items
    models: dict | None = None  # models_report(): would these models keep the vectors?
    family: str | None = None  # the model family that built the vectors (registry key)
    check: dict | None = None  # {"ok", "problems", "repaired"} after `status --check`

    def to_dict(self) -> dict[str, Any]:
        video = {"files": 0, "frames": 0, "incomplete": 0, **self.kinds.get("video", {})}
        out: dict[str, Any] = {
            "index": self.index,
            "searchable": self.images,
            "images": self.images,  # deprecated: searchable
            "files": self.files,
            "items": self.items,
            "catalog_rows": self.catalog_rows,
            "pending": self.items - self.images,
            "skipped_count": len(self.skipped),
            "skipped": self.skipped,
            "model_id": self.model_id,
            "model_file": self.model_file,
            "space": self.space,
            "family": self.family,
            "dim": self.dim,
            "generation": self.generation,
            "schema_version": self.schema_version,
            "vector_index": self.vector_index,
            "vectors_in_faiss": self.vectors_in_faiss,
            "vectors_current": self.vectors_current,
            "disk_bytes": self.disk_bytes,
            "vector_file": self.vector_file,
            "disk_total_bytes": sum(self.disk_bytes.values()),
            "kinds": self.kinds,
            "videos": video["files"],
            "frames": video["frames"],
            "videos_incomplete": video["incomplete"],
            "video_damage": self.video_damage,
            "regions": self.regions,
            "photos_cut": self.photos_cut,
            "region_items": self.region_items,
        }
        if self.models is not None:
            out["models"] = self.models
        if self.check is not None:
            out["check"] = self.check
        return out


def index_status(store: IndexStore) -> IndexStatus:
    cat = store.catalog
    vec = store.vectors
    if vec.index is not None:
        choice = vec.choice.as_dict() if vec.choice else None
        in_faiss, current = vec.ntotal, vec.is_current(cat)
    else:  # opened without loading FAISS (status): the sidecar describes it
        side = vec.sidecar() or {}
        choice, in_faiss = side.get("index"), side.get("count", 0)
        current = side.get("generation") == cat.generation and side.get("model_id") == cat.get_meta(
            "model_id"
        )
    dim = cat.get_meta("dim")
    cut, region_items = cat.count_tiled()
    return IndexStatus(
        index=str(store.dir),
        images=cat.count_embedded(),
        files=cat.count_images(),
        items=cat.count_items(),
        catalog_rows=cat.count_images(),
        skipped=[{"path": s["path"], "reason": s["reason"]} for s in cat.skipped()],
        model_id=cat.get_meta("model_id"),
        model_file=cat.get_meta("model_file"),
        space=cat.get_meta("space"),
        family=cat.get_meta("family"),
        dim=int(dim) if dim is not None else None,
        generation=cat.generation,
        schema_version=cat.schema_version,
        vector_index=choice,
        vectors_in_faiss=in_faiss,
        vectors_current=current,
        disk_bytes=store.disk_usage(),
        vector_file=cat.vector_file_usage(),
        kinds=kind_counts(cat),
        video_damage=[{"path": p, "damage": d} for p, d in cat.video_damage()],
        regions=cat.get_meta("regions"),
        photos_cut=cut,
        region_items=region_items,
    )


def models_report(models, index_model_id: str | None) -> dict[str, Any]:
    """Would `wherein index` with these models (a ModelDir) keep the index's vectors?
    matches_index is None when it cannot tell (no image tower there, or an empty index)."""
    from wherein.indexer.models.registry import entry_for
    from wherein.schemas.errors import ModelError

    out: dict[str, Any] = {
        "dir": str(models.root),
        "standin": models.is_standin,
        "family": models.model_key,
        "model_id": None,
    }
    try:
        out["model_id"] = entry_for(models).identify(models)[0]
    except (ModelError, OSError) as exc:
        out["problem"] = str(exc)
    out["matches_index"] = (
        None
        if out["model_id"] is None or index_model_id is None
        else out["model_id"] == index_model_id
    )
    return out
