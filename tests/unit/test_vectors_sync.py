"""FAISS follows the catalog: VectorIndex.sync and IndexStore.ensure_vectors on tiny random vectors."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from wherein.indexer.normalize import unit_rows
from wherein.indexer.store import vectors as V
from wherein.indexer.store.index_store import IndexStore
from wherein.indexer.store.vectors import VectorIndex, index_ids

DIM = 8
RNG = np.random.default_rng(7)


def rec(i: int) -> dict:
    return {
        "path": f"/p/{i}.png",
        "size": i,
        "mtime_ns": i,
        "sha256": f"{i:064x}",
        "width": 1,
        "height": 1,
        "format": "png",
        "indexed_at": "t",
        "model_id": "m1",
    }


def fill(store: IndexStore, n: int, model_id: str = "m1") -> list[int]:
    """n new rows with random vectors, one committed batch (generation + 1)."""
    cat = store.catalog
    start = cat.max_id()
    with cat.transaction():
        cat.set_meta("model_id", model_id)
        cat.set_meta("dim", DIM)
        ids = [
            cat.insert_image(rec(start + k), RNG.standard_normal(DIM).astype(np.float32))
            for k in range(n)
        ]
        cat.bump_generation()
    return ids


@pytest.fixture()
def store(tmp_path):
    s = IndexStore.open(tmp_path / "index", write=True, create=True)
    yield s
    s.close()


def faiss_ids(vi: VectorIndex) -> list[int]:
    assert vi.index is not None
    return sorted(index_ids(vi.index).tolist())


def on_disk(store: IndexStore) -> VectorIndex:
    vi = VectorIndex(store.dir)
    assert vi.load()
    return vi


def test_first_sync_builds_from_the_catalog_and_saves(store):
    ids = fill(store, 5)
    note = store.ensure_vectors()
    assert note.startswith("rebuilt flat")
    disk = on_disk(store)
    assert faiss_ids(disk) == ids and disk.generation == store.catalog.generation
    assert store.ensure_vectors() == ""  # current: nothing to do
    # The stored vectors, normalised, are what FAISS returns.
    got, vecs = store.catalog.vectors_for(ids[:1])
    assert np.allclose(disk.index.reconstruct(int(got[0])), unit_rows(vecs)[0], atol=1e-6)


def test_ids_missing_in_faiss_are_added_and_extra_ones_removed(store):
    ids = fill(store, 6)
    store.ensure_vectors()
    with store.catalog.transaction():
        store.catalog.delete_images(ids[:2])
        store.catalog.bump_generation()
    new = fill(store, 3)
    note = store.ensure_vectors()
    assert note == "updated index: +3 -2 vectors"
    assert faiss_ids(store.vectors) == faiss_ids(on_disk(store)) == ids[2:] + new


def test_a_stale_file_after_a_crash_is_repaired_on_open(store):
    ids = fill(store, 4)
    store.ensure_vectors()
    # A writer committed a batch, then died before saving FAISS.
    more = fill(store, 2)
    reopened = IndexStore.open(store.dir)  # loads the stale file
    assert reopened.vectors.generation != reopened.catalog.generation
    assert reopened.ensure_vectors(persist=True) == "updated index: +2 -0 vectors"
    assert faiss_ids(on_disk(store)) == ids + more
    assert on_disk(store).generation == store.catalog.generation
    reopened.close()


def test_a_foreign_id_in_faiss_goes_when_the_generation_disagrees(store):
    ids = fill(store, 3)
    store.ensure_vectors()
    vi = store.vectors
    vi.index.add_with_ids(
        unit_rows(RNG.standard_normal((1, DIM)).astype(np.float32)), np.array([999], dtype=np.int64)
    )
    vi.generation = -5
    assert vi.sync(store.catalog) == "updated index: +0 -1 vectors"
    assert faiss_ids(vi) == ids


def test_a_model_change_rebuilds(store):
    fill(store, 3)
    store.ensure_vectors()
    with store.catalog.transaction():
        store.catalog.clear_embeddings()
    ids = fill(store, 2, model_id="m2")
    note = store.ensure_vectors()
    assert note.startswith("rebuilt flat") and store.vectors.model_id == "m2"
    assert faiss_ids(on_disk(store)) == ids and on_disk(store).model_id == "m2"


def test_growing_past_the_exact_limit_switches_index_type(store, monkeypatch):
    monkeypatch.setattr(V, "EXACT_LIMIT", 100)
    fill(store, 50)
    store.ensure_vectors()
    assert store.vectors.choice.kind == "flat"
    fill(store, 300)  # at least nlist (64) points to train the IVF lists on
    note = store.ensure_vectors()
    assert note.startswith("rebuilt ivf-sq8")
    assert isinstance(faiss.extract_index_ivf(store.vectors.index), faiss.IndexIVF)
    assert faiss_ids(on_disk(store)) == store.catalog.embedded_ids().tolist()
    assert store.check().ok


def test_check_passes_after_sync_and_names_a_mismatch(store):
    fill(store, 4)
    store.ensure_vectors()
    assert store.check().ok
    # FAISS claims to be current but lacks a row: check reports it.
    vi = store.vectors
    vi.index.remove_ids(faiss.IDSelectorBatch(np.array([1], dtype=np.int64)))
    vi.save()
    rep = store.check()
    assert not rep.ok and "1 missing" in rep.problems[0]
