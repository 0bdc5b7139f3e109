"""`wherein models optimize`: widened graphs compute what their fp16 source computes, int8
candidates are verified before use (and rejected when they fail), the self-test names the
broken step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.optimize import selftest as S
from wherein.indexer.models.optimize.probes import SELF_TEST, variety
from wherein.indexer.models.optimize.widen import (
    fp16_constant_count,
    read_model,
    weight_types,
    widen,
    write_model,
)
from wherein.indexer.models.standins import GRAPHS_DIR
from wherein.schemas.models import SIGLIP_IMAGE

from conftest import draw_shape

IMAGE_GRAPH = SIGLIP_IMAGE.graphs[0].filename


def _cli():
    from wherein.search.cli import cli

    return cli


def _inputs(n: int = 12) -> np.ndarray:
    from wherein.indexer.imaging import prepare
    from wherein.schemas.models import SIGLIP2

    return np.stack([prepare(p.file_bytes(), SIGLIP2.image).pixels for p in variety(n)])


def _outputs(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    from wherein.indexer.models.convert.build import litert_embed
    from wherein.indexer.models.litert_graph import LiteRTGraph

    g = LiteRTGraph(path, 1)
    return {key: litert_embed(g, key, x) for key in g.signatures}


def _fp16(src: Path, dst: Path) -> Path:
    """A published-style graph: fp16 constants behind DEQUANTIZE ops (ai-edge-quantizer float casting)."""
    from wherein.indexer.models.convert.build import reduce_precision

    reduce_precision(src, dst, "fp16")
    return dst


@pytest.fixture(scope="module")
def fp16_tower(tmp_path_factory) -> Path:
    return _fp16(GRAPHS_DIR / IMAGE_GRAPH, tmp_path_factory.mktemp("fp16") / IMAGE_GRAPH)


@pytest.fixture()
def pulled(standin_models, tmp_path, fp16_tower) -> Path:
    """A models directory as `pull` lays it out, with an fp16-weight image tower like the real one."""
    root = tmp_path / "models"
    shutil.copytree(standin_models, root)
    shutil.copyfile(fp16_tower, root / SIGLIP_IMAGE.key / IMAGE_GRAPH)
    return root


# -- widen -----------------------------------------------------------------------
def test_committed_standin_graph_widens_to_itself(tmp_path):
    src = GRAPHS_DIR / IMAGE_GRAPH
    report = widen(src, tmp_path / "wide.tflite")
    x = _inputs(4)
    assert report.widened == fp16_constant_count(src)
    a, b = _outputs(src, x), _outputs(tmp_path / "wide.tflite", x)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6)


@pytest.mark.convert
def test_widened_fp16_graph_computes_the_same_and_becomes_quantizable(fp16_tower, tmp_path):
    from wherein.indexer.models.convert.build import reduce_precision

    n = fp16_constant_count(fp16_tower)
    assert n > 0
    wide = tmp_path / "wide.tflite"
    report = widen(fp16_tower, wide)
    assert (report.widened, report.dequantize_dropped, report.left) == (n, n, 0)
    assert fp16_constant_count(wide) == 0
    x = _inputs()
    a, b = _outputs(fp16_tower, x), _outputs(wide, x)
    for key in a:  # every fp16 value is an fp32 value: exactly the same graph
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6)
    # Why widen at all: the dynamic int8 recipe leaves the fp16 graph's weights alone.
    reduce_precision(fp16_tower, tmp_path / "direct.tflite", "int8")
    reduce_precision(wide, tmp_path / "int8.tflite", "int8")
    assert "INT8" not in weight_types(tmp_path / "direct.tflite")
    assert weight_types(tmp_path / "int8.tflite").get("INT8", 0) >= 2


@pytest.mark.convert
@pytest.mark.slow
def test_widen_keeps_every_signature_of_a_converted_tower(tmp_path):
    from wherein.indexer.models.convert.build import convert_image_tower
    from wherein.indexer.models.convert.towers import Source

    m = convert_image_tower(
        Source("random", config="small"), tmp_path, [1, 8], "fp16", log=lambda s: None
    )
    src = tmp_path / SIGLIP_IMAGE.key / m["file"]
    assert fp16_constant_count(src) > 0
    widen(src, tmp_path / "wide.tflite")
    x = _inputs(9)
    a, b = _outputs(src, x), _outputs(tmp_path / "wide.tflite", x)
    assert set(b) == {"serving_default", "batch_8"}
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6)
    # Both signatures still read one copy of the weights: fp16 -> fp32 doubles the file, no more.
    assert len(read_model(tmp_path / "wide.tflite").subgraphs) == 2
    assert (tmp_path / "wide.tflite").stat().st_size < 2.5 * src.stat().st_size


# -- optimize: image tower ----------------------------------------------------------
def _optimize(root: Path, index: Path, *args: str):
    return CliRunner().invoke(
        _cli(),
        ["models", "optimize", "--models", str(root), "--index", str(index), "--yes", *args],
    )


@pytest.mark.convert
@pytest.mark.slow
def test_optimize_switches_to_a_verified_int8_tower_and_is_rerunnable(pulled, tmp_path):
    from wherein.indexer.models.image_tower import ImageTower

    before = ImageTower.from_models(ModelDir(pulled))
    r = _optimize(pulled, tmp_path / "no-index", "--only", "siglip2-image", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{") :])
    (image,) = out["optimized"]
    assert image["status"] == "switched"
    assert out["self_test"]["ok"]
    for fig in image["figures"]["signatures"].values():
        assert fig["pearson"] >= 0.99 and fig["top10_agreement"] >= 0.9
    md = ModelDir(pulled)
    manifest = json.loads((md.image_dir / "manifest.json").read_text())
    assert manifest["precision"] == "int8" and manifest["optimize"]["passed"]
    assert manifest["optimize"]["from"] == IMAGE_GRAPH
    after = ImageTower.from_models(md)
    assert after.path.name == image["file"] != IMAGE_GRAPH
    assert after.model_id != before.model_id  # the index sees a model change
    x = _inputs()
    got, ref = after.embed(x), before.embed(x)
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] >= 0.99
    # Re-running leaves the current graph alone.
    again = json.loads(
        _optimize(pulled, tmp_path / "no-index", "--only", "siglip2-image", "--json").output
    )
    assert again["optimized"][0]["status"] == "up to date"
    rows = _check_rows(pulled)
    assert any(r["file"] == image["file"] and "corr 0.99" in r["found"] for r in rows)


def _check_rows(root: Path) -> list[dict]:
    r = CliRunner().invoke(_cli(), ["models", "check", str(root), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output[r.output.index("{") :])["checks"]


@pytest.mark.convert
@pytest.mark.slow
def test_a_candidate_that_misses_the_pass_marks_is_not_used(pulled, tmp_path, monkeypatch):
    from wherein.indexer.models.convert import build as C
    from wherein.indexer.models.image_tower import ImageTower

    monkeypatch.setitem(C.MIN_CORR, "int8", 1.0)  # a mark no int8 graph can meet
    r = _optimize(pulled, tmp_path / "no-index", "--only", "siglip2-image", "--no-self-test")
    assert r.exit_code == 0, r.output
    assert "rejected" in r.output and "correlation" in r.output
    md = ModelDir(pulled)
    assert ImageTower.from_models(md).path.name == IMAGE_GRAPH
    assert not list(md.image_dir.glob("*_opt.tflite"))
    manifest = json.loads((md.image_dir / "manifest.json").read_text())
    assert manifest["file"] == IMAGE_GRAPH and not manifest["optimize"]["passed"]
    row = next(r for r in _check_rows(pulled) if r["status"] == "not used")
    assert "correlation" in row["found"]


@pytest.mark.convert
@pytest.mark.slow
def test_a_candidate_that_is_not_faster_is_not_used(pulled, tmp_path, monkeypatch):
    from wherein.indexer.models.image_tower import ImageTower
    from wherein.indexer.models.optimize import build as O

    monkeypatch.setattr(O, "speed_matters", lambda md: True)  # stand-ins are not timed otherwise
    monkeypatch.setattr(O, "MIN_SPEEDUP", 1e6)
    r = _optimize(pulled, tmp_path / "no-index", "--only", "siglip2-image", "--json")
    assert r.exit_code == 0, r.output
    (image,) = json.loads(r.output[r.output.index("{") :])["optimized"]
    assert image["status"] == "rejected" and "not faster on this CPU" in image["message"]
    assert ImageTower.from_models(ModelDir(pulled)).path.name == IMAGE_GRAPH
    r = _optimize(pulled, tmp_path / "no-index", "--only", "siglip2-image", "--min-speedup", "0")
    assert r.exit_code == 0, r.output
    assert ImageTower.from_models(ModelDir(pulled)).path.name != IMAGE_GRAPH


def _negate_int8_weights(path: Path) -> None:
    """Corrupt a quantized graph the way a bad conversion would: every int8 weight flipped."""
    model = read_model(path)
    for sg in model.subgraphs:
        for t in sg.tensors:
            data = model.buffers[t.buffer].data
            if t.type == 9 and data is not None and len(data):  # INT8
                model.buffers[t.buffer].data = (-np.frombuffer(data, np.int8)).view(np.uint8)
    # The model's other buffers still map the file: write beside it, then replace it.
    tmp = path.with_name(path.name + ".corrupt")
    write_model(model, tmp)
    tmp.replace(path)


@pytest.mark.convert
@pytest.mark.slow
def test_clipseg_uses_the_int8_vision_graph_only_when_it_passed(pulled, tmp_path, monkeypatch):
    from wherein.indexer.models.clipseg import VISION_FILE, ClipSeg
    from wherein.indexer.models.optimize import build as O

    md = ModelDir(pulled)
    real = O.make_int8

    def corrupted(source, out, log):
        done = real(source, out, log)
        _negate_int8_weights(out)
        return done

    monkeypatch.setattr(O, "make_int8", corrupted)
    r = _optimize(pulled, tmp_path / "no-index", "--only", "clipseg", "--no-self-test", "--json")
    assert r.exit_code == 0, r.output
    clip, _text = json.loads(r.output[r.output.index("{") :])["optimized"]
    assert clip["status"] == "rejected" and "mask IoU" in clip["message"]
    assert ClipSeg.load(md).vision.path.name == VISION_FILE
    monkeypatch.setattr(O, "make_int8", real)
    r = _optimize(pulled, tmp_path / "no-index", "--only", "clipseg", "--json")
    assert r.exit_code == 0, r.output
    clip, _text = json.loads(r.output[r.output.index("{") :])["optimized"]
    assert clip["status"] == "switched" and clip["figures"]["mask_iou"] >= 0.95
    assert ClipSeg.load(md).vision.path.name == clip["file"] != VISION_FILE


@pytest.mark.convert
@pytest.mark.slow
def test_switch_is_announced_with_an_estimate_then_the_index_re_embeds(pulled, tmp_path):
    photos = tmp_path / "photos"
    for i, c in enumerate(["red", "green", "blue", "yellow", "orange", "purple"] * 2):
        draw_shape(photos / f"{i:02d}_{c}.jpg", c, box=(0.05 * (i % 5), 0.1, 0.9, 0.9))
    index = tmp_path / "index"
    cli = _cli()
    args = ["--models", str(pulled), "--index", str(index)]
    assert CliRunner().invoke(cli, ["index", str(photos), *args, "-q"]).exit_code == 0
    r = _optimize(pulled, index, "--only", "siglip2-image", "--no-self-test")
    assert r.exit_code == 0, r.output
    assert "12 of your 12 indexed images" in r.output
    assert "holds 12 images" in r.output and "re-embeds every one, about" in r.output
    r = CliRunner().invoke(cli, ["index", str(photos), *args, "-q", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output[r.output.index("{") :])
    assert result["invalidated"] == 12 and result["embedded"] == 12


def test_text_tower_without_the_convert_extra_says_what_it_gains(standin_models, monkeypatch):
    from wherein.indexer.models.optimize import build as O

    monkeypatch.setattr(O, "text_converter_available", lambda: False)
    out = O.optimize_text(ModelDir(standin_models), log=lambda s: None)
    assert out.status == "unavailable"
    assert "pip install 'litert-torch" in out.message and "9.96 s" in out.message
    assert "bench/results/convert.md" in out.message


# -- self-test -------------------------------------------------------------------
@pytest.fixture(scope="module")
def parts(standin_models):
    from wherein.indexer.models.clipseg import ClipSeg
    from wherein.indexer.models.image_tower import ImageTower

    md = ModelDir(standin_models)
    return md, ImageTower.from_models(md), ClipSeg.load(md)


def _run(parts, **kw):
    md, tower, clipseg = parts
    kw.setdefault("encoder", S.text_encoder(md))
    return S.run_self_test(md, tower=tower, clipseg=clipseg, **kw)


def _failed(result) -> dict[str, str]:
    assert not result.ok
    return {c.name: c.points_to for c in result.checks if not c.ok and not c.skipped}


@pytest.mark.slow
def test_self_test_passes_on_the_standins(parts):
    result = _run(parts)
    assert result.ok, [c.figures for c in result.checks]
    assert [r["rank"] for r in result.rows] == [1] * len(SELF_TEST)
    assert min(r["mask_iou"] for r in result.rows) >= S.MIN_MASK_IOU


@pytest.mark.slow
def test_self_test_names_broken_preprocessing(parts, monkeypatch):
    import wherein.indexer.imaging as imaging

    right = imaging.model_input
    monkeypatch.setattr(imaging, "model_input", lambda img, spec: right(img, spec)[::-1])
    assert _failed(_run(parts, masks=False)) == {"caption ranking": S.PREPROCESSING}


@pytest.mark.slow
def test_self_test_names_a_lost_exif_orientation(parts, monkeypatch):
    from PIL import ImageOps

    monkeypatch.setattr(ImageOps, "exif_transpose", lambda img, **kw: img)
    assert _failed(_run(parts)).get("CLIPSeg masks") == S.PREPROCESSING


@pytest.mark.slow
def test_self_test_names_swapped_graph_outputs(parts, monkeypatch):
    from wherein.indexer.models import clipseg as C

    right = C.ClipSeg.image_features

    def swapped(self, img):
        f = right(self, img)
        return C.Features(f.t6, f.t3, f.t9)

    monkeypatch.setattr(C.ClipSeg, "image_features", swapped)
    failed = _failed(_run(parts))
    assert failed.keys() == {"CLIPSeg masks"}
    assert failed["CLIPSeg masks"].startswith(S.BINDING) and "t6/t3/t9" in failed["CLIPSeg masks"]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["bias", "scale"])
def test_self_test_names_wrong_calibration(parts, what):
    encoder = S.text_encoder(parts[0])
    if what == "bias":
        encoder.logit_bias = -encoder.logit_bias  # sign lost
    else:
        encoder.logit_scale = float(np.log(encoder.logit_scale))  # left in log space
    assert _failed(_run(parts, encoder=encoder, masks=False)) == {"calibration": S.CALIBRATION}


@pytest.mark.slow
def test_self_test_names_a_broken_tokenizer(parts):
    encoder = S.text_encoder(parts[0])
    right = encoder.tokenizer
    encoder.tokenizer = lambda texts: right(["This is a photo of a thing."] * len(texts))
    assert _failed(_run(parts, encoder=encoder, masks=False))["caption ranking"] == S.TOKENIZER


def test_self_test_probes_show_what_was_drawn():
    from wherein.indexer.imaging import decode

    for probe in SELF_TEST:
        img, size = decode(probe.file_bytes())
        assert img.size == size == probe.size  # EXIF turned back to the drawn orientation
        truth = probe.truth()
        pixels = np.asarray(img, np.int16)
        inside = pixels[truth].mean(axis=0)
        outside = pixels[~truth].mean(axis=0)
        assert np.abs(inside - outside).sum() > 100, probe.name


@pytest.mark.slow
def test_check_self_test_reports_the_figures(standin_models):
    r = CliRunner().invoke(_cli(), ["models", "check", str(standin_models), "--self-test"])
    assert r.exit_code == 0, r.output
    assert "6/6 true captions first" in r.output and "self-test  ok" in r.output


@pytest.mark.convert
@pytest.mark.slow
def test_pull_optimizes_by_default_and_no_optimize_keeps_the_published_graphs(
    pulled, tmp_path, monkeypatch
):
    from wherein.indexer.models import modeldir

    monkeypatch.setattr(modeldir, "pull", lambda root, keys=None: [Path(root)])
    monkeypatch.setenv("WHEREIN_INDEX", str(tmp_path / "no-index"))
    args = ["models", "pull", "--models", str(pulled)]
    r = CliRunner().invoke(_cli(), [*args, "--no-optimize"])
    assert r.exit_code == 0, r.output
    assert "self-test  ok" in r.output and "wherein models optimize" in r.output
    assert ModelDir(pulled).image_tower_file().name == IMAGE_GRAPH
    r = CliRunner().invoke(_cli(), args)
    assert r.exit_code == 0, r.output
    assert "switched" in r.output and "self-test  ok" in r.output
    assert ModelDir(pulled).image_tower_file().name != IMAGE_GRAPH


def _photos(folder: Path, n: int = 12) -> Path:
    for i, c in enumerate((["red", "green", "blue", "yellow", "orange", "purple"] * 4)[:n]):
        draw_shape(folder / f"{i:02d}_{c}.jpg", c, box=(0.05 * (i % 5), 0.1, 0.9, 0.9))
    return folder


def _index(models: Path, index: Path, photos: Path):
    args = ["index", str(photos), "--models", str(models), "--index", str(index), "-q"]
    return CliRunner().invoke(_cli(), args)


@pytest.mark.convert
@pytest.mark.slow
def test_the_first_index_verifies_the_tower_again_on_the_users_photos(pulled, tmp_path):
    index, photos = tmp_path / "index", _photos(tmp_path / "photos")
    r = _optimize(pulled, index, "--only", "siglip2-image", "--no-self-test")
    assert r.exit_code == 0, r.output
    md = ModelDir(pulled)
    switched = md.image_tower_file().name
    assert switched != IMAGE_GRAPH and md.image_reverify_pending()
    r = _index(pulled, index, photos)
    assert r.exit_code == 0, r.output
    assert "verified the int8 image tower again on 12 of your photos" in r.stderr
    assert md.image_tower_file().name == switched and not md.image_reverify_pending()
    record = json.loads((md.image_dir / "manifest.json").read_text())["optimize"]
    assert record["verified_on"] == "12 of your photos" and record["figures"]["n"] == 12
    r = _index(pulled, index, photos)  # once only
    assert r.exit_code == 0 and "verified" not in r.stderr


@pytest.mark.convert
@pytest.mark.slow
def test_a_tower_that_fails_on_the_users_photos_is_switched_back(pulled, tmp_path, monkeypatch):
    from wherein.indexer.models.convert import build as C
    from wherein.indexer.models.image_tower import ImageTower

    index, photos = tmp_path / "index", _photos(tmp_path / "photos")
    md = ModelDir(pulled)
    published = ImageTower.from_models(md).model_id
    assert _optimize(pulled, index, "--only", "siglip2-image", "--no-self-test").exit_code == 0
    candidate = md.image_tower_file()
    monkeypatch.setitem(C.MIN_CORR, "int8", 1.0)  # as if these photos broke the int8 graph
    r = _index(pulled, index, photos)
    assert r.exit_code == 0, r.output
    assert (
        "failed on 12 of your photos" in r.stderr and f"switched back to {IMAGE_GRAPH}" in r.stderr
    )
    assert md.image_tower_file().name == IMAGE_GRAPH and not candidate.exists()
    assert ImageTower.from_models(md).model_id == published
    manifest = json.loads((md.image_dir / "manifest.json").read_text())
    assert not manifest["optimize"]["passed"] and not md.image_reverify_pending()
    r = CliRunner().invoke(_cli(), ["status", "--index", str(index), "--json"])
    assert json.loads(r.stdout)["model_id"] == published  # the index was built with it


@pytest.mark.convert
@pytest.mark.slow
def test_without_a_terminal_or_yes_a_switch_that_re_embeds_is_not_made(pulled, tmp_path):
    index = tmp_path / "index"
    assert _index(pulled, index, _photos(tmp_path / "photos")).exit_code == 0
    args = ["models", "optimize", "--models", str(pulled), "--index", str(index)]
    r = CliRunner().invoke(_cli(), [*args, "--only", "siglip2-image", "--no-self-test", "--json"])
    assert r.exit_code == 0, r.output
    (image,) = json.loads(r.stdout)["optimized"]
    assert image["status"] == "not switched" and "--yes" in image["message"]
    md = ModelDir(pulled)
    assert md.image_tower_file().name == IMAGE_GRAPH
    assert not list(md.image_dir.glob("*_opt.tflite"))


@pytest.mark.convert
@pytest.mark.slow
def test_a_slower_stand_in_switch_says_stand_ins_are_exempt(pulled, tmp_path, monkeypatch):
    from wherein.indexer.models.optimize import compare

    # The candidate twice as slow as its source, whatever this CPU does.
    monkeypatch.setattr(
        compare, "ms_per_image", lambda g, x, sig: 1.0 if g.path.name == IMAGE_GRAPH else 2.0
    )
    r = _optimize(
        pulled, tmp_path / "no-index", "--only", "siglip2-image", "--no-self-test", "--json"
    )
    assert r.exit_code == 0, r.output
    (image,) = json.loads(r.stdout)["optimized"]
    assert image["status"] == "switched" and "1 -> 2 ms/image" in image["message"]
    assert "stand-in graphs are exempt from the speed gate" in image["message"]
