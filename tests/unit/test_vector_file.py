"""vectors.f16: the float16 rows search re-scores with, as the catalog keeps and reads them."""

from __future__ import annotations

import numpy as np
import pytest

from wherein.indexer.store.catalog import Catalog
from wherein.indexer.store.vector_file import VECTOR_FILE, VectorFile

DIM = 8


def unit(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def rec(i: int) -> dict:
    return {
        "id": i,
        "path": f"/p/{i}.png",
        "size": 1,
        "mtime_ns": 1,
        "sha256": "",
        "width": 1,
        "height": 1,
        "format": "png",
        "indexed_at": "2026-01-01T00:00:00.000+00:00",
        "model_id": "m",
    }


def bulk(cat: Catalog, ids: list[int], vecs: np.ndarray) -> None:
    with cat.transaction():
        cat.insert_images([rec(i) for i in ids], vecs)


@pytest.fixture()
def f16_cat(tmp_path):
    c = Catalog(tmp_path / "catalog.db")
    with c.transaction():
        c.set_meta("dim", DIM)
        c.use_vector_file(DIM)
    yield c
    c.close()


def test_rows_by_id_any_order_holes_read_as_zeros(tmp_path):
    v = unit(5)
    f = VectorFile(tmp_path / "v.f16", DIM)
    f.write(np.array([5, 1, 2]), v[[4, 0, 1]])  # two runs, out of order
    got = f.read(np.array([1, 2, 3, 5, 9]))
    assert np.allclose(got[[0, 1, 3]], v[[0, 1, 4]], atol=1e-3)
    assert not got[2].any() and not got[4].any()  # never written / past the end
    assert np.array_equal(f.read_span(np.array([1, 2, 3, 5])), got[:4])
    f.close()


def test_a_reader_sees_rows_written_after_it_mapped_the_file(tmp_path):
    v = unit(4)
    w = VectorFile(tmp_path / "v.f16", DIM)
    w.write(np.array([1]), v[:1])
    r = VectorFile(tmp_path / "v.f16", DIM, readonly=True)
    assert np.allclose(r.read(np.array([1])), v[:1], atol=1e-3)
    w.write(np.array([2, 3, 4]), v[1:])
    assert np.allclose(r.read(np.array([4, 2])), v[[3, 1]], atol=1e-3)
    w.close()
    r.close()


def test_bulk_rows_keep_vectors_in_the_file_not_the_catalog(f16_cat, tmp_path):
    v = unit(6)
    bulk(f16_cat, [1, 2, 3, 4, 5, 6], v)
    assert (tmp_path / VECTOR_FILE).stat().st_size == 6 * DIM * 2
    assert f16_cat.count_embedded() == 6 and f16_cat.misshapen_embeddings(DIM) == 0
    ids, got = f16_cat.vectors_for([6, 2, 99])
    assert list(ids) == [2, 6]
    assert np.allclose(got, v[[1, 5]], atol=1e-3) and not np.array_equal(got, v[[1, 5]])
    batches = list(f16_cat.iter_vectors(batch=4))
    assert [list(b[0]) for b in batches] == [[1, 2, 3, 4], [5, 6]]
    assert np.allclose(np.concatenate([b[1] for b in batches]), v, atol=1e-3)


def test_rows_survive_reopen_also_read_only(f16_cat, tmp_path):
    v = unit(3)
    bulk(f16_cat, [1, 2, 3], v)
    with f16_cat.transaction():
        f16_cat.delete_images([2])
    f16_cat.close()
    for readonly in (False, True):
        again = Catalog(tmp_path / "catalog.db", readonly=readonly)
        ids, got = again.vectors_for([1, 2, 3])
        assert list(ids) == [1, 3] and np.allclose(got, v[[0, 2]], atol=1e-3)
        again.close()


def test_float32_rows_beside_file_rows(f16_cat):
    """The ingest path (insert_image, set_embedding) keeps float32 blobs; both read back."""
    v = unit(3)
    bulk(f16_cat, [1, 2], v[:2])
    with f16_cat.transaction():
        new = f16_cat.insert_image({k: x for k, x in rec(0).items() if k != "id"}, v[2])
        f16_cat.set_embedding(1, v[2])  # re-embedded: the file row is dead from now on
    ids, got = f16_cat.vectors_for([1, 2, new])
    assert list(ids) == [1, 2, new]
    assert np.array_equal(got[0], v[2]) and np.array_equal(got[2], v[2])  # exact: float32
    assert np.allclose(got[1], v[1], atol=1e-3)
    assert f16_cat.misshapen_embeddings(DIM) == 0


def test_empty_blob_without_the_file_is_misshapen(tmp_path):
    c = Catalog(tmp_path / "catalog.db")
    bulk(c, [1], unit(1))  # no vector file: a float32 blob
    assert c.misshapen_embeddings(DIM) == 0 and not (tmp_path / VECTOR_FILE).exists()
    assert c.misshapen_embeddings(DIM * 2) == 1
    c.close()
