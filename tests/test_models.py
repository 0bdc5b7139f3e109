"""Model directories: contract checks, clear errors, downloads when offline, the demo."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import ModelError
from wherein.schemas.models import (
    ALL_MODELS,
    CLIPSEG,
    SIGLIP_IMAGE,
    STANDIN_MARKER,
    ModelSpec,
)
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


def test_check_table_fits_in_100_columns(standin_models):
    """The contracts made the table 190 columns wide (250 after optimize): now they are
    listed below it, and every line of the report fits in 100 columns."""
    from wherein.search.cli.models import _check_table

    r = CliRunner().invoke(cli, ["models", "check", str(standin_models)])
    assert r.exit_code == 0, r.output
    assert max(map(len, r.stdout.splitlines())) <= 100, r.stdout
    rows = json.loads(
        CliRunner().invoke(cli, ["models", "check", str(standin_models), "--json"]).stdout
    )["checks"]
    # Rows as `models optimize` and a failure add them: long names, figures and errors.
    rows += [
        {
            "model": "siglip2-image",
            "file": "siglip2_base_224_int8_dynamic_range_batch8_candidate.tflite",
            "expected": "int8 vs siglip2_base_224_fp16.tflite: corr >= 0.995, top-10 >= 0.9",
            "found": "corr 0.99871, top-10 overlap 0.97 over 200 of your photos, "
            "38 -> 14 ms/image at batch 8 (2.7x faster)",
            "status": "ok",
        },
        {
            "model": "clipseg",
            "file": "clipseg_vision_int8.tflite",
            "expected": "int8 vs clipseg_vision_fp16.tflite: mask IoU >= 0.95",
            "found": "failed: mask IoU 0.912 below 0.95 over 24 image x prompt pairs; "
            "410 -> 160 ms/image",
            "status": "not used",
        },
    ]
    text = _check_table(rows)
    assert max(map(len, text.splitlines())) <= 100, text
    # Nothing is cut off: read the cells back (continuation lines have no model) and the
    # contracts below the table, and find every field whole.
    table, below = text.split("\nexpected:\n")
    head, rule, *body = table.strip("\n").splitlines()
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    cells: list[list[str]] = []
    for line in body:
        parts = [line[a : b + 1].strip() for a, b in spans]
        if parts[0]:
            cells.append(parts)
        else:
            cells[-1] = [f"{c} {p}".strip() for c, p in zip(cells[-1], parts, strict=True)]
    columns = head.split()
    assert [dict(zip(columns, c, strict=True)) for c in cells] == [
        {k: " ".join(r[k].split()) for k in columns} for r in rows
    ]
    contracts = " ".join(below.split())
    for r in rows:
        if r["expected"] != "-":
            assert f"{r['file']} {r['expected']}" in contracts, r["expected"]


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


def _hub_cache(cache: Path, models: Path, specs: Sequence[ModelSpec] = ALL_MODELS) -> None:
    """A Hugging Face hub cache as huggingface_hub lays it out (blobs, snapshot symlinks,
    refs/main), holding the files of models/ under each model's hub repo."""
    for spec in specs:
        repo = cache / ("models--" + spec.hub_repo.replace("/", "--"))
        rev = hashlib.sha1(spec.hub_repo.encode()).hexdigest()
        snapshot = repo / "snapshots" / rev
        snapshot.mkdir(parents=True)
        (repo / "blobs").mkdir()
        for f in sorted((models / spec.key).iterdir()):
            if not f.is_file():
                continue
            blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
            shutil.copyfile(f, blob)
            (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(rev)


@pytest.mark.convert
@pytest.mark.slow
def test_pull_offline_from_the_hub_cache_ends_with_the_verified_fast_set_up(
    standin_models, tmp_path
):
    """The real download code (snapshot_download), no network: a user whose Hugging Face cache
    holds the models gets them, then the optimized graphs that passed their gates."""
    cache = tmp_path / "hf" / "hub"
    _hub_cache(cache, standin_models)
    root, index = tmp_path / "models", tmp_path / "index"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(cache),
        "WHEREIN_INDEX": str(index),
    }
    # The pulled folder holds no STANDIN.json (pull writes "real" models), so the speed gate
    # would time these tiny graphs: the rule for stand-ins (exempt) is applied by hand.
    code = (
        "from wherein.indexer.models.optimize import build\n"
        "build.speed_matters = lambda md: False\n"
        "from wherein.search.cli import cli\n"
        "cli()\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "models", "pull", "--models", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    table = r.stdout[r.stdout.index("\nmodel ") :]
    for model in ("siglip2-image ", "clipseg ", "clipseg text ", "siglip2-text "):
        row = next(ln for ln in table.splitlines() if ln.startswith(model))
        assert row[len(model) :].split()[0] == "switched", row
    assert "self-test  ok" in r.stdout
    assert "verifying on 32 bundled sample images" in r.stdout  # the index is empty
    md = ModelDir(root)
    assert not md.is_standin and not (root / STANDIN_MARKER).exists()
    for spec in ALL_MODELS:
        for f in (standin_models / spec.key).iterdir():
            if f.is_file() and spec.hub_files and f.name in spec.hub_files:
                copied = root / spec.key / f.name
                assert not copied.is_symlink() and copied.read_bytes() == f.read_bytes()
    assert md.image_tower_file().name.endswith("_int8_opt.tflite")
    assert md.image_reverify_pending()  # the first index verifies it on the user's photos
    assert md.clipseg_vision_file().name.endswith("_int8_opt.tflite")
    assert md.clipseg_text_short() is not None
    assert (md.text_dir / "text_tower.tflite").is_file()
    assert "DestroyAccelerator" not in r.stderr


@pytest.mark.slow  # the demo builds stand-in models of its own
def test_demo_runs_on_standins_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("WHEREIN_MODELS", str(tmp_path / "no-models"))
    r = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "demo")])
    assert r.exit_code == 0, r.output
    assert "STAND-IN" in r.output
    assert "10 files: 8 embedded, 2 skipped; 8 items in the index" in r.output
    assert "check      ok" in r.output
    # The same path as `models pull`: optimized stand-ins, verified again on the photos.
    assert "what `models pull` ends with" in r.output
    assert "verified the int8 image tower again on 8 of your photos" in r.output
    # The export line is pasted into a shell: each assignment is a folder the demo made.
    (export,) = [ln for ln in r.output.splitlines() if ln.lstrip().startswith("export ")]
    words = shlex.split(export)
    assert words[0] == "export" and [w.split("=")[0] for w in words[1:]] == [
        "WHEREIN_INDEX",
        "WHEREIN_MODELS",
    ]
    assert all(Path(w.split("=", 1)[1]).is_dir() for w in words[1:]), export
    # Run again: the sample is rewritten with the same bytes, and the summary says so.
    again = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "demo")])
    assert again.exit_code == 0, again.output
    assert "10 files: 0 embedded, 8 re-stamped (same bytes, new mtime), 2 skipped" in again.output
    # The stand-ins are there: a second run uses them and does not say it builds them.
    assert "building tiny stand-ins" not in again.output
    assert "using the stand-ins built before" in again.output


@pytest.mark.parametrize("made", [False, True])
def test_check_of_a_folder_without_models_says_so_once(tmp_path, made):
    # It printed 10 FAIL rows repeating the same three lines, then one of them again on stderr.
    empty = tmp_path / "models"
    if made:
        empty.mkdir()
    r = CliRunner().invoke(cli, ["models", "check", str(empty)])
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"Error: {empty}: no models here (run `wherein models pull`, or point --models / "
        "WHEREIN_MODELS at a models directory)"
    ]
