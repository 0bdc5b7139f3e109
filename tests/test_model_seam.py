"""The model seam: a model registered under a key is indexed and searched end to end.

The tiny model here has another width (512, not SigLIP's 768), its own input (32 px,
bilinear, plain /255) and its own prompt template. Nothing but its registry entry and a
MODEL.json in its models directory tells wherein about it: the indexer, the catalog,
FAISS and search must ask the model, not assume SigLIP 2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wherein.indexer.imaging import model_input
from wherein.indexer.models import registry
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.standins.palette import NAMES, PROTOTYPES
from wherein.indexer.models.text_tower import CalibratedScores
from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.models import MODEL_MARKER, EmbedderSpec, ImageInput
from wherein.search.cli import cli

pytestmark = pytest.mark.slow  # indexes and searches through the CLI

TINY = EmbedderSpec(
    key="tiny-512",
    title="a tiny colour model",
    image=ImageInput(size=32, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resample="bilinear"),
    dim=512,
    template="a picture of {}",
)
# Each palette colour's direction in the 512-d space (orthonormal rows).
DIRECTIONS = np.linalg.qr(np.random.default_rng(7).standard_normal((TINY.dim, len(NAMES))))[0].T


class TinyImages:
    spec, space, dim, batch_size = TINY, "tiny", TINY.dim, 3

    def __init__(self, models: ModelDir) -> None:
        self.path = models.root / MODEL_MARKER
        self.model_id = "tiny:1"
        self.batches: list[tuple[int, ...]] = []

    def preprocess(self, image) -> np.ndarray:
        return model_input(image, TINY.image)

    def embed(self, batch: np.ndarray) -> np.ndarray:
        self.batches.append(batch.shape)
        pixels = batch.transpose(0, 2, 3, 1).reshape(len(batch), -1, 3)  # values in [0, 1]
        dist = ((pixels[:, :, None, :] - PROTOTYPES[None, None]) ** 2).sum(-1)
        share = (dist < 0.02).mean(axis=1)  # [n, colours]: the part of the image of each colour
        return unit_rows(share @ DIRECTIONS)


class TinyText(CalibratedScores):
    logit_scale, logit_bias = 10.0, -5.0

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.prompts.extend(texts)
        words = [[n in t.lower().split() for n in NAMES] for t in texts]
        return unit_rows(np.array(words, dtype=np.float64) @ DIRECTIONS + 1e-9)


@pytest.fixture()
def tiny(tmp_path, monkeypatch):
    models = tmp_path / "tiny-models"
    models.mkdir()
    (models / MODEL_MARKER).write_text(json.dumps({"model": TINY.key, "space": "tiny"}))
    made: dict[str, object] = {}
    text = TinyText()

    def load_image(md: ModelDir, threads: int | None) -> TinyImages:
        made["images"] = TinyImages(md)
        return made["images"]  # type: ignore[return-value]

    registry.register(
        registry.ModelEntry(TINY, load_image, lambda md: text, lambda md: ("tiny:1", MODEL_MARKER))
    )
    yield {"models": models, "made": made, "text": text}
    registry.unregister(TINY.key)


def test_a_registered_model_of_another_width_indexes_and_searches(tiny, shapes, tmp_path):
    index = tmp_path / "index"
    env = {"WHEREIN_MODELS": str(tiny["models"]), "WHEREIN_INDEX": str(index)}
    runner = CliRunner(env=env)
    r = runner.invoke(cli, ["index", str(shapes), "-q"])
    assert r.exit_code == 0, r.output
    images = tiny["made"]["images"]
    assert images.batches and all(shape[1:] == (3, 32, 32) for shape in images.batches)

    with IndexStore.open(index) as store:
        assert store.catalog.get_meta("dim") in (512, "512")
        assert store.vectors.index.d == 512

    r = runner.invoke(cli, ["search", "red", "-k", "3", "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)
    assert {Path(h["path"]).name for h in hits[:2]} == {"red_square.jpg", "red_disc.png"}
    assert hits[0]["probability"] > hits[2]["probability"]
    assert tiny["text"].prompts == ["a picture of red"]  # the model's own template

    r = runner.invoke(cli, ["search", "blue", "--raw", "-k", "1", "--paths"])
    assert r.exit_code == 0, r.output
    assert Path(r.stdout.strip()).name in {"blue_square.png", "blue_wide.webp"}
    assert tiny["text"].prompts[-1] == "blue"

    r = runner.invoke(cli, ["status", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["models"]["matches_index"] is True


def test_an_unknown_model_key_is_one_line(tmp_path):
    models = tmp_path / "m"
    models.mkdir()
    (models / MODEL_MARKER).write_text(json.dumps({"model": "no-such-model"}))
    r = CliRunner(env={"WHEREIN_MODELS": str(models), "WHEREIN_INDEX": str(tmp_path / "i")}).invoke(
        cli, ["index", str(tmp_path), "-q"]
    )
    assert r.exit_code == 1
    assert "no model 'no-such-model' is registered" in r.output
    assert "Traceback" not in r.output
