"""Model directories: contract checks, clear errors, downloads when offline, the demo."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import ModelError
from wherein.schemas.models import CLIPSEG, SIGLIP_IMAGE
from wherein.search.cli import cli


@pytest.fixture()
def models_copy(standin_models, tmp_path) -> Path:
    dst = tmp_path / "models"
    shutil.copytree(standin_models, dst)
    return dst


def check(models: Path) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["models", "check", str(models)])
    return r.exit_code, r.output


def test_check_passes_on_standins(standin_models):
    r = CliRunner().invoke(cli, ["models", "check", str(standin_models), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{") :])
    assert data["ok"]
    files = {row["file"] for row in data["checks"]}
    assert {
        "siglip2_base_224_fp16.tflite",
        "clipseg_decoder.tflite",
        "token_embedding_f16.bin",
    } <= files


def test_missing_graph_is_named(models_copy):
    (models_copy / "clipseg" / "clipseg_decoder.tflite").unlink()
    code, out = check(models_copy)
    assert code == 1
    last = out.strip().splitlines()[-1]
    assert last.startswith("Error: clipseg_decoder.tflite") and "not found" in last


def test_wrong_asset_size_is_named(models_copy):
    p = models_copy / "clipseg" / "token_embedding_f16.bin"
    p.write_bytes(p.read_bytes()[:1000])
    code, out = check(models_copy)
    assert code == 1
    assert "token_embedding_f16.bin: 1,000 bytes (expected 50,593,792 bytes)" in out


def test_graph_with_wrong_contract_is_refused(models_copy):
    # The CLIPSeg text graph in the image tower's place: loadable, wrong shapes.
    shutil.copyfile(
        models_copy / "clipseg" / "clipseg_text_fp16.tflite",
        models_copy / "siglip2-image" / "siglip2_base_224_fp16.tflite",
    )
    code, out = check(models_copy)
    assert code == 1
    assert "expected [1, 3, 224, 224] -> [1, 768]" in out


def test_corrupt_graph_is_refused(models_copy):
    (models_copy / "siglip2-image" / "siglip2_base_224_fp16.tflite").write_bytes(
        b"not a flatbuffer" * 64
    )
    code, out = check(models_copy)
    assert code == 1 and "siglip2_base_224_fp16.tflite" in out


def test_decoder_inputs_bound_by_slot_not_shape(standin_models):
    graph = LiteRTGraph(standin_models / "clipseg" / "clipseg_decoder.tflite")
    graph.check(CLIPSEG.graphs[2])
    sig = next(iter(graph.signatures.values()))
    assert sig.inputs == ["args_0", "args_1", "args_2", "args_3"]


def test_converted_tower_manifest_wins(models_copy):
    md = ModelDir(models_copy)
    src = md.image_dir / SIGLIP_IMAGE.graphs[0].filename
    shutil.copyfile(src, md.image_dir / "mine.tflite")
    (md.image_dir / "manifest.json").write_text(json.dumps({"file": "mine.tflite"}))
    assert md.image_tower_file().name == "mine.tflite"


def test_missing_models_dir_error(tmp_path):
    with pytest.raises(ModelError, match="models pull"):
        ModelDir(tmp_path / "none").require(SIGLIP_IMAGE)


def test_pull_offline_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = CliRunner().invoke(
        cli, ["models", "pull", "--models", str(tmp_path / "m"), "--only", "clipseg"]
    )
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert (
        len(lines) == 1
        and "litert-community/CLIPSeg-rd64-LiteRT" in lines[0]
        and "offline" in lines[0]
    )


@pytest.mark.slow  # the demo builds stand-in models of its own
def test_demo_runs_on_standins_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("WHEREIN_MODELS", str(tmp_path / "no-models"))
    r = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "demo")])
    assert r.exit_code == 0, r.output
    assert "STAND-IN" in r.output
    assert "8 images indexed" in r.output and "check      ok" in r.output
