"""A damaged, empty or foreign catalog.db: named in one line, never written into, recoverable.

The damage is the real thing: 60 KB of catalog.db overwritten in the middle (pages of
rows and vectors), its header left intact, as a bad sector or a torn copy leaves it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image
from test_disk import fill, small_disk, wherein  # noqa: F401  (small_disk: a fixture)

from wherein.indexer.store.checked import CHECKED_FILE, MAX_AGE_S
from wherein.indexer.store.index_store import IndexStore
from wherein.indexer.store.integrity import IntegrityChecks
from wherein.search.cli import cli

from conftest import draw_shape

N_PHOTOS = 300  # enough rows that 60 KB in the middle leaves pages on either side intact


def run(*args: str):
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.output


def index_json(*args: str) -> dict:
    code, out = run("index", *args, "--json", "-q")
    assert code == 0, out
    return json.loads(out[out.index("{") :])


def one_error(code: int, out: str) -> str:
    assert code == 1, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out
    return errors[0]


@pytest.fixture(scope="module")
def indexed(standin_models, tmp_path_factory) -> dict[str, Path]:
    """A sound index over N_PHOTOS small photos (copied per test: tests damage it)."""
    root = tmp_path_factory.mktemp("damage")
    photos, index = root / "photos", root / "index"
    photos.mkdir()
    rng = random.Random(7)
    for i in range(N_PHOTOS):
        colour = (rng.randrange(256), rng.randrange(256), i % 256)
        Image.new("RGB", (40, 32), colour).save(photos / f"p{i:03d}.png")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHEREIN_MODELS", str(standin_models))
        index_json(str(photos), "--index", str(index))
    return {"photos": photos, "index": index}


@pytest.fixture()
def damaged(indexed, env) -> dict[str, Path]:
    """env's index: a copy of `indexed` with 60 KB in the middle of catalog.db overwritten."""
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    db = index / "catalog.db"
    size = db.stat().st_size
    assert size > 8 * 60 * 1024, "the catalog must be much larger than the damage"
    with open(db, "r+b") as f:
        f.seek(size // 2)
        f.write(random.Random(1).randbytes(60 * 1024))
    return {**indexed, "index": index, "db": db}


READERS = [
    ("status",),
    ("search", "red", "-k", "300"),
    ("select", "red", "-p", "0.0001"),
    ("dupes",),
    ("unique", "-k", "3"),
    ("label", "-l", "red,blue"),
]


@pytest.mark.parametrize("args", READERS, ids=lambda a: " ".join(a))
def test_every_command_names_the_damaged_catalog_and_the_way_back(damaged, args):
    line = one_error(*run(*args))
    assert str(damaged["db"]) in line and "damaged" in line, line
    assert "--rebuild-catalog" in line, line


def test_status_check_reports_the_damage_and_the_one_command_that_repairs_it(damaged):
    code, out = run("status", "--check")
    assert code == 1 and "Traceback" not in out, out
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    assert len(problems) == 1 and str(damaged["db"]) in problems[0], out
    assert f"wherein index PATHS --index {damaged['index']} --rebuild-catalog" in problems[0]
    assert out.splitlines()[-1] == "check      FAILED"


def test_index_writes_nothing_into_a_damaged_catalog(damaged, tmp_path):
    new = tmp_path / "new"
    new.mkdir()
    for i in range(20):
        Image.new("RGB", (30, 30), (i * 12, 40, 90)).save(new / f"n{i}.png")
    before = damaged["db"].read_bytes()
    line = one_error(*run("index", str(new), "-q"))
    assert "damaged" in line and "--rebuild-catalog" in line, line
    assert damaged["db"].read_bytes() == before
    wal = damaged["index"] / "catalog.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0, "rows were written into the WAL"
    conn = sqlite3.connect(damaged["db"])
    try:  # the rightmost pages, where new rows would go, are intact
        assert (
            conn.execute("SELECT count(*) FROM images WHERE id > ?", (N_PHOTOS,)).fetchone()[0] == 0
        )
    finally:
        conn.close()


def test_rebuild_catalog_keeps_what_it_can_read_and_embeds_the_rest(damaged):
    index, photos = damaged["index"], damaged["photos"]
    before = damaged["db"].read_bytes()
    out = index_json(str(photos), "--rebuild-catalog")
    asides = list(index.glob("catalog.db.damaged-*"))
    assert [p.name for p in asides if not p.name.endswith(("-wal", "-shm"))] == [asides[0].name]
    assert asides[0].read_bytes() == before, "the damaged file is set aside as it was"

    rebuilt = out["rebuilt_catalog"]
    reused = rebuilt["rows_reused"]
    assert 0 < reused < N_PHOTOS, rebuilt  # some rows were lost with the damaged pages
    # Every salvaged row was re-hashed and kept (touched), only the lost ones embedded.
    assert out["touched"] == reused and out["embedded"] == N_PHOTOS - reused, out
    assert out["images"] == N_PHOTOS

    code, status = run("status", "--check", "--json")
    assert code == 0, status
    assert json.loads(status[status.index("{") :])["check"]["ok"]
    res = CliRunner().invoke(cli, ["search", "red", "--paths", "-k", "5"])
    assert res.exit_code == 0 and len(res.stdout.split()) == 5, res.output
    again = index_json(str(photos))
    assert again["unchanged"] == N_PHOTOS and again["embedded"] == 0


def test_status_check_reports_damage_it_can_open_and_prints_the_repair(env, indexed):
    """Damage only a full check finds: every page reads, but an index disagrees with its
    table (here its definition names another column than the one its entries hold)."""
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    conn = sqlite3.connect(index / "catalog.db")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE INDEX images_sha256 ON images(model_id)' "
        "WHERE name = 'images_sha256'"
    )
    conn.commit()
    conn.close()
    code, out = run("status", "--check")
    assert code == 1 and "Traceback" not in out, out
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    assert len(problems) == 1 and "catalog integrity" in problems[0], out
    assert f"wherein index PATHS --index {index} --rebuild-catalog" in problems[0], out


def test_the_web_app_refuses_a_damaged_catalog_before_serving(damaged, standin_models):
    from wherein.schemas.errors import CatalogDamaged
    from wherein.search.web.app import create_app

    # Its tables of files and items are checked when it opens: nothing is served from it.
    with pytest.raises(CatalogDamaged) as err:
        create_app(damaged["index"], standin_models)
    assert str(damaged["db"]) in str(err.value) and "--rebuild-catalog" in str(err.value)
    line = one_error(*run("serve", "--port", "0"))
    assert str(damaged["db"]) in line and "--rebuild-catalog" in line, line


# -- a few hundred bytes over the pages of the files table ----------------------------------------
@pytest.fixture()
def rows_damaged(indexed, env) -> dict[str, Path]:
    """env's index: a copy of `indexed` with 500 random bytes written into each of 3 leaf
    pages of the images table. SQLite reads most of such a page without complaint: rows drop
    out of joins (a garbled id) or come back with garbled text."""
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    db = index / "catalog.db"
    damage_rows(db)
    return {**indexed, "index": index, "db": db}


def damage_rows(db: Path) -> None:
    """500 random bytes into each of 3 leaf pages of the images table (rows_damaged)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        try:
            pages = [
                r[0]
                for r in conn.execute(
                    "SELECT pageno FROM dbstat WHERE name = 'images' AND pagetype = 'leaf' "
                    "ORDER BY pageno"
                )
            ]
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table to find the pages with")
    assert len(pages) >= 5
    rng = random.Random(10)
    with open(db, "r+b") as f:
        for page in pages[2:5]:
            f.seek((page - 1) * page_size + rng.randrange(200, page_size - 600))
            f.write(rng.randbytes(500))


@pytest.mark.parametrize("args", [*READERS, ("mask", "id:1", "red")], ids=lambda a: " ".join(a))
def test_readers_refuse_a_catalog_that_lost_rows_and_write_nothing(rows_damaged, args, tmp_path):
    index = rows_damaged["index"]

    def files() -> dict[str, bytes]:  # a reader's empty -wal and its -shm are SQLite's own
        out = {str(p): p.read_bytes() for p in index.rglob("*") if p.is_file()}
        out.pop(str(index / "catalog.db-shm"), None)
        return {k: v for k, v in out.items() if v or not k.endswith("-wal")}

    before = files()
    line = one_error(*run(*args, *(["--out", str(tmp_path / "out")] if args[0] == "mask" else [])))
    assert str(rows_damaged["db"]) in line and "damaged" in line, line
    assert "--rebuild-catalog" in line and "\n" not in line, line
    # No cache, no mask, nothing else: the damaged index is left as it was.
    assert files() == before
    assert not (tmp_path / "out").exists()


# -- the reader's check, remembered while the catalog is unchanged (checked.py) ----------------


@pytest.mark.parametrize("times", ["new", "restored"])
def test_damage_after_a_passed_check_is_still_caught(indexed, env, times):
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    db = index / "catalog.db"
    assert run("search", "red", "-k", "3")[0] == 0
    assert (index / CHECKED_FILE).is_file()  # the check passed and is remembered
    st = db.stat()
    damage_rows(db)  # same size; "restored": the same mtime too, as a careful tool leaves it
    if times == "restored":
        os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))
    line = one_error(*run("search", "red", "-k", "3"))
    assert str(db) in line and "damaged" in line, line


def test_an_unchanged_catalog_is_checked_once_a_changed_or_old_record_again(
    indexed, env, shapes, monkeypatch
):
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    checks = []
    rows_problem = IntegrityChecks.rows_problem
    monkeypatch.setattr(
        IntegrityChecks, "rows_problem", lambda self: checks.append(1) or rows_problem(self)
    )

    def searches() -> int:
        checks.clear()
        for _ in range(3):
            assert run("search", "red", "-k", "3")[0] == 0
        return len(checks)

    assert searches() == 1
    index_json(str(shapes / "red_square.jpg"))  # a writer's commit: the catalog changed
    assert searches() == 1
    record = json.loads((index / CHECKED_FILE).read_text())
    record["checked_at"] -= MAX_AGE_S + 1  # passed too long ago: bit rot changes no stamp
    (index / CHECKED_FILE).write_text(json.dumps(record))
    assert searches() == 1
    # A read-only open trusts a record but never writes one.
    (index / CHECKED_FILE).unlink()
    with IndexStore.open(index, load_vectors=False, read_only=True):
        pass
    assert not (index / CHECKED_FILE).exists()


def test_a_readers_check_never_opens_the_catalog_beside_sqlite(indexed, env, monkeypatch):
    """SQLite's locks are POSIX locks: closing any descriptor of catalog.db drops them for
    the whole process, and another process's checkpoint can then rewrite pages a live
    connection (serve's) still reads. The remembered check must look at the file by stat."""
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    opened: list[str] = []
    real_open = os.open

    def watching_open(path, *args, **kwargs):
        opened.append(os.path.basename(os.fsdecode(path)))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", watching_open)
    for _ in range(2):  # the check run and recorded, then the record compared
        with IndexStore.open(index, load_vectors=False) as store:
            assert store.catalog.count_images() > 0
    assert (index / CHECKED_FILE).exists()
    assert "catalog.db" not in opened


# -- an empty or foreign catalog.db -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["empty", "foreign_sqlite", "text"])
def test_an_empty_or_foreign_catalog_is_refused_and_left_alone(indexed, env, shapes, kind):
    """In place of an index's catalog.db (truncated, or another file copied over it)."""
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    db = index / "catalog.db"
    db.unlink()
    if kind == "empty":
        db.write_bytes(b"")
    elif kind == "foreign_sqlite":
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes(body) VALUES ('mine')")
        conn.commit()
        conn.close()
    else:
        db.write_text("shopping list\n" * 400)
    before = {p.name: p.read_bytes() for p in index.iterdir() if p.name != "index.lock"}
    for args in (("status", "--check"), ("status",), ("search", "red"), ("index", str(shapes))):
        line = one_error(*run(*args, *(["-q"] if args[0] == "index" else [])))
        assert str(db) in line, line
        after = {p.name: p.read_bytes() for p in index.iterdir() if p.name != "index.lock"}
        assert after == before, f"{args}: the index folder was written"


# -- a full disk, a folder that takes no new file ---------------------------------------------
@pytest.mark.slow
def test_a_full_disk_still_reads_and_checks_the_index(env, shapes, small_disk):  # noqa: F811
    index = small_disk / "index"
    assert wherein("index", str(shapes), "--index", str(index), "-q").returncode == 0
    fill(small_disk, leave_kb=0)
    assert os.statvfs(small_disk).f_bavail == 0
    files = {p.name: p.read_bytes() for p in index.iterdir()}
    found = wherein("search", "red", "--index", str(index), "--paths", "-k", "2")
    assert found.returncode == 0 and len(found.stdout.split()) == 2, found.stderr
    assert wherein("status", "--index", str(index)).returncode == 0
    checked = wherein("status", "--check", "--json", "--index", str(index))
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["check"]["ok"]
    for name, data in files.items():
        assert (index / name).read_bytes() == data, f"{name} was written"


@contextlib.contextmanager
def no_new_files(folder: Path) -> Iterator[None]:
    """The folder takes no new file, rename or removal while its files stay writable (as a
    folder of mode 555 does for a user): chattr +i on the folder, which stops root too."""
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode:
        pytest.skip("needs chattr +i (root, on a file system with the immutable flag)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_index_refuses_a_folder_that_takes_no_new_file_before_writing(indexed, env, shapes):
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    # A reader holding the catalog open keeps its -wal and -shm there: SQLite can then
    # commit into them without making a file, and only vectors.faiss would fail.
    reader = sqlite3.connect(index / "catalog.db")
    rows = reader.execute("SELECT count(*) FROM images").fetchone()[0]
    try:
        with no_new_files(index):
            line = one_error(*run("index", str(shapes), "-q"))
            assert "cannot write to this index folder" in line, line
            assert reader.execute("SELECT count(*) FROM images").fetchone()[0] == rows
        code, out = run("status", "--check")
        assert code == 0, out
    finally:
        reader.close()


# -- a file rewritten with its old size and mtime ------------------------------------------------
def test_a_rewrite_that_keeps_size_and_mtime_is_picked_up(env, shapes):
    first = index_json(str(shapes))
    assert first["embedded"] == 6
    green = shapes / "green.bmp"
    st = green.stat()
    draw_shape(green, "red")  # an uncompressed BMP of the same size: the same byte count
    os.utime(green, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (green.stat().st_size, green.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)

    again = index_json(str(shapes))
    assert again["embedded"] == 1 and again["unchanged"] == 5, again
    code, out = run("search", "red", "--paths", "-k", "3")
    assert code == 0 and str(green) in out.split(), out


def test_rebuild_never_leaves_vectors_faiss_current_with_lost_rows(env, shapes):
    """A lost row whose file is gone too: nothing of the run touches FAISS, so only the new
    catalog's generation can tell that vectors.faiss holds a row the catalog lost."""
    index_json(str(shapes))
    index = env["index"]
    gen = json.loads((index / "vectors.json").read_text())["generation"]
    conn = sqlite3.connect(index / "catalog.db")
    with conn:  # as a salvage may find it: an older generation, one row gone
        conn.execute("UPDATE meta SET value = ? WHERE key = 'generation'", (str(gen - 1),))
        (lost,) = conn.execute("SELECT path FROM images ORDER BY id LIMIT 1").fetchone()
        conn.execute("DELETE FROM images WHERE path = ?", (lost,))
    conn.close()
    Path(os.fsdecode(lost)).unlink()
    out = index_json(str(shapes), "--rebuild-catalog")
    assert out["images"] == 5 and out["embedded"] == 0, out
    code, status = run("status", "--check", "--json")
    assert code == 0 and json.loads(status[status.index("{") :])["check"]["ok"], status


# -- a catalog from a newer wherein ------------------------------------------------------------
def test_a_catalog_from_a_newer_wherein_is_read_but_never_written(indexed, env, shapes):
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    db = index / "catalog.db"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")

    def files() -> dict[str, bytes]:  # a reader's empty -wal and its -shm are SQLite's own
        out = {p.name: p.read_bytes() for p in index.iterdir() if p.name != "index.lock"}
        out.pop("catalog.db-shm", None)
        return {k: v for k, v in out.items() if v or k != "catalog.db-wal"}

    before = files()
    writers = [
        ("index", str(shapes), "-q"),
        ("index", str(shapes), "-q", "--rebuild-catalog"),
        ("status", "--repair"),
        ("label", "-l", "red,blue"),
    ]
    for args in writers:
        line = one_error(*run(*args))
        assert "made by a newer wherein" in line and "schema 99" in line, (args, line)
        assert files() == before, f"{args}: the index folder was written"
    code, out = run("search", "red", "--paths", "-k", str(N_PHOTOS))
    assert code == 0 and len([w for w in out.split() if w.endswith(".png")]) == N_PHOTOS, out
    code, out = run("status", "--json")
    assert code == 0 and json.loads(out[out.index("{") :])["schema_version"] == 99, out


# -- overwritten bytes in vectors.faiss ---------------------------------------------------------
def test_index_rewrites_a_vectors_faiss_whose_checksum_fails(indexed, env):
    index = env["index"]
    shutil.copytree(indexed["index"], index)
    faiss_file = index / "vectors.faiss"
    data = bytearray(faiss_file.read_bytes())
    data[800_000:804_000] = random.Random(2).randbytes(4000)  # the vectors of 1-2 photos
    faiss_file.write_bytes(bytes(data))
    code, out = run("status", "--check")
    assert code == 1 and "Traceback" not in out, out
    out = index_json(str(indexed["photos"]))
    assert out["unchanged"] == N_PHOTOS and out["embedded"] == 0, out
    assert faiss_file.read_bytes() != bytes(data)
    code, out = run("status", "--check")
    assert code == 0 and "check      ok" in out, out
