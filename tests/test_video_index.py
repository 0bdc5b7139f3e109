"""Videos in `wherein index`: a folder of photos and videos indexes in one run.

Every video is real H.264 (MP4/MOV/MKV) written by the test with PyAV (tests/video_files.py):
coloured segments at known times (red 0-4 s, blue 4-8 s, green 8-12 s), so the stand-in
models (which know colours) find the frames of a colour, and frame times can be checked
against what was drawn.
"""

from __future__ import annotations

import importlib
import json
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from launch import python_argv
from PIL import Image
from video_files import BLUE, PHONE, RED, H, W, segments, solid, write_audio, write_video

from wherein.indexer.ingest import videos as ingest_videos
from wherein.indexer.ingest.walk import walk
from wherein.indexer.ingest.watch import folders_to_walk
from wherein.indexer.kinds import registry as media
from wherein.indexer.scale.sources import list_items
from wherein.indexer.store.catalog import Catalog
from wherein.search.cli import cli


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def index_json(*args: str) -> dict:
    code, out, err = run("index", *args, "--json", "-q")
    assert code == 0, out + err
    return json.loads(out)


def status(*args: str) -> dict:
    code, out, err = run("status", *args, "--json")
    assert code in (0, 1), out + err
    return json.loads(out)


def catalog(env) -> Catalog:
    return Catalog(env["index"] / "catalog.db", readonly=True)


def frames_of(env, path: Path) -> dict[float, int]:
    """t -> item id of the video's frames."""
    cat = catalog(env)
    try:
        row = cat.row_by_path(str(path))
        assert row is not None, path
        conn = cat._conn
        rows = conn.execute(
            "SELECT t, id FROM items WHERE image_id = ? AND kind = 'frame' ORDER BY t",
            (row["id"],),
        ).fetchall()
        return {float(t): int(i) for t, i in rows}
    finally:
        cat.close()


def video_row(env, path: Path) -> dict:
    cat = catalog(env)
    try:
        row = cat.row_by_path(str(path))
        assert row is not None, path
        return {**row, **cat.video_rows([row["id"]])[row["id"]]}
    finally:
        cat.close()


def photo(path: Path, rgb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 48), rgb).save(path)
    return path


@pytest.fixture()
def library(tmp_path) -> Path:
    """Two photos, an MP4, a MOV, and a clip saved under a photo's name."""
    root = tmp_path / "lib"
    photo(root / "red.png", RED)
    photo(root / "blue.png", BLUE)
    write_video(root / "clip.mp4", segments, seconds=12)
    write_video(root / "phone.mov", segments, seconds=4, metadata=PHONE)
    write_video(root / "misnamed.jpg", lambda t: solid(BLUE), seconds=2, fmt="mp4")
    return root


# --- what a file is -----------------------------------------------------------------------


def test_videos_are_found_by_name_and_by_content_and_embed_lists_them(tmp_path):
    write_video(tmp_path / "a.mp4", segments, seconds=1)
    write_video(tmp_path / "IMG_0001", segments, seconds=1, fmt="mp4")  # no extension
    photo(tmp_path / "p.png", RED)
    (tmp_path / "notes.txt").write_text("a list")
    (tmp_path / "fake.mp4").write_text("not a video")  # a video's name: probed, then a skip
    found = sorted(Path(f.path).name for f in walk([tmp_path]))
    assert found == ["IMG_0001", "a.mp4", "fake.mp4", "p.png"]
    assert media.kind_of(tmp_path / "IMG_0001").name == "video"
    assert media.kind_of(tmp_path / "p.png").name == "photo"
    # A watch looks where an event names a video, by name or by content, and nowhere else.
    assert folders_to_walk([str(tmp_path / "IMG_0001")], [str(tmp_path)]) == [str(tmp_path)]
    assert folders_to_walk([str(tmp_path / "notes.txt")], [str(tmp_path)]) == []
    # `wherein embed`'s sources ask the same seam (a video's frames are rows of its shards).
    assert [Path(i.uri).name for i in list_items([str(tmp_path)])] == found


# --- one run over a mixed folder --------------------------------------------------------


def test_a_folder_of_photos_and_videos_indexes_in_one_run(env, library):
    r = index_json(str(library))
    assert r["seen"] == 5 and r["embedded"] == 5 and r["skipped"] == 0, r
    assert r["videos"] == 3 and r["video_damage"] == []
    clip = frames_of(env, library / "clip.mp4")
    assert list(clip) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # every 2 s, from the pts
    assert r["frames"] == len(clip) + len(frames_of(env, library / "phone.mov")) + len(
        frames_of(env, library / "misnamed.jpg")
    )
    assert r["images"] == 2 + r["frames"]
    row = video_row(env, library / "clip.mp4")
    assert (row["width"], row["height"], row["format"], row["codec"]) == (W, H, "mp4", "h264")
    assert (
        row["complete"] == 1 and row["frames"] == 6 and row["duration"] == pytest.approx(12, 0.05)
    )
    st = status("--check")
    assert st["check"]["ok"] and "notes" not in st["check"], st["check"]
    assert (st["videos"], st["frames"], st["files"]) == (3, r["frames"], 5)
    assert st["images"] == st["items"] == r["images"] and st["videos_incomplete"] == 0
    # A frame is found by what it shows, at its time.
    code, out, _ = run("search", "red", "-k", "50", "--json")
    hits = json.loads(out)
    frames = [h for h in hits if h["path"] == str(library / "clip.mp4")]
    best = max(frames, key=lambda h: h["score"])
    assert best["time"] < 4  # the red segment


def test_photos_keep_flowing_while_a_long_video_decodes(env, tmp_path, monkeypatch):
    """The photos behind a video are loaded and routed while its frames decode: the video's
    chunks share the decode pool with the photos' loads instead of holding up the run. The
    video's decoding waits here until every photo was routed (a run that held the photos
    back until the video's end would wait for ever: the gate gives up after 20 s)."""
    from wherein.indexer.ingest import run as ingest_run

    root = tmp_path / "lib"
    write_video(root / "a_long.mp4", segments, seconds=12, fps=10)
    for i in range(6):
        photo(root / f"b_{i}.png", (200, 20 + 30 * i, 20))  # no two alike (no copies)
    photos_routed = threading.Event()
    routed: list[str] = []
    route, next_chunk = ingest_run.route, ingest_videos._next_chunk

    def counting_route(work, read, *rest):
        if work.found.path.endswith(".png"):
            routed.append(work.found.path)
            if len(routed) == 6:
                photos_routed.set()
        return route(work, read, *rest)

    waited: list[bool] = []

    def gated(job, spec, size):
        waited.append(photos_routed.wait(20))
        return next_chunk(job, spec, size)

    monkeypatch.setattr(ingest_run, "route", counting_route)
    monkeypatch.setattr(ingest_videos, "_next_chunk", gated)
    r = index_json(str(root), "--frame-every", "0.2")
    assert r["videos"] == 1 and r["embedded"] == 7
    assert r["frames"] == len(frames_of(env, root / "a_long.mp4")) >= 50
    assert waited and all(waited)  # no chunk had to give up waiting for the photos


# --- what real phone videos do -----------------------------------------------------------


def test_a_rotated_phone_video_is_stored_as_a_player_shows_it(env, tmp_path):
    def top_red_bottom_blue(t: float) -> np.ndarray:
        a = solid(BLUE)
        a[: H // 2] = RED
        return a

    path = write_video(tmp_path / "v" / "upright.mov", top_red_bottom_blue, seconds=2, rotation=-90)
    index_json(str(path.parent))
    row = video_row(env, path)
    assert (row["width"], row["height"], row["rotation"]) == (H, W, 270)


def test_variable_frame_rate_frames_carry_their_own_times(env, tmp_path):
    pts = [0, 100, 250, 1300, 1350, 3000, 5200, 5300]
    path = write_video(
        tmp_path / "v" / "vfr.mkv", lambda t: solid(RED if t < 3 else BLUE), pts_ms=pts, fps=10
    )
    index_json(str(path.parent))
    assert list(frames_of(env, path)) == [0.0, 1.35, 3.0, 5.2]  # the pts of the frames taken


def test_a_ten_bit_video_is_indexed(env, tmp_path):
    path = write_video(tmp_path / "v" / "hdr.mp4", segments, seconds=6, pix_fmt="yuv420p10le")
    r = index_json(str(path.parent))
    assert r["videos"] == 1 and r["frames"] == 3
    _, out, _ = run("search", "blue", "-k", "1", "--json")
    [best] = json.loads(out)
    assert best["path"] == str(path) and 4 <= best["time"] < 8  # the blue segment


# --- files to skip, and damage ------------------------------------------------------------


def test_truncated_empty_and_audio_only_files_are_recorded_skips(env, tmp_path):
    root = tmp_path / "lib"
    whole = write_video(tmp_path / "whole.mp4", segments, seconds=12)  # moov is written last
    root.mkdir()
    (root / "cut.mp4").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    (root / "empty.mov").write_bytes(b"")
    write_audio(root / "voice.mp4")
    photo(root / "red.png", RED)
    r = index_json(str(root))
    assert (r["embedded"], r["skipped"], r["videos"]) == (1, 3, 0), r
    reasons = {Path(s["path"]).name: s["reason"] for s in status()["skipped"]}
    assert reasons == {
        "cut.mp4": reasons["cut.mp4"],
        "empty.mov": "empty file",
        "voice.mp4": "no video stream (audio only)",
    }
    assert reasons["cut.mp4"].startswith("unreadable video")
    again = index_json(str(root))
    assert again["skipped_earlier"] == 3 and again["skipped"] == 0  # not retried


def test_a_corrupt_stream_keeps_the_frames_before_the_damage(env, tmp_path):
    path = write_video(tmp_path / "whole.mkv", segments, seconds=12, gop=10)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = bytes(2000)  # a run of zeros, as a bad sector reads
    bad = tmp_path / "lib" / "bad.mkv"
    bad.parent.mkdir()
    bad.write_bytes(bytes(data))
    code, out, err = run("index", str(bad.parent), "-q")
    assert code == 0 and "damaged video" in err and str(bad) in err
    kept = frames_of(env, bad)
    assert kept and min(kept) == 0 and max(kept) < 10
    st = status("--check")
    assert st["check"]["ok"] and st["videos_incomplete"] == 0
    [damaged] = st["video_damage"]
    assert damaged["path"] == str(bad) and damaged["damage"] == video_row(env, bad)["damage"]
    assert "skipped" in damaged["damage"] or "truncated" in damaged["damage"]
    code, out, _ = run("status")
    assert code == 0 and "videos     1 (" in out and f"damaged {bad}: " in out


# --- re-runs ------------------------------------------------------------------------------


@pytest.fixture()
def decodes(monkeypatch) -> list[str]:
    """The videos whose frames a run decodes."""
    seen: list[str] = []
    # The module (the package's `sample` is a function): what the video kind samples with.
    video_sample = importlib.import_module("wherein.indexer.video.sample")
    real = video_sample.Sampling

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, path, **kw) -> None:
            seen.append(Path(path).name)
            super().__init__(path, **kw)

    monkeypatch.setattr(video_sample, "Sampling", Counting)
    return seen


def test_re_runs_decode_only_what_changed(env, library, decodes):
    index_json(str(library))
    assert sorted(decodes) == ["clip.mp4", "misnamed.jpg", "phone.mov"]
    decodes.clear()
    r = index_json(str(library))
    assert decodes == [] and r["unchanged"] == 5 and r["frames"] == 0
    # Moved: the row and its frames follow the file, ids and all; nothing is decoded.
    before = frames_of(env, library / "clip.mp4")
    (library / "sub").mkdir()
    (library / "clip.mp4").rename(library / "sub" / "clip.mp4")
    r = index_json(str(library))
    assert r["moved"] == 1 and decodes == [] and r["frames"] == 0
    assert frames_of(env, library / "sub" / "clip.mp4") == before
    # Changed: sampled again (a shorter video, other frames).
    write_video(library / "sub" / "clip.mp4", segments, seconds=6)
    r = index_json(str(library))
    assert decodes == ["clip.mp4"] and r["embedded"] == 1 and r["frames"] == 3
    after = frames_of(env, library / "sub" / "clip.mp4")
    assert list(after) == [0.0, 2.0, 4.0] and not set(after.values()) & set(before.values())
    assert status("--check")["check"]["ok"]


def test_a_copy_of_a_video_reuses_its_frames(env, library, decodes):
    index_json(str(library))
    decodes.clear()
    shutil.copyfile(library / "clip.mp4", library / "copy.mp4")
    r = index_json(str(library))
    assert r["copied"] == 1 and r["frames"] == 0 and decodes == []
    original, copy = frames_of(env, library / "clip.mp4"), frames_of(env, library / "copy.mp4")
    assert list(copy) == list(original) and not set(copy.values()) & set(original.values())
    cat = catalog(env)
    try:
        _, a = cat.vectors_for(original.values())
        _, b = cat.vectors_for(copy.values())
        assert np.array_equal(a, b)
        assert cat.video_rows([cat.row_by_path(str(library / "copy.mp4"))["id"]]).popitem()[1][
            "complete"
        ]
    finally:
        cat.close()
    assert status("--check")["check"]["ok"]


def test_an_unfinished_video_is_finished_in_place_or_where_it_moved(env, library, decodes):
    index_json(str(library))
    full = frames_of(env, library / "clip.mp4")
    db = env["index"] / "catalog.db"

    def stop_mid_video() -> None:  # what a kill -9 after the third frame's commit leaves
        conn = sqlite3.connect(db)
        with conn:
            image_id = conn.execute(
                "SELECT image_id FROM items WHERE id = ?", (min(full.values()),)
            ).fetchone()[0]
            late = [i for t, i in frames_of(env, library / "sub" / "clip.mp4").items() if t > 4]
            conn.execute(
                f"DELETE FROM embeddings WHERE item_id IN ({','.join('?' * len(late))})", late
            )
            conn.execute(f"DELETE FROM items WHERE id IN ({','.join('?' * len(late))})", late)
            conn.execute("UPDATE videos SET complete = 0 WHERE image_id = ?", (image_id,))
        conn.close()

    (library / "sub").mkdir()
    (library / "clip.mp4").rename(library / "sub" / "clip.mp4")
    index_json(str(library))  # moved: same ids
    stop_mid_video()
    assert status()["videos_incomplete"] == 1
    decodes.clear()
    r = index_json(str(library))  # unchanged on disk, yet unfinished: resumed in place
    assert decodes == ["clip.mp4"] and r["frames"] == 3 and r["videos"] == 1
    again = frames_of(env, library / "sub" / "clip.mp4")
    assert list(again) == list(full) and {t: again[t] for t in (0.0, 2.0, 4.0)} == {
        t: full[t] for t in (0.0, 2.0, 4.0)
    }  # what was stored stays, ids and all
    stop_mid_video()
    (library / "sub" / "clip.mp4").rename(library / "clip.mp4")
    r = index_json(str(library))  # moved while unfinished: finished where it landed
    assert r["moved"] == 1 and r["frames"] == 3
    assert list(frames_of(env, library / "clip.mp4")) == list(full)
    st = status("--check")
    assert st["check"]["ok"] and st["videos_incomplete"] == 0


# --- a kill -9 in the middle of a long video ----------------------------------------------

_CHILD = """
import sys, time
from pathlib import Path
from wherein.indexer.ingest.run import Indexer
from wherein.indexer.ingest.videos import FrameSettings
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.registry import load_image_embedder
from wherein.indexer.store.index_store import IndexStore

tower = load_image_embedder(ModelDir(Path(sys.argv[1])), None)
embed = tower.embed
def slow(batch):  # a slow tower: the parent's kill lands in the middle of the video
    time.sleep(0.05)
    return embed(batch)
tower.embed = slow
with IndexStore.open(Path(sys.argv[2]), write=True, create=True) as store:
    frames = FrameSettings(every=0.5, chunk=2)
    Indexer(store, tower, commit_every=2, frames=frames).run([sys.argv[3]])
"""


def _committed_frames(db: Path) -> tuple[int, int]:
    """(frames stored, complete) of the one video, read as another process would."""
    if not db.exists():
        return 0, 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute("SELECT frames, complete FROM videos").fetchone()
        finally:
            conn.close()
    except sqlite3.OperationalError:  # not created yet
        return 0, 0
    return (row[0], row[1]) if row else (0, 0)


@pytest.mark.slow
def test_kill_9_mid_video_then_the_next_run_finishes_it_with_the_same_frames(env, tmp_path):
    root = tmp_path / "lib"
    video = write_video(root / "long.mp4", segments, seconds=12, fps=10)
    reference = tmp_path / "reference"
    index_json(str(root), "--index", str(reference), "--frame-every", "0.5")
    ref = Catalog(reference / "catalog.db", readonly=True)
    want = sorted(ref.frame_times(ref.row_by_path(str(video))["id"]))
    ref.close()
    assert len(want) == 24

    index = env["index"]
    child = subprocess.Popen(
        python_argv("-c", _CHILD, str(env["models"]), str(index), str(root)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        stored, complete = _committed_frames(index / "catalog.db")
        if stored and not complete:
            child.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    child.wait(30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    stored, complete = _committed_frames(index / "catalog.db")
    assert 0 < stored < len(want) and not complete

    st = status("--check")
    assert st["check"]["ok"] and st["videos_incomplete"] == 1
    assert any("next index run" in n for n in st["check"]["notes"])
    r = index_json(str(root), "--frame-every", "0.5")
    assert r["frames"] == len(want) - stored and r["videos"] == 1  # nothing embedded twice
    assert sorted(frames_of(env, video)) == want
    st = status("--check")
    assert st["check"]["ok"] and "notes" not in st["check"] and st["videos_incomplete"] == 0
    assert st["frames"] == len(want)


# --- when and where ----------------------------------------------------------------------


def test_taken_and_gps_from_the_container_find_videos(env, library):
    index_json(str(library))
    _, out, _ = run("search", "a photo", "--taken", "2024-06-01..2024-06-01", "--json")
    assert {h["path"] for h in json.loads(out)} == {str(library / "phone.mov")}
    _, out, _ = run("search", "a photo", "--near", "48.858,2.294,1", "--json")
    hits = json.loads(out)
    assert {h["path"] for h in hits} == {str(library / "phone.mov")}
    assert hits[0]["taken"] == "2024-06-01T12:20:30+02:00"
    assert hits[0]["taken_source"] == "container"  # the MOV's creation time, not EXIF
    assert hits[0]["gps"] == {"lat": 48.8584, "lon": 2.2945}


# --- status --check on a damaged catalog -------------------------------------------------


def test_status_check_finds_videos_without_frames_and_frames_without_a_video(env, library):
    index_json(str(library))
    db = env["index"] / "catalog.db"
    clip = video_row(env, library / "clip.mp4")["id"]
    cat = catalog(env)
    red = cat.row_by_path(str(library / "red.png"))["id"]
    cat.close()
    conn = sqlite3.connect(db)
    with conn:  # foreign keys off: what a broken tool or a bad restore leaves behind
        conn.execute(
            "DELETE FROM embeddings WHERE item_id IN (SELECT id FROM items WHERE image_id = ?)",
            (clip,),
        )
        conn.execute("DELETE FROM items WHERE image_id = ?", (clip,))
        conn.execute("UPDATE items SET kind = 'frame', t = 0 WHERE image_id = ?", (red,))
    conn.close()
    code, out, _ = run("status", "--check", "--json")
    assert code == 1
    problems = json.loads(out)["check"]["problems"]
    assert any("1 videos marked complete have no frames" in p for p in problems), problems
    assert any("1 frame items belong to files that are not videos" in p for p in problems)
