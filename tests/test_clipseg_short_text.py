"""CLIPSeg's text graph cut to 16 token positions: the same cond for prompts that fit, the
77-position graph for the others, refused when the cut would not be exact, and used only
after `models optimize` has compared it with the 77-position graph."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wherein.indexer.models.clipseg import TEXT_FILE, ClipSeg, LazyGraph, ShortTextGraph
from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.optimize import build as O
from wherein.indexer.models.optimize.shorten import DEFAULT_LENGTH, shorten, shorten_model
from wherein.indexer.models.optimize.widen import read_model, write_model
from wherein.indexer.models.standins import GRAPHS_DIR
from wherein.schemas.errors import ModelError

from conftest import Counting

L = DEFAULT_LENGTH
WORDS = "a photo of the red car next to a green tree on the left side of the old house"


def prompt_of(model: ClipSeg, n: int) -> str:
    """A prompt of exactly n content tokens."""
    words = WORDS.split()
    p = " ".join(words[i % len(words)] for i in range(n))
    ids = model.tokenize(p)
    assert int(np.argmax(ids == 49407)) - 1 == min(n, 75), p
    return p


def square_constants(model, size: int):
    """The [size, size] float constants of a graph (the stand-in's causal mixing matrix)."""
    sg = model.subgraphs[0]
    return [
        t
        for t in sg.tensors
        if t.shape is not None
        and list(t.shape) == [size, size]
        and model.buffers[t.buffer].data is not None
        and len(model.buffers[t.buffer].data)
    ]


def rewrite_square(path: Path, size: int, values: np.ndarray) -> None:
    """Replace the graph's [size, size] constant (e.g. with a non-causal one), in place."""
    model = read_model(path)
    (t,) = square_constants(model, size)
    model.buffers[t.buffer].data = values.astype("<f4").view(np.uint8).ravel()
    tmp = path.with_name(path.name + ".tmp")
    write_model(model, tmp)  # the model's buffers map the file it was read from
    tmp.replace(path)


@pytest.fixture(scope="module")
def short_graph(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("short") / "text_t16.tflite"
    report = shorten(GRAPHS_DIR / TEXT_FILE, out, L)
    assert report.sliced and report.shape_constants
    return out


@pytest.fixture()
def models(standin_models, tmp_path) -> Path:
    root = tmp_path / "models"
    shutil.copytree(standin_models, root)
    return root


def pair(standin_models, short_graph) -> tuple[ClipSeg, ClipSeg, Counting, list[Counting]]:
    """(77-only model, model with the short graph, its 77 graph counter, its short graph counter)."""
    base = ClipSeg.load(ModelDir(standin_models), num_threads=1)
    text, short = Counting(base.text), []

    def make():
        short.append(Counting(LiteRTGraph(short_graph, 1)))
        return short[0]

    model = ClipSeg(
        base.vision,
        text,
        base.decoder,
        base.token_table,
        base.projection,
        base.tokenizer,
        short_text=ShortTextGraph(L, make),
    )
    return base, model, text, short


# -- the rewrite ------------------------------------------------------------------------
def test_short_graph_gives_the_77_graphs_cond_at_every_length_that_fits(
    standin_models, short_graph
):
    base, model, text, short = pair(standin_models, short_graph)
    prompts = [prompt_of(model, n) for n in range(1, L - 1)] + ["a red car", "purple"]
    for p in prompts:
        np.testing.assert_allclose(model.compute_cond(p), base.compute_cond(p), rtol=0, atol=1e-6)
    assert text.calls == 0 and short[0].calls == len(prompts)
    assert LiteRTGraph(short_graph).signatures["serving_default"].input_shapes == [(1, L, 512)]


def test_a_prompt_longer_than_the_short_graph_runs_the_77_graph(standin_models, short_graph):
    base, model, text, short = pair(standin_models, short_graph)
    longer = [prompt_of(model, n) for n in (L - 1, L + 4, 60)] + ["a red " + "big " * 30 + "car"]
    for p in longer:
        np.testing.assert_allclose(model.compute_cond(p), base.compute_cond(p), rtol=0, atol=1e-6)
    assert text.calls == len(longer) and not short  # never even loaded
    model.compute_cond(prompt_of(model, L - 2))  # the longest that fits
    assert short[0].calls == 1 and text.calls == len(longer)


def test_shorten_refuses_a_graph_that_is_not_causal():
    model = read_model(GRAPHS_DIR / TEXT_FILE)
    (t,) = square_constants(model, 77)
    model.buffers[t.buffer].data = np.full((77, 77), 1 / 77, "<f4").view(np.uint8).ravel()
    with pytest.raises(ModelError, match="not causal"):
        shorten_model(model, L)


def test_shorten_refuses_a_sequence_length_it_cannot_place():
    """A 77 in an int constant that is not a RESHAPE shape (here MEAN's axis) is ambiguous."""
    model = read_model(GRAPHS_DIR / TEXT_FILE)
    sg = model.subgraphs[0]
    axis = next(t for t in sg.tensors if t.name == b"arith.constant")  # MEAN's axis, [1]
    model.buffers[axis.buffer].data = np.array([77], "<i4").view(np.uint8)
    with pytest.raises(ModelError, match="read by MEAN"):
        shorten_model(model, L)
    with pytest.raises(ModelError, match="below 77"):
        shorten_model(read_model(GRAPHS_DIR / TEXT_FILE), 77)


# -- the gate and the manifest -------------------------------------------------------------
def test_a_wrong_short_graph_is_rejected_and_the_77_graph_stays(models, monkeypatch):
    md = ModelDir(models)
    real = O.shorten

    def non_causal(src, dst, length):
        done = real(src, dst, length)
        rewrite_square(dst, length, np.full((length, length), 1 / length))  # sees the padding
        return done

    monkeypatch.setattr(O, "shorten", non_causal)
    out = O.optimize_clipseg_text(md, log=lambda s: None)
    assert out.status == "rejected" and "cond" in out.message, out.message
    rec = json.loads((md.clipseg_dir / "manifest.json").read_text())["text_short"]
    assert not rec["passed"] and rec["figures"]["failed"]
    assert md.clipseg_text_short() is None
    assert ClipSeg.load(md).short_text is None
    assert not list(md.clipseg_dir.glob("*_t16.tflite"))
    row = next(r for r in _check_rows(models) if r["file"] == rec.get("file", "?"))
    assert row["status"] == "not used" and "failed" in row["found"]

    monkeypatch.setattr(O, "shorten", real)
    out = O.optimize_clipseg_text(md, log=lambda s: None)
    assert out.status == "switched", out.message
    assert out.figures["cond_pearson_min"] >= 0.9999 and out.figures["content_tokens"] == [1, L - 2]
    assert ClipSeg.load(md).short_text is not None


def test_a_short_graph_that_breaks_its_contract_is_rejected(models, monkeypatch):
    md = ModelDir(models)
    real = O.shorten
    monkeypatch.setattr(O, "shorten", lambda src, dst, length: real(src, dst, length // 2))
    out = O.optimize_clipseg_text(md, log=lambda s: None)
    assert out.status == "rejected" and f"expected [1, {L}, 512]" in out.message
    assert md.clipseg_text_short() is None
    assert not list(md.clipseg_dir.glob("*_t16.tflite"))


def test_a_graph_the_rewrite_refuses_is_recorded_and_not_used(models):
    md = ModelDir(models)
    rewrite_square(md.clipseg_dir / TEXT_FILE, 77, np.full((77, 77), 1 / 77))
    out = O.optimize_clipseg_text(md, log=lambda s: None)
    assert out.status == "rejected" and "not causal" in out.message
    rec = json.loads((md.clipseg_dir / "manifest.json").read_text())["text_short"]
    assert not rec["passed"] and "not causal" in rec["figures"]["failed"][0]
    assert md.clipseg_text_short() is None and ClipSeg.load(md).short_text is None


def _check_rows(root: Path) -> list[dict]:
    from wherein.search.cli import cli

    r = CliRunner().invoke(cli, ["models", "check", str(root), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output[r.output.index("{") :])["checks"]


def test_a_text_graph_changed_since_verification_is_not_used_until_re_verified(models):
    md = ModelDir(models)
    assert O.optimize_clipseg_text(md, log=lambda s: None).status == "switched"
    assert md.clipseg_text_short() is not None
    source = md.clipseg_dir / TEXT_FILE
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # copied, or re-pulled
    assert md.clipseg_text_short() is None
    assert ClipSeg.load(md).short_text is None
    row = next(r for r in _check_rows(models) if r["file"].endswith("_t16.tflite"))
    assert row["status"] == "not used"
    # The bytes are the verified ones: re-running vouches for them again without a rebuild.
    again = O.optimize_clipseg_text(md, log=lambda s: None)
    assert again.status == "up to date"
    assert md.clipseg_text_short() is not None
    # Different bytes: rebuilt and verified.
    rewrite_square(source, 77, np.tril(np.ones((77, 77))) / 2)
    assert md.clipseg_text_short() is None
    assert O.optimize_clipseg_text(md, log=lambda s: None).status == "switched"


@pytest.mark.convert
def test_manifest_keeps_vision_and_text_short_records_across_re_runs(models, tmp_path):
    from wherein.indexer.models.optimize.inputs import bundled_sample
    from wherein.search.cli import cli

    def optimize(*args: str) -> list[dict]:
        r = CliRunner().invoke(
            cli,
            ["models", "optimize", "--models", str(models), "--index", str(tmp_path / "none")]
            + ["--only", "clipseg", "--no-self-test", "--json", *args],
        )
        assert r.exit_code == 0, r.output
        return json.loads(r.output[r.output.index("{") :])["optimized"]

    manifest = ModelDir(models).clipseg_dir / "manifest.json"
    first = optimize()
    assert [o["status"] for o in first] == ["switched", "switched"]
    both = json.loads(manifest.read_text())
    assert both["vision"]["passed"] and both["text_short"]["passed"]
    assert [o["status"] for o in optimize()] == ["up to date", "up to date"]
    assert json.loads(manifest.read_text()) == both
    # Each step, rebuilding its own record, keeps the other's.
    md = ModelDir(models)
    vision = O.optimize_clipseg(md, lambda: bundled_sample(6, 3), True, lambda s: None)
    assert vision.status == "switched"
    after = json.loads(manifest.read_text())
    assert after["text_short"] == both["text_short"] and after["vision"] == vision.record
    text = O.optimize_clipseg_text(md, True, lambda s: None)
    assert text.status == "switched"
    after = json.loads(manifest.read_text())
    assert after["vision"] == vision.record and after["text_short"] == text.record
    rows = {r["file"]: r for r in _check_rows(models)}
    assert rows[after["vision"]["file"]]["status"] == "ok"
    text_row = rows[after["text_short"]["file"]]
    assert text_row["status"] == "ok" and "cond corr 1.0000" in text_row["found"]


# -- the host -------------------------------------------------------------------------------
def test_clipseg_with_the_short_graph_gives_the_same_masks(models):
    from wherein.indexer.imaging import decode
    from wherein.indexer.models.optimize.probes import SELF_TEST

    md = ModelDir(models)
    without = ClipSeg.load(md, num_threads=1)
    assert without.short_text is None
    assert O.optimize_clipseg_text(md, log=lambda s: None).status == "switched"
    with_short = ClipSeg.load(md, num_threads=1)
    # Neither text graph is loaded (XNNPACK packs weights at load) until a prompt needs it.
    assert with_short.short_text is not None and not with_short.short_text.loaded
    assert isinstance(with_short.text, LazyGraph) and not with_short.text.loaded
    for probe in SELF_TEST[:3]:
        img, _ = decode(probe.file_bytes())
        prompts = [probe.caption, *probe.wrong_captions()[:2], "the background"]
        a = without.probabilities(img, prompts)
        b = with_short.probabilities(img, prompts)
        for pa, pb in zip(a, b, strict=True):
            np.testing.assert_allclose(pa, pb, rtol=0, atol=1e-5)
            assert np.array_equal(pa > 0.5, pb > 0.5)
    assert with_short.short_text.loaded and not with_short.text.loaded  # all prompts fit
    long = "a red " + "very " * 20 + "big square"
    np.testing.assert_allclose(
        with_short.encode_prompt(long), without.encode_prompt(long), rtol=0, atol=1e-6
    )
    assert with_short.text.loaded


def test_clipseg_without_text_loads_no_text_graph(models):
    md = ModelDir(models)
    assert O.optimize_clipseg_text(md, log=lambda s: None).status == "switched"
    model = ClipSeg.load(md, text=False)
    assert model.short_text is None
    with pytest.raises(ModelError, match="without that graph"):
        model.text.run(np.zeros((1, 77, 512), np.float32))


# -- CLIP's own text structure (position embedding, additive causal mask, fp16 weights) ----
@pytest.mark.convert
@pytest.mark.parity
def test_shorten_a_clip_text_transformer_with_and_without_fp16_weights(tmp_path):
    import litert_torch
    import torch
    from test_clipseg_parity import small_reference, split, write_assets

    from wherein.indexer.models.clipseg import LeftOut
    from wherein.indexer.models.convert.build import reduce_precision

    reference = small_reference()
    assets = write_assets(reference, tmp_path / "assets")
    text_fn = split(reference)[1].fn

    class Text(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = reference

        def forward(self, x):
            return text_fn(x)

    full = tmp_path / "text.tflite"
    litert_torch.convert(Text().eval(), (torch.zeros(1, 77, 512),)).export(str(full))
    fp16 = tmp_path / "text_fp16.tflite"
    reduce_precision(full, fp16, "fp16")
    for src in (full, fp16):
        dst = src.with_name(src.stem + "_t16.tflite")
        report = shorten(src, dst, L)
        assert len(report.sliced) == 2  # the position embedding and the causal mask
        before, after = read_model(src), read_model(dst)
        assert len(after.subgraphs[0].operators) == len(before.subgraphs[0].operators)
        base = ClipSeg.from_parts(LeftOut("v"), LiteRTGraph(src, 1), LeftOut("d"), assets)
        short = ClipSeg(
            base.vision,
            base.text,
            base.decoder,
            base.token_table,
            base.projection,
            base.tokenizer,
            short_text=ShortTextGraph(L, lambda dst=dst: LiteRTGraph(dst, 1)),
        )
        for n in (1, 5, L - 2):
            p = prompt_of(base, n)
            a, b = base.compute_cond(p), short.compute_cond(p)
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * np.abs(a).max())
    assert _dequantize_ops(fp16) == _dequantize_ops(fp16.with_name("text_fp16_t16.tflite")) > 0


def _dequantize_ops(path: Path) -> int:
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils as fb

    model = read_model(path)
    return sum(
        fb.get_builtin_code_from_operator_code(model.operatorCodes[op.opcodeIndex])
        == schema.BuiltinOperator.DEQUANTIZE
        for op in model.subgraphs[0].operators
    )
