"""CLIPSeg host pipeline over the stand-in graphs: tokens, cond, binding order, asset checks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from wherein.indexer.models.clipseg import ClipSeg, Features
from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import ModelError
from wherein.schemas.models import CLIPSEG_EOT, CLIPSEG_SOT
from wherein.search.localize.masking import MaskResult

from conftest import Counting, draw_shape


@pytest.fixture(scope="module")
def model(standin_models) -> ClipSeg:
    return ClipSeg.load(ModelDir(standin_models), num_threads=1)


def counted(model: ClipSeg) -> ClipSeg:
    return ClipSeg(
        Counting(model.vision),
        Counting(model.text),
        Counting(model.decoder),
        model.token_table,
        model.projection,
        model.tokenizer,
    )


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def rect_mask(size: tuple[int, int], px: tuple[int, int, int, int]) -> np.ndarray:
    w, h = size
    m = np.zeros((h, w), dtype=bool)
    m[px[1] : px[3] + 1, px[0] : px[2] + 1] = True  # draw_shape's box is inclusive
    return m


def test_tokens_are_sot_content_eot_padding(model):
    ids = model.tokenize("a red square")
    assert ids.shape == (77,)
    assert ids[0] == CLIPSEG_SOT
    content = list(ids[1:4])
    assert ids[4] == CLIPSEG_EOT and not ids[5:].any()
    from open_clip.tokenizer import SimpleTokenizer

    assert content == SimpleTokenizer().encode("a red square")


@pytest.mark.parametrize(
    "text",
    [
        "a red square",
        "The DOG's collar!",
        "  café   crème  brûlée ",
        "&amp; fish &lt;chips&gt;",
        "Ünïcödé — “quotes” and emoji 🐶",
        "don't stop-believing 42x",
        "tab\tand\nnewline",
        "日本語のテキスト",
        " ".join(f"word{i}" for i in range(90)),
    ],
)
def test_tokens_equal_open_clips_tokenizer(text):
    # Torch-free, but open_clip's encoding: same cleaning, same merges, same truncation.
    import open_clip

    from wherein.indexer.models.clipseg import Tokenizer

    want = open_clip.tokenize([text], context_length=77)[0].numpy()
    assert Tokenizer()(text).tolist() == want.tolist()


def test_bpe_tables_equal_open_clips_vocabulary_and_merge_ranks():
    # Every entry, not only those a few prompts reach: the tables are built from the merges
    # file by hand (no pairs kept), and a wrong id or rank would show only for some words.
    from open_clip.tokenizer import SimpleTokenizer

    from wherein.indexer.models.clip_bpe import ClipBPE, open_clip_bpe_file

    ref, ours = SimpleTokenizer(), ClipBPE(open_clip_bpe_file())
    assert len(ref.encoder) == len(ours.encoder)
    assert all(ours.encoder.get(token) == i for token, i in ref.encoder.items())
    assert len(ref.bpe_ranks) == len(ours.ranks)
    assert all(ours.ranks.get(f"{a} {b}") == r for (a, b), r in ref.bpe_ranks.items())


def test_graphs_run_on_one_cached_model_with_the_interpreters_outputs(standin_models):
    # Each graph's packed weights live in one cache file beside it, shared by every thread
    # (not an Interpreter per thread, each with its own copy): the same outputs, every input
    # bound to its own slot (distinct inputs: the decoder's three [1,485,768] slots included).
    from concurrent.futures import ThreadPoolExecutor

    from wherein.indexer.models.litert_cached import CACHE_SUFFIX, SharedGraph

    m = ClipSeg.load(ModelDir(standin_models), num_threads=1)
    rng = np.random.default_rng(7)
    for g in (m.vision, m.text, m.decoder):
        assert isinstance(g, SharedGraph)
        sig = next(iter(g.signatures.values()))
        xs = [rng.standard_normal(shape).astype(np.float32) for shape in sig.input_shapes]
        shared, alone = g.run(*xs), g.graph.run(*xs)
        assert g._cached is not None, f"{g.path.name} fell back to the Interpreter"
        assert len(shared) == len(alone) == len(sig.outputs)
        for a, b in zip(shared, alone, strict=True):
            np.testing.assert_array_equal(a, b)
        assert list(g.path.parent.glob(f"{g.path.name}.*{CACHE_SUFFIX}"))
        with ThreadPoolExecutor(4) as pool:  # one native model: runs are serialised
            for out in pool.map(lambda _, g=g, xs=xs: g.run(*xs), range(8)):
                for a, b in zip(out, alone, strict=True):
                    np.testing.assert_array_equal(a, b)


def test_the_shared_model_runs_on_every_core_whatever_each_thread_was_planned(
    standin_models, monkeypatch
):
    # The CLI's mask pool plans 2 workers x 1 interpreter thread on 2 cores; one model serving
    # them in turn must use both cores, or every vision pass runs on one.
    from wherein.indexer.models import litert_cached

    asked: list[int] = []
    real = litert_cached.open_cached

    def recording(graph, num_threads, fingerprint=""):
        asked.append(num_threads)
        return real(graph, num_threads, fingerprint)

    monkeypatch.setattr(litert_cached, "open_cached", recording)
    monkeypatch.setattr(litert_cached, "default_threads", lambda: 3)
    m = ClipSeg.load(ModelDir(standin_models), num_threads=1)
    sig = next(iter(m.vision.signatures.values()))
    m.vision.run(*[np.zeros(shape, np.float32) for shape in sig.input_shapes])
    assert asked == [3]


def test_long_prompt_keeps_75_content_tokens(model):
    ids = model.tokenize(" ".join(["red"] * 200))
    assert ids[0] == CLIPSEG_SOT and ids[76] == CLIPSEG_EOT
    assert (ids[1:76] != CLIPSEG_EOT).all() and (ids == CLIPSEG_EOT).sum() == 1


def test_cond_is_eot_row_times_input_major_projection_unnormalised(model):
    ids = model.tokenize("a red square")
    emb = np.asarray(model.token_table[ids], np.float32)[None]
    (hidden,) = model.text.run(emb)
    expected = hidden[0, 4] @ model.projection  # EOT sits at index 4
    cond = model.encode_prompt("a red square")
    np.testing.assert_allclose(cond, expected, rtol=1e-5, atol=1e-6)
    # Transposed projection or another row gives a different cond.
    assert not np.allclose(cond, hidden[0, 4] @ model.projection.T, atol=1e-3)
    assert not np.allclose(cond, hidden[0, 3] @ model.projection, atol=1e-3)
    assert abs(np.linalg.norm(cond) - 1.0) > 1e-2  # not L2-normalised


def test_one_vision_pass_serves_several_prompts_and_cond_is_cached(model, tmp_path):
    m = counted(model)
    draw_shape(tmp_path / "r.png", "red")
    img = Image.open(tmp_path / "r.png").convert("RGB")
    probs = m.probabilities(img, ["red", "blue", "a red thing", "red"])
    assert m.vision.calls == 1
    assert m.text.calls == 3  # "red" twice: cond cached
    assert m.decoder.calls == 4
    assert probs[0].shape == (352, 352)
    assert probs[0].max() > 0.9 and probs[1].max() < 0.1


@pytest.mark.parametrize(
    "order",
    [(1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)],
    ids=lambda o: "t" + "".join("369"[i] for i in o),
)
def test_decoder_binding_order_matters(model, tmp_path, order):
    """t3/t6/t9 share one shape; any other binding gives a wrong mask, so order must come from slots.

    The stand-in decoder reads each slot in its own basis, so this fails for a
    swap of any two (t6/t9 included), as it would with the real model.
    """
    size = (320, 240)
    px = draw_shape(tmp_path / "r.png", "red", size=size, box=(0.1, 0.2, 0.5, 0.9))
    img = Image.open(tmp_path / "r.png").convert("RGB")
    feats = model.image_features(img)
    cond = model.encode_prompt("red")
    truth = rect_mask(size, px)
    right = MaskResult.from_probability("red", model.decode(feats, cond), size)
    assert iou(right.mask, truth) >= 0.8
    slots = feats.in_slot_order()
    swapped = Features(*(slots[i] for i in order))
    wrong = MaskResult.from_probability("red", model.decode(swapped, cond), size)
    assert iou(wrong.mask, truth) < 0.3


def _copy_clipseg(standin_models: Path, tmp_path: Path) -> Path:
    root = tmp_path / "models"
    src = standin_models / "clipseg"
    dst = root / "clipseg"
    dst.mkdir(parents=True)
    for f in src.iterdir():
        os.symlink(f, dst / f.name)
    return root


@pytest.mark.parametrize(
    ("name", "cut"),
    [("token_embedding_f16.bin", 1024), ("text_projection_f16.bin", 2)],
)
def test_bad_asset_size_names_the_file(standin_models, tmp_path, name, cut):
    root = _copy_clipseg(standin_models, tmp_path)
    target = root / "clipseg" / name
    data = (standin_models / "clipseg" / name).read_bytes()
    target.unlink()
    target.write_bytes(data[:-cut])
    with pytest.raises(ModelError) as err:
        ClipSeg.load(ModelDir(root), 1)
    msg = str(err.value)
    assert name in msg and f"{len(data):,} bytes" in msg and "\n" not in msg


def test_wrong_graph_in_a_slot_is_a_clear_error(standin_models, tmp_path):
    root = _copy_clipseg(standin_models, tmp_path)
    vision = root / "clipseg" / "clipseg_vision_fp16.tflite"
    vision.unlink()
    shutil.copyfile(standin_models / "clipseg" / "clipseg_decoder.tflite", vision)
    with pytest.raises(
        ModelError, match=r"clipseg_vision_fp16\.tflite: expected \[1, 3, 352, 352\]"
    ):
        ClipSeg.load(ModelDir(root), 1)


def test_missing_or_foreign_vocab_is_an_error(standin_models, tmp_path):
    root = _copy_clipseg(standin_models, tmp_path)
    vocab = root / "clipseg" / "vocab.json"
    vocab.unlink()
    with pytest.raises(ModelError, match="vocab.json: CLIP BPE vocabulary not found"):
        ClipSeg.load(ModelDir(root), 1)
    vocab.write_text('{"a": 0, "b": 1}')
    with pytest.raises(ModelError, match="vocab.json: expected the CLIP BPE vocabulary"):
        ClipSeg.load(ModelDir(root), 1)
