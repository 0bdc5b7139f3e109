"""A second real model family, end to end through the CLI: SigLIP 2 ViT-B/32 at 256 px.

`models convert siglip2-b32 --random-weights` builds the directory `models pull --model
siglip2-b32` makes (both towers converted to LiteRT and checked against open_clip, MODEL.json
naming the family); index, search and `models check` then run on it like on B/16. The small
config (width 64, 2 layers; the same 256-px input and 768-wide output) keeps the convert to
seconds: the full-size run is measured by hand (docs/models.md, bench/results/convert.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from wherein.indexer.models.modeldir import ModelDir
from wherein.search.cli import cli

pytestmark = [pytest.mark.convert, pytest.mark.slow]

FAMILY = "siglip2-b32"


@pytest.fixture(scope="module")
def b32_models(tmp_path_factory, standin_models) -> Path:
    root = tmp_path_factory.mktemp("b32") / "models"
    args = [
        "models",
        "convert",
        FAMILY,
        "--random-weights",
        "--config",
        "small",
        "--out",
        str(root),
    ]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    (root / "clipseg").symlink_to(standin_models / "clipseg")  # masks: the stand-in CLIPSeg
    return root


def test_the_random_weight_directory_is_a_pulled_one(b32_models):
    md = ModelDir(b32_models)
    assert md.model_key == FAMILY
    assert md.image_dir.name == f"{FAMILY}-image" and md.text_dir.name == f"{FAMILY}-text"
    manifest = json.loads((md.image_dir / "manifest.json").read_text())
    assert manifest["signatures"]["batch_8"]["inputs"]["args_0"] == [8, 3, 256, 256]
    assert manifest["signatures"]["serving_default"]["outputs"]["output_0"] == [1, 768]
    assert (md.text_dir / "text_tower.tflite").is_file()
    assert "random" in md.space  # never the trained family's space
    r = CliRunner().invoke(cli, ["models", "check", "--json", "--models", str(b32_models)])
    assert r.exit_code == 0, r.output
    files = {row["file"] for row in json.loads(r.stdout)["checks"]}
    assert {manifest["file"], "open_clip_config.json", "text_tower.tflite"} <= files
    # `models verify` rebuilds both PyTorch references from the manifests, at 256 px.
    r = CliRunner().invoke(cli, ["models", "verify", str(b32_models), "--count", "12", "--json"])
    assert r.exit_code == 0, r.output
    graphs = json.loads(r.output[r.output.index("{") :])["graphs"]
    assert {g["model"].split("/")[0] for g in graphs} == {md.image_dir.name, md.text_dir.name}


def test_it_indexes_and_searches_through_the_cli_without_torch(b32_models, shapes, tmp_path):
    index = tmp_path / "idx"
    code = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from wherein.search.cli import cli\n"
        f"args = ['--index', {str(index)!r}, '--models', {str(b32_models)!r}]\n"
        f"r = CliRunner().invoke(cli, ['index', {str(shapes)!r}, '-q', *args])\n"
        "assert r.exit_code == 0, r.output\n"
        f"like = {str(shapes / 'red_disc.png')!r}\n"
        "r = CliRunner().invoke(cli, ['search', '--like', like, '-k', '1', '--paths', *args])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(r.output.strip().splitlines()[-1])\n"
        "r = CliRunner().invoke(cli, ['search', 'red', '--json', *args])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(len(json.loads(r.output[r.output.index('['):])))\n"
        "print('torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    best, hits, torch_loaded = r.stdout.strip().splitlines()[-3:]
    assert Path(best).name == "red_disc.png"  # a photo is its own nearest neighbour
    assert int(hits) == 6 and torch_loaded == "False"
    status = CliRunner().invoke(
        cli, ["status", "--json", "--index", str(index), "--models", str(b32_models)]
    )
    assert status.exit_code == 0, status.output
    got = json.loads(status.stdout)
    assert got["family"] == FAMILY and got["dim"] == 768 and got["models"]["matches_index"]


def test_a_b16_index_refuses_the_b32_models(b32_models, shapes, standin_models, tmp_path):
    index = tmp_path / "idx16"
    args = ["--index", str(index)]
    r = CliRunner().invoke(
        cli, ["index", str(shapes), "-q", *args, "--models", str(standin_models)]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["search", "red", *args, "--models", str(b32_models)])
    assert r.exit_code == 1
    assert f"was built with the standin models, but {b32_models} holds {FAMILY}" in r.output


def test_random_weights_never_land_beside_trained_models(standin_models, tmp_path):
    """Stand-in folders count as trained here: a random tower must not be mixed in."""
    import shutil

    root = tmp_path / "m"
    shutil.copytree(standin_models, root, symlinks=True)
    (root / "MODEL.json").write_text(
        json.dumps({"model": FAMILY, "folders": {"image": "siglip2-image", "text": "siglip2-text"}})
    )
    r = CliRunner().invoke(
        cli, ["models", "convert", FAMILY, "--random-weights", "--out", str(root)]
    )
    assert r.exit_code == 1
    assert "not random-weight ones" in r.output


def test_optimize_builds_and_gates_its_int8_image_tower(b32_models, tmp_path, monkeypatch):
    """The int8 image tower is built and verified as B/16's is, at the family's 256 px; a
    part of another family is refused in one line."""
    import shutil

    root = tmp_path / "models"
    shutil.copytree(b32_models, root, symlinks=True)
    monkeypatch.setenv("WHEREIN_INDEX", str(tmp_path / "no-index"))
    args = ["models", "optimize", "--models", str(root), "--no-self-test", "--min-speedup", "0"]
    r = CliRunner().invoke(cli, [*args, "--only", "siglip2-image"])
    assert r.exit_code == 2 and "not a part of the siglip2-b32 models" in r.output
    r = CliRunner().invoke(cli, [*args, "--only", f"{FAMILY}-image", "--json"])
    assert r.exit_code == 0, r.output
    (outcome,) = json.loads(r.stdout)["optimized"]
    assert outcome["status"] == "switched", outcome
    assert ModelDir(root).image_tower_file().name.endswith("_int8_b1-8_opt.tflite")
    r = CliRunner().invoke(cli, ["models", "check", "--models", str(root)])
    assert r.exit_code == 0, r.output


def test_pull_downloads_the_open_clip_weights_and_converts_the_image_tower(b32_models, tmp_path):
    """The real download code (snapshot_download), offline from a Hugging Face cache that
    holds timm/ViT-B-32-SigLIP2-256 (here: the small random weights), then the conversion."""
    import os

    from test_models import _hub_cache

    from wherein.indexer.models import registry

    text = registry.entry(FAMILY).layout[1]
    assert text.hub_repo == "timm/ViT-B-32-SigLIP2-256"
    cache = tmp_path / "hf" / "hub"
    _hub_cache(cache, b32_models, [text])
    root = tmp_path / "models"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(cache),
        "WHEREIN_INDEX": str(tmp_path / "no-index"),
    }
    folders = [a for m in registry.entry(FAMILY).layout for a in ("--only", m.key)]
    args = ["models", "pull", "--model", FAMILY, "--models", str(root), *folders, "--no-optimize"]
    r = subprocess.run(
        [sys.executable, "-m", "wherein.search.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    md = ModelDir(root)
    assert md.model_key == FAMILY and md.space == "siglip2-vit-b32-256-webli"
    pulled = md.text_dir / "open_clip_model.safetensors"
    assert pulled.read_bytes() == (b32_models / text.key / pulled.name).read_bytes()
    manifest = json.loads((md.image_dir / "manifest.json").read_text())
    assert manifest["source"] == {
        **manifest["source"],
        "kind": "local-dir",
        "ref": str(md.text_dir),
    }
    assert manifest["signatures"]["serving_default"]["inputs"]["args_0"] == [1, 3, 256, 256]
    # Another family is not pulled over it.
    r = CliRunner().invoke(cli, ["models", "pull", "--model", "siglip2", "--models", str(root)])
    assert r.exit_code == 1 and f"holds the {FAMILY} models" in r.output
