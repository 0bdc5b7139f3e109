"""What `wherein status` reports about an index."""

from __future__ import annotations

from wherein.indexer.store import IndexStore


def index_status(store: IndexStore) -> dict:
    cat = store.catalog
    vec = store.vectors
    skipped = [{"path": s["path"], "reason": s["reason"]} for s in cat.skipped()]
    usage = store.disk_usage()
    return {
        "index": str(store.dir),
        "images": cat.count_embedded(),
        "catalog_rows": cat.count_images(),
        "pending": cat.count_images() - cat.count_embedded(),
        "skipped_count": len(skipped),
        "skipped": skipped,
        "model_id": cat.get_meta("model_id"),
        "model_file": cat.get_meta("model_file"),
        "space": cat.get_meta("space"),
        "dim": cat.get_meta("dim"),
        "generation": cat.generation,
        "vector_index": vec.choice.as_dict() if vec.choice else None,
        "vectors_in_faiss": vec.ntotal,
        "vectors_current": vec.is_current(cat),
        "disk_bytes": usage,
        "disk_total_bytes": sum(usage.values()),
    }
