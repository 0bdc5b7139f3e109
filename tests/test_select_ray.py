"""`wherein select --mask --engine ray`: masks of a whole selection on Ray actors, in resumable
shards, merged into the same label export the local engine writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wherein.search.cli import cli

from conftest import draw_shape

pytestmark = [pytest.mark.scale, pytest.mark.slow]

# Red shapes at sizes that take both paths of the mask (enlarged from 352, shrunk below it),
# in several formats; other colours that the selection leaves out.
REDS = [
    ("r00.jpg", (320, 240), "rect"),
    ("r01.png", (800, 600), "ellipse"),
    ("r02.jpg", (1000, 300), "rect"),
    ("r03.webp", (200, 150), "ellipse"),
    ("r04.png", (352, 352), "rect"),
    ("deep/r05.jpg", (90, 400), "rect"),
    ("deep/r06.png", (640, 480), "ellipse"),
    ("deep/r07.jpg", (500, 700), "rect"),
    ("deep/r08.png", (400, 100), "ellipse"),
    ("deep/r09.jpg", (360, 360), "rect"),
]
BROKEN = "deep/r09.jpg"  # unreadable after indexing: no mask with either engine


def invoke(env: dict, *args):
    return CliRunner().invoke(cli, [str(a) for a in args], env={k: str(v) for k, v in env.items()})


def ok(env: dict, *args):
    res = invoke(env, *args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res


@pytest.fixture(scope="module")
def ray_local():
    """One small local Ray for the module: the library joins a session that is already up."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def world(standin_models, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("reds")
    photos = root / "photos"
    for i, (name, size, shape) in enumerate(REDS):
        kw = {"quality": 95} if name.endswith(".jpg") else {}
        box = (0.1 + 0.02 * i, 0.15, 0.8, 0.9 - 0.03 * i)
        draw_shape(photos / name, "red", size=size, box=box, shape=shape, **kw)
    draw_shape(photos / "blue.png", "blue")
    draw_shape(photos / "green.jpg", "green")
    env = {"WHEREIN_MODELS": standin_models, "WHEREIN_INDEX": root / "index"}
    ok(env, "index", photos, "-q")
    (photos / BROKEN).write_bytes(b"no longer an image")
    return {"env": env, "photos": photos, "root": root}


def coco(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc["info"].pop("date_created")
    return doc


def decoded(doc: dict) -> dict[int, np.ndarray]:
    from pycocotools import mask as mask_utils

    out = {}
    for ann in doc["annotations"]:
        seg = dict(ann["segmentation"], counts=ann["segmentation"]["counts"].encode())
        assert ann["image_id"] not in out, "one mask per image"
        out[ann["image_id"]] = mask_utils.decode(seg).astype(bool)
    return out


def select(world, export: Path, *extra) -> list[dict]:
    res = ok(
        world["env"], "select", "red", "-p", "0.1", "--mask", "--export", export, "--json", *extra
    )
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def local_coco(world) -> tuple[dict, list[dict]]:
    out = world["root"] / "local"
    out.mkdir()
    hits = select(world, out / "red.coco.json", "--out", out / "masks")
    return coco(out / "red.coco.json"), hits


def test_ray_engine_writes_the_local_engines_coco(
    world, local_coco, ray_local, tmp_path, monkeypatch
):
    from wherein.search.curate import masks_at_scale

    monkeypatch.setattr(masks_at_scale, "SHARD_IMAGES", 3)  # 10 hits: 4 shards over 2 actors
    export = tmp_path / "red.coco.json"
    hits = select(world, export, "--engine", "ray")
    local, local_hits = local_coco
    got = coco(export)
    assert len(local["images"]) == len(REDS) - 1  # the broken one has no mask in either
    assert got == local  # same images, order, annotation ids, categories, RLE
    masks, want = decoded(got), decoded(local)
    assert masks.keys() == want.keys() and len(masks) >= 8
    for i, m in masks.items():
        assert np.array_equal(m, want[i]), i
    fields = ("id", "path", "bbox", "mask_area", "mask_score")
    assert [{k: h.get(k) for k in fields} for h in hits] == [
        {k: h.get(k) for k in fields} for h in local_hits
    ]
    assert not (tmp_path / "red.coco.json.work").exists()  # removed after the merge


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file of a folder export: bytes, or a link's target; data.yaml without its own path
    (not the export's manifest: it records each file's time)."""
    out: dict[str, bytes | str] = {}
    for f in sorted(root.rglob("*")):
        rel = str(f.relative_to(root))
        if rel == ".wherein-export.json":
            continue
        if f.is_symlink():
            out[rel] = os.readlink(f)
        elif f.is_file():
            data = f.read_bytes()
            out[rel] = data.replace(str(root).encode(), b"DEST") if f.name == "data.yaml" else data
    return out


@pytest.mark.parametrize("fmt", ["yolo", "masks"])
def test_folder_exports_are_the_local_engines_too(world, ray_local, tmp_path, monkeypatch, fmt):
    from wherein.search.curate import masks_at_scale

    monkeypatch.setattr(masks_at_scale, "SHARD_IMAGES", 4)
    select(world, tmp_path / f"local.{fmt}", "--out", tmp_path / "m")
    select(world, tmp_path / f"ray.{fmt}", "--engine", "ray")
    local, ray = tree(tmp_path / f"local.{fmt}"), tree(tmp_path / f"ray.{fmt}")
    assert len(local) >= len(REDS) and local == ray


def test_a_killed_run_resumes_with_only_the_missing_shards(
    world, local_coco, ray_local, tmp_path, monkeypatch
):
    from wherein.search.curate import masks_at_scale
    from wherein.search.localize.mask_shards import WorkFolder

    monkeypatch.setattr(masks_at_scale, "SHARD_IMAGES", 3)
    export = tmp_path / "red.coco.json"
    real_write = WorkFolder.write
    written: list[int] = []

    def write_then_die(self, i, outcomes):
        real_write(self, i, outcomes)
        written.append(i)
        raise KeyboardInterrupt  # as a kill right after the first shard reached the disk

    monkeypatch.setattr(WorkFolder, "write", write_then_die)
    args = ("select", "red", "-p", "0.1", "--mask", "--engine", "ray", "--export", export)
    res = invoke(world["env"], *args)
    assert res.exit_code == 130, res.output
    assert "interrupted: 1 of 4 shard(s) kept" in res.stderr and not export.exists()
    work = tmp_path / "red.coco.json.work"
    assert [p.name for p in work.glob("shard-*.jsonl")] == [f"shard-{written[0]:05d}.jsonl"]

    def write_and_count(self, i, outcomes):
        written.append(i)
        real_write(self, i, outcomes)

    monkeypatch.setattr(WorkFolder, "write", write_and_count)
    res = ok(world["env"], *args)
    assert "1 from an earlier run" in res.stderr
    assert sorted(written) == [0, 1, 2, 3]  # the kept shard was not masked again
    doc = coco(export)
    ids = [im["id"] for im in doc["images"]]
    assert len(ids) == len(set(ids)) == len(REDS) - 1
    assert doc == local_coco[0]
    assert not work.exists()


def test_a_worker_that_cannot_load_its_graph_is_one_line(world, ray_local, tmp_path):
    """The driver never loads the vision graph: the actors find it broken, the user gets one line."""
    models = tmp_path / "models"
    shutil.copytree(world["env"]["WHEREIN_MODELS"], models)
    from wherein.indexer.models.clipseg import VISION_FILE

    (models / "clipseg" / VISION_FILE).write_bytes(b"not a graph")
    env = {**world["env"], "WHEREIN_MODELS": models}
    export = tmp_path / "red.coco.json"
    res = invoke(env, "select", "red", "-p", "0.1", "--mask", "--engine", "ray", "--export", export)
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("Using STAND-IN")]
    broken = models / "clipseg" / VISION_FILE
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"Error: {broken}: not a loadable LiteRT model"), res.stderr
    assert "Traceback" not in res.output and not export.exists()


def test_a_work_folder_of_another_job_starts_over(tmp_path):
    from wherein.search.localize.mask_shards import Item, MaskJob, Outcome, WorkFolder

    items = [Item(i, f"/p/{i}.jpg", "red") for i in range(1, 5)]
    job = MaskJob("red", "coco", ["red"], items, 2, "m")
    work = WorkFolder.open(tmp_path / "x.work", job)
    work.write(0, [Outcome(2, None, None, "bad"), Outcome(1, None, None, "bad")])
    assert WorkFolder.open(tmp_path / "x.work", job).pending() == [1]
    other = MaskJob("red", "coco", ["red"], items[:3], 2, "m")  # the selection changed
    again = WorkFolder.open(tmp_path / "x.work", other)
    assert again.restarted and again.pending() == [0, 1]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not wherein's")
    with pytest.raises(Exception, match="not a wherein work folder"):
        WorkFolder.open(tmp_path / "mine", job)


# -- one-line errors, before any work -------------------------------------------------------
@pytest.mark.parametrize(
    "extra, code, message",
    [
        (["--engine", "ray"], 2, "Error: --engine ray runs the mask step: add --mask"),
        (["--engine", "ray", "--mask"], 2, "Error: --engine ray writes the masks as labels"),
        (
            ["--ray-address", "127.0.0.1:1"],
            2,
            "Error: --ray-address only applies with --engine ray",
        ),
        (
            ["--engine", "ray", "--mask", "--export", "X.coco.json", "--ray-address", "nohost"],
            1,
            "Error: --ray-address 'nohost': expected HOST:PORT",
        ),
        (
            [
                "--engine",
                "ray",
                "--mask",
                "--export",
                "X.coco.json",
                "--ray-address",
                "127.0.0.1:1",
            ],
            1,
            "Error: cannot reach a Ray cluster at 127.0.0.1:1: connection refused",
        ),
    ],
)
def test_engine_ray_misuse_is_one_line(world, tmp_path, extra, code, message):
    extra = [str(tmp_path / a) if a == "X.coco.json" else a for a in extra]
    res = invoke(world["env"], "select", "red", "-p", "0.1", *extra)
    assert res.exit_code == code, res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(message), res.stderr
    assert "Traceback" not in res.output and not list(tmp_path.iterdir())


def test_workers_load_no_text_graph_and_local_paths_import_no_ray(standin_models, tmp_path):
    from wherein.indexer.models.clipseg import ClipSeg
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.schemas.errors import ModelError

    image_side = ClipSeg.load(ModelDir(standin_models), 1, text=False)
    with pytest.raises(ModelError, match="without that graph"):
        image_side.encode_prompt("red")
    cond = ClipSeg.load(ModelDir(standin_models), 1, image=False).encode_prompt("red")
    photo = tmp_path / "red.png"
    draw_shape(photo, "red")
    # A worker's whole job (the actor's code, run in a bare process) imports neither Ray nor
    # torch/open_clip; nor do the modules of the local path.
    code = f"""
import sys
import numpy as np
import wherein.search.cli.curate, wherein.search.curate.masks_at_scale
from wherein.search.localize.mask_shards import Item
from wherein.search.localize.ray_masks import MaskActor
cond = np.array({cond.tolist()!r}, np.float32)  # computed by the driver (this test)
actor = MaskActor({str(standin_models)!r}, cond, "red", "coco", ["red"])
items = [Item(1, {str(photo)!r}, "red"), Item(2, "/no/such/file.jpg", "red")]
shard, (good, bad), spent = actor.run(0, items)
assert good.values["mask_area"] > 0.3 and good.piece.record["annotations"], good
assert bad.values is None and bad.piece is None and bad.error, bad
print(sorted(m for m in ("ray", "torch", "open_clip") if m in sys.modules))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
