"""What `wherein status` reports about an index."""

from __future__ import annotations

from wherein.indexer.store.index_store import IndexStore


def index_status(store: IndexStore) -> dict:
    cat = store.catalog
    vec = store.vectors
    skipped = [{"path": s["path"], "reason": s["reason"]} for s in cat.skipped()]
    usage = store.disk_usage()
    if vec.index is not None:
        choice = vec.choice.as_dict() if vec.choice else None
        in_faiss, current = vec.ntotal, vec.is_current(cat)
    else:  # opened without loading FAISS (status): the sidecar describes it
        side = vec.sidecar() or {}
        choice, in_faiss = side.get("index"), side.get("count", 0)
        current = side.get("generation") == cat.generation and side.get("model_id") == cat.get_meta(
            "model_id"
        )
    return {
        "index": str(store.dir),
        "images": cat.count_embedded(),  # embedded items: what search can find
        "files": cat.count_images(),
        "items": cat.count_items(),
        "catalog_rows": cat.count_images(),
        "pending": cat.count_items() - cat.count_embedded(),
        "skipped_count": len(skipped),
        "skipped": skipped,
        "model_id": cat.get_meta("model_id"),
        "model_file": cat.get_meta("model_file"),
        "space": cat.get_meta("space"),
        "dim": cat.get_meta("dim"),
        "generation": cat.generation,
        "schema_version": cat.schema_version,
        "vector_index": choice,
        "vectors_in_faiss": in_faiss,
        "vectors_current": current,
        "disk_bytes": usage,
        # vectors.f16: apparent vs allocated size (deleted rows' blocks are holes), dead bytes
        "vector_file": cat.vector_file_usage(),
        "disk_total_bytes": sum(usage.values()),
    }
