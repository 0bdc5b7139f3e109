"""The indexer end to end: incremental runs, bad input, model changes, locking."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner

from wherein.indexer.models.standins.palette import rgb255
from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.records import INDEX_RUN_SCHEMA_PATH
from wherein.search.cli import cli

from conftest import draw_shape


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def index_json(*paths: Path) -> dict:
    code, out = run_cli("index", *map(str, paths), "--json")
    assert code == 0, out
    return json.loads(out[out.index("{") :])


def status_json(check: bool = False) -> dict:
    code, out = run_cli("status", "--json", *(["--check"] if check else []))
    data = json.loads(out[out.index("{") :])
    if check:
        assert code == (0 if data["check"]["ok"] else 1)
    return data


def catalog_paths(index: Path) -> dict[str, int]:
    with IndexStore.open(index) as store:
        return {p: row[0] for p, row in store.catalog.known_files().items()}


def vector_of(index: Path, path: Path) -> np.ndarray:
    with IndexStore.open(index) as store:
        image_id = store.catalog.known_files()[str(path)][0]
        return store.catalog.vectors_for([image_id])[1][0]


def test_index_and_status(env, shapes):
    result = index_json(shapes)
    assert result["embedded"] == 6 and result["images"] == 6 and result["skipped"] == 0
    status = status_json(check=True)
    assert status["images"] == 6
    assert status["skipped"] == []
    assert status["check"]["ok"]
    assert status["vector_index"]["kind"] == "flat"
    assert status["space"] == "wherein-standin-colour-v1"
    # Nested folders are walked; every path is absolute.
    assert all(os.path.isabs(p) for p in catalog_paths(env["index"]))
    assert str(shapes / "nested" / "yellow.gif") in catalog_paths(env["index"])


def test_rerun_embeds_nothing(env, shapes):
    index_json(shapes)
    again = index_json(shapes)
    assert again["embedded"] == 0 and again["unchanged"] == 6 and again["images"] == 6


def test_a_run_over_one_folder_copies_vectors_from_the_rest_and_keeps_it(env, shapes):
    """A run over a subfolder (what a watch batch is) plans from that folder's rows only,
    yet a file identical to one indexed elsewhere reuses its vector, and nothing outside
    the folder is deleted or re-read."""
    index_json(shapes)
    before = catalog_paths(env["index"])
    shutil.copyfile(shapes / "red_disc.png", shapes / "nested" / "copy.png")
    (shapes / "green.bmp").unlink()  # outside the folder run below: left for a full run
    r = index_json(shapes / "nested")
    assert (r["embedded"], r["copied"], r["deleted"], r["unchanged"]) == (0, 1, 0, 2)
    after = catalog_paths(env["index"])
    assert str(shapes / "green.bmp") in after
    assert {p: i for p, i in after.items() if p in before} == before
    assert np.array_equal(
        vector_of(env["index"], shapes / "nested" / "copy.png"),
        vector_of(env["index"], shapes / "red_disc.png"),
    )


def test_new_changed_moved_deleted(env, shapes):
    index_json(shapes)
    before = catalog_paths(env["index"])
    red_vec = vector_of(env["index"], shapes / "red_square.jpg")

    draw_shape(shapes / "new_green.png", "green")  # new
    draw_shape(shapes / "red_square.jpg", "blue", quality=95)  # changed content, same path
    (shapes / "blue_square.png").rename(shapes / "nested" / "moved_blue.png")  # moved
    (shapes / "green.bmp").unlink()  # deleted
    shutil.copyfile(shapes / "red_disc.png", shapes / "copy_of_red_disc.png")  # duplicate

    r = index_json(shapes)
    assert r["embedded"] == 2  # the new file and the changed one; nothing else
    assert r["moved"] == 1 and r["deleted"] == 1 and r["copied"] == 1
    after = catalog_paths(env["index"])
    assert str(shapes / "green.bmp") not in after
    assert str(shapes / "blue_square.png") not in after
    # The moved file kept its row (and vector) instead of being re-embedded.
    assert (
        after[str(shapes / "nested" / "moved_blue.png")] == before[str(shapes / "blue_square.png")]
    )
    # The changed file got a new vector that follows its new colour.
    new_vec = vector_of(env["index"], shapes / "red_square.jpg")
    blue_vec = vector_of(env["index"], shapes / "nested" / "moved_blue.png")
    assert float(new_vec @ blue_vec) > float(new_vec @ red_vec)
    np.testing.assert_allclose(
        vector_of(env["index"], shapes / "copy_of_red_disc.png"),
        vector_of(env["index"], shapes / "red_disc.png"),
    )
    status = status_json(check=True)
    assert status["images"] == 7 and status["vectors_in_faiss"] == 7


def test_touch_without_change_is_not_reembedded(env, shapes):
    index_json(shapes)
    p = shapes / "green.bmp"
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    r = index_json(shapes)
    assert r["embedded"] == 0 and r["touched"] == 1


# Each file a run sees lands in exactly one of these (RunStats.file_counts).
FILE_COUNTS = (
    "embedded",
    "copied",
    "moved",
    "touched",
    "unchanged",
    "skipped",
    "skipped_earlier",
    "changed_during_read",
)


def _files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file())


def _summary_counts(out: str) -> tuple[int, int]:
    """(N, the sum of the counts) of the summary line 'N files: a embedded, b ...; ...'."""
    line = next(ln for ln in out.splitlines() if " files: " in ln)
    seen, rest = line.split(" files: ", 1)
    counts = re.findall(r"(?:^|, )(\d+) ", rest.split(";")[0])
    return int(seen), sum(map(int, counts))


def test_every_file_a_run_sees_is_counted_once(env, shapes):
    (shapes / "broken.jpg").write_bytes(b"not a jpeg")
    shutil.copyfile(shapes / "red_disc.png", shapes / "nested" / "twin.png")  # a copy, new too
    first = index_json(shapes)
    assert {k: first[k] for k in FILE_COUNTS if first[k]} == {
        "embedded": 6,
        "copied": 1,  # the twin: the same bytes as a file embedded earlier in the same run
        "skipped": 1,
    }
    assert first["seen"] == _files(shapes) == 8

    green = shapes / "green.bmp"
    os.utime(green, ns=(green.stat().st_atime_ns, green.stat().st_mtime_ns + 10**9))  # touched
    (shapes / "blue_square.png").rename(shapes / "nested" / "moved.png")
    (shapes / "nested" / "yellow.gif").unlink()
    draw_shape(shapes / "new.png", "purple")
    draw_shape(shapes / "red_square.jpg", "orange", quality=95)  # changed content
    shutil.copyfile(shapes / "red_disc.png", shapes / "copy.png")  # a copy of an indexed file
    second = index_json(shapes)
    assert {k: second[k] for k in FILE_COUNTS if second[k]} == {
        "embedded": 2,
        "copied": 1,
        "moved": 1,
        "touched": 1,
        "unchanged": 3,  # red_disc.png, twin.png, blue_wide.webp
        "skipped_earlier": 1,
    }
    assert second["deleted"] == 1  # a row, not a file seen
    assert sum(second[k] for k in FILE_COUNTS) == second["seen"] == _files(shapes) == 9
    # The report follows its schema, which names the same counts.
    schema = json.loads(INDEX_RUN_SCHEMA_PATH.read_text())
    for report in (first, second):
        jsonschema.validate(report, schema)
    assert set(FILE_COUNTS) <= set(schema["required"])

    # The line a person reads adds up too (a second demo run printed "0 embedded,
    # 0 unchanged" for 8 re-stamped photos).
    for p in shapes.rglob("*.png"):
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    code, out = run_cli("index", str(shapes))
    assert code == 0, out
    assert _summary_counts(out) == (9, 9) and "re-stamped" in out


def test_a_copy_in_the_same_run_reuses_its_originals_vector(env, shapes, monkeypatch):
    """Byte-identical files new to the index go through the model once, whether the
    original is in the same commit batch as its copy or an earlier one."""
    from wherein.indexer.ingest.run import Indexer
    from wherein.indexer.models.image_tower import ImageTower
    from wherein.indexer.models.modeldir import ModelDir

    shutil.copyfile(shapes / "red_disc.png", shapes / "nested" / "twin.png")
    shutil.copyfile(shapes / "red_disc.png", shapes / "z_twin.png")
    embedded = []
    real_embed = ImageTower.embed

    def counting(self, batch):
        embedded.append(len(batch))
        return real_embed(self, batch)

    monkeypatch.setattr(ImageTower, "embed", counting)
    tower = ImageTower.from_models(ModelDir(env["models"]))
    for every in (32, 1):  # one batch for all, then one commit per embedded image
        index = env["index"].with_name(f"index-{every}")
        embedded.clear()
        with IndexStore.open(index, write=True, create=True) as store:
            stats = Indexer(store, tower, commit_every=every).run([shapes])
            assert (stats.embedded, stats.copied) == (6, 2)
            ids = {p: row[0] for p, row in store.catalog.known_files().items()}
            got, vecs = store.catalog.vectors_for(ids.values())
            vec = dict(zip(got.tolist(), vecs, strict=True))
        assert sum(embedded) == 6  # the model never saw the copies
        for twin in (shapes / "nested" / "twin.png", shapes / "z_twin.png"):
            assert np.array_equal(vec[ids[str(twin)]], vec[ids[str(shapes / "red_disc.png")]])


def test_indexing_two_roots_separately_keeps_both(env, shapes, tmp_path):
    other = tmp_path / "other"
    draw_shape(other / "purple.png", "purple")
    index_json(shapes)
    index_json(other)  # must not delete what lies under `shapes`
    assert status_json()["images"] == 7


def _png_with_size(path: Path, width: int, height: int) -> None:
    """A tiny PNG whose header claims width x height pixels (a decompression bomb)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    data = zlib.compress(b"\x00" * 4)
    idat = b"IDAT" + data
    png = (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + struct.pack(">I", len(data))
        + idat
        + struct.pack(">I", zlib.crc32(idat))
        + struct.pack(">I", 0)
        + b"IEND"
        + struct.pack(">I", zlib.crc32(b"IEND"))
    )
    path.write_bytes(png)


def test_bad_files_are_skipped_with_reasons(env, shapes):
    good = shapes / "red_square.jpg"
    data = good.read_bytes()
    (shapes / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (shapes / "empty.png").write_bytes(b"")
    (shapes / "text.jpg").write_text("this is not a picture")
    (shapes / "garbage.webp").write_bytes(os.urandom(2048))
    _png_with_size(shapes / "bomb.png", 40_000, 40_000)
    (shapes / "notes.txt").write_text("not an image name: ignored, not skipped")

    code, out = run_cli("index", str(shapes), "--json")
    assert code == 0, out  # a run that finished with skips succeeds
    r = json.loads(out[out.index("{") :])
    assert r["embedded"] == 6 and r["skipped"] == 5
    reasons = {Path(s["path"]).name: s["reason"] for s in status_json()["skipped"]}
    assert set(reasons) == {"truncated.jpg", "empty.png", "text.jpg", "garbage.webp", "bomb.png"}
    assert "truncated" in reasons["truncated.jpg"]
    assert reasons["empty.png"] == "empty file"
    assert "not an image" in reasons["text.jpg"]
    assert "decompression bomb" in reasons["bomb.png"]
    # Known-bad files are not retried until they change; the good ones stay indexed.
    again = index_json(shapes)
    assert again["skipped"] == 0 and again["skipped_earlier"] == 5 and again["images"] == 6
    # A skipped file that gets fixed is indexed on the next run and leaves the skip list.
    draw_shape(shapes / "text.jpg", "orange")
    fixed = index_json(shapes)
    assert fixed["embedded"] == 1
    assert "text.jpg" not in {Path(s["path"]).name for s in status_json()["skipped"]}


def test_unreadable_file_is_skipped(env, shapes, monkeypatch):
    # Root reads whatever the mode says, so the denial is made at the open: photos are read
    # through os.open (indexer/regular.py: an fstat-checked descriptor), not builtins.open.
    blocked = str(shapes / "green.bmp")
    real_open = os.open

    def fake_open(path, *args, **kwargs):
        if os.fspath(path) == blocked:
            raise PermissionError(13, "Permission denied", blocked)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    r = index_json(shapes)
    assert r["skipped"] == 1 and r["embedded"] == 5
    [skip] = status_json()["skipped"]
    assert skip["path"] == blocked and "permission denied" in skip["reason"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_file_real(env, shapes):
    p = shapes / "green.bmp"
    p.chmod(0)
    try:
        r = index_json(shapes)
    finally:
        p.chmod(0o644)
    assert r["skipped"] == 1


def test_image_modes_and_formats_are_indexed(env, tmp_path):
    import pillow_heif
    from PIL import Image

    root = tmp_path / "modes"
    root.mkdir()
    rgb = Image.new("RGB", (64, 48), (220, 30, 30))
    rgb.convert("CMYK").save(root / "cmyk.jpg")
    rgb.convert("P").save(root / "palette.png", transparency=0)
    rgb.convert("LA").save(root / "la.png")
    rgb.convert("RGBA").save(root / "rgba.png")
    Image.fromarray(np.full((48, 64), 40000, np.uint16)).save(root / "sixteen.png")
    rgb.save(root / "tiff.tiff")
    frames = [rgb, Image.new("RGB", (64, 48), (30, 30, 220))]
    frames[0].save(root / "anim.gif", save_all=True, append_images=frames[1:])
    expected = 7
    try:
        rgb.save(root / "photo.avif")
        expected += 1
    except (KeyError, OSError, ValueError):
        pass  # no encoder in this Pillow build; decoding is what the indexer needs
    # Written by pillow-heif itself: wherein registers it for reading only, on first use.
    pillow_heif.from_pillow(rgb).save(root / "photo.heic", quality=90)
    expected += 1
    r = index_json(root)
    assert r["skipped"] == 0 and r["embedded"] == expected


def test_exif_orientation_is_applied(env, tmp_path):
    from PIL import Image, ImageDraw

    root = tmp_path / "exif"
    root.mkdir()
    # Stored: red left half, blue right half. EXIF 6 (rotate 90 clockwise) shows a
    # viewer red on top, blue below — which is what must be embedded.
    stored = Image.new("RGB", (300, 100), rgb255("red"))
    ImageDraw.Draw(stored).rectangle([150, 0, 299, 99], fill=rgb255("blue"))
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(root / "rotated.jpg", exif=exif.tobytes(), quality=95)
    viewed = Image.new("RGB", (100, 300), rgb255("red"))
    ImageDraw.Draw(viewed).rectangle([0, 150, 99, 299], fill=rgb255("blue"))
    viewed.save(root / "as_viewed.jpg", quality=95)
    stored.save(root / "unrotated.jpg", quality=95)
    index_json(root)
    with IndexStore.open(env["index"]) as store:
        known = store.catalog.known_files()
        row = store.catalog.rows_by_ids([known[str(root / "rotated.jpg")][0]])
    assert (
        row[known[str(root / "rotated.jpg")][0]]["width"],
        row[known[str(root / "rotated.jpg")][0]]["height"],
    ) == (100, 300)
    rotated = vector_of(env["index"], root / "rotated.jpg")
    assert float(rotated @ vector_of(env["index"], root / "as_viewed.jpg")) > 0.99
    assert float(rotated @ vector_of(env["index"], root / "unrotated.jpg")) < 0.95


def test_hidden_files_skipped_and_symlink_loops_end(env, shapes):
    draw_shape(shapes / ".hidden" / "secret.png", "purple")
    draw_shape(shapes / ".dotfile.png", "purple")
    (shapes / "nested" / "loop").symlink_to(shapes, target_is_directory=True)
    r = index_json(shapes)
    assert r["embedded"] == 6
    code, out = run_cli("index", str(shapes), "--hidden", "--json")
    hidden = json.loads(out[out.index("{") :])
    # the two drawings are byte-identical: one goes through the model, the other reuses it
    assert (hidden["embedded"], hidden["copied"]) == (1, 1)


def test_model_change_invalidates_vectors(env, shapes, tmp_path, monkeypatch):
    index_json(shapes)
    other = tmp_path / "other-models"
    shutil.copytree(env["models"], other)
    marker = other / "STANDIN.json"
    info = json.loads(marker.read_text())
    info["space"] = "another-space"
    marker.write_text(json.dumps(info))
    monkeypatch.setenv("WHEREIN_MODELS", str(other))
    r = index_json(shapes)
    assert r["invalidated"] == 6 and r["embedded"] == 6
    status = status_json(check=True)
    assert status["space"] == "another-space" and status["images"] == 6


def test_missing_models_is_one_line_error(env, shapes, tmp_path):
    code, out = run_cli("index", str(shapes), "--models", str(tmp_path / "nowhere"))
    assert code == 1
    assert out.strip().startswith("Error:") and len(out.strip().splitlines()) == 1
    assert "models pull" in out


def test_missing_root_fails_after_indexing_the_others(env, shapes, tmp_path):
    missing = tmp_path / "missing"
    code, out = run_cli("index", str(shapes), str(missing), "--json")
    assert code == 1
    r, _ = json.JSONDecoder().raw_decode(out[out.index("{") :])
    assert r["embedded"] == 6 and r["bad_roots"] == [str(missing)]
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: cannot read {missing}: no such file or directory"]
    # A root that went missing (an unmounted drive) fails the run and keeps its rows.
    shapes.rename(tmp_path / "elsewhere")
    code, out = run_cli("index", str(shapes), "-q")
    assert code == 1 and f"cannot read {shapes}" in out
    assert status_json()["images"] == 6


def test_a_missing_root_alone_is_only_the_error(env, tmp_path):
    # It printed a success-style summary first ("0 files: 0 embedded; ..."), then the error.
    missing = tmp_path / "no" / "such" / "folder"
    code, out = run_cli("index", str(missing))
    assert code == 1
    lines = [line for line in out.splitlines() if line and not line.startswith("Using STAND-IN")]
    assert lines == [f"Error: cannot read {missing}: no such file or directory"]


def test_a_path_that_is_not_a_folder_or_an_image_is_refused(env, shapes, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list")
    code, out = run_cli("index", str(notes))
    assert code == 1
    [line] = out.strip().splitlines()
    assert line.startswith(f"Error: {notes}: not a folder or an image file (wherein reads ")
    assert ", jpg, " in line
    assert not env["index"].exists()  # nothing was made for it
    # Given along with photos (a shell glob, say): indexed, and the file is named on stderr.
    result = CliRunner().invoke(cli, ["index", str(shapes), str(notes), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["embedded"] == 6
    assert f"ignored {notes}: not a folder or an image file" in result.stderr


def test_second_writer_is_refused(env, shapes):
    index_json(shapes)
    with IndexStore.open(env["index"], write=True):
        code, out = run_cli("index", str(shapes))
    # 75 = EX_TEMPFAIL: "try again later", distinct from a failure; the message names the holder.
    assert code == 75 and f"locked by PID {os.getpid()}" in out
    assert [line for line in out.splitlines() if "locked" in line][0].startswith("Error:")


def test_status_without_index_is_clear_error(env):
    code, out = run_cli("status")
    assert code == 1 and "no wherein index" in out


def test_check_reports_stale_vectors_and_repair_saves_them(env, shapes):
    index_json(shapes)
    # Simulate a crash after a catalog commit but before the vectors were saved.
    (env["index"] / "vectors.faiss").unlink()
    status = status_json(check=True)  # reads only: says what --repair would do
    assert status["check"]["ok"] and not status["check"]["repaired"]
    assert "status --repair" in status["check"]["to_repair"][0]
    assert not (env["index"] / "vectors.faiss").exists()
    code, out = run_cli("status", "--repair", "--json")
    assert code == 0, out
    assert json.loads(out[out.index("{") :])["check"]["repaired"]
    assert (env["index"] / "vectors.faiss").exists()
    assert not status_json(check=True)["check"]["to_repair"]


def test_check_fails_on_inconsistency(env, shapes):
    index_json(shapes)
    # Corrupt the catalog behind the store's back: an embedding with a bad dimension.
    conn = sqlite3.connect(env["index"] / "catalog.db")
    with conn:
        conn.execute("UPDATE embeddings SET vector = zeroblob(12) WHERE item_id = 1")
    conn.close()
    code, out = run_cli("status", "--check")
    assert code == 1 and "not 768-dimensional" in out


def test_index_and_status_do_not_import_torch(env, shapes):
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from wherein.search.cli import cli\n"
        f"r = CliRunner().invoke(cli, ['index', {str(shapes)!r}, '-q'])\n"
        "assert r.exit_code == 0, r.output\n"
        "r = CliRunner().invoke(cli, ['status'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False"
