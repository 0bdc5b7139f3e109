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


# -- dead rows give their disk blocks back (punch_dead) ---------------------------------
WIDE = 768  # the real dimension: 1536-byte rows, which straddle 4 KiB blocks


def wide(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, WIDE)).astype(np.float32)


def raw_rows(path, dim: int, ids) -> list[bytes]:
    data, row = path.read_bytes(), dim * 2
    return [data[(i - 1) * row : i * row] for i in ids]


def live_from(alive: set[int]):
    return lambda lo, hi: np.array(sorted(i for i in alive if lo <= i <= hi), np.int64)


def punchable(path) -> bool:
    from wherein.indexer.store.vector_file import punch_hole

    with open(path, "wb") as f:
        f.write(b"x" * 16384)
        f.flush()
        return punch_hole(f.fileno(), 4096, 4096)


@pytest.fixture()
def sparse_ok(tmp_path):
    if not punchable(tmp_path / "probe"):
        pytest.skip("this filesystem cannot punch holes")


def test_dead_rows_give_back_their_blocks_and_live_rows_keep_every_byte(tmp_path, sparse_ok):
    f = VectorFile(tmp_path / "v.f16", WIDE)
    f.write(np.arange(1, 101), wide(100))
    f.sync()
    before = f.allocated_bytes()
    alive = set(range(1, 101)) - set(range(20, 60))  # ids 20-59 deleted
    kept = raw_rows(f.path, WIDE, sorted(alive))
    dead_row_20 = raw_rows(f.path, WIDE, [20])[0]

    freed = f.punch_dead(live_from(alive), np.arange(20, 60))

    # Ids 20-59 are bytes 29184-90624: blocks 8-21 hold only them (57344 bytes); block 7
    # is shared with id 19 and block 22 with id 60.
    assert freed == 14 * 4096 and f.allocated_bytes() == before - freed
    assert f.path.stat().st_size == 100 * WIDE * 2  # the size is kept
    assert raw_rows(f.path, WIDE, sorted(alive)) == kept  # bit-identical
    # Id 20 lies in block 7, shared with live id 19: that block keeps its bytes.
    assert raw_rows(f.path, WIDE, [20])[0] == dead_row_20
    assert not f.read(np.array([40])).any()  # a row inside punched blocks reads as zeros
    f.close()


@pytest.mark.parametrize("dim", [8, 768, 2048, 3000])
def test_punching_never_touches_a_live_row(tmp_path, sparse_ok, dim):
    """Random deaths, any row size (smaller than a block, a divisor, a multiple, neither):
    every live row's bytes survive both the per-id and the whole-file pass."""
    rng = np.random.default_rng(dim)
    n = 3000 if dim == 8 else 400
    f = VectorFile(tmp_path / "v.f16", dim)
    f.write(np.arange(1, n + 1), rng.normal(size=(n, dim)).astype(np.float32))
    alive = set(range(1, n + 1))
    for _ in range(3):  # deaths in runs and scattered, a row at a time and whole runs
        start = int(rng.integers(1, n))
        gone = set(range(start, min(n, start + int(rng.integers(1, n // 4)))))
        gone |= set(rng.integers(1, n + 1, n // 20).tolist())
        alive -= gone
        kept = raw_rows(f.path, dim, sorted(alive))
        f.punch_dead(live_from(alive), np.array(sorted(gone)))
        assert raw_rows(f.path, dim, sorted(alive)) == kept
    kept = raw_rows(f.path, dim, sorted(alive))
    f.punch_dead(live_from(alive))
    assert raw_rows(f.path, dim, sorted(alive)) == kept
    # ...and it gave back everything it could: no block left that only dead rows touch.
    row, data = dim * 2, f.path.read_bytes()
    for b in range(0, len(data), 4096):
        touching = range(b // row + 1, min(len(data), b + 4096) // row + 2)
        if not alive.intersection(touching) and any(data[b : b + 4096]):
            raise AssertionError(f"block at {b} holds only dead rows but was not punched")
    f.close()


def test_without_punch_support_nothing_happens(tmp_path, monkeypatch):
    """Another OS or a filesystem without punch-hole (EOPNOTSUPP): rows stay, no error."""
    import errno

    from wherein.indexer.store import vector_file as V

    monkeypatch.setattr(V, "_fallocate", lambda: None)
    f = VectorFile(tmp_path / "v.f16", WIDE)
    v = wide(10)
    f.write(np.arange(1, 11), v)
    assert f.punch_dead(live_from(set()), np.arange(1, 11)) == 0
    assert np.allclose(f.read(np.arange(1, 11)), v, atol=1e-2)

    def refuses(*_a) -> int:
        import ctypes

        ctypes.set_errno(errno.EOPNOTSUPP)
        return -1

    f.close()
    monkeypatch.setattr(V, "_fallocate", lambda: refuses)
    f = VectorFile(tmp_path / "v.f16", WIDE)
    assert f.punch_dead(live_from(set())) == 0
    assert np.allclose(f.read(np.arange(1, 11)), v, atol=1e-2)
    f.close()


def wide_cat(tmp_path) -> Catalog:
    c = Catalog(tmp_path / "catalog.db")
    with c.transaction():
        c.set_meta("dim", WIDE)
        c.use_vector_file(WIDE)
    return c


def test_deleting_rows_frees_their_blocks_after_commit_not_before(tmp_path, sparse_ok):
    cat = wide_cat(tmp_path)
    v = wide(100)
    with cat.transaction():
        cat.insert_images([{**rec(i), "path": f"/p/{i}.png"} for i in range(1, 101)], v)
    full = cat.vector_file_usage()
    assert full is not None and full["dead_bytes"] < 4096
    live = [i for i in range(1, 101) if not 30 <= i < 70]
    _, want = cat.vectors_for(live)

    with pytest.raises(RuntimeError), cat.transaction():
        cat.delete_images(range(30, 70))
        raise RuntimeError("rolled back")
    assert cat.vector_file_usage() == full  # nothing punched under rows that came back
    assert cat.count_embedded() == 100

    with cat.transaction():
        cat.delete_images(range(30, 50))
        cat.record_skip("/p/50.png", "broken", 1, 1, "now")  # a row a skip replaces dies too
        cat.relink(1, "/p/51.png", 1, 1)  # so does the row a moved file lands on
    cat.relink(51, "/p/51b.png", 1, 1)  # outside transaction(): the next commit punches it
    with cat.transaction():
        cat.delete_images(range(52, 70))
    after = cat.vector_file_usage()
    assert after is not None
    assert after["allocated_bytes"] <= full["allocated_bytes"] - 13 * 4096
    assert (
        after["live_bytes"] == 60 * WIDE * 2 and after["apparent_bytes"] == full["apparent_bytes"]
    )
    ids, got = cat.vectors_for(live)
    assert list(ids) == live and np.array_equal(got, want)  # bit-identical
    cat.close()


def test_reclaim_frees_dead_rows_left_from_before(tmp_path, sparse_ok, monkeypatch):
    """An index whose deletions never punched (written before they did): a whole-file pass
    frees their blocks; re-embedded rows (float32 blobs now) count as dead too."""
    cat = wide_cat(tmp_path)
    v = wide(100)
    with cat.transaction():
        cat.insert_images([rec(i) for i in range(1, 101)], v)
    monkeypatch.setattr(cat, "_punch_dead", lambda: None)  # as before deletions punched
    with cat.transaction():
        cat.delete_images(range(10, 40))
        for i in range(60, 90):
            cat.set_embedding(i, v[i - 1])
    before = cat.vector_file_usage()
    assert before is not None and before["dead_bytes"] >= 60 * WIDE * 2 - 4096
    monkeypatch.undo()
    _, want = cat.vectors_for(range(1, 101))
    freed = cat.reclaim_vector_file()
    after = cat.vector_file_usage()
    assert after is not None and freed >= 2 * 10 * 4096  # two runs of 30 dead rows
    assert after["allocated_bytes"] == before["allocated_bytes"] - freed
    assert np.array_equal(cat.vectors_for(range(1, 101))[1], want)
    cat.close()
