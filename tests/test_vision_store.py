"""CLIPSeg vision passes on disk: a later process (or a restarted server) masks the same
photos with the decoder only, and gets the masks a fresh pass would give."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from wherein.indexer.models.clipseg import ClipSeg
from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.records import Hit
from wherein.search.cache.limit import CacheJanitor
from wherein.search.cache.vision_store import VISION_DIR, VisionStore, graph_id
from wherein.search.cli import cli
from wherein.search.localize.masking import add_masks_to_hits
from wherein.search.web.app import create_app

from conftest import Counting, draw_shape


class CountedVision(Counting):
    """The real vision graph, counting its runs (and able to refuse them)."""

    def __init__(self, graph, refuse: bool = False) -> None:
        super().__init__(graph)
        self.refuse = refuse
        self.path = graph.path  # what the store keys the graph by

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        if self.refuse:
            raise AssertionError("the vision graph ran although the store holds this photo")
        return super().run(*inputs)


def fresh_model(models: Path, refuse: bool = False) -> tuple[ClipSeg, CountedVision]:
    """A model as a new process has it: nothing in memory."""
    model = ClipSeg.load(ModelDir(models), num_threads=1)
    counted = CountedVision(model.vision, refuse)
    model.vision = counted
    return model, counted


def hits_of(paths: list[Path]) -> list[Hit]:
    return [
        Hit(rank=i + 1, path=str(p), score=0.5, probability=None, width=None, height=None, id=i + 1)
        for i, p in enumerate(paths)
    ]


@pytest.fixture()
def photos(tmp_path) -> list[Path]:
    return [
        tmp_path / "p" / "red.jpg",
        tmp_path / "p" / "red_blue.png",
        tmp_path / "p" / "green.png",
    ]


def draw(photos: list[Path]) -> None:
    draw_shape(photos[0], "red", quality=95)
    draw_shape(photos[1], "red", size=(400, 300), box=(0.05, 0.1, 0.45, 0.9))
    draw_shape(photos[2], "green")


def masked(models: Path, model, store, paths: list[Path], prompt: str, out: Path) -> list:
    return add_masks_to_hits(hits_of(paths), prompt, out, models, model=model, store=store)


def masks(hits: list) -> list[tuple]:
    return [(h.bbox, h.mask_area, h.mask_score) for h in hits]


def test_a_new_process_masks_stored_photos_with_the_decoder_only(standin_models, photos, tmp_path):
    draw(photos)
    store_dir = tmp_path / "index" / "cache" / VISION_DIR
    first, seen = fresh_model(standin_models)
    store = VisionStore(store_dir)
    red = masked(standin_models, first, store, photos, "red", tmp_path / "o1")
    assert seen.calls == 3 and store.saved == 3
    assert red[0].mask_area > 0.3 and red[2].bbox is None  # the masks are real ones

    later, refused = fresh_model(standin_models, refuse=True)
    store2 = VisionStore(store_dir)
    again = masked(standin_models, later, store2, photos, "red", tmp_path / "o2")
    assert store2.loaded == 3
    assert masks(again) == masks(red)  # a stored pass gives the mask a fresh one gave
    for a, b in zip(red, again, strict=True):
        assert Path(a.mask_path).read_bytes() == Path(b.mask_path).read_bytes()
    green = masked(standin_models, later, store2, photos, "green", tmp_path / "o3")
    assert green[2].mask_area > 0.3 and green[0].bbox is None


def test_a_renamed_photo_keeps_its_entry_a_changed_one_does_not(standin_models, photos, tmp_path):
    draw(photos)
    store_dir = tmp_path / "cache" / VISION_DIR
    model, _ = fresh_model(standin_models)
    masked(standin_models, model, VisionStore(store_dir), photos[:1], "red", tmp_path / "o")

    moved = photos[0].with_name("renamed.jpg")
    os.rename(photos[0], moved)
    later, refused = fresh_model(standin_models, refuse=True)
    (hit,) = masked(standin_models, later, VisionStore(store_dir), [moved], "red", tmp_path / "o2")
    assert hit.mask_area > 0.3

    draw_shape(moved, "blue", quality=95)  # same name, other content
    later, counted = fresh_model(standin_models)
    (hit,) = masked(standin_models, later, VisionStore(store_dir), [moved], "red", tmp_path / "o3")
    assert counted.calls == 1 and hit.bbox is None  # the blue photo, not the stored red one


def test_a_damaged_entry_is_computed_again(standin_models, photos, tmp_path):
    draw(photos)
    store_dir = tmp_path / "cache" / VISION_DIR
    model, _ = fresh_model(standin_models)
    want = masked(standin_models, model, VisionStore(store_dir), photos[:1], "red", tmp_path / "o")
    (entry,) = store_dir.glob("*/*.npy")
    entry.write_bytes(entry.read_bytes()[:1000])  # torn
    later, counted = fresh_model(standin_models)
    store = VisionStore(store_dir)
    got = masked(standin_models, later, store, photos[:1], "red", tmp_path / "o2")
    assert counted.calls == 1 and store.loaded == 0 and masks(got) == masks(want)
    assert entry.is_file() and entry.stat().st_size > 1000  # written again whole


def test_another_vision_graph_never_reads_the_entries(standin_models, tmp_path):
    class Model:
        def __init__(self, path: Path) -> None:
            self.vision = type("G", (), {"path": path})()

    graph = tmp_path / "vision.tflite"
    graph.write_bytes(b"graph one")
    before = graph_id(Model(graph))
    os.utime(graph, ns=(1, 1))
    assert graph_id(Model(graph)) != before
    assert graph_id(Model(tmp_path / "gone.tflite")) is None  # nothing stored for it


def test_stored_passes_obey_the_cache_size_limit(standin_models, photos, tmp_path):
    draw(photos)
    cache = tmp_path / "cache"
    model, _ = fresh_model(standin_models)
    one = VisionStore(cache / VISION_DIR)
    masked(standin_models, model, one, photos[:1], "red", tmp_path / "o")
    (entry,) = (cache / VISION_DIR).glob("*/*.npy")
    size = entry.stat().st_size
    os.utime(entry, ns=(1, 1))  # the oldest-used entry
    store = VisionStore(cache / VISION_DIR, CacheJanitor(cache, limit_bytes=int(size * 2.5)))
    masked(standin_models, model, store, photos, "red", tmp_path / "o2")
    left = sorted(cache.glob(f"{VISION_DIR}/*/*.npy"))
    assert len(left) == 2 and entry not in left


def test_cli_search_and_mask_keep_passes_in_the_index_cache(env, shapes, tmp_path):
    runner = CliRunner()
    assert runner.invoke(cli, ["index", str(shapes), "-q"]).exit_code == 0
    r = runner.invoke(cli, ["search", "red", "-k", "2", "--mask", "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    stored = list((env["index"] / "cache" / VISION_DIR).glob("*/*.npy"))
    assert len(stored) == 2
    r = runner.invoke(cli, ["mask", str(shapes / "green.bmp"), "green", "--no-files"])
    assert r.exit_code == 0, r.output
    assert len(list((env["index"] / "cache" / VISION_DIR).glob("*/*.npy"))) == 3
    # --index at a folder that holds no index: masked all the same, nothing written there.
    plain = tmp_path / "not-an-index"
    plain.mkdir()
    r = runner.invoke(
        cli, ["mask", str(shapes / "green.bmp"), "blue", "--no-files", "--index", str(plain)]
    )
    assert r.exit_code == 0, r.output
    assert list(plain.iterdir()) == []


def test_a_restarted_server_reuses_the_passes(standin_models, shapes, tmp_path):
    index = tmp_path / "index"
    r = CliRunner().invoke(
        cli, ["index", str(shapes), "--index", str(index), "--models", str(standin_models), "-q"]
    )
    assert r.exit_code == 0, r.output

    def open_mask(prompt: str) -> tuple[dict, dict]:
        app = create_app(index, standin_models, prefetch_masks=0)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            hit = client.get("/api/search", params={"q": "red"}).json()["hits"][0]
            m = client.get(f"/api/mask/{hit['id']}", params={"prompt": prompt}).json()
            return m, client.get("/api/status").json()["masks"]

    red, status = open_mask("red")
    assert status["vision_passes"] == 1 and red["mask_area"] > 0.3
    blue, status = open_mask("blue")  # a new server, a new prompt on the same photo
    assert status["vision_passes"] == 0 and status["vision_passes_loaded"] == 1
    assert blue["bbox"] is None and status["decoder_runs"] == 1


def test_cli_select_mask_keeps_passes_in_the_index_cache(env, shapes, tmp_path):
    """select --mask takes the same path as search --mask: its passes are there for later."""
    runner = CliRunner()
    assert runner.invoke(cli, ["index", str(shapes), "-q"]).exit_code == 0
    r = runner.invoke(
        cli, ["select", "red", "-p", "0.5", "--mask", "--out", str(tmp_path / "m"), "--json"]
    )
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)
    assert {Path(h["path"]).name for h in hits} == {"red_square.jpg", "red_disc.png"}
    stored = list((env["index"] / "cache" / VISION_DIR).glob("*/*.npy"))
    assert len(stored) == len(hits)


def test_a_kept_pass_is_half_the_bytes_and_masks_to_the_bit(standin_models, photos):
    """A vision pass is kept (in memory, as on disk) in float16: half a float32 pass, and the
    decoder's map from it equals, bit for bit, its map from the float32 pass rounded to the
    stored precision, which is what every mask path has always used."""
    from PIL import Image

    from wherein.indexer.models.clipseg import Features
    from wherein.search.localize.masking import seen_image

    draw(photos)
    model, _ = fresh_model(standin_models)
    image = Image.open(photos[1]).convert("RGB")
    raw = model.image_features(image).in_slot_order()
    seen = seen_image(model, image, image.size)
    kept = seen.features.in_slot_order()
    assert [t.dtype for t in kept] == [np.float16] * 3
    assert 2 * sum(t.nbytes for t in kept) == sum(np.asarray(t, np.float32).nbytes for t in raw)
    at_stored_precision = Features(
        *(np.float32(t).astype(np.float16).astype(np.float32) for t in raw)
    )
    for prompt in ("red", "blue"):
        cond = model.encode_prompt(prompt)
        want = model.decode(at_stored_precision, cond)
        assert np.array_equal(model.decode(seen.features, cond), want)
