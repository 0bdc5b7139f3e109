"""Own conversion: batched and quantized towers, proven equal to PyTorch (needs [convert])."""

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

from wherein.indexer.models.modeldir import ModelDir

from conftest import draw_shape

pytestmark = [pytest.mark.convert, pytest.mark.slow]


def _cli():
    from wherein.search.cli import cli

    return cli


def _convert(out: Path, *args: str) -> None:
    r = CliRunner().invoke(_cli(), ["models", "convert", *args, "--out", str(out)])
    assert r.exit_code == 0, r.output


def _verify(root: Path, *args: str):
    return CliRunner().invoke(_cli(), ["models", "verify", str(root), "--json", *args])


def _small_reference(seed: int = 0):
    from wherein.indexer.models.convert.towers import Source, image_module

    return image_module(Source("random", config="small", seed=seed))


@pytest.fixture(scope="module")
def small_fp32_run(tmp_path_factory) -> tuple[Path, str]:
    """A small conversion in its own process, so the C++ converter logs are captured too."""
    out = tmp_path_factory.mktemp("small-fp32")
    exe = Path(sys.executable).parent / "wherein"
    args = ["siglip2", "--random-weights", "--config", "small", "--batch", "1,8", "--out", str(out)]
    r = subprocess.run(
        [str(exe), "models", "convert", *args], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout + r.stderr


@pytest.fixture(scope="module")
def small_fp32(small_fp32_run) -> Path:
    return small_fp32_run[0]


def test_conversion_prints_only_its_own_progress(small_fp32_run):
    """litert-torch's progress tree, torch warnings and C++ logs stay out of the output."""
    lines = small_fp32_run[1].splitlines()
    assert lines[0].startswith("building the torch tower") and lines[-1].startswith("wrote ")
    assert len(lines) == 5, "\n".join(lines)  # build, convert, 2 parity lines, wrote


def test_small_tower_matches_torch_at_batch_1_and_8(small_fp32):
    from wherein.indexer.models.convert.build import random_images, torch_embed
    from wherein.indexer.models.image_tower import ImageTower

    tower = ImageTower.from_models(ModelDir(small_fp32))
    assert tower.batch_size == 8
    x = random_images(11, seed=3)  # one full batch of 8 + a tail of 3 at batch 1
    got = tower.embed(x)
    ref = torch_embed(_small_reference(), x)
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] >= 0.9999
    assert np.allclose(got, ref, atol=1e-4)
    # The batch-8 signature gives each image what the batch-1 signature gives it.
    one = np.concatenate(
        [tower.graph.run(x[i : i + 1], signature="serving_default")[0] for i in range(8)]
    )
    eight = tower.graph.run(x[:8], signature="batch_8")[0]
    assert np.allclose(one, eight, atol=1e-5)
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)


def test_manifest_describes_the_graph(small_fp32):
    d = ModelDir(small_fp32).image_dir
    m = json.loads((d / "manifest.json").read_text())
    assert ModelDir(small_fp32).image_tower_file() == d / m["file"]
    assert m["precision"] == "fp32"
    assert m["source"]["kind"] == "random" and m["source"]["config"] == "small"
    assert len(m["source"]["state_digest"]) == 16
    assert m["signatures"]["serving_default"]["inputs"]["args_0"] == [1, 3, 224, 224]
    assert m["signatures"]["batch_8"]["outputs"]["output_0"] == [8, 768]
    for fig in m["parity"]["figures"].values():
        assert fig["pearson"] >= 0.9999
    from wherein.indexer.models.litert_graph import LiteRTGraph

    g = LiteRTGraph(d / m["file"], 1)
    assert {k: s.input_shapes for k, s in g.signatures.items()} == {
        "serving_default": [(1, 3, 224, 224)],
        "batch_8": [(8, 3, 224, 224)],
    }


def test_verify_passes_then_fails_on_tampering(small_fp32, tmp_path):
    r = _verify(small_fp32)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{") :])
    assert out["ok"] and {g["signature"] for g in out["graphs"]} == {"serving_default", "batch_8"}

    # A graph swapped for another one: caught by the manifest's digest.
    swapped = tmp_path / "swapped"
    shutil.copytree(small_fp32, swapped)
    d = ModelDir(swapped).image_dir
    m = json.loads((d / "manifest.json").read_text())
    graph = d / m["file"]
    data = bytearray(graph.read_bytes())
    data[-100] ^= 0xFF
    graph.write_bytes(bytes(data))
    assert _verify(swapped).exit_code == 1

    # A manifest naming other weights, with no digests to catch it: the numbers catch it.
    lied = tmp_path / "lied"
    shutil.copytree(small_fp32, lied)
    d = ModelDir(lied).image_dir
    m = json.loads((d / "manifest.json").read_text())
    m["source"]["seed"] = 1
    del m["source"]["state_digest"], m["sha256"]
    (d / "manifest.json").write_text(json.dumps(m))
    r = _verify(lied)
    assert r.exit_code == 1
    rows = json.loads(r.output[r.output.index("{") :])["graphs"]
    assert all(row["pearson"] < 0.9999 for row in rows)


def test_int8_small_tower_within_one_percent(tmp_path, small_fp32):
    from wherein.indexer.models.convert.build import random_images, torch_embed
    from wherein.indexer.models.image_tower import ImageTower

    _convert(
        tmp_path,
        "siglip2",
        "--random-weights",
        "--config",
        "small",
        "--batch",
        "8",
        "--precision",
        "int8",
    )
    md = ModelDir(tmp_path)
    m = json.loads((md.image_dir / "manifest.json").read_text())
    assert m["precision"] == "int8"
    assert (
        md.image_tower_file().stat().st_size
        < ModelDir(small_fp32).image_tower_file().stat().st_size
    )
    x = random_images(16, seed=5)
    got = ImageTower.from_models(md).embed(x)
    ref = torch_embed(_small_reference(), x)
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] >= 0.99
    assert _verify(tmp_path).exit_code == 0


@pytest.mark.parametrize(
    "offline",
    [{"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": "http://127.0.0.1:9"}],  # port 9 refuses at once
    ids=["HF_HUB_OFFLINE", "unreachable"],
)
def test_offline_real_weights_give_one_line_error(tmp_path, offline):
    """No hub and nothing cached: one Error line naming the way out, no retry chatter."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_ENDPOINT")}
    env.update(offline, HF_HOME=str(tmp_path / "hf"))  # an empty cache: the download is needed
    exe = Path(sys.executable).parent / "wherein"
    r = subprocess.run(
        [str(exe), "models", "convert", "siglip2", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 1
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert [ln for ln in lines if "Error" in ln or "WARNING" in ln or "Retry" in ln] == [lines[-1]]
    assert lines[-1].startswith(
        "Error: cannot reach the Hugging Face Hub to download timm/ViT-B-16-SigLIP2"
    )
    assert "--source local-dir:DIR" in lines[-1]
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.rglob("*.tflite"))


def test_batched_standin_tower_indexes_the_same_vectors(standin_models, tmp_path):
    from wherein.indexer.models.image_tower import ImageTower
    from wherein.indexer.store.index_store import IndexStore

    photos = tmp_path / "photos"
    colours = [
        "red",
        "green",
        "blue",
        "yellow",
        "orange",
        "purple",
        "white",
        "black",
        "red",
        "blue",
        "green",
    ]
    for i, c in enumerate(colours):  # 11 images: one batch of 8 and a tail of 3
        draw_shape(photos / f"{i:02d}_{c}.png", c, box=(0.05 * (i % 4), 0.1, 0.9, 0.9))
    batched = tmp_path / "models-batched"
    shutil.copytree(standin_models, batched)
    _convert(batched, "siglip2", "--source", "standin", "--batch", "1,8")
    assert ImageTower.from_models(ModelDir(batched)).batch_size == 8

    def index(models: Path, name: str) -> dict[str, np.ndarray]:
        idx = tmp_path / name
        r = CliRunner().invoke(
            _cli(), ["index", str(photos), "--models", str(models), "--index", str(idx), "-q"]
        )
        assert r.exit_code == 0, r.output
        with IndexStore.open(idx) as store:
            cat = store.catalog
            ids, vecs = cat.vectors_for(cat.embedded_ids())
            paths = {k: v["path"] for k, v in cat.rows_by_ids(ids).items()}
        return {Path(paths[i]).name: v for i, v in zip(ids, vecs, strict=True)}

    one, eight = index(standin_models, "index-1"), index(batched, "index-8")
    assert sorted(one) == sorted(eight) and len(one) == 11
    for name in one:
        assert np.allclose(one[name], eight[name], atol=1e-5), name
    assert _verify(batched).exit_code == 0


def test_regenerated_standin_graphs_compute_the_committed_outputs(tmp_path):
    from wherein.indexer.models.litert_graph import LiteRTGraph
    from wherein.indexer.models.standins import GRAPH_FILES, GRAPHS_DIR, build_graphs

    build_graphs(tmp_path)
    rng = np.random.default_rng(0)
    for fname in GRAPH_FILES:
        old, new = LiteRTGraph(GRAPHS_DIR / fname, 1), LiteRTGraph(tmp_path / fname, 1)
        for key, sig in old.signatures.items():
            assert new.signatures[key].input_shapes == sig.input_shapes, fname
            xs = [rng.uniform(-1, 1, s).astype(np.float32) for s in sig.input_shapes]
            for a, b in zip(old.run(*xs, signature=key), new.run(*xs, signature=key), strict=True):
                assert np.allclose(a, b, rtol=1e-3, atol=1e-4), fname


@pytest.fixture(scope="module")
def litert_text_models(standin_models, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models-text")
    shutil.copytree(standin_models, root, dirs_exist_ok=True)
    _convert(root, "siglip2-text", "--source", f"local-dir:{root / 'siglip2-text'}")
    return root


PROMPTS = [
    "a red square",
    "This is a photo of a BLUE disc.",
    "green &amp; yellow",
    "café—purple!",
    "a dog",
    "",
]


def test_litert_text_tower_equals_torch(litert_text_models):
    from wherein.indexer.models.text_tower import TextTower
    from wherein.indexer.models.text_tower_litert import LiteRTTextTower, load_query_encoder

    lite = load_query_encoder(str(litert_text_models))
    assert isinstance(lite, LiteRTTextTower)
    ref = TextTower.from_models(ModelDir(litert_text_models))
    assert np.array_equal(lite.tokenizer(PROMPTS), ref.tokenizer(PROMPTS).numpy())
    assert np.allclose(lite.encode(PROMPTS), ref.encode(PROMPTS), atol=1e-5)
    assert lite.logit_scale == pytest.approx(ref.logit_scale) and lite.logit_bias == pytest.approx(
        ref.logit_bias
    )
    assert lite.cosine_for_probability(0.5) == pytest.approx(ref.cosine_for_probability(0.5))
    assert lite.dim == 768 and lite.space == ref.space
    r = _verify(litert_text_models)
    assert r.exit_code == 0, r.output


def test_litert_text_tower_without_the_weight_cache_is_the_same(litert_text_models, monkeypatch):
    from wherein.indexer.models import litert_cached
    from wherein.indexer.models.text_tower_litert import LiteRTTextTower

    cached = LiteRTTextTower.from_models(ModelDir(litert_text_models))
    assert cached._graph is not None  # the packed-weights cache path
    monkeypatch.setattr(litert_cached, "open_cached", lambda *a, **k: None)
    plain = LiteRTTextTower.from_models(ModelDir(litert_text_models))
    assert plain._graph is None  # the Interpreter
    assert np.array_equal(cached.encode(PROMPTS), plain.encode(PROMPTS))


def test_query_needs_no_torch_with_litert_text(litert_text_models):
    code = (
        "import sys, numpy as np\n"
        "from wherein.indexer.models.text_tower_litert import load_query_encoder\n"
        f"t = load_query_encoder({str(litert_text_models)!r})\n"
        "e = t.encode(['a red square', 'a blue square'])\n"
        "assert e.shape == (2, 768)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(type(t).__name__)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "LiteRTTextTower"


def test_search_uses_litert_text_tower_without_torch(litert_text_models, shapes, tmp_path):
    code = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from wherein.search.cli import cli\n"
        f"args = ['--index', {str(tmp_path / 'idx')!r}, '--models', {str(litert_text_models)!r}]\n"
        f"r = CliRunner().invoke(cli, ['index', {str(shapes)!r}, '-q', *args])\n"
        "assert r.exit_code == 0, r.output\n"
        "r = CliRunner().invoke(cli, ['search', 'red', '--json', '-k', '2', *args])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(json.dumps([h['path'] for h in json.loads(r.output[r.output.index('['):])]))\n"
        "print('torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    paths, torch_loaded = r.stdout.strip().splitlines()[-2:]
    assert sorted(Path(p).name for p in json.loads(paths)) == ["red_disc.png", "red_square.jpg"]
    assert torch_loaded == "False"
    check = CliRunner().invoke(_cli(), ["models", "check", str(litert_text_models), "--json"])
    assert check.exit_code == 0, check.output
    assert "text_tower.tflite" in {row["file"] for row in json.loads(check.stdout)["checks"]}


def test_an_int8_text_tower_is_smaller_and_searches_alike(litert_text_models, tmp_path):
    """`convert siglip2-text --precision int8` (the text tower's packed weights are most of
    what `wherein serve` holds): int8 weights, within the int8 parity marks of open_clip,
    and each query's nearest of a set of texts is the fp32 tower's."""
    from wherein.indexer.models.text_tower_litert import LiteRTTextTower

    root = tmp_path / "models"
    shutil.copytree(litert_text_models, root, ignore=shutil.ignore_patterns("*.xnnpack-cache"))
    fp32 = LiteRTTextTower.from_models(ModelDir(root))
    texts = [p for p in PROMPTS if p] + ["a yellow star", "two green circles", "a black cat"]
    ref = fp32.encode(texts)
    assert _int8_tensors(root / "siglip2-text" / "text_tower.tflite") == 0
    _convert(root, "siglip2-text", "--precision", "int8")
    manifest = json.loads((root / "siglip2-text" / "manifest.json").read_text())
    assert manifest["precision"] == "int8"
    figures = manifest["parity"]["figures"]["serving_default"]
    assert figures["pearson"] >= 0.99 and figures["top10_agreement"] >= 0.9
    int8 = LiteRTTextTower.from_models(ModelDir(root))
    assert _int8_tensors(root / "siglip2-text" / "text_tower.tflite") > 0  # fp32 had none
    got = int8.encode(texts)
    assert np.array_equal(np.argmax(got @ ref.T, axis=1), np.arange(len(texts)))
    assert float(np.min(np.sum(got * ref, axis=1))) > 0.95


def _int8_tensors(graph: Path) -> int:
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_path=str(graph)).get_tensor_details()
    return sum(1 for d in details if d["dtype"] == np.int8)


def test_query_encoder_falls_back_to_torch(standin_models):
    from wherein.indexer.models.text_tower import TextTower
    from wherein.indexer.models.text_tower_litert import load_query_encoder

    assert isinstance(load_query_encoder(str(standin_models)), TextTower)


def test_hf_tokenizer_path_matches_open_clip(tmp_path):
    """The real model's path (tokenizer.json + canonicalize + EOS) on a tiny local tokenizer."""
    from open_clip.tokenizer import HFTokenizer
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from wherein.indexer.models.convert.build import PROBE_TEXTS, _special_ids
    from wherein.indexer.models.text_tower_litert import QueryTokenizer

    words = sorted(
        {w for t in PROBE_TEXTS for w in t.lower().split()} | {"a", "photo", "tshirt", "cafe"}
    )
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    ).save_pretrained(tmp_path)
    reference = HFTokenizer(str(tmp_path), context_length=64, clean="canonicalize")
    recipe = {
        "kind": "hf",
        "file": "tokenizer.json",
        "clean": "canonicalize",
        "context_length": 64,
        "pad_id": 0,
    }
    prefix, suffix = _special_ids(reference, recipe, tmp_path)
    assert (prefix, suffix) == ([], [1])
    ours = QueryTokenizer(tmp_path, {**recipe, "prefix": prefix, "suffix": suffix})(PROBE_TEXTS)
    theirs = reference(PROBE_TEXTS).numpy()
    assert ours.shape == (len(PROBE_TEXTS), 64)
    assert np.array_equal(ours, theirs)
    assert ours[-1, -1] == 1  # the long text: truncated with EOS kept last


def test_random_weights_never_replace_a_trained_tower(standin_models, tmp_path):
    models = tmp_path / "models"
    shutil.copytree(standin_models, models)
    r = CliRunner().invoke(
        _cli(),
        [
            "models",
            "convert",
            "siglip2",
            "--random-weights",
            "--config",
            "small",
            "--out",
            str(models),
        ],
    )
    assert r.exit_code == 1
    assert "holds a trained image tower" in r.output
    assert not (ModelDir(models).image_dir / "manifest.json").exists()
