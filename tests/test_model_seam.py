"""The model seam: a model registered under a key is indexed and searched end to end.

The tiny model here has another width (512, not SigLIP's 768), its own input (32 px,
bilinear, plain /255) and its own prompt template. Nothing but its registry entry and a
MODEL.json in its models directory tells wherein about it: the indexer, the catalog,
FAISS and search must ask the model, not assume SigLIP 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from tiny_family import SPACE, TINY, TinyImages, TinyText, entry

from wherein.indexer.models import registry
from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.models import MODEL_MARKER
from wherein.search.cli import cli

pytestmark = pytest.mark.slow  # indexes and searches through the CLI


@pytest.fixture()
def tiny(tmp_path, standin_models):
    models = tmp_path / "tiny-models"
    models.mkdir()
    (models / MODEL_MARKER).write_text(json.dumps({"model": TINY.key, "space": SPACE}))
    (models / "clipseg").symlink_to(standin_models / "clipseg")  # masks: the stand-in CLIPSeg
    made: dict[str, object] = {}
    text = TinyText()

    def load_image(md) -> TinyImages:
        made["images"] = TinyImages(md)
        return made["images"]  # type: ignore[return-value]

    registry.register(entry(load_image, text))
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


# -- the family, not only its loading: Ray's decode path and `models check` -------------------
TESTS = Path(__file__).resolve().parent


@pytest.mark.scale
def test_a_registered_family_is_embedded_on_ray_with_its_own_input(tiny, shapes, monkeypatch):
    """Ray's decode tasks preprocess with the family's input (32 px here), and its workers
    load the family through WHEREIN_MODEL_PLUGINS: the tower refuses any other shape."""
    import pyarrow.parquet as pq

    from wherein.indexer.scale.embed import embed
    from wherein.indexer.scale.shards import embeddings

    monkeypatch.setenv(registry.PLUGINS_ENV, "tiny_family:register")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    out = tiny["models"].parent / "emb"
    stats = embed([str(shapes)], out, tiny["models"], engine="ray", shard_size=50)
    assert stats.complete and stats.embedded == 6 and stats.failed == 0
    by_name = {}
    for f in sorted((out / "shards").glob("shard-?????.parquet")):
        t = pq.read_table(f)
        for uri, v in zip(t.column("uri").to_pylist(), embeddings(t, TINY.dim), strict=True):
            by_name[Path(uri).name] = v
    red = by_name["red_square.jpg"] @ by_name["red_disc.png"]
    assert red > 0.9 and by_name["red_square.jpg"] @ by_name["blue_square.png"] < 0.5


def test_models_check_checks_a_registered_family_by_its_own_contract(tiny):
    r = CliRunner().invoke(cli, ["models", "check", "--json", "--models", str(tiny["models"])])
    assert r.exit_code == 0, r.output
    rows = {(c["model"], c["file"]): c for c in json.loads(r.stdout)["checks"]}
    image, text = rows[(TINY.key, "image side")], rows[(TINY.key, "text side")]
    assert image["status"] == text["status"] == "ok"
    assert image["found"] == "[n,3,32,32] -> [n,512] unit vectors"
    assert text["found"].startswith("[n,512]")


def test_models_check_fails_a_family_whose_input_is_not_what_it_declares(tiny):
    """A family whose image side preprocesses to another size than its spec says is caught."""

    class Wrong(TinyImages):
        def preprocess(self, image):
            return super().preprocess(image.resize((64, 64)))[:, :16, :16]

    registry.register(entry(Wrong))
    r = CliRunner().invoke(cli, ["models", "check", "--models", str(tiny["models"])])
    assert r.exit_code == 1
    assert "image side: preprocess gives [3, 16, 16]" in r.output


def test_an_index_of_one_family_refuses_another_familys_models(
    tiny, shapes, standin_models, tmp_path
):
    """The index records its family: searching or indexing it with other models is one line,
    and the vectors stay as they were (no silent re-embedding with another model)."""
    index = tmp_path / "index"
    tiny_env = {"WHEREIN_MODELS": str(tiny["models"]), "WHEREIN_INDEX": str(index)}
    assert CliRunner(env=tiny_env).invoke(cli, ["index", str(shapes), "-q"]).exit_code == 0
    other = CliRunner(env={"WHEREIN_MODELS": str(standin_models), "WHEREIN_INDEX": str(index)})
    for args in (["search", "red"], ["index", str(shapes), "-q"]):
        r = other.invoke(cli, args)
        assert r.exit_code == 1, r.output
        errors = [ln for ln in r.output.splitlines() if "Error" in ln or "Traceback" in ln]
        assert len(errors) == 1 and errors[0].startswith("Error: "), r.output
        assert "was built with the tiny-512 models" in errors[0] and "holds standin" in errors[0]
    r = CliRunner(env=tiny_env).invoke(cli, ["status", "--json"])
    status = json.loads(r.stdout)
    assert status["family"] == TINY.key and status["images"] == 6
    assert status["models"]["family"] == TINY.key
