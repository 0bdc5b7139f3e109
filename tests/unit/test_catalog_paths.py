"""Any file name the OS allows is a catalog key: stored losslessly, handed back as os.fsdecode gives it."""

from __future__ import annotations

import os
import sqlite3
import unicodedata

import numpy as np
import pytest

from wherein.indexer.store.catalog import Catalog

LATIN1 = os.fsdecode(b"/photos/caf\xe9.jpg")  # not UTF-8: a lone surrogate in str form
LATIN1_DIR = os.fsdecode(b"/photos/r\xe9sum\xe9")
NFC = unicodedata.normalize("NFC", "/photos/caf\u00e9.jpg")
NFD = unicodedata.normalize("NFD", "/photos/caf\u00e9.jpg")


def rec(path: str, i: int = 0) -> dict:
    return {
        "path": path,
        "size": 10 + i,
        "mtime_ns": 20 + i,
        "sha256": f"{i:064x}",
        "width": 1,
        "height": 1,
        "format": "jpg",
        "indexed_at": "t",
        "model_id": "m",
    }


@pytest.fixture()
def cat(tmp_path):
    c = Catalog(tmp_path / "catalog.db")
    yield c
    c.close()


def stored_paths(cat: Catalog) -> set[bytes]:
    conn = sqlite3.connect(cat.path)
    try:
        return {r[0] for r in conn.execute("SELECT path FROM images")}
    finally:
        conn.close()


def test_a_non_utf8_name_round_trips_exactly(cat):
    assert "\udce9" in LATIN1
    with cat.transaction():
        i = cat.insert_image(rec(LATIN1), np.ones(3, np.float32))
    assert stored_paths(cat) == {b"/photos/caf\xe9.jpg"}  # the bytes the OS has
    assert list(cat.known_files()) == [LATIN1]
    assert cat.rows_by_ids([i])[i]["path"] == LATIN1
    assert cat.row_by_path(LATIN1)["id"] == i
    assert cat.all_paths() == [LATIN1] and cat.embedded_paths() == [(i, LATIN1)]
    assert os.fsencode(cat.known_files().popitem()[0]) == b"/photos/caf\xe9.jpg"


def test_nfc_and_nfd_spellings_are_two_rows(cat):
    assert NFC != NFD
    with cat.transaction():
        a = cat.insert_image(rec(NFC, 0), None)
        b = cat.insert_image(rec(NFD, 1), None)
    assert a != b and set(cat.known_files()) == {NFC, NFD}
    assert cat.row_by_path(NFC)["id"] == a and cat.row_by_path(NFD)["id"] == b
    assert stored_paths(cat) == {NFC.encode(), NFD.encode()}


def test_move_relink_and_delete_with_undecodable_names(cat):
    moved = LATIN1_DIR + "/" + os.fsdecode(b"\xff\xfe.jpg")
    with cat.transaction():
        i = cat.insert_image(rec(LATIN1), np.ones(3, np.float32))
        cat.relink(i, moved, 1, 2)
    assert cat.known_files() == {moved: (i, 1, 2, f"{0:064x}", True, None, None)}
    assert cat.embedded_paths([LATIN1_DIR]) == [(i, moved)]
    assert cat.embedded_paths(["/photos/r"]) == []
    with cat.transaction():
        cat.touch(i, 3, 4)
        assert cat.delete_images([i]) == 1
    assert cat.known_files() == {} and cat.row_by_path(moved) is None


def test_skips_with_undecodable_names(cat):
    with cat.transaction():
        cat.insert_image(rec(LATIN1), None)
        cat.record_skip(LATIN1, "truncated", 1, 2, "t")  # replaces the row
        cat.record_skips([(NFD, "bad", None, None, "t")])
    assert cat.known_files() == {}
    assert [s["path"] for s in cat.skipped()] == sorted([LATIN1, NFD], key=os.fsencode)
    with cat.transaction():
        cat.forget_skips([LATIN1])
        cat.insert_image(rec(NFD), None)  # an insert clears the skip of its path
    assert cat.skipped() == []


def test_bulk_insert_and_labels_carry_undecodable_names(cat):
    with cat.transaction():
        cat.insert_images([{**rec(LATIN1), "id": 5}], np.ones((1, 3), np.float32))
        cat.store_labels([(5, "red", 0.5, "{}", "m")])
    assert cat.rows_by_ids([5])[5]["path"] == LATIN1
    assert [r["path"] for r in cat.read_labels()] == [LATIN1]


def test_rows_under_folders_are_a_byte_prefix_range(cat):
    """What one folder's run loads: its own rows and skips, not a sibling's that shares
    the prefix, and undecodable names included."""
    inside = [LATIN1_DIR + "/a.jpg", "/photos/deep/er/b.jpg", "/photos"]
    outside = ["/photos2/c.jpg", "/photosx.jpg", "/other/d.jpg"]
    with cat.transaction():
        for i, path in enumerate(inside + outside):
            cat.insert_image(rec(path, i), np.zeros(4, np.float32))
        cat.record_skips(
            [("/photos/bad.jpg", "bad", 1, 1, "t"), ("/photos2/bad.jpg", "bad", 1, 1, "t")]
        )
    assert set(cat.known_files(["/photos/"])) == set(inside)
    assert set(cat.known_files(["/photos", "/other"])) == set(inside) | {"/other/d.jpg"}
    assert len(cat.known_files()) == 6
    assert [s["path"] for s in cat.skipped(["/photos"])] == ["/photos/bad.jpg"]
    same = cat.embedded_with_hash(f"{3:064x}")
    assert same == [(4, "/photos2/c.jpg")]
    # Metadata still to read, in the folder only; a row read already is not listed again.
    cat.store_photos([{"image_id": 2, "size": 11, "mtime_ns": 21}])
    todo = {path for _, path, _, _ in cat.photos_to_read(["/photos"])}
    assert todo == {inside[0], inside[2]}
    assert len(cat.photos_to_read()) == 5
