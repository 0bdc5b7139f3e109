"""Videos through the scale path: `wherein embed` + `wherein build-index` give the catalog
`wherein index` gives (the video one file with frame items and a videos row, the same
frames and vectors), and old photo-only shards still build.

The videos are real H.264 written with PyAV (tests/video_files.py): red 0-4 s, blue 4-8 s,
green 8-12 s, so the stand-in models (which know colours) find a frame of a colour.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from video_files import PHONE, RED, segments, solid, write_audio, write_video

from wherein.indexer.store.catalog import Catalog
from wherein.search.cli import cli


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def ok(*args: str) -> str:
    code, out, err = run(*args)
    assert code == 0, out + err
    return out


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """Photos, a plain clip, a rotated phone clip with time and place, a truncated clip, an
    audio-only file."""
    root = tmp_path_factory.mktemp("lib")
    Image.new("RGB", (64, 48), RED).save(root / "red.jpg")
    Image.new("RGB", (40, 60), (20, 20, 220)).save(root / "blue.png")
    write_video(root / "clip.mp4", segments, seconds=12)
    write_video(root / "phone.mov", lambda t: solid(RED), 3, rotation=90, metadata=PHONE)
    whole = (root / "clip.mp4").read_bytes()
    (root / "broken.mp4").write_bytes(whole[: len(whole) // 3])
    write_audio(root / "memo.mp4")
    return root


def build(library: Path, tmp: Path, *embed_args: str, rescore: str = "float16") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    index = tmp / "built"
    ok("embed", str(library), "--out", str(tmp / "emb"), "-q", *embed_args)
    ok("build-index", str(tmp / "emb"), "--index", str(index), "-q", "--rescore", rescore)
    return index


def catalog_view(index: Path) -> dict:
    """What a user's index holds, by path and time (ids and indexing times left out)."""
    cat = Catalog(index / "catalog.db", readonly=True)
    try:
        conn = cat._conn
        files = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT path, size, mtime_ns, sha256, width, height, format FROM images"
            )
        }
        items = conn.execute(
            "SELECT i.path, it.kind, it.t, it.id FROM items it JOIN images i ON i.id = it.image_id"
        ).fetchall()
        ids, vecs = cat.vectors_for(r[3] for r in items)
        vector = dict(zip(ids.tolist(), vecs, strict=True))
        videos = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT i.path, v.duration, v.fps, v.codec, v.rotation, v.frames, v.complete, "
                "v.damage FROM videos v JOIN images i ON i.id = v.image_id"
            )
        }
        photos = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT i.path, p.taken, p.taken_offset, p.lat, p.lon FROM photos p "
                "JOIN images i ON i.id = p.image_id"
            )
        }
        skipped = {(s["path"], s["reason"]) for s in cat.skipped()}
    finally:
        cat.close()
    name = os.fsdecode  # paths are stored as the OS's bytes
    return {
        "files": {name(p): v for p, v in files.items()},
        "items": {(name(p), k, t): vector[i] for p, k, t, i in items},
        "videos": {name(p): v for p, v in videos.items()},
        "photos": {name(p): v for p, v in photos.items()},
        "skipped": skipped,
    }


def test_embed_and_build_index_equal_wherein_index(library, standin_models, env, tmp_path):
    # float32 re-scoring vectors, as `wherein index` stores them: equal to the bit.
    built = catalog_view(build(library, tmp_path, "--frame-every", "3", rescore="float32"))
    ok("index", str(library), "-q", "--frame-every", "3")
    indexed = catalog_view(env["index"])
    assert built["files"] == indexed["files"]
    assert built["items"].keys() == indexed["items"].keys()
    for key, vec in indexed["items"].items():
        np.testing.assert_array_equal(built["items"][key], vec, err_msg=str(key))
    assert built["videos"] == indexed["videos"]
    assert built["photos"] == indexed["photos"]
    assert built["skipped"] == indexed["skipped"]
    # What the catalog holds, not only that the two agree.
    clip, phone = str(library / "clip.mp4"), str(library / "phone.mov")
    # Every 3 s after a sample, and at the colour cuts drawn at 4 s and 8 s.
    assert sorted(t for p, k, t in built["items"] if p == clip) == [0, 3, 4, 7, 8, 11]
    assert {k for p, k, _ in built["items"] if p.endswith((".jpg", ".png"))} == {"image"}
    assert built["files"][phone][3:5] == (64, 96)  # as a player shows it: turned
    assert built["photos"][phone][:2] == ("2024-06-01 12:20:30", "+02:00")
    assert {Path(p).name for p, _ in built["skipped"]} == {"broken.mp4", "memo.mp4"}


def test_a_video_split_over_read_batches_builds_the_same(library, env, tmp_path, monkeypatch):
    """build-index reads shards a batch of rows at a time: a video whose frames straddle two
    batches is still one file with all its frames."""
    from wherein.indexer.scale import embed_set

    whole = catalog_view(build(library, tmp_path / "whole", rescore="float32"))
    monkeypatch.setattr(embed_set, "READ_ROWS", 4)
    split = catalog_view(build(library, tmp_path / "split", rescore="float32"))
    assert split["files"] == whole["files"] and split["videos"] == whole["videos"]
    assert split["items"].keys() == whole["items"].keys()
    for key, vec in whole["items"].items():
        np.testing.assert_array_equal(split["items"][key], vec, err_msg=str(key))


def test_search_finds_the_video_at_its_moment_and_status_is_ok(library, env, tmp_path):
    index = build(library, tmp_path)
    hits = json.loads(ok("search", "green", "--index", str(index), "--json", "-k", "3"))
    best = hits[0]
    assert best["path"] == str(library / "clip.mp4") and best["kind"] == "video"
    assert 8.0 <= best["time"] < 12.0
    code, out, err = run("status", "--check", "--index", str(index), "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["check"]["ok"], report["check"]


def test_broken_videos_are_recorded_skips(library, env, tmp_path):
    out = tmp_path / "emb"
    stats = json.loads(ok("embed", str(library), "--out", str(out), "--json", "-q"))
    assert stats["items"] == 6 and stats["failed"] == 2 and stats["frames"] == 6 + 2
    import pyarrow.parquet as pq

    errors = pq.read_table(next((out / "shards").glob("*.errors.parquet"))).to_pydict()
    reasons = dict(zip([Path(u).name for u in errors["uri"]], errors["reason"], strict=True))
    assert set(reasons) == {"broken.mp4", "memo.mp4"}
    assert "audio only" in reasons["memo.mp4"]
    index = tmp_path / "idx"
    ok("build-index", str(out), "--index", str(index), "-q")
    status = json.loads(ok("status", "--index", str(index), "--json"))
    assert {Path(s["path"]).name for s in status["skipped"]} == {"broken.mp4", "memo.mp4"}


def test_a_video_in_two_embed_dirs_keeps_the_newest_frames_only(library, env, tmp_path):
    """The same video embedded twice: one file, its frames once in FAISS (the older copy's
    frame items left out), whether built together or appended."""
    for name in ("a", "b"):
        ok("embed", str(library / "clip.mp4"), "--out", str(tmp_path / name), "-q")
    together = tmp_path / "together"
    ok("build-index", str(tmp_path / "a"), str(tmp_path / "b"), "--index", str(together), "-q")
    grown = tmp_path / "grown"
    ok("build-index", str(tmp_path / "a"), "--index", str(grown), "-q")
    ok("build-index", str(tmp_path / "b"), "--index", str(grown), "--append", "-q")
    for index in (together, grown):
        code, out, err = run("status", "--check", "--index", str(index), "--json")
        assert code == 0, out + err
        report = json.loads(out)
        assert report["check"]["ok"], report["check"]
        with sqlite3.connect(index / "catalog.db") as db:
            assert db.execute("SELECT count(*) FROM images").fetchone()[0] == 1
            assert db.execute("SELECT count(*) FROM items").fetchone()[0] == 6
            assert db.execute("SELECT count(*) FROM videos").fetchone()[0] == 1
        hits = json.loads(ok("search", "blue", "--index", str(index), "--json", "--frames"))
        assert len(hits) == 6 and all(4.0 <= h["time"] < 8.0 for h in hits[:2])


def test_old_photo_only_shards_still_build(library, env, tmp_path):
    """Shards written before videos were carried (no kind, t or video columns; no frame
    counts in the manifest) build as they did: ids as planned."""
    import pyarrow.parquet as pq

    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("red.jpg", "blue.png"):
        (photos / name).write_bytes((library / name).read_bytes())
    out = tmp_path / "emb"
    ok("embed", str(photos), "--out", str(out), "-q")
    shard = next(p for p in (out / "shards").glob("*.parquet") if "errors" not in p.name)
    old = ("kind", "t", "duration", "fps", "codec", "rotation", "frames", "damage")
    table = pq.read_table(shard)
    pq.write_table(table.drop(list(old)), shard)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["shards"]:
        del entry["frames"]
    del manifest["frames"], manifest["sampling"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    index = tmp_path / "idx"
    ok("build-index", str(out), "--index", str(index), "-q")
    with sqlite3.connect(index / "catalog.db") as db:
        rows = db.execute(
            "SELECT i.id, i.path, it.id, it.kind FROM images i JOIN items it ON it.image_id = i.id"
        ).fetchall()
    by_path = {Path(os.fsdecode(p)).name: (i, item, kind) for i, p, item, kind in rows}
    planned = dict(zip(table["uri"].to_pylist(), table["id"].to_pylist(), strict=True))
    assert by_path == {Path(u).name: (i, i, "image") for u, i in planned.items()}
    hits = json.loads(ok("search", "red", "--index", str(index), "--json", "-k", "1"))
    assert Path(hits[0]["path"]).name == "red.jpg"


def test_a_resumed_embed_keeps_its_sampling(library, env, tmp_path):
    out = tmp_path / "emb"
    ok("embed", str(library / "clip.mp4"), "--out", str(out), "-q", "--max-frames", "2")
    assert json.loads((out / "manifest.json").read_text())["sampling"] == {
        "frame_every": 2.0,
        "max_frames": 2,
    }
    code, stdout, err = run("embed", str(library / "clip.mp4"), "--out", str(out), "-q")
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"Error: {out}: was planned with --max-frames 2; use it or a new --out"
    )


@pytest.mark.scale
@pytest.mark.slow
def test_ray_engine_writes_the_local_engines_video_rows(library, standin_models, tmp_path):
    """A video is one Ray decode task; its frames come back chunk by chunk (3 frames a chunk
    here: the clip's six end on an empty last chunk) and make the same rows as locally."""
    import pyarrow.parquet as pq

    from wherein.indexer.ingest.videos import FrameSettings
    from wherein.indexer.scale.embed import embed
    from wherein.indexer.scale.shards import embeddings

    frames = FrameSettings(chunk=3)
    tables = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        stats = embed([str(library)], out, standin_models, engine, shard_size=2, frames=frames)
        assert stats.complete and stats.frames == 8 and stats.failed == 2
        tables[engine] = {
            f.name: pq.read_table(f) for f in sorted((out / "shards").glob("*.parquet"))
        }
    assert tables["ray"].keys() == tables["local"].keys()
    for name, local in tables["local"].items():
        ray = tables["ray"][name]
        if "embedding" in local.column_names:
            diff = np.abs(embeddings(ray, 768) - embeddings(local, 768))
            assert diff.max(initial=0.0) < 1e-6, name
            ray, local = ray.drop(["embedding"]), local.drop(["embedding"])
        assert ray.equals(local), name
