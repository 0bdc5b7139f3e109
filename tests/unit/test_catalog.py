"""Catalog's named methods: what each caller relies on, on a fresh catalog with tiny vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wherein.indexer.store.catalog import SCHEMA_VERSION, Catalog, CatalogReadOnly
from wherein.indexer.store.migrations import MIGRATIONS

DIM = 4


def rec(path: str, i: int = 0, sha: str | None = None) -> dict:
    return {
        "path": path,
        "size": 100 + i,
        "mtime_ns": 1_000 + i,
        "sha256": sha or f"{i:064x}",
        "width": 10,
        "height": 20,
        "format": "png",
        "indexed_at": "2026-01-01T00:00:00+00:00",
        "model_id": "m",
    }


def vec(i: int) -> np.ndarray:
    return np.arange(DIM, dtype=np.float32) + np.float32(i) / 3


@pytest.fixture()
def cat(tmp_path) -> Catalog:
    c = Catalog(tmp_path / "catalog.db")
    yield c
    c.close()


def add(cat: Catalog, *paths: str) -> list[int]:
    with cat.transaction():
        return [cat.insert_image(rec(p, i), vec(i)) for i, p in enumerate(paths)]


def test_a_new_catalog_has_every_migration_and_reopening_applies_none(tmp_path):
    c = Catalog(tmp_path / "catalog.db")
    assert c.migrated == [m.name for m in MIGRATIONS._migrations]
    assert c.schema_version == SCHEMA_VERSION == len(c.migrated)  # each step records its number
    c.close()
    again = Catalog(tmp_path / "catalog.db")
    assert again.migrated == [] and again.schema_version == SCHEMA_VERSION
    again.close()


def test_insert_then_read_back_by_path_id_and_vector(cat):
    a, b = add(cat, "/p/a.png", "/p/b.png")
    known = cat.known_files()
    assert known == {
        "/p/a.png": (a, 100, 1000, f"{0:064x}", True, None, None),  # no ctime, inode given
        "/p/b.png": (b, 101, 1001, f"{1:064x}", True, None, None),
    }
    row = cat.rows_by_ids([b, 999])
    assert list(row) == [b] and row[b] == {**rec("/p/b.png", 1), "id": b, "file_kind": "photo"}
    assert cat.row_by_path("/p/a.png")["id"] == a and cat.row_by_path("/p/zz.png") is None
    ids, vecs = cat.vectors_for([b, a, 999])
    assert sorted(ids.tolist()) == [a, b]
    got = dict(zip(ids.tolist(), vecs, strict=True))
    assert got[a].tobytes() == vec(0).tobytes() and got[b].tobytes() == vec(1).tobytes()
    assert cat.count_images() == cat.count_embedded() == 2 and cat.max_id() == b
    assert sorted(cat.all_paths()) == ["/p/a.png", "/p/b.png"]


def test_a_row_without_vector_is_pending(cat):
    with cat.transaction():
        i = cat.insert_image(rec("/p/a.png"), None)
    assert cat.known_files()["/p/a.png"][4] is False
    assert cat.count_images() == 1 and cat.count_embedded() == 0
    with cat.transaction():
        cat.set_embedding(i, vec(7))
    assert cat.vectors_for([i])[1][0].tobytes() == vec(7).tobytes()


def test_relink_keeps_id_and_vector_under_the_new_path(cat):
    a, b = add(cat, "/p/a.png", "/p/b.png")
    with cat.transaction():
        cat.relink(a, "/q/moved.png", 555, 777)
    known = cat.known_files()
    assert "/p/a.png" not in known and known["/q/moved.png"][:3] == (a, 555, 777)
    assert cat.vectors_for([a])[1][0].tobytes() == vec(0).tobytes()
    # Moved onto a path that had its own row: that row goes, the moved one stays.
    with cat.transaction():
        cat.relink(a, "/p/b.png", 1, 2)
    assert cat.known_files() == {"/p/b.png": (a, 1, 2, f"{0:064x}", True, None, None)}
    assert cat.rows_by_ids([b]) == {}


def test_touch_updates_size_and_mtime_only(cat):
    (a,) = add(cat, "/p/a.png")
    with cat.transaction():
        cat.touch(a, 9, 99, 7, 8)
    assert cat.known_files()["/p/a.png"] == (a, 9, 99, f"{0:064x}", True, 7, 8)


def test_delete_takes_row_vector_and_labels_and_ids_are_never_reused(cat):
    a, b, c = add(cat, "/p/a.png", "/p/b.png", "/p/c.png")
    with cat.transaction():
        cat.store_labels([(c, "red", 0.9, "{}", "m"), (a, "red", 0.2, "{}", "m")])
        assert cat.delete_images([c, 12345]) == 1
    assert cat.rows_by_ids([c]) == {} and len(cat.vectors_for([c])[0]) == 0
    assert [r["image_id"] for r in cat.read_labels()] == [a]
    (d,) = add(cat, "/p/d.png")
    assert d > c  # AUTOINCREMENT: FAISS and caches key on ids


def test_skips_replace_rows_and_an_insert_clears_them(cat):
    (a,) = add(cat, "/p/a.png")
    with cat.transaction():
        cat.record_skip("/p/a.png", "truncated", 5, 6, "now")
        cat.record_skip("/p/b.png", "bad", None, None, "now")
    assert cat.rows_by_ids([a]) == {}
    assert cat.skipped() == [
        {"path": "/p/a.png", "reason": "truncated", "size": 5, "mtime_ns": 6, "seen_at": "now"},
        {"path": "/p/b.png", "reason": "bad", "size": None, "mtime_ns": None, "seen_at": "now"},
    ]
    with cat.transaction():
        cat.insert_image(rec("/p/a.png"), vec(0))
        cat.forget_skips(["/p/b.png"])
    assert cat.skipped() == []
    with cat.transaction():
        cat.record_skips([("/p/c.png", "r1", 1, 2, "t"), ("/p/c.png", "r2", 3, 4, "t")])
    assert [(s["path"], s["reason"]) for s in cat.skipped()] == [("/p/c.png", "r2")]


def test_bulk_insert_keeps_the_given_ids(cat):
    records = [{**rec(f"/s/{i}.png", i), "id": 10 + i} for i in range(3)]
    with cat.transaction():
        cat.insert_images(records, np.stack([vec(i) for i in range(3)]))
    assert cat.embedded_ids().tolist() == [10, 11, 12]
    assert cat.rows_by_ids([11])[11]["path"] == "/s/1.png"


def test_iter_vectors_walks_all_in_id_order_in_batches(cat):
    ids = add(cat, *[f"/p/{i}.png" for i in range(7)])
    with cat.transaction():
        cat.delete_images([ids[3]])
    batches = list(cat.iter_vectors(batch=3))
    assert [len(b[0]) for b in batches] == [3, 3]
    got = np.concatenate([b[0] for b in batches])
    assert got.tolist() == cat.embedded_ids().tolist() == [i for i in ids if i != ids[3]]
    assert batches[1][1][0].tobytes() == vec(4).tobytes()


def test_meta_values_round_trip_as_json_and_generation_counts(cat):
    assert cat.get_meta("nothing", "dflt") == "dflt" and cat.generation == 0
    with cat.transaction():
        cat.set_meta("dim", 768)
        cat.set_meta("model_file", None)
        cat.set_meta("nested", {"a": [1, 2]})
        assert cat.bump_generation() == 1
        assert cat.bump_generation() == 2
    assert cat.get_meta("dim") == 768 and cat.get_meta("model_file", "x") is None
    assert cat.get_meta("nested") == {"a": [1, 2]} and cat.generation == 2


def test_an_exception_in_a_transaction_leaves_nothing(cat):
    (a,) = add(cat, "/p/a.png")
    with pytest.raises(RuntimeError), cat.transaction():
        cat.insert_image(rec("/p/b.png", 1), vec(1))
        cat.delete_images([a])
        cat.record_skip("/p/c.png", "bad", 1, 1, "t")
        cat.bump_generation()
        with cat.transaction():  # nested: joins the outer unit, commits nothing alone
            cat.set_meta("k", 1)
        raise RuntimeError("crash")
    assert list(cat.known_files()) == ["/p/a.png"] and cat.embedded_ids().tolist() == [a]
    assert cat.skipped() == [] and cat.generation == 0 and cat.get_meta("k") is None
    # and the connection is usable afterwards
    (b,) = add(cat, "/p/b.png")
    assert cat.count_images() == 2 and b > a


def test_a_committed_transaction_is_visible_to_another_connection(cat, tmp_path):
    add(cat, "/p/a.png")
    other = Catalog(tmp_path / "catalog.db", readonly=True)
    assert list(other.known_files()) == ["/p/a.png"]
    other.close()


def test_embedded_paths_under_a_folder_is_a_path_prefix_not_a_string_prefix(cat):
    paths = ["/a/b", "/a/b/c.png", "/a/b/d/e.png", "/a/bc.png", "/a/b_x/f.png", "/a/B/g.png"]
    ids = dict(zip(paths, add(cat, *paths), strict=True))
    with cat.transaction():
        cat.insert_image(rec("/a/b/pending.png", 9), None)

    def under(*folders):
        return sorted(p for _, p in cat.embedded_paths(list(folders)))

    assert under("/a/b") == ["/a/b", "/a/b/c.png", "/a/b/d/e.png"]
    assert under("/a/b/") == under("/a/b")
    assert under("/a/b_x", "/a/b/d") == ["/a/b/d/e.png", "/a/b_x/f.png"]  # "_" is no wildcard
    assert under("/") == sorted(paths)
    assert under("/nowhere") == []
    assert dict((p, i) for i, p in cat.embedded_paths()) == ids


def test_exact_duplicates_group_ids_by_content_hash(cat):
    with cat.transaction():
        ids = [
            cat.insert_image(rec(f"/p/{i}.png", i, sha=s), vec(i))
            for i, s in enumerate(["aa", "bb", "aa", "cc", "bb", "aa"])
        ]
    assert cat.exact_duplicate_groups() == [[ids[0], ids[2], ids[5]], [ids[1], ids[4]]]


def test_labels_store_replace_read_and_best(cat):
    a, b = add(cat, "/p/a.png", "/p/b.png")
    with cat.transaction():
        n = cat.store_labels(
            [
                (a, "red", 0.9, "{}", "m"),
                (a, "blue", 0.1, "{}", "m"),
                (b, "blue", 0.8, "{}", "m"),
                (b, "red", 0.3, "{}", "old-model"),
                (999, "red", 0.5, "{}", "m"),  # its image is gone: dropped
            ]
        )
    assert n == 4
    with cat.transaction():
        cat.store_labels([(a, "red", 0.95, "{}", "m")])  # same key: replaced
    rows = cat.read_labels(model_id="m")
    assert [(r["path"], r["label"], r["probability"]) for r in rows] == [
        ("/p/a.png", "blue", 0.1),
        ("/p/a.png", "red", 0.95),
        ("/p/b.png", "blue", 0.8),
    ]
    assert len(cat.read_labels()) == 4 and len(cat.read_labels(label="red", template="{}")) == 2
    assert cat.label_names("m") == ["blue", "red"] and cat.label_names("x") == []
    assert cat.best_labels([a, b, 999], "m") == {a: "red", b: "blue"}


def test_health_checks_see_a_sound_catalog(cat):
    add(cat, "/p/a.png")
    assert cat.integrity_problem() is None and cat.orphan_embeddings() == 0
    assert cat.misshapen_embeddings(DIM) == 0 and cat.misshapen_embeddings(DIM + 1) == 1


def test_sample_paths_are_a_stable_spread(cat):
    add(cat, *[f"/p/{i}.png" for i in range(20)])
    first = cat.sample_paths(5)
    assert len(first) == 5 and first == cat.sample_paths(5)
    assert first != [f"/p/{i}.png" for i in range(5)]
    assert len(cat.sample_paths(100)) == 20


def test_read_only_catalog_reads_and_refuses_label_writes(cat, tmp_path):
    add(cat, "/p/a.png")
    ro = Catalog(Path(tmp_path / "catalog.db"), readonly=True)
    assert ro.migrated == [] and ro.row_by_path("/p/a.png")["path"] == "/p/a.png"
    with pytest.raises(CatalogReadOnly), ro.transaction():
        ro.store_labels([(1, "red", 0.5, "{}", "m")])
    ro.close()


def test_snapshot_holds_one_view_while_another_connection_commits(cat, tmp_path):
    add(cat, "/p/a.png")
    writer = Catalog(tmp_path / "catalog.db")
    with cat.snapshot():
        before = cat.count_images()
        with writer.transaction():
            writer.insert_image(rec("/p/b.png", 1), vec(1))
        assert cat.count_images() == before == 1
    assert cat.count_images() == 2
    writer.close()


def test_a_file_yields_items_each_with_its_vector_and_locator(cat):
    from wherein.schemas.records import Hit

    (photo,) = add(cat, "/p/photo.png")
    with cat.transaction():
        video = cat.insert_image(
            {**rec("/p/clip.mp4", 7), "kind": "video"},  # the file's media kind
            None,
            items=[("frame", 0.0, None, vec(1)), ("frame", 2.5, None, vec(2))],
        )
        region = cat.insert_image(
            rec("/p/big.png", 8), None, items=[("region", None, (10, 20, 110, 220), vec(3))]
        )
    frames = [video, video + 1]
    assert cat.count_images() == 3 and cat.count_items() == 4 == cat.count_embedded()
    assert region == video + 2 and cat.next_id() == region + 1  # ids shared, never reused
    assert cat.embedded_ids().tolist() == [photo, *frames, region]
    rows = cat.hit_rows([frames[1], region, photo])
    assert [rows[frames[1]][k] for k in ("id", "item_id", "kind", "t", "box")] == [
        video,
        frames[1],
        "frame",
        2.5,
        None,
    ]
    assert rows[region]["box"] == [10, 20, 110, 220] and rows[region]["path"] == "/p/big.png"
    hits = {i: Hit.from_row(rows[i], 1, 0.5).to_dict() for i in rows}
    assert {k: hits[photo][k] for k in ("id", "item_id", "kind", "time", "region")} == {
        "id": photo,
        "item_id": photo,
        "kind": "photo",
        "time": None,
        "region": None,
    }
    assert (hits[frames[1]]["kind"], hits[frames[1]]["time"]) == ("video", 2.5)  # its file's
    assert (hits[region]["kind"], hits[region]["region"]) == ("photo", [10, 20, 110, 220])
    assert sorted(i for i, _ in cat.embedded_paths(["/p"])) == [photo, *frames, region]
    assert cat.known_files()["/p/clip.mp4"][4]  # embedded: its items have vectors
    with cat.transaction():
        assert cat.delete_images([video]) == 1
    assert cat.vectors_for(frames)[0].size == 0 and cat.count_items() == 2
    assert cat.orphan_items() == cat.files_without_items() == cat.orphan_embeddings() == 0


def test_a_timed_files_taken_is_its_containers_whatever_its_kind_is_called(cat):
    """taken_source asks the file's kind (registry.timed, passed in by hit_rows): an
    animation's recorded time is its container's like a video's; a photo's is EXIF."""
    from wherein.schemas.records import Hit

    (photo,) = add(cat, "/p/photo.png")
    with cat.transaction():
        moving = cat.insert_image(
            {**rec("/p/anim.webp", 7), "kind": "animation"},
            None,
            items=[("frame", 0.0, None, vec(1))],
        )
        cat.store_photos(
            [
                {
                    "image_id": i,
                    "size": 100 + n,
                    "mtime_ns": 1_000 + n,
                    "taken": "2024-06-15 14:03:22",
                    "taken_offset": "+02:00",
                }  # fmt: skip
                for i, n in ((photo, 0), (moving, 7))
            ]
        )
    rows = cat.hit_rows([photo, moving])
    sources = {rows[i]["path"]: Hit.from_row(rows[i], 1, 0.5).taken_source for i in rows}
    assert sources == {"/p/photo.png": "exif", "/p/anim.webp": "container"}
