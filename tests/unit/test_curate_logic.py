"""Curation logic without an index: duplicate grouping, where a selection's files go, label input."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from wherein.indexer.store.catalog import Catalog
from wherein.schemas.errors import WhereinError
from wherein.schemas.records import Hit
from wherein.search.curate import labels as L
from wherein.search.curate.dupes import UnionFind, find_duplicates
from wherein.search.curate.select import MaterialiseError, Placement, materialise, plan


# -- union-find: pairs become groups --------------------------------------------------------
def test_a_chain_of_pairs_is_one_group():
    uf = UnionFind()
    uf.union(1, 3)
    uf.union(2, 3)
    assert uf.groups() == [[1, 2, 3]]
    assert uf.find(1) == uf.find(2) == uf.find(3)


def test_an_image_alone_is_no_group():
    uf = UnionFind()
    uf.union(4, 4)
    assert uf.find(9) == 9  # never seen: its own root
    assert uf.groups() == []


def components(n: int, edges: list[tuple[int, int]]) -> list[list[int]]:
    """Connected components with two or more members, by repeated graph search."""
    adjacent: dict[int, set[int]] = {}
    for a, b in edges:
        adjacent.setdefault(a, set()).add(b)
        adjacent.setdefault(b, set()).add(a)
    seen: set[int] = set()
    out = []
    for start in sorted(adjacent):
        if start in seen:
            continue
        stack, group = [start], set()
        while stack:
            x = stack.pop()
            if x not in group:
                group.add(x)
                stack.extend(adjacent[x] - group)
        seen |= group
        if len(group) > 1:
            out.append(sorted(group))
    return out


def test_random_unions_give_the_connected_components():
    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(2, 60))
        edges = [(int(a), int(b)) for a, b in rng.integers(0, n, size=(int(rng.integers(0, n)), 2))]
        uf = UnionFind()
        for a, b in edges:
            uf.union(a, b)
        assert sorted(uf.groups()) == components(n, edges), trial


def test_the_keeper_is_the_existing_largest_oldest_copy(tmp_path):
    """Exact copies (one content hash) group; the keeper follows the documented order."""
    same = "ab" * 32
    other = "cd" * 32
    rows = [  # name, exists, width x height, size, mtime, sha
        ("a.jpg", False, 100, 10, 5, same),  # the largest, but its file is gone
        ("b.jpg", True, 50, 30, 5, same),  # the largest file, but fewer pixels
        ("c.jpg", True, 80, 10, 5, same),
        ("d.jpg", True, 80, 20, 9, same),  # keeper: existing, largest resolution, larger file
        ("x.jpg", True, 10, 5, 7, other),
        ("z.jpg", True, 10, 5, 3, other),
        ("y.jpg", True, 10, 5, 3, other),  # keeper: oldest, then first by path
        ("lone.jpg", True, 10, 5, 3, "ef" * 32),
    ]
    cat = Catalog(tmp_path / "catalog.db")
    with cat.transaction():
        for name, exists, side, size, mtime, sha in rows:
            path = tmp_path / name
            if exists:
                path.write_bytes(b"x")
            record = {
                "path": str(path),
                "size": size,
                "mtime_ns": mtime,
                "sha256": sha,
                "width": side,
                "height": side,
                "format": "jpeg",
                "indexed_at": "2026-01-01T00:00:00+00:00",
                "model_id": "m",
            }
            cat.insert_image(record, np.ones(4, dtype=np.float32))
    try:
        report = find_duplicates(SimpleNamespace(catalog=cat), exact_only=True)
    finally:
        cat.close()
    got = [(Path(h.path).name, h.extra["group"], h.extra["keeper"]) for h in report.hits]
    assert got[0] == ("d.jpg", 1, True) and got[4] == ("y.jpg", 2, True)
    assert {n for n, g, _ in got if g == 1} == {"a.jpg", "b.jpg", "c.jpg", "d.jpg"}
    assert {n for n, g, _ in got if g == 2} == {"x.jpg", "y.jpg", "z.jpg"}
    assert all(h.extra["match"] == "exact" for h in report.hits if not h.extra["keeper"])
    assert (report.groups, report.redundant, report.redundant_bytes) == (2, 5, 10 + 30 + 10 + 5 + 5)
    assert report.threshold is None


def test_a_threshold_outside_the_cosine_range_is_refused():
    with pytest.raises(WhereinError, match="between -1 and 1"):
        find_duplicates(SimpleNamespace(catalog=SimpleNamespace(get_meta=dict().get)), 1.5)


# -- select: where each file goes -----------------------------------------------------------
def hit(path: Path, id_: int) -> Hit:
    return Hit(rank=id_, path=str(path), score=0.5, probability=0.9, width=4, height=4, id=id_)


def files(root: Path, *names: str) -> list[Path]:
    out = []
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(name.encode())
        out.append(p)
    return out


def targets(placements: list[Placement], dest: Path) -> list[str]:
    return [p.target.relative_to(dest).as_posix() for p in placements]


def test_tree_keeps_paths_below_the_deepest_common_folder(tmp_path):
    src = files(tmp_path / "photos", "2023/a.jpg", "2024/a.jpg", "2024/trip/b.png")
    dest = tmp_path / "out"
    placed = plan([hit(p, i) for i, p in enumerate(src, 1)], dest)
    assert targets(placed, dest) == ["2023/a.jpg", "2024/a.jpg", "2024/trip/b.png"]
    assert [p.source for p in placed] == src and [p.id for p in placed] == [1, 2, 3]
    assert not dest.exists()  # planning writes nothing


def test_tree_of_one_folder_puts_files_directly_in_dest(tmp_path):
    src = files(tmp_path / "photos" / "deep", "a.jpg", "b.jpg")
    dest = tmp_path / "out"
    assert targets(plan([hit(p, i) for i, p in enumerate(src, 1)], dest), dest) == [
        "a.jpg",
        "b.jpg",
    ]


def test_dest_may_start_with_a_tilde_or_be_relative(tmp_path, monkeypatch):
    src = files(tmp_path / "photos", "a.jpg")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (placed,) = plan([hit(src[0], 1)], "~/picked")
    assert placed.target == tmp_path / "home" / "picked" / "a.jpg"
    monkeypatch.chdir(tmp_path)
    (placed,) = plan([hit(src[0], 1)], "here")
    assert placed.target == tmp_path / "here" / "a.jpg"


def test_flat_names_collisions_case_insensitively_by_catalog_id(tmp_path):
    src = files(tmp_path, "x/IMG.jpg", "y/img.JPG", "z/Other.png", "y/c.gif")
    dest = tmp_path / "out"
    hits = [hit(p, i) for p, i in zip(src, (17, 42, 5, 6), strict=True)]
    assert targets(plan(hits, dest, layout="flat"), dest) == [
        "IMG-17.jpg",
        "img-42.JPG",
        "Other.png",
        "c.gif",
    ]


def test_an_existing_target_of_any_kind_refuses_the_whole_plan(tmp_path):
    src = files(tmp_path / "photos", "a.jpg", "b.jpg")
    hits = [hit(p, i) for i, p in enumerate(src, 1)]
    for kind in ("file", "folder", "broken link"):
        dest = tmp_path / f"out-{kind}"
        dest.mkdir()
        target = dest / "b.jpg"
        if kind == "file":
            target.write_bytes(b"mine")
        elif kind == "folder":
            target.mkdir()
        else:
            target.symlink_to(tmp_path / "nowhere")
        with pytest.raises(MaterialiseError, match="already exist"):
            plan(hits, dest)
        assert sorted(os.listdir(dest)) == ["b.jpg"], kind  # a.jpg was not written either
    assert (tmp_path / "out-file" / "b.jpg").read_bytes() == b"mine"


def test_a_vanished_source_or_a_file_as_dest_refuses(tmp_path):
    src = files(tmp_path / "photos", "a.jpg", "b.jpg")
    hits = [hit(p, i) for i, p in enumerate(src, 1)]
    src[1].unlink()
    with pytest.raises(MaterialiseError, match="no longer exist"):
        plan(hits, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    dest = tmp_path / "a-file"
    dest.write_bytes(b"")
    with pytest.raises(MaterialiseError, match="not a folder"):
        plan(hits[:1], dest)
    with pytest.raises(ValueError, match="layout"):
        plan(hits[:1], tmp_path / "out", layout="nested")
    assert plan([], tmp_path / "out") == []


def test_materialise_copies_or_links_what_was_planned(tmp_path):
    src = files(tmp_path / "photos", "2023/a.jpg", "2024/a.jpg")
    os.utime(src[0], ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    hits = [hit(p, i) for i, p in enumerate(src, 1)]
    copied = materialise(plan(hits, tmp_path / "copy"))
    assert [p.read_bytes() for p in copied] == [b"2023/a.jpg", b"2024/a.jpg"]
    assert copied[0].stat().st_mtime_ns == 1_500_000_000_000_000_000  # times kept
    linked = materialise(plan(hits, tmp_path / "link"), mode="link")
    assert [os.readlink(p) for p in linked] == [str(s) for s in src]


def test_a_target_that_appears_after_planning_undoes_everything(tmp_path):
    src = files(tmp_path / "photos", "2023/a.jpg", "2024/b.jpg")
    dest = tmp_path / "out"
    placements = plan([hit(p, i) for i, p in enumerate(src, 1)], dest)
    (dest / "2024").mkdir(parents=True)
    (dest / "2024" / "b.jpg").write_bytes(b"someone else's")
    with pytest.raises(MaterialiseError, match="appeared"):
        materialise(placements)
    # The first copy and its new folder are gone again; what was already there is untouched.
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == ["2024", "2024/b.jpg"]
    assert (dest / "2024" / "b.jpg").read_bytes() == b"someone else's"


# -- labels: what the user types ------------------------------------------------------------
def test_labels_are_split_trimmed_and_deduplicated_in_order():
    assert L.parse_labels("cat, dog,car") == ["cat", "dog", "car"]
    assert L.parse_labels(["  red   car ,cat", "cat", ", dog,"]) == ["red car", "cat", "dog"]


@pytest.mark.parametrize("given", ["", " , ,", [], [" ", ","]])
def test_no_labels_is_an_error_that_shows_an_example(given):
    with pytest.raises(L.LabelError, match="no labels given"):
        L.parse_labels(given)


def test_a_label_that_is_not_text_is_refused():
    with pytest.raises(L.LabelError, match="not text"):
        L.parse_labels("cat,caf\udce9")  # a non-UTF-8 byte from argv (surrogateescape)


@pytest.mark.parametrize("template", ["{}", "This is a photo of {}.", "a {} in {{braces}}"])
def test_templates_with_one_slot_are_accepted(template):
    assert L.check_template(template) == template


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("a photo", "exactly once"),
        ("a {0} of {0}", "exactly once"),
        ("a {} of {}", "nothing else in braces"),
        ("a {name}", "nothing else in braces"),
        ("a {1}", "nothing else in braces"),
        ("a {", "nothing else in braces"),
        ("a }", "nothing else in braces"),
        ("caf\udce9 {}", "not text"),
    ],
)
def test_bad_templates_say_what_is_wrong(template, reason):
    with pytest.raises(L.LabelError, match=reason) as info:
        L.check_template(template)
    assert "\n" not in str(info.value)


def test_a_prompt_does_not_double_the_templates_full_stop():
    assert L.prompt_for("This is a photo of {}.", " cat. ") == "This is a photo of cat."
    assert L.prompt_for("{}", "dog!") == "dog"
