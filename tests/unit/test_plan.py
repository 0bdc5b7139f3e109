"""The run plan on plain data: every kind of change, decided without files or models."""

from __future__ import annotations

from wherein.indexer.imaging import Prepared
from wherein.indexer.ingest.plan import Decision, Kind, Known, SkipEntry, Work, plan, route
from wherein.indexer.ingest.read import Unsettled
from wherein.indexer.ingest.walk import FoundFile

ROOT = "/photos"


def f(name: str, size: int = 100, mtime: int = 1, root: str = ROOT) -> FoundFile:
    return FoundFile(f"{root}/{name}", size, mtime)


def row(i: int, sha: str, size: int = 100, mtime: int = 1, vec: bool = True) -> Known:
    return Known(i, size, mtime, sha, vec)


def read(sha: str, error: str = "", size: int = 100, mtime: int = 2) -> Prepared:
    return Prepared(size=size, mtime_ns=mtime, sha256=sha, error=error)


def run_plan(found, known, skipped=None, roots=(ROOT,), reads=None, **kw):
    """Stage 1 then stage 2 for every todo item, claiming moves the way the indexer does.
    Returns (plan, {path: Decision}, deleted ids)."""
    p = plan(found, known, skipped or {}, list(roots), **kw)
    claimed: set[int] = set()
    decisions: dict[str, Decision] = {}
    for w in p.todo:
        d = route(w, (reads or {})[w.found.path], p, claimed)
        if d.kind is Kind.MOVE:
            claimed.add(d.row)
        decisions[w.found.path] = d
    return p, decisions, p.deleted(claimed)


def test_every_kind():
    known = {
        "/photos/same.jpg": row(1, "s1"),
        "/photos/edited.jpg": row(2, "s2"),
        "/photos/touched.jpg": row(3, "s3"),
        "/photos/old_name.jpg": row(4, "s4"),
        "/photos/deleted.jpg": row(5, "s5"),
        "/photos/original.jpg": row(6, "s6"),
    }
    skipped = {"/photos/broken.jpg": SkipEntry(7, 1), "/photos/gone_broken.jpg": SkipEntry(7, 1)}
    found = [
        f("same.jpg"),
        f("edited.jpg", size=120),
        f("touched.jpg", mtime=9),
        f("new_name.jpg"),
        f("original.jpg"),
        f("duplicate.jpg"),
        f("fresh.jpg"),
        f("broken.jpg", size=7),
        f("bad.jpg"),
    ]
    reads = {
        "/photos/edited.jpg": read("s2-new", size=120),
        "/photos/touched.jpg": read("s3", mtime=9),
        "/photos/new_name.jpg": read("s4"),
        "/photos/duplicate.jpg": read("s6"),
        "/photos/fresh.jpg": read("s7"),
        "/photos/bad.jpg": read("s8", error="not an image"),
    }
    p, d, deleted = run_plan(found, known, skipped, reads=reads)
    assert p.unchanged == ("/photos/same.jpg", "/photos/original.jpg")
    assert p.skipped_known == ("/photos/broken.jpg",)
    assert {w.found.path: (w.old.id if w.old else None) for w in p.todo} == {
        "/photos/edited.jpg": 2,
        "/photos/touched.jpg": 3,
        "/photos/new_name.jpg": None,
        "/photos/duplicate.jpg": None,
        "/photos/fresh.jpg": None,
        "/photos/bad.jpg": None,
    }
    assert d["/photos/edited.jpg"] == Decision(Kind.EMBED)
    assert d["/photos/touched.jpg"] == Decision(Kind.TOUCH, 3)
    assert d["/photos/new_name.jpg"] == Decision(Kind.MOVE, 4)
    assert d["/photos/duplicate.jpg"] == Decision(Kind.COPY, 6)
    assert d["/photos/fresh.jpg"] == Decision(Kind.EMBED)
    assert d["/photos/bad.jpg"] == Decision(Kind.SKIP, reason="not an image")
    assert deleted == [5]  # old_name.jpg moved, so only deleted.jpg's row goes
    assert p.forget_skips == ("/photos/gone_broken.jpg",)


def test_identical_files_moved_together_both_keep_their_rows():
    known = {"/photos/a/1.jpg": row(1, "same"), "/photos/a/2.jpg": row(2, "same")}
    found = [f("b/1.jpg"), f("b/2.jpg")]
    reads = {"/photos/b/1.jpg": read("same"), "/photos/b/2.jpg": read("same")}
    _, d, deleted = run_plan(found, known, reads=reads)
    assert {d["/photos/b/1.jpg"], d["/photos/b/2.jpg"]} == {
        Decision(Kind.MOVE, 1),
        Decision(Kind.MOVE, 2),
    }
    assert deleted == []


def test_a_third_identical_copy_reuses_a_vector():
    known = {"/photos/a/1.jpg": row(1, "same")}
    found = [f("b/1.jpg"), f("b/2.jpg")]
    reads = {"/photos/b/1.jpg": read("same"), "/photos/b/2.jpg": read("same")}
    _, d, deleted = run_plan(found, known, reads=reads)
    assert d["/photos/b/1.jpg"] == Decision(Kind.MOVE, 1)
    assert d["/photos/b/2.jpg"] == Decision(Kind.COPY, 1)
    assert deleted == []


def test_a_row_outside_the_roots_is_offered_as_a_donor_only_when_needed():
    # The plan holds only the rows under the walked folder; one outside it has the bytes.
    outside = {"same": 7}
    asked: list[str] = []

    def lookup(sha: str) -> int | None:
        asked.append(sha)
        return outside.get(sha)

    known = {"/photos/a.jpg": row(1, "mine")}
    found = [f("a.jpg"), f("copy.jpg"), f("new.jpg"), f("again.jpg")]
    reads = {
        "/photos/copy.jpg": read("same"),
        "/photos/new.jpg": read("fresh"),
        "/photos/again.jpg": read("mine"),
    }
    _, d, deleted = run_plan(found, known, reads=reads, outside_donor=lookup)
    assert d == {
        "/photos/copy.jpg": Decision(Kind.COPY, 7),
        "/photos/new.jpg": Decision(Kind.EMBED),
        "/photos/again.jpg": Decision(Kind.COPY, 1),  # a donor under the roots comes first
    }
    assert sorted(asked) == ["fresh", "same"] and deleted == []


def test_changed_file_whose_new_bytes_equal_another_indexed_file():
    known = {"/photos/p.jpg": row(1, "old"), "/photos/q.jpg": row(2, "qq")}
    found = [f("p.jpg", size=5), f("q.jpg")]
    _, d, deleted = run_plan(found, known, reads={"/photos/p.jpg": read("qq", size=5)})
    assert d == {"/photos/p.jpg": Decision(Kind.COPY, 2)}  # replaces row 1 with q's vector
    assert deleted == []


def test_a_changing_row_is_never_a_donor():
    # p's old bytes reappear at r while p itself changes: p's row may be replaced before
    # r is committed, so r cannot copy from it.
    known = {"/photos/p.jpg": row(1, "x")}
    found = [f("p.jpg", size=5), f("r.jpg")]
    reads = {"/photos/p.jpg": read("y", size=5), "/photos/r.jpg": read("x")}
    _, d, _ = run_plan(found, known, reads=reads)
    assert d["/photos/r.jpg"] == Decision(Kind.EMBED)


def test_changed_file_takes_over_a_moved_row():
    # `mv a.jpg p.jpg` over an indexed p.jpg: a's row moves to p, p's old row is replaced.
    known = {"/photos/p.jpg": row(1, "pp"), "/photos/a.jpg": row(2, "aa")}
    found = [f("p.jpg", size=5)]
    _, d, deleted = run_plan(found, known, reads={"/photos/p.jpg": read("aa", size=5)})
    assert d["/photos/p.jpg"] == Decision(Kind.MOVE, 2)
    assert deleted == []


def test_another_root_is_not_deleted():
    known = {"/photos/a.jpg": row(1, "a"), "/other/b.jpg": row(2, "b")}
    p, _, deleted = run_plan([], known, roots=["/other"])
    assert set(p.gone) == {"/other/b.jpg"} and deleted == [2]
    # A root that merely shares a prefix is another root.
    p, _, deleted = run_plan([], {"/photos2/c.jpg": row(3, "c")}, roots=["/photos"])
    assert deleted == []


def test_unreadable_root_or_folder_deletes_nothing_under_it():
    known = {"/photos/a.jpg": row(1, "a"), "/photos/locked/b.jpg": row(2, "b")}
    _, _, deleted = run_plan([], known, unreadable=["/photos"])
    assert deleted == []
    _, _, deleted = run_plan([], known, unreadable=["/photos/locked"])
    assert deleted == [1]


def test_retry_skipped():
    skipped = {"/photos/bad.jpg": SkipEntry(100, 1)}
    p, _, _ = run_plan([f("bad.jpg")], {}, skipped)
    assert p.skipped_known == ("/photos/bad.jpg",) and p.todo == ()
    p, _, _ = run_plan(
        [f("bad.jpg")], {}, skipped, retry_skipped=True, reads={"/photos/bad.jpg": read("b")}
    )
    assert p.skipped_known == () and [w.found.path for w in p.todo] == ["/photos/bad.jpg"]
    # A skipped file that changed is read again without asking.
    p, _, _ = run_plan([f("bad.jpg", size=101)], {}, skipped, reads={"/photos/bad.jpg": read("b")})
    assert [w.found.path for w in p.todo] == ["/photos/bad.jpg"]


def test_good_file_turned_bad_is_skipped_and_replaces_its_row():
    known = {"/photos/a.jpg": row(1, "a")}
    reads = {"/photos/a.jpg": read("garbage", error="not an image", size=9)}
    p, d, _ = run_plan([f("a.jpg", size=9)], known, reads=reads)
    assert p.todo == (Work(f("a.jpg", size=9), known["/photos/a.jpg"]),)
    assert d["/photos/a.jpg"].kind is Kind.SKIP


def test_row_without_vector_is_embedded_not_touched_or_moved():
    # After a model change every row lost its vector: same stat is not "unchanged",
    # and a moved file is embedded afresh (its old row is deleted).
    known = {"/photos/a.jpg": row(1, "a", vec=False), "/photos/b.jpg": row(2, "b", vec=False)}
    found = [f("a.jpg"), f("moved_b.jpg")]
    reads = {"/photos/a.jpg": read("a", mtime=1), "/photos/moved_b.jpg": read("b")}
    p, d, deleted = run_plan(found, known, reads=reads)
    assert p.unchanged == ()
    assert d == {"/photos/a.jpg": Decision(Kind.EMBED), "/photos/moved_b.jpg": Decision(Kind.EMBED)}
    assert deleted == [2]


def test_unsettled_read_is_left_for_the_next_run():
    known = {"/photos/a.jpg": row(1, "a")}
    reads = {"/photos/a.jpg": Unsettled("changed while being read")}
    _, d, deleted = run_plan([f("a.jpg", size=5)], known, reads=reads)
    assert d["/photos/a.jpg"] == Decision(Kind.LATER, reason="changed while being read")
    assert deleted == []


def test_a_file_with_its_old_size_and_mtime_but_a_new_ctime_or_inode_is_read_again():
    known = {
        f"{ROOT}/same.png": Known(1, 100, 1, "a", True, ctime_ns=5, inode=9),
        f"{ROOT}/rewritten.png": Known(2, 100, 1, "b", True, ctime_ns=5, inode=9),
        f"{ROOT}/replaced.png": Known(3, 100, 1, "c", True, ctime_ns=5, inode=9),
        f"{ROOT}/older_row.png": Known(4, 100, 1, "d", True),  # written before ctime was kept
    }
    found = [
        FoundFile(f"{ROOT}/same.png", 100, 1, 5, 9),
        FoundFile(f"{ROOT}/rewritten.png", 100, 1, 6, 9),
        FoundFile(f"{ROOT}/replaced.png", 100, 1, 5, 10),
        FoundFile(f"{ROOT}/older_row.png", 100, 1, 7, 11),
    ]
    p = plan(found, known, {}, [ROOT])
    assert set(p.unchanged) == {f"{ROOT}/same.png", f"{ROOT}/older_row.png"}
    assert {w.found.path for w in p.todo} == {f"{ROOT}/rewritten.png", f"{ROOT}/replaced.png"}
    # verify: every file is read; the same bytes are a touch, new bytes an embed.
    p, decisions, _ = run_plan(
        found,
        known,
        reads={w.path: read("a" if w.path.endswith("same.png") else "new") for w in found},
        verify=True,
    )
    assert p.unchanged == ()
    assert decisions[f"{ROOT}/same.png"] == Decision(Kind.TOUCH, 1)
    assert decisions[f"{ROOT}/rewritten.png"].kind is Kind.EMBED
