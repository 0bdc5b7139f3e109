"""--export writes only what it owns (issue 22): files, symlinks, -, FIFOs, devices, the index.

Every command that exports (search, select, label, dupes, unique) goes through one
destination check, so each case runs on search and on a curation command; the
label formats (a COCO file, a YOLO folder) follow the same rules.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_run import run

# Each command with its arguments, and the same listing printed as CSV.
COMMANDS = {
    "search": ["search", "red", "-k", "3"],
    "select": ["select", "red", "-p", "0.5"],
    "dupes": ["dupes", "--threshold", "0.5"],
}


def error_lines(stderr: str) -> list[str]:
    """stderr less the stand-in models' banner (it comes before any work)."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("Using STAND-IN")]


def one_error_line(result, code: int = 1) -> str:
    """The command failed with exactly one `Error:` line on stderr (no traceback)."""
    assert result.exit_code == code, result.output + repr(result.exception)
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def digest(folder: Path) -> dict[str, str]:
    """Every file below folder and a hash of its bytes: what 'left intact' means."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture()
def indexed(env, shapes) -> dict[str, Path]:
    run("index", shapes, "-q")
    return {**env, "photos": shapes}


def csv_of(args: list[str]) -> str:
    return run(*args, "--csv").stdout


# -- regular files, new paths, symlinks ------------------------------------------------------
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_new_path_and_an_earlier_export_get_the_export(indexed, tmp_path, command):
    args = COMMANDS[command]
    expected = csv_of(args)
    new = tmp_path / "new.csv"
    run(*args, "--export", new)
    assert new.read_text() == expected
    old = tmp_path / "old.csv"
    run("search", "blue", "-k", "1", "--export", old)  # an earlier export: wherein's own
    old.chmod(0o600)
    run(*args, "--export", old)
    assert old.read_text() == expected
    assert stat.S_IMODE(old.stat().st_mode) == 0o600  # replaced, permissions kept
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_symlink_is_written_through_to_its_target(indexed, tmp_path, command):
    args = COMMANDS[command]
    target = tmp_path / "real" / "rows.csv"
    target.parent.mkdir()
    run("search", "blue", "-k", "1", "--export", target)  # an earlier export
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    run(*args, "--export", link)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text() == csv_of(args)


def test_a_symlink_into_the_index_is_refused(indexed, tmp_path):
    before = digest(indexed["index"])
    link = tmp_path / "innocent.csv"
    link.symlink_to(indexed["index"] / "catalog.db")
    line = one_error_line(run(*COMMANDS["search"], "--export", link, ok=False))
    assert "index folder" in line
    assert digest(indexed["index"]) == before and link.is_symlink()


def test_the_python_export_request_overwrites_as_the_cli_does(indexed, tmp_path):
    """ExportRequest(overwrite=True) is --overwrite: a user's regular file is replaced; an
    indexed file, the index and a symlink's target never are."""
    from wherein.search.export.errors import ExportError
    from wherein.search.service.search import ExportRequest, SearchRequest, open_index, search

    notes = tmp_path / "notes.csv"
    notes.write_text("my notes\n")
    photo = indexed["photos"] / "nested" / "yellow.gif"  # indexed, not a hit of red -k 3
    link = tmp_path / "link.csv"
    link.symlink_to(notes)
    before = photo.read_bytes()
    with open_index() as index:

        def export(path: Path, overwrite: bool):
            return search(
                index,
                SearchRequest("red", k=3, export=ExportRequest(path, "csv", overwrite=overwrite)),
            )

        with pytest.raises(ExportError, match="pass --overwrite"):
            export(notes, False)
        assert notes.read_text() == "my notes\n"
        for kept, why in [
            (photo, "a file in the index"),
            (indexed["index"] / "catalog.db", "index folder"),
            (link, "symlink"),
        ]:
            with pytest.raises(ExportError, match=why):
                export(kept, True)
        assert photo.read_bytes() == before and notes.read_text() == "my notes\n"
        result = export(notes, True)
    assert result.exported == notes and notes.read_text() == csv_of(COMMANDS["search"])


# -- standard output -------------------------------------------------------------------------
@pytest.mark.parametrize("command", list(COMMANDS))
def test_dash_is_standard_output(indexed, command):
    args = COMMANDS[command]
    res = run(*args, "--export", "-", "--format", "csv")
    assert res.stdout == csv_of(args)  # the export alone: the listing is not printed too
    assert "standard output" in res.stderr
    assert not Path("-").exists()


def test_dash_needs_a_format_and_a_folder_format_refuses_it(indexed, tmp_path):
    assert "--format" in one_error_line(run(*COMMANDS["select"], "--export", "-", ok=False))
    res = run(
        "search", "red", "-k", "2", "--mask", "--out", tmp_path / "m", "--export", "-",
        "--format", "yolo", ok=False,
    )  # fmt: skip
    assert "standard output" in one_error_line(res)
    assert not (tmp_path / "m").exists()  # refused before any mask was made


# -- FIFOs and character devices ---------------------------------------------------------------
@pytest.mark.parametrize("command", ["search", "select"])
def test_a_fifo_is_written_as_a_stream(indexed, tmp_path, command):
    args = COMMANDS[command]
    expected = csv_of(args)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    run(*args, "--export", fifo)
    reader.join(timeout=60)
    assert not reader.is_alive(), "the FIFO's reader never saw the end of the export"
    assert got == [expected.encode()]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not a regular file


def test_a_fifo_nobody_reads_is_one_error_line_not_a_hang(indexed, tmp_path, monkeypatch):
    from wherein.search.export import destination

    monkeypatch.setattr(destination, "READER_WAIT_S", 0.5)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    done: list = []
    worker = threading.Thread(
        target=lambda: done.append(run(*COMMANDS["search"], "--export", fifo, ok=False)),
        daemon=True,
    )
    worker.start()
    worker.join(120)
    if worker.is_alive():  # blocked opening the FIFO: let it go, then fail
        with open(fifo, "rb") as f:
            f.read()
        worker.join(60)
        pytest.fail("the export waited for a reader forever")
    line = one_error_line(done[0])
    assert str(fifo) in line and "no process opened this FIFO for reading" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_swapped_for_a_file_after_the_check_is_not_written(indexed, tmp_path, monkeypatch):
    """The FIFO checked before the search is a user's file by the time the export opens it:
    nothing is written into that file."""
    from wherein.search.export import hits

    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    resolve = hits.resolve

    def swapped(*a, **k):
        dest = resolve(*a, **k)
        if "reads" in k:  # write_export's own look, just before it writes (not check_export's)
            fifo.unlink()
            fifo.write_text("my notes\n")
        return dest

    monkeypatch.setattr(hits, "resolve", swapped)
    line = one_error_line(run(*COMMANDS["search"], "--export", fifo, ok=False))
    assert str(fifo) in line and "changed since it was checked" in line
    assert fifo.read_text() == "my notes\n"


@pytest.mark.parametrize("where", ["fifo", "device"])
def test_parquet_is_refused_on_a_fifo_or_a_device(indexed, tmp_path, where):
    dest = tmp_path / "pipe.parquet"
    if where == "fifo":
        os.mkfifo(dest)
        # A reader, so that a regression writes (and the test fails) instead of blocking.
        threading.Thread(target=dest.read_bytes, daemon=True).start()
    else:
        dest = Path("/dev/null")
    line = one_error_line(
        run(*COMMANDS["search"], "--export", dest, "--format", "parquet", ok=False)
    )
    assert "read from its end" in line and "csv or jsonl" in line, line
    kind = stat.S_ISFIFO if where == "fifo" else stat.S_ISCHR
    assert kind(os.lstat(dest).st_mode)


def test_parquet_goes_to_standard_output_only_when_it_is_a_file(indexed, tmp_path):
    pytest.importorskip("pyarrow")
    argv = [sys.executable, "-m", "wherein.search.cli", *COMMANDS["search"]]
    argv += ["--export", "-", "--format", "parquet"]
    piped = subprocess.run(argv, capture_output=True, timeout=300)
    lines = error_lines(piped.stderr.decode())
    assert piped.returncode == 1 and piped.stdout == b"", lines
    assert len(lines) == 1 and "cannot go to a pipe or a terminal" in lines[0], lines
    out = tmp_path / "hits.parquet"
    with open(out, "wb") as f:
        redirected = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, timeout=300)
    assert redirected.returncode == 0, redirected.stderr
    from wherein.search.export.hits import read_export

    assert [r["path"] for r in read_export(out)] == [
        r["path"] for r in read_export_csv(csv_of(COMMANDS["search"]))
    ]


def read_export_csv(text: str) -> list[dict]:
    from wherein.search import output

    return output.read_csv(text)


def _full_devices(tmp_path: Path) -> list[Path]:
    """/dev/full, and a replica of it made with mknod where this process may."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    devices = [Path("/dev/full")]
    replica = tmp_path / "full"
    try:
        os.mknod(replica, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        devices.append(replica)
    except (PermissionError, AttributeError):
        pass  # not root: /dev/full alone
    return devices


def test_a_full_device_is_one_error_line_and_exit_1(indexed, tmp_path):
    for device in _full_devices(tmp_path):
        # A real process: nothing at exit (a flush, a traceback) may add to the one line.
        res = subprocess.run(
            [sys.executable, "-m", "wherein.search.cli", *COMMANDS["search"]]
            + ["--export", str(device), "--format", "csv"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = error_lines(res.stderr)
        assert res.returncode == 1, res.stderr
        assert len(lines) == 1 and lines[0].startswith(f"Error: {device}: cannot write"), lines
        assert "No space left" in lines[0]
        assert stat.S_ISCHR(os.lstat(device).st_mode)  # still the device


def test_a_full_standard_output_is_one_error_line_and_exit_1(indexed):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        res = subprocess.run(
            [sys.executable, "-m", "wherein.search.cli", *COMMANDS["search"]]
            + ["--export", "-", "--format", "csv"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    lines = error_lines(res.stderr)
    assert res.returncode == 1, res.stderr
    assert lines == ["Error: standard output: cannot write (No space left on device)"]


def test_a_full_device_fails_select_too(indexed, tmp_path):
    for device in _full_devices(tmp_path):
        res = run(*COMMANDS["select"], "--export", device, "--format", "jsonl", ok=False)
        assert "No space left" in one_error_line(res)
        assert stat.S_ISCHR(os.lstat(device).st_mode)


# -- the index folder and the inputs -------------------------------------------------------------
@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("inside", ["catalog.db", "vectors.faiss", "new.csv", "cache/x.csv", "."])
def test_nothing_inside_the_index_folder_is_written(indexed, command, inside):
    index = indexed["index"]
    (index / "cache").mkdir(exist_ok=True)
    before = digest(index)
    names = sorted(os.listdir(index))
    res = run(*COMMANDS[command], "--export", index / inside, "--format", "csv", ok=False)
    assert "index folder" in one_error_line(res)
    assert digest(index) == before and sorted(os.listdir(index)) == names
    run(*COMMANDS[command])  # the index still works


def test_the_index_is_guarded_when_named_by_option(indexed, tmp_path):
    """--index (another index than WHEREIN_INDEX's) through a symlink; the export path
    spelled another way, with a .. on the way."""
    index = tmp_path / "other index"
    run("index", indexed["photos"], "--index", index, "-q")
    (index / "cache").mkdir(exist_ok=True)
    alias = tmp_path / "alias"
    alias.symlink_to(index, target_is_directory=True)
    before = digest(index)
    sneaky = index / "cache" / ".." / "catalog.db"
    res = run("unique", "--index", alias, "--export", sneaky, "--format", "csv", ok=False)
    assert "index folder" in one_error_line(res)
    assert digest(index) == before


def test_a_label_export_into_the_index_is_refused(indexed, tmp_path):
    index = indexed["index"]
    before = digest(index)
    for dest in (index / "labels.yolo", index / "labels.coco.json"):
        res = run(
            "search", "red", "-k", "2", "--mask", "--out", tmp_path / "m", "--export", dest,
            ok=False,
        )  # fmt: skip
        assert "index folder" in one_error_line(res)
        assert not dest.exists() and digest(index) == before
    assert not (tmp_path / "m").exists()


def test_the_photo_a_search_reads_is_refused(indexed, tmp_path):
    photo = indexed["photos"] / "red_square.jpg"
    before = photo.read_bytes()
    res = run("search", "--like", photo, "--export", photo, "--format", "csv", ok=False)
    assert "an input of this command" in one_error_line(res)
    assert photo.read_bytes() == before


@pytest.mark.parametrize("command", ["search", "select"])
def test_an_image_among_the_hits_is_refused(indexed, command):
    photo = indexed["photos"] / "red_square.jpg"  # a hit of "red"
    before = photo.read_bytes()
    res = run(*COMMANDS[command], "--export", photo, "--format", "csv", ok=False)
    assert "a file in the index" in one_error_line(res)  # before the search
    assert photo.read_bytes() == before


@pytest.mark.parametrize("command", ["search", "select"])
@pytest.mark.parametrize("how", ["named", "symlink", "hard link"])
def test_an_indexed_file_that_is_not_a_hit_is_refused(indexed, tmp_path, command, how):
    """Not a hit of `red -k 3` and not read by the command: still the user's photo."""
    photo = indexed["photos"] / "nested" / "yellow.gif"
    dest = {"named": photo, "symlink": tmp_path / "rows.jsonl", "hard link": tmp_path / "h.jsonl"}
    if how == "symlink":
        dest[how].symlink_to(photo)
    elif how == "hard link":
        os.link(photo, dest[how])
    before = photo.read_bytes()
    res = run(*COMMANDS[command], "--export", dest[how], "--format", "jsonl", ok=False)
    assert "a file in the index" in one_error_line(res)
    assert photo.read_bytes() == before


def test_a_hard_link_to_the_catalog_is_refused(indexed, tmp_path):
    link = tmp_path / "rows.csv"
    os.link(indexed["index"] / "catalog.db", link)
    before = digest(indexed["index"])
    res = run(*COMMANDS["search"], "--export", link, ok=False)
    assert "index folder" in one_error_line(res)
    assert digest(indexed["index"]) == before


@pytest.fixture()
def bind_mount(tmp_path):
    """mount --bind SRC DST (root only), unmounted after the test."""
    mounted: list[Path] = []

    def mount(src: Path, dst: Path) -> Path:
        dst.mkdir()
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("needs root and mount")
        if subprocess.run(["mount", "--bind", src, dst], capture_output=True).returncode:
            pytest.skip("cannot bind-mount here")
        mounted.append(dst)
        return dst

    yield mount
    for dst in mounted:
        subprocess.run(["umount", "-l", dst], capture_output=True)


@pytest.mark.parametrize("command", ["search", "dupes"])
def test_the_index_folder_through_a_bind_mount_is_refused(indexed, tmp_path, bind_mount, command):
    alias = bind_mount(indexed["index"], tmp_path / "alias")
    before = digest(indexed["index"])
    res = run(*COMMANDS[command], "--export", alias / "catalog.db", "--format", "csv", ok=False)
    assert "index folder" in one_error_line(res)
    res = run(*COMMANDS[command], "--export", alias / "new.csv", ok=False)
    assert "index folder" in one_error_line(res)
    assert digest(indexed["index"]) == before
    run(*COMMANDS[command])  # the index still works


# -- label formats -----------------------------------------------------------------------------
def test_label_exports_follow_the_same_rules(indexed, tmp_path):
    mask = ["search", "red", "-k", "2", "--mask", "--out", tmp_path / "m"]
    # COCO through a symlink: the target gets it, the link stays.
    target = tmp_path / "real.coco.json"
    run(*mask, "--export", target)  # an earlier export
    before = target.read_text()
    link = tmp_path / "link.coco.json"
    link.symlink_to(target)
    run("search", "blue", "-k", "1", "--mask", "--out", tmp_path / "m", "--export", link)
    assert target.read_text() != before
    assert link.is_symlink() and '"annotations"' in target.read_text()
    # COCO to -: the JSON document alone on stdout.
    res = run(*mask, "--export", "-", "--format", "coco")
    assert res.stdout.startswith("{") and '"annotations"' in res.stdout
    # A YOLO folder through a symlink to an empty folder: built there, the link kept.
    folder = tmp_path / "real.yolo"
    folder.mkdir()
    yolo = tmp_path / "link.yolo"
    yolo.symlink_to(folder, target_is_directory=True)
    run(*mask, "--export", yolo)
    assert yolo.is_symlink() and (folder / "data.yaml").is_file()
    # A full device is one error line for a label file too.
    if Path("/dev/full").exists():
        res = run(*mask, "--export", "/dev/full", "--format", "coco", ok=False)
        assert "No space left" in one_error_line(res)
    # A FIFO is not a folder.
    fifo = tmp_path / "pipe.yolo"
    os.mkfifo(fifo)
    assert "not a folder" in one_error_line(run(*mask, "--export", fifo, ok=False))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# -- a file that is not wherein's: refused unless --overwrite (issue 28) ----------------------
MASK = ["--mask", "--out"]  # + a folder: the search makes masks (label formats need them)
# An export of each file format, and a file a user might have at that name.
USER_FILES = {
    "rows.csv": b"rank,path,score\n1,mine.jpg,0.9\n",  # a table, not wherein's header
    "rows.jsonl": b'{"path": "mine.jpg", "rank": 1}\n',
    "rows.parquet": b"PAR1 not really\n",
    "dogs.coco.json": b'{"info": {"description": "my own labels"}, "images": []}',
}


def _export_args(name: str, tmp_path: Path, query: str = "red", k: str = "2") -> list:
    args = ["search", query, "-k", k]
    return args + MASK + [tmp_path / "m"] if name.endswith(".coco.json") else args


@pytest.mark.parametrize("name", list(USER_FILES))
def test_a_users_file_is_refused_and_left_as_it_was(indexed, tmp_path, name):
    dest = tmp_path / name
    dest.write_bytes(USER_FILES[name])
    res = run(*_export_args(name, tmp_path), "--export", dest, ok=False)
    line = one_error_line(res)
    assert name in line and "--overwrite" in line
    assert dest.read_bytes() == USER_FILES[name]
    assert not (tmp_path / "m").exists()  # refused before any mask was made
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("command", ["select", "dupes", "unique", "label"])
def test_every_exporting_command_refuses_a_users_file(indexed, tmp_path, command):
    args = {
        "select": COMMANDS["select"],
        "dupes": COMMANDS["dupes"],
        "unique": ["unique", "-k", "2"],
        "label": ["label", "-l", "red,blue", "--no-store"],
    }[command]
    dest = tmp_path / "notes.csv"
    dest.write_text("my notes\n")
    assert "--overwrite" in one_error_line(run(*args, "--export", dest, ok=False))
    assert dest.read_text() == "my notes\n"
    run(*args, "--export", dest, "--overwrite")
    assert dest.read_text() != "my notes\n"


def test_a_users_folder_is_refused_for_a_folder_format(indexed, tmp_path):
    folder = tmp_path / "mine.yolo"
    folder.mkdir()
    (folder / "labels.txt").write_text("mine")
    res = run(*_export_args("x.yolo", tmp_path) + MASK + [tmp_path / "m"], "--export", folder,
              "--overwrite", ok=False)  # fmt: skip
    assert "not empty" in one_error_line(res)
    assert digest(folder) == {"labels.txt": hashlib.sha256(b"mine").hexdigest()}


@pytest.mark.parametrize("name", list(USER_FILES))
def test_a_re_run_replaces_its_own_earlier_export(indexed, tmp_path, name):
    dest = tmp_path / name
    run(*_export_args(name, tmp_path, "red", "1"), "--export", dest)
    first = dest.read_bytes()
    run(*_export_args(name, tmp_path, "blue", "3"), "--export", dest)
    assert dest.read_bytes() != first
    if not name.endswith(".coco.json"):
        from wherein.search.export.hits import read_export

        assert [r["rank"] for r in read_export(dest)] == [1, 2, 3]


@pytest.mark.parametrize("name", list(USER_FILES))
def test_overwrite_replaces_a_users_regular_file(indexed, tmp_path, name):
    dest = tmp_path / name
    dest.write_bytes(USER_FILES[name])
    res = run(*_export_args(name, tmp_path), "--export", dest, "--overwrite")
    assert dest.read_bytes() != USER_FILES[name]
    assert "exported" in res.stderr


def test_overwrite_never_replaces_an_indexed_photo_or_a_symlinks_target(indexed, tmp_path):
    photo = indexed["photos"] / "nested" / "yellow.gif"
    before = photo.read_bytes()
    res = run(*COMMANDS["search"], "--export", photo, "--format", "csv", "--overwrite", ok=False)
    assert "a file in the index" in one_error_line(res)
    assert photo.read_bytes() == before
    mine = tmp_path / "mine.csv"
    mine.write_text("my notes\n")
    link = tmp_path / "link.csv"
    link.symlink_to(mine)
    res = run(*COMMANDS["search"], "--export", link, "--overwrite", ok=False)
    assert "symlink" in one_error_line(res)
    assert mine.read_text() == "my notes\n" and link.is_symlink()


def test_overwrite_needs_export(indexed):
    res = run(*COMMANDS["search"], "--overwrite", ok=False)
    assert res.exit_code == 2 and "--overwrite" in res.stderr and "--export" in res.stderr


@pytest.mark.parametrize("name", ["dogs.yolo", "dogs.masks"])
def test_a_folder_export_re_run_replaces_its_own_folder_and_nothing_else(indexed, tmp_path, name):
    dest = tmp_path / name
    mask = ["--mask", "--out", tmp_path / "m"]
    run("search", "red", "-k", "1", *mask, "--export", dest)
    first = digest(dest)
    run("search", "blue", "-k", "3", *mask, "--export", dest)  # its own folder: replaced
    assert digest(dest) != first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no .old left
    # A file of the user's in it since: the folder is not the export's any more.
    (dest / "notes.txt").write_text("mine")
    before = digest(dest)
    res = run("search", "red", "-k", "1", *mask, "--export", dest, ok=False)
    assert "not empty" in one_error_line(res)
    assert digest(dest) == before
